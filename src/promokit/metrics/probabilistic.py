"""Calibration-sensitive metrics of predicted probabilities, reported next to AUC in ESM² Table 3."""

from __future__ import annotations

import warnings

import numpy as np

from promokit.metrics._validation import check_labels_and_scores
from promokit.metrics.ranking import MetricWarning


def logloss(y_true, p, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy -[y log p + (1 - y) log(1 - p)], with p clipped to [eps, 1 - eps].

    NaN with a ``MetricWarning`` on empty input.
    """
    labels, probs = _check_probabilities(y_true, p)
    if len(labels) == 0:
        return _undefined("logloss")
    probs = np.clip(probs, eps, 1 - eps)
    return float(-np.mean(labels * np.log(probs) + (1 - labels) * np.log1p(-probs)))


def mse(y_true, p) -> float:
    """Mean squared error (y - p)², i.e. the Brier score for binary labels.

    NaN with a ``MetricWarning`` on empty input.
    """
    labels, probs = _check_probabilities(y_true, p)
    if len(labels) == 0:
        return _undefined("MSE")
    return float(np.mean((labels - probs) ** 2))


def _check_probabilities(y_true, p) -> tuple[np.ndarray, np.ndarray]:
    labels, probs = check_labels_and_scores(y_true, p, score_name="p")
    outside = (probs < 0) | (probs > 1)
    if outside.any():
        raise ValueError(f"p must be probabilities in [0, 1]; {int(outside.sum())} values are not, "
                         f"e.g. {probs[outside][0]!r}")
    return labels, probs


def _undefined(name: str) -> float:
    warnings.warn(f"{name} is undefined on empty input; returning NaN", MetricWarning, stacklevel=3)
    return float("nan")

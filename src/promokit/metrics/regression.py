"""Errors of predicted quantities that are not probabilities (e.g. normalised incentive shares)."""

from __future__ import annotations

import numpy as np

from promokit.metrics._validation import as_float_1d


def mae(y_true, y_pred) -> float:
    """Mean absolute error |y − ŷ|."""
    y, p = _pair(y_true, y_pred)
    return float(np.mean(np.abs(y - p))) if len(y) else float("nan")


def squared_error(y_true, y_pred) -> float:
    """Mean squared error (y − ŷ)² of any finite numbers (:func:`promokit.metrics.mse` is its form for
    probabilities)."""
    y, p = _pair(y_true, y_pred)
    return float(np.mean((y - p) ** 2)) if len(y) else float("nan")


def _pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    y, p = as_float_1d(y_true, "y_true"), as_float_1d(y_pred, "y_pred")
    if len(y) != len(p):
        raise ValueError(f"y_true and y_pred must have the same length, got {len(y)} and {len(p)}")
    if not (np.isfinite(y).all() and np.isfinite(p).all()):
        raise ValueError("y_true and y_pred must be finite numbers")
    return y, p

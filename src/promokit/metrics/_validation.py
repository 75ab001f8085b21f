"""Boundary checks shared by every metric: 1-D numeric inputs of one length, 0/1 labels, finite scores."""

from __future__ import annotations

import numpy as np


def as_float_1d(values, name: str) -> np.ndarray:
    """``values`` as a 1-D float64 array; raise ``ValueError`` on other shapes or non-numeric dtypes."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {array.dtype} (missing values or mixed types?)")
    return array.astype(np.float64, copy=False)


def as_binary_1d(values, name: str) -> np.ndarray:
    """``values`` as a float64 vector of 0/1, or a ``ValueError`` counting the other values."""
    array = as_float_1d(values, name)
    not_binary = (array != 0) & (array != 1)
    if not_binary.any():
        raise ValueError(f"{name} must hold only 0 and 1; {int(not_binary.sum())} of {len(array)} values "
                         f"do not, e.g. {array[not_binary][0].item()!r}")
    return array


def check_labels_and_scores(y_true, y_score, score_name: str = "y_score") -> tuple[np.ndarray, np.ndarray]:
    """``(labels as int64 0/1, scores as finite float64)``, or a ``ValueError`` naming the problem."""
    labels = as_binary_1d(y_true, "y_true")
    scores = as_float_1d(y_score, score_name)
    if len(labels) != len(scores):
        raise ValueError(f"y_true and {score_name} must have the same length, "
                         f"got {len(labels)} and {len(scores)}")
    n_nan, n_inf = int(np.isnan(scores).sum()), int(np.isinf(scores).sum())
    if n_nan or n_inf:
        raise ValueError(f"{score_name} must be finite; it has {n_nan} NaN and {n_inf} inf values")
    return labels.astype(np.int64), scores

"""Checks on the arrays every allocation solver receives: named, counted, with an example."""

from __future__ import annotations

import numpy as np

from promokit.data.errors import DataError


def check_matrix(name: str, values, n_rows: int | None = None, n_columns: int | None = None,
                 allow_negative: bool = False) -> np.ndarray:
    """Return ``values`` as a 2-D float64 array, or fail naming the first bad entry.

    Rejects a shape other than ``(n_rows, n_columns)`` (when given), NaN or infinite entries, and negative
    entries unless ``allow_negative``.
    """
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2:
        raise DataError(f"{name} must be a matrix (rows × options), got an array of shape {array.shape}")
    expected = (n_rows if n_rows is not None else array.shape[0], n_columns if n_columns is not None else array.shape[1])
    if array.shape != expected:
        raise DataError(f"{name} has shape {array.shape}, expected {expected}")
    bad = ~np.isfinite(array)
    if not allow_negative:
        bad |= array < 0
    if bad.any():
        row, column = np.argwhere(bad)[0]
        what = "NaN, infinite" if allow_negative else "NaN, infinite or negative"
        raise DataError(f"{name} has {int(bad.sum())} {what} entries in {array.shape[0]} rows, "
                        f"e.g. row {row}, option {column}: {array[row, column].item()!r}")
    return array


def check_vector(name: str, values, length: int | None = None, allow_negative: bool = False) -> np.ndarray:
    """Return ``values`` as a 1-D float64 array of ``length`` finite (and, by default, non-negative) entries."""
    return check_matrix(name, np.asarray(values, dtype=np.float64).reshape(-1, 1), length, 1, allow_negative)[:, 0]

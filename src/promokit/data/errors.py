"""The one error type raised when an input breaks its contract."""

from __future__ import annotations

import pandas as pd


class DataError(ValueError):
    """An input table breaks its documented contract.

    The message names the column, how many rows are affected and one example, so the user can fix the
    data without reading a traceback.
    """


def example_row(frame: pd.DataFrame, mask, columns: list[str] | None = None) -> str:
    """Render the first row where ``mask`` holds as ``row 17 {click=0, purchase=1}``."""
    hits = frame.index[mask]
    if len(hits) == 0:
        return "no example"
    label = hits[0]
    row = frame.loc[label, columns] if columns else frame.loc[label]
    values = ", ".join(f"{col}={_plain(row[col])!r}" for col in row.index)
    return f"row {label} {{{values}}}"


def _plain(value):
    """numpy scalars print as ``np.int64(0)``; show the Python value instead."""
    return value.item() if hasattr(value, "item") else value

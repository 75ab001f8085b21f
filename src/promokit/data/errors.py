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


def unique_index(frame: pd.DataFrame, key: str, where: str) -> pd.DataFrame:
    """``frame`` indexed by ``key``, or a DataError (prefixed by ``where``, e.g. a file name) counting the
    duplicated keys and showing one: side tables need one row per id."""
    duplicated = frame[key].duplicated()
    if duplicated.any():
        raise DataError(f"{where}: {int(duplicated.sum())} duplicate {key} values in {len(frame)} rows, e.g. "
                        f"{_plain(frame.loc[duplicated, key].iloc[0])!r}; one row per {key} is needed")
    return frame.set_index(key)

"""A domain's data given the ways a user has it: one table as a DataFrame or a path, and a named set of tables as
a mapping of table name → DataFrame or path, or a folder holding each table as ``<name>.parquet``, ``<name>.csv``
or a directory ``<name>/`` of Parquet parts."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import read_table
from promokit.data.uris import as_path


def as_table(data, argument: str) -> pd.DataFrame:
    """``data`` as a DataFrame: itself, or the table at a path (:func:`~promokit.data.read_table`)."""
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, (str, os.PathLike)):
        return read_table(data)
    raise DataError(f"{argument} must be a DataFrame or a table path, got {type(data).__name__}")


def table_paths(folder, names: Sequence[str], required: Sequence[str], what: str) -> dict[str, Path]:
    """Where each table of ``names`` is in ``folder`` (``<name>.parquet``, ``<name>.csv`` or a directory
    ``<name>/`` of parts); a one-line error for a missing folder, a missing ``required`` table or one given
    twice. ``what`` names the data in messages ("voucher data"); ``folder`` may be a URI."""
    folder = as_path(folder)
    if not folder.is_dir():
        raise DataError(f"data: {folder} is not a folder; {what} is a folder of {_listing(names, required)} "
                        "tables (.parquet, .csv or a directory of parts)")
    paths = {}
    for name in names:
        found = [path for path in (folder / f"{name}.parquet", folder / f"{name}.csv") if path.is_file()]
        found += [folder / name] if (folder / name).is_dir() else []
        if len(found) > 1:
            shown = [path.name + ("/" if path.is_dir() else "") for path in found]
            raise DataError(f"data: {folder} holds both {shown[0]} and {shown[1]}; keep one")
        if found:
            paths[name] = found[0]
        elif name in required:
            raise DataError(f"data: {folder} has no {name}.parquet (or .csv, or {name}/ of parts); {what} needs "
                            f"{_listing(names, required)}")
    return paths


def read_tables(data, names: Sequence[str], required: Sequence[str], what: str) -> dict[str, pd.DataFrame]:
    """The tables of ``data`` by name: a mapping of table name → DataFrame or path, or a folder
    (:func:`table_paths`); each path read whole (:func:`~promokit.data.read_table`). Tables not given are
    absent from the result; an unknown or missing required name is a one-line error."""
    if isinstance(data, (str, os.PathLike)):
        data = table_paths(data, names, required, what)
    if not isinstance(data, Mapping):
        raise DataError(f"data must be a mapping of table name → DataFrame or path, or a folder; got "
                        f"{type(data).__name__}")
    unknown = [name for name in data if name not in names]
    if unknown:
        raise DataError(f"data: unknown table {unknown[0]!r}; {what} has the tables {list(names)}")
    missing = [name for name in required if data.get(name) is None]
    if missing:
        raise DataError(f"data: no {missing[0]!r} table among {list(data)}; {what} needs {_listing(names, required)}")
    return {name: as_table(table, f"data[{name!r}]") for name, table in data.items() if table is not None}


def check_rows(rows, n: int, argument: str, what: str) -> np.ndarray:
    """``rows`` as row indices (int64, in their order) of a table of ``n`` ``what`` ("sessions"); a one-line error
    naming ``argument`` for anything that is not whole numbers in [0, n)."""
    values = np.asarray(rows)
    if values.ndim != 1 or (len(values) and values.dtype.kind not in "iu"):
        raise DataError(f"{argument} must be row indices of the {what} (a list of whole numbers), got "
                        f"{type(rows).__name__} of shape {values.shape} and dtype {values.dtype}")
    values = values.astype(np.int64)
    outside = (values < 0) | (values >= n)
    if outside.any():
        raise DataError(f"{argument}: {int(outside.sum())} of its {len(values)} rows are outside the {n:,} {what}, "
                        f"e.g. {int(values[outside][0])}")
    return values


def _listing(names: Sequence[str], required: Sequence[str]) -> str:
    optional = [name for name in names if name not in required]
    return ", ".join(required) + (f" [, {', '.join(optional)}]" if optional else "")

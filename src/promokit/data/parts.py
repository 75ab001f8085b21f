"""Tables in parts: a table given as one file, a directory of Parquet parts or a glob, listed and read part by
part (an executor maps a function over the parts; :func:`promokit.data.io.read_table` reads them into one frame).
A table this package writes in parts is a directory of ``part-00000.parquet``, ``part-00001.parquet``, … one per
input part, in the input's order (:func:`part_name`, :func:`promokit.data.io.write_part`).

A directory is read recursively (Hive-style ``key=value/`` folders included) in sorted path order; files and
folders whose name starts with ``.`` or ``_`` (``_SUCCESS``, ``_temporary/``, temporaries) are skipped, as Spark,
pyarrow and Ray Data do. A part is a Parquet file: a CSV in a directory or matched by a glob is not one.
"""

from __future__ import annotations

import glob
import os
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from promokit.data.errors import DataError

TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
GLOB_CHARACTERS = frozenset("*?[")
PARQUET_SUFFIXES = (".parquet", ".pq")
SKIPPED_PREFIXES = (".", "_")


def is_partitioned(path: str | os.PathLike) -> bool:
    """True for a directory or a glob (a table in parts), False for one file."""
    return Path(path).is_dir() or bool(GLOB_CHARACTERS & set(str(path)))


def list_parts(path: str | os.PathLike) -> list[Path]:
    """The files of the table at ``path``, in the order their rows are read (one file: itself)."""
    text = str(path)
    if GLOB_CHARACTERS & set(text):
        files = [Path(p) for p in sorted(glob.glob(text, recursive=True)) if Path(p).is_file()]
        if not files:
            raise DataError(f"{path}: no file matches this pattern")
        files = [p for p in files if not p.name.startswith(SKIPPED_PREFIXES)]
    elif Path(path).is_dir():
        files = sorted(p for p in Path(path).rglob("*") if p.is_file()
                       and not any(name.startswith(SKIPPED_PREFIXES) for name in p.relative_to(path).parts))
    else:
        return [Path(path)]
    parts = [p for p in files if p.suffix.lower() in PARQUET_SUFFIXES]
    if not parts:
        csvs = [p for p in files if p.suffix.lower() == ".csv"]
        raise DataError(f"{path}: no table parts (.parquet files) there" + (
            f"; its {len(csvs)} CSV files (e.g. {csvs[0].name}) are not parts: give one CSV file as the table, or "
            f"write the parts as Parquet" if csvs else ""))
    return parts


def part_name(index: int) -> str:
    """The file name of part ``index`` of a table this package writes in parts."""
    return f"part-{index:05d}.parquet"


def read_part(path: str | os.PathLike, allow_empty: bool = True) -> pd.DataFrame:
    """One part; a Parquet part may have no rows (a partition can be empty), a CSV file (a table of one part)
    must have some. Errors name the file."""
    return read_file(path, allow_empty=allow_empty and Path(path).suffix.lower() in PARQUET_SUFFIXES)


def read_file(path: str | os.PathLike, allow_empty: bool = False) -> pd.DataFrame:
    """Read one CSV or Parquet file; fail with a one-line message for a missing, unknown, unreadable or (unless
    ``allow_empty``) empty file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file")
    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(f"{path}: unknown table format {path.suffix!r}; use .csv or .parquet")
    try:
        frame = pd.read_csv(path) if kind == "csv" else pd.read_parquet(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty") from None
    except (OSError, ValueError, KeyError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{path}: cannot be read as {kind}: {first_line}") from None
    if frame.empty and not allow_empty:
        raise DataError(f"{path}: the table has no rows (columns: {list(frame.columns)})")
    if kind == "csv":  # pandas renames a repeated header "x" to "x.1": check the header as written
        header = [str(c) for c in pd.read_csv(path, nrows=1, header=None, dtype=str).iloc[0]]
        repeated = sorted({c for c in header if header.count(c) > 1})
        if repeated:
            raise DataError(f"{path}: column names {repeated} appear more than once in the header of its "
                            f"{len(frame)} rows; every column needs its own name")
    return frame


def parquet_rows(path: str | os.PathLike) -> int | None:
    """The rows of a Parquet file, from its footer; None when it is not readable as Parquet."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except (OSError, ValueError):  # pyarrow raises both for a file that is not Parquet
        return None


@contextmanager
def naming(path: str | os.PathLike):
    """Prefix a :class:`DataError` raised while handling one part with that part's file (unless it names it)."""
    try:
        yield
    except DataError as exc:
        message = str(exc)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from None

"""Tables in parts: a table given as one file, a directory of Parquet parts or a glob, listed and read part by
part (``promokit.scale`` maps the parts over an engine; :func:`read_parts` reads them into one frame).

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
from promokit.data.io import read_file

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


def read_part(path: str | os.PathLike, allow_empty: bool = True) -> pd.DataFrame:
    """One part; a Parquet part may have no rows (a partition can be empty), a CSV file (a table of one part)
    must have some. Errors name the file."""
    return read_file(path, allow_empty=allow_empty and Path(path).suffix.lower() in PARQUET_SUFFIXES)


def parquet_rows(path: str | os.PathLike) -> int | None:
    """The rows of a Parquet file, from its footer; None when it is not readable as Parquet."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).num_rows
    except (OSError, ValueError):  # pyarrow raises both for a file that is not Parquet
        return None


def read_parts(path: str | os.PathLike) -> pd.DataFrame:
    """The whole table in one frame (for commands that need it whole): one file as :func:`read_file` reads it, or
    every part in order, concatenated (index reset); the parts must share their columns and hold some rows."""
    if not is_partitioned(path):
        return read_file(path)
    files = list_parts(path)
    frames = []
    for file in files:
        with naming(file):
            frame = read_part(file)
        if frames and set(frame.columns) != set(frames[0].columns):
            raise DataError(f"{file}: columns {list(frame.columns)} differ from {list(frames[0].columns)} in "
                            f"{files[0]}: every part of a table has the same columns")
        frames.append(frame)
    filled = [frame for frame in frames if len(frame)]  # an empty part adds no rows (nor its dtypes)
    if not filled:
        raise DataError(f"{path}: the table has no rows in its {len(frames)} parts (columns: "
                        f"{list(frames[0].columns)})")
    return pd.concat(filled, ignore_index=True)


@contextmanager
def naming(path: str | os.PathLike):
    """Prefix a :class:`DataError` raised while handling one part with that part's file (unless it names it)."""
    try:
        yield
    except DataError as exc:
        message = str(exc)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from None

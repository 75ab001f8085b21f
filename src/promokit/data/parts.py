"""Tables in parts: a table given as one file, a directory of Parquet parts or a glob, listed and read part by
part (an executor maps a function over the parts; :func:`promokit.data.io.read_table` reads them into one frame).
A table this package writes in parts is a directory of ``part-00000.parquet``, ``part-00001.parquet``, … one per
input part, in the input's order (:func:`part_name`, :func:`promokit.data.io.write_part`).

A directory is read recursively (Hive-style ``key=value/`` folders included) in sorted path order; files and
folders whose name starts with ``.`` or ``_`` (``_SUCCESS``, ``_temporary/``, temporaries) are skipped, as Spark,
pyarrow and Ray Data do. A part is a Parquet file: a CSV in a directory or matched by a glob is not one.

Each of these paths may also be a URI (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``): :mod:`promokit.data.uris`.
"""

from __future__ import annotations

import glob
import io
import os
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from promokit.data.errors import DataError
from promokit.data.uris import as_path, glob_files, is_uri, list_files, parquet_metadata, read_bytes, read_parquet

TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
GLOB_CHARACTERS = frozenset("*?[")
PARQUET_SUFFIXES = (".parquet", ".pq")
SKIPPED_PREFIXES = (".", "_")


def is_partitioned(path: str | os.PathLike) -> bool:
    """True for a directory or a glob (a table in parts), False for one file."""
    return bool(GLOB_CHARACTERS & set(str(path))) or as_path(path).is_dir()


def list_parts(path: str | os.PathLike) -> list[Path]:
    """The files of the table at ``path``, in the order their rows are read (one file: itself); for a URI,
    :class:`~promokit.data.uris.StoragePath` objects."""
    path = as_path(path) if is_uri(path) else path
    text = str(path)
    if GLOB_CHARACTERS & set(text):
        files = (glob_files(text) if is_uri(path) else
                 [Path(p) for p in sorted(glob.glob(text, recursive=True)) if Path(p).is_file()])
        if not files:
            raise DataError(f"{path}: no file matches this pattern")
        files = [p for p in files if not p.name.startswith(SKIPPED_PREFIXES)]
    elif is_uri(path):
        if not path.is_dir():
            return [path]
        files = list_files(path, SKIPPED_PREFIXES)
    elif Path(path).is_dir():
        files = sorted(p for p in Path(path).rglob("*") if p.is_file()
                       and not any(name.startswith(SKIPPED_PREFIXES) for name in p.relative_to(path).parts))
    else:
        return [as_path(path)]
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
    return read_file(path, allow_empty=allow_empty and as_path(path).suffix.lower() in PARQUET_SUFFIXES)


def read_file(path: str | os.PathLike, allow_empty: bool = False) -> pd.DataFrame:
    """Read one CSV or Parquet file; fail with a one-line message for a missing, unknown, unreadable or (unless
    ``allow_empty``) empty file."""
    path = as_path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file")
    kind = TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(f"{path}: unknown table format {path.suffix!r}; use .csv or .parquet")
    source = io.BytesIO(read_bytes(path)) if is_uri(path) and kind == "csv" else path
    try:
        frame = pd.read_csv(source) if kind == "csv" else parquet(path)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty") from None
    except (OSError, ValueError, KeyError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{path}: cannot be read as {kind}: {first_line}") from None
    if frame.empty and not allow_empty:
        raise DataError(f"{path}: the table has no rows (columns: {list(frame.columns)})")
    if kind == "csv":  # pandas renames a repeated header "x" to "x.1": check the header as written
        if is_uri(path):
            source.seek(0)
        header = [str(c) for c in pd.read_csv(source, nrows=1, header=None, dtype=str).iloc[0]]
        repeated = sorted({c for c in header if header.count(c) > 1})
        if repeated:
            raise DataError(f"{path}: column names {repeated} appear more than once in the header of its "
                            f"{len(frame)} rows; every column needs its own name")
    return frame


def parquet_rows(path: str | os.PathLike) -> int | None:
    """The rows of a Parquet file, from its footer; None when it is not readable as Parquet."""
    import pyarrow.parquet as pq

    try:
        return (parquet_metadata(as_path(path)) if is_uri(path) else pq.read_metadata(path)).num_rows
    except (OSError, ValueError):  # pyarrow raises both for a file that is not Parquet
        return None


def parquet(path: str | os.PathLike, columns: list[str] | None = None) -> pd.DataFrame:
    """A Parquet file read whole (or its ``columns``), local or at a URI."""
    return read_parquet(as_path(path), columns) if is_uri(path) else pd.read_parquet(path, columns=columns)


def parquet_schema(path: str | os.PathLike):
    """A Parquet file's schema (from its footer), local or at a URI."""
    import pyarrow.parquet as pq

    return parquet_metadata(as_path(path)).schema.to_arrow_schema() if is_uri(path) else pq.read_schema(path)


@contextmanager
def naming(path: str | os.PathLike):
    """Prefix a :class:`DataError` raised while handling one part with that part's file (unless it names it)."""
    try:
        yield
    except DataError as exc:
        message = str(exc)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from None

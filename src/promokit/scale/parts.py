"""Partitioned tables: a table given as one file, a directory of Parquet parts or a glob, read and written part by
part so that no process ever holds more than a few parts.

A directory is read recursively (Hive-style ``key=value/`` folders included) in sorted path order; files whose
name starts with ``.`` or ``_`` (``_SUCCESS``, temporaries) are skipped, as Spark, pyarrow and Ray Data do. A
written table is a directory of ``part-00000.parquet``, ``part-00001.parquet``, … one per input part, in the
input's order, each written atomically.
"""

from __future__ import annotations

import glob
import os
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import TABLE_SUFFIXES, read_table, write_parquet

GLOB_CHARACTERS = frozenset("*?[")


def is_partitioned(path: str | os.PathLike) -> bool:
    """True for a directory or a glob (a table in parts), False for one file."""
    return Path(path).is_dir() or bool(GLOB_CHARACTERS & set(str(path)))


def list_parts(path: str | os.PathLike) -> list[Path]:
    """The files of the table at ``path``, in the order their rows are read."""
    text = str(path)
    if GLOB_CHARACTERS & set(text):
        files = [Path(p) for p in sorted(glob.glob(text, recursive=True)) if Path(p).is_file()]
        if not files:
            raise DataError(f"{path}: no file matches this pattern")
    elif Path(path).is_dir():
        files = sorted(p for p in Path(path).rglob("*") if p.is_file())
    else:
        return [Path(path)]
    parts = [p for p in files if not p.name.startswith((".", "_")) and p.suffix.lower() in TABLE_SUFFIXES]
    if not parts:
        raise DataError(f"{path}: no table parts (.parquet or .csv files) there")
    return parts


def read_part(path: str | os.PathLike, allow_empty: bool = True) -> pd.DataFrame:
    """One part; one of several may have no rows (a partition can be empty). Errors name the file."""
    path = Path(path)
    if allow_empty and path.suffix.lower() in (".parquet", ".pq"):
        try:
            return pd.read_parquet(path)
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except (OSError, ValueError, KeyError) as exc:
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DataError(f"{path}: cannot be read as parquet: {first_line}") from None
    return read_table(path)


def read_parts(path: str | os.PathLike) -> pd.DataFrame:
    """The whole table in one frame (for commands that need it whole); one file is read as today."""
    if not is_partitioned(path):
        return read_table(path)
    frames = [read_part(p) for p in list_parts(path)]
    frame = pd.concat(frames, ignore_index=True)
    if frame.empty:
        raise DataError(f"{path}: the table has no rows in its {len(frames)} parts")
    return frame


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def write_part(frame: pd.DataFrame, directory: str | os.PathLike, index: int) -> Path:
    return write_parquet(frame.reset_index(drop=True), Path(directory) / part_name(index))


@contextmanager
def naming(path: str | os.PathLike):
    """Prefix a :class:`DataError` raised while handling one part with that part's file (unless it names it)."""
    try:
        yield
    except DataError as exc:
        message = str(exc)
        raise DataError(message if message.startswith(str(path)) else f"{path}: {message}") from None

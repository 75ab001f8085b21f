"""Score tables as :func:`plan_budget` and :func:`plan_quota` take them — a DataFrame, a CSV or Parquet file, or a
table in parts (a directory or glob of Parquet parts) — and the steps they take around the parts."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Callable, NamedTuple, Union

import pandas as pd

from promokit.data.errors import DataError
from promokit.data.parts import is_partitioned, list_parts
from promokit.data.part_keys import check_unique_keys

TableSource = Union[str, os.PathLike, pd.DataFrame]
#: ``progress(text)`` is entered around each step (reading, solving, writing), ``text`` saying what it does;
#: the command line shows a spinner, then the step's duration
Progress = Callable[[str], AbstractContextManager]


class Source(NamedTuple):
    """One table given as ``argument``: ``table`` the DataFrame or the path as given, ``files`` its files in row
    order (one for a file, the parts for a directory or glob, none for a DataFrame)."""

    argument: str
    table: pd.DataFrame | Path
    files: list[Path]
    partitioned: bool

    @property
    def name(self) -> str:
        """How steps and errors name the table: its path, or the argument for a DataFrame."""
        return f"the `{self.argument}` table" if isinstance(self.table, pd.DataFrame) else str(self.table)

    @property
    def first(self) -> pd.DataFrame | Path:
        """The DataFrame or the first file: where the key column is looked up."""
        return self.table if isinstance(self.table, pd.DataFrame) else self.files[0]


def source(table: TableSource, argument: str) -> Source:
    """``table`` as given to ``argument``, its files listed (a directory or glob without parts is an error)."""
    if isinstance(table, pd.DataFrame):
        return Source(argument, table, [], False)
    if not isinstance(table, (str, os.PathLike)):
        raise DataError(f"`{argument}` must be a DataFrame or the path of a table (a CSV or Parquet file, or a "
                        f"directory or glob of Parquet parts), got {type(table).__name__}")
    return Source(argument, Path(table), list_parts(table), is_partitioned(table))


def in_parts(sources: list[Source], out: str | os.PathLike | None) -> bool:
    """Whether the tables are solved in parts (some table is partitioned); then every table must be a path and
    ``out`` given, where the plan is written part by part as it is solved."""
    if not any(s.partitioned for s in sources):
        return False
    framed = [s.argument for s in sources if isinstance(s.table, pd.DataFrame)]
    if framed:
        raise DataError(f"`{framed[0]}`: a table in parts is solved with its other tables given as files or parts, "
                        f"not as a DataFrame")
    if out is None:
        raise DataError("`out` is needed for a table in parts: its plan is written part by part as it is solved "
                        "(OUT/plan/part-NNNNN.parquet)")
    return True


def step(progress: Progress | None, text: str) -> AbstractContextManager:
    """``progress(text)``, or nothing to enter without ``progress``."""
    return progress(text) if progress is not None else nullcontext()


def check_unique_users(files: list[Path], out: Path, map_parts, key: str) -> None:
    """Each user (``key``) in one part: the parts' own checks cannot see a user two parts hold (hashed in buckets by
    ``map_parts``, in a scratch folder inside ``out``, where every worker can read it)."""
    check_unique_keys(files, key, out / ".user-keys", map_parts=map_parts)


def drop_stale_parts(folder: Path, written: set) -> None:
    """Remove plan parts an earlier run with more input parts left in ``folder``."""
    for stale in folder.glob("part-*.parquet"):
        if stale.name not in written:
            stale.unlink()

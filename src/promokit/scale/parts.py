"""Partitioned tables: a table given as one file, a directory of Parquet parts or a glob, read and written part by
part so that no process ever holds more than a few parts.

Listing and reading parts is core I/O and lives in :mod:`promokit.data.parts` (re-exported here, where the scale
code and its callers import it). A written table is a directory of ``part-00000.parquet``,
``part-00001.parquet``, … one per input part, in the input's order, each written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from promokit.data.io import write_parquet
from promokit.data.parts import GLOB_CHARACTERS, is_partitioned, list_parts, naming, parquet_rows, read_part, read_parts

__all__ = ["GLOB_CHARACTERS", "is_partitioned", "list_parts", "naming", "parquet_rows", "part_name", "read_part",
           "read_parts", "write_part"]


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def write_part(frame: pd.DataFrame, directory: str | os.PathLike, index: int) -> Path:
    return write_parquet(frame.reset_index(drop=True), Path(directory) / part_name(index))

"""Reading tables with clear errors and writing files atomically."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError

TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a table into one frame: a CSV or Parquet file, or a directory or glob of Parquet parts (see
    :mod:`promokit.data.parts`); fail with a one-line message for missing, unknown, unreadable or empty tables."""
    from promokit.data.parts import read_parts  # not at the top: parts reads each of its files with read_file

    return read_parts(path)


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


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds. The file gets
    the permissions of any new file (0o666 minus the umask), not the temporary file's private 0o600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_parquet(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return Path(path)


def write_npy(array: np.ndarray, path: str | os.PathLike) -> Path:
    """An array as ``.npy`` (readable memory-mapped, and never unpickled: no object arrays), written atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as file:
        np.save(file, array, allow_pickle=False)
    return Path(path)


def write_table(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """A table as CSV or Parquet by the suffix of ``path``, written atomically, without the index."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)
    return path


def write_text(text: str, path: str | os.PathLike) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(obj, path: str | os.PathLike) -> Path:
    return write_text(json.dumps(obj, indent=2, allow_nan=True, default=_json_default) + "\n", path)


def _json_default(value):
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")

"""Reading a table whole (one file, or every part of a table in parts) with clear errors, and writing files
atomically (to a URI: :mod:`promokit.data.uris`, each object whole or not at all)."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.parts import is_partitioned, list_parts, naming, part_name, read_file, read_part
from promokit.data.uris import as_path, is_uri, write_bytes, write_frame


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a table into one frame: a CSV or Parquet file (:func:`~promokit.data.parts.read_file`), or a directory
    or glob of Parquet parts (:mod:`promokit.data.parts`), every part in order, concatenated (index reset); the
    parts must share their columns and hold some rows. Fails with a one-line message for missing, unknown,
    unreadable or empty tables."""
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
    if is_uri(path):
        return write_frame(frame, as_path(path))
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
    if is_uri(path):
        return write_frame(frame, as_path(path))
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)
    return path


def write_text(text: str, path: str | os.PathLike) -> Path:
    if is_uri(path):
        return write_bytes(text.encode("utf-8"), as_path(path))
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


def write_part(frame: pd.DataFrame, directory: str | os.PathLike, index: int) -> Path:
    """Part ``index`` of a table written in parts: ``directory/part-NNNNN.parquet``, atomically, index reset."""
    return write_parquet(frame.reset_index(drop=True), as_path(directory) / part_name(index))

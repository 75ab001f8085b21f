"""Keys unique across the parts of a table, checked without gathering them in one process: every key lives in
one part (a part may hold a key on several rows, as a long score table does; the part's own contract checks
say whether it may).

Two maps: each part hashes its distinct keys (64-bit, :func:`pandas.util.hash_pandas_object`) and writes the hashes
grouped by bucket (hash mod ``buckets``) to one scratch file; then each bucket is checked alone, reading its slice
of every part's file. Equal hashes are confirmed on the keys themselves (two keys may share a hash), so a
report is never a collision. Memory per worker: one part's keys, or one bucket's hashes (8 bytes a key of about
:data:`PARTS_PER_BUCKET` parts); scratch on disk: 8 bytes a key.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.parts import parquet

MapParts = Callable[[Callable, Iterable], Iterable]
#: A bucket holds about as many hashes as this many parts have keys; each bucket opens every part's file, so
#: fewer buckets mean fewer (parts × buckets) file opens.
PARTS_PER_BUCKET = 8


def check_unique_keys(paths: list, column: str, scratch: str | Path, map_parts: MapParts = map,
                      buckets: int | None = None) -> None:
    """Raise a one-line :class:`DataError` naming the key and the two files (and rows) of the first key found in
    two parts. ``scratch`` is a folder for the hashes, removed afterwards."""
    scratch = Path(scratch)
    buckets = buckets or -(-len(paths) // PARTS_PER_BUCKET)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        _same_kind(paths, column, list(map_parts(_hash_part, [(str(p), column, str(scratch), k, buckets)
                                                              for k, p in enumerate(paths)])))
        found = [pair for pairs in map_parts(_check_bucket, [(str(scratch), len(paths), b) for b in range(buckets)])
                 for pair in pairs]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for digest, first, second in sorted(found, key=lambda pair: (pair[1], pair[2])):
        _confirm(paths, column, digest, first, second)


def _keys(path: str, column: str) -> pd.Series:
    """The part's keys (:func:`canonical`)."""
    try:
        keys = parquet(path, columns=[column])[column]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: cannot read its {column!r} column: "
                        f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
    return canonical(keys)


def canonical(keys: pd.Series) -> pd.Series:
    """Keys as they are hashed: integers as they are, anything else as text (hashing integers is ≈ 20× cheaper)."""
    return keys if pd.api.types.is_integer_dtype(keys) else keys.astype(str)


def _hashes(keys: pd.Series) -> np.ndarray:
    return pd.util.hash_pandas_object(keys, index=False).to_numpy()


def bucket_of(keys: pd.Series, buckets: int) -> np.ndarray:
    """The bucket (0 … ``buckets`` − 1) of each key: equal keys of any part land in one bucket."""
    return (_hashes(canonical(keys)) % np.uint64(buckets)).astype(np.int64)


def _hash_part(task: tuple) -> bool | None:
    """Write the part's distinct key hashes grouped by bucket; return whether its keys are integers (None: none)."""
    path, column, scratch, k, buckets = task
    keys = _keys(path, column)
    digest = np.sort(_hashes(keys))  # a key on several rows of the part counts once (np.unique hashed: 10× slower)
    digest = digest[np.r_[True, digest[1:] != digest[:-1]]] if len(digest) else digest
    bucket = digest % np.uint64(buckets)
    order = np.argsort(bucket, kind="stable")
    offsets = np.searchsorted(bucket[order], np.arange(buckets + 1, dtype=np.uint64))
    np.save(Path(scratch) / f"{k:05d}.npy", digest[order])
    np.save(Path(scratch) / f"{k:05d}.offsets.npy", offsets)
    return pd.api.types.is_integer_dtype(keys) if len(keys) else None


def _same_kind(paths: list, column: str, integer: list) -> None:
    """Integer keys in one part and text in another would never compare equal: refuse the mix."""
    kinds = {flag: k for k, flag in reversed(list(enumerate(integer))) if flag is not None}
    if len(kinds) == 2:
        raise DataError(f"{column} is integer in {paths[kinds[True]]} but text in {paths[kinds[False]]}: the parts "
                        f"of a table must agree on its type")


def _check_bucket(task: tuple) -> list[tuple[int, int, int]]:
    """(hash, part, part) of every hash that two parts hold in bucket ``b``."""
    scratch, n_parts, b = task
    digests, owners = [], []
    for k in range(n_parts):
        offsets = np.load(Path(scratch) / f"{k:05d}.offsets.npy")
        piece = np.load(Path(scratch) / f"{k:05d}.npy", mmap_mode="r")[offsets[b]:offsets[b + 1]]
        digests.append(np.asarray(piece))
        owners.append(np.full(len(piece), k))
    digest, owner = np.concatenate(digests), np.concatenate(owners)
    order = np.argsort(digest, kind="stable")
    digest, owner = digest[order], owner[order]
    twice = np.flatnonzero((digest[1:] == digest[:-1]) & (owner[1:] != owner[:-1]))  # parts in order
    return [(int(digest[i]), int(owner[i]), int(owner[i + 1])) for i in twice]


def _confirm(paths: list, column: str, digest: int, first: int, second: int) -> None:
    """Raise if parts ``first`` and ``second`` hold one key with hash ``digest`` (else it was a collision)."""
    found = {}
    for k in (first, second):
        keys = _keys(str(paths[k]), column)
        at = np.flatnonzero(_hashes(keys) == np.uint64(digest))
        found[k] = {keys.iloc[i].item() if hasattr(keys.iloc[i], "item") else keys.iloc[i]: int(i)
                    for i in at[::-1]}  # each key's first row
    for key in found[first].keys() & found[second].keys():
        raise DataError(f"{column} {key!r} is in two parts, {paths[first]} (row {found[first][key]}) and "
                        f"{paths[second]} (row {found[second][key]}): each {column} must be in one part")

"""Subject ids as 64-bit hashes: a compact, order-free fingerprint of a set of ids (which subjects a model was
trained on) that any process can compare against another table's ids without holding the ids themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd


def id_hashes(ids) -> np.ndarray:
    """The sorted distinct 64-bit hashes of ``ids`` read as text (``17`` and ``"17"`` are one id), stable across
    processes and machines (pandas' ``hash_pandas_object``, whose key is fixed)."""
    values = np.asarray(ids)
    if values.dtype.kind in "iu":  # each distinct number read as text once
        values = pd.unique(values)
    text = pd.Series(np.asarray(values, dtype=object)).astype(str)
    return np.unique(pd.util.hash_pandas_object(text, index=False).to_numpy())


def share_in(ids, hashes: np.ndarray) -> float:
    """The share of ``ids`` whose hash is in ``hashes`` (sorted, as :func:`id_hashes` returns them)."""
    mine = pd.util.hash_pandas_object(pd.Series(np.asarray(ids, dtype=object)).astype(str), index=False).to_numpy()
    if not len(mine):
        return 0.0
    position = np.searchsorted(hashes, mine).clip(max=max(len(hashes) - 1, 0))
    return float(np.mean(hashes[position] == mine)) if len(hashes) else 0.0


def id_fractions(ids, seed: int) -> np.ndarray:
    """A number in [0, 1) for each of ``ids`` (read as text), from its hash with ``seed``: a random split that any
    process draws for the ids it holds, the same for an id wherever it is (a table's parts never meet)."""
    text = pd.Series(np.asarray(ids, dtype=object)).astype(str) + f"\x1f{seed}"
    return (pd.util.hash_pandas_object(text, index=False).to_numpy() >> np.uint64(11)) / float(1 << 53)

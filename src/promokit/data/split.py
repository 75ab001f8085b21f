"""Train / validation / test splits as index arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.data.errors import DataError


def random_split(n_rows: int, fractions: tuple[float, ...], seed: int = 0) -> list[np.ndarray]:
    """Shuffle ``range(n_rows)`` with ``seed`` and cut it by ``fractions`` (the last part takes the rest)."""
    _check_fractions(fractions)
    order = np.random.default_rng(seed).permutation(n_rows)
    return _cut(order, fractions)


def time_split(times: pd.Series, fractions: tuple[float, ...]) -> list[np.ndarray]:
    """Order rows by ``times`` and cut by ``fractions``; equal times never straddle a cut."""
    _check_fractions(fractions)
    values = times.to_numpy()
    order = np.argsort(values, kind="stable")
    parts = _cut(order, fractions)
    # move each cut forward past rows that share the boundary time, so no time is in two parts
    sorted_values = values[order]
    bounds, start = [], 0
    for part in parts[:-1]:
        end = start + len(part)
        if 0 < end < len(sorted_values):
            end = int(np.searchsorted(sorted_values, sorted_values[end - 1], side="right"))
        bounds.append(end)
        start = end
    return [np.sort(p) for p in np.split(order, bounds)]


def group_split(groups: pd.Series, fractions: tuple[float, ...], seed: int = 0) -> list[np.ndarray]:
    """Split so that every group (e.g. a user) falls in exactly one part."""
    _check_fractions(fractions)
    codes, uniques = pd.factorize(groups)
    group_parts = random_split(len(uniques), fractions, seed)
    part_of_group = np.empty(len(uniques), dtype=np.int64)
    for k, members in enumerate(group_parts):
        part_of_group[members] = k
    part = part_of_group[codes]
    return [np.flatnonzero(part == k) for k in range(len(fractions))]


def _check_fractions(fractions: tuple[float, ...]) -> None:
    if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise DataError(f"split fractions must be non-negative and sum to 1, got {fractions}")


def _cut(order: np.ndarray, fractions: tuple[float, ...]) -> list[np.ndarray]:
    bounds = np.round(np.cumsum(fractions)[:-1] * len(order)).astype(int)
    return [np.sort(p) for p in np.split(order, bounds)]

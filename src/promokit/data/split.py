"""Train / validation / test splits as index arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.data.errors import DataError

#: The share of the data every model's ``fit`` holds out for evaluation unless told otherwise, in every domain
#: (``test_fraction``; ``train --test-fraction``): docs/conventions.md.
TEST_FRACTION = 0.1


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


class NothingEarlier(DataError):
    """A split by time whose latest rows would be every row (all ``rows`` are at or after ``threshold``, the first
    time of the latest part): nothing is left to train on. A domain can say it in its own terms (the time as a
    date, the option that splits otherwise)."""

    def __init__(self, column, rows: int, threshold):
        self.column, self.rows, self.threshold = column, rows, threshold
        super().__init__(f"time column {column!r}: all {rows} rows are at or after {threshold}, which leaves none to "
                         "train on before the validation rows")


def latest_split(times: pd.Series, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(earlier rows, latest rows): the latest ``fraction`` of the rows by ``times``, widened so that rows with
    the boundary time all fall in the latest part (validate on the future, as a time-ordered test does)."""
    if not 0 < fraction < 1:
        raise DataError(f"the validation fraction must be in (0, 1), got {fraction}")
    values = times.to_numpy()
    missing = pd.isna(values)
    if missing.any():
        raise DataError(f"time column {times.name!r} has {int(missing.sum())} missing values in {len(values)} rows "
                        f"(first at row {int(np.flatnonzero(missing)[0])})")
    ordered = np.sort(values, kind="stable")
    threshold = ordered[len(values) - max(1, int(round(fraction * len(values))))]
    latest = values >= threshold
    if latest.all():
        raise NothingEarlier(times.name, len(values), threshold)
    return np.flatnonzero(~latest), np.flatnonzero(latest)


def holdout_split(frame: pd.DataFrame, fraction: float, how: str = "random",
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(kept rows, held-out rows) of ``frame``: ``how`` is ``"random"`` (a seeded random ``fraction``) or
    ``"time:<column>"`` (the latest ``fraction`` by that column, see :func:`latest_split`)."""
    if how == "random":
        kept, held = random_split(len(frame), (1 - fraction, fraction), seed)
    elif how.startswith("time:"):
        column = how.split(":", 1)[1]
        if column not in frame.columns:
            raise DataError(f"split {how!r}: column {column!r} is not in the table of {len(frame)} rows; columns: "
                            f"{list(frame.columns)[:20]}")
        kept, held = latest_split(frame[column], fraction)
    else:
        raise DataError(f"a split is 'random' or 'time:<column>', got {how!r}")
    if len(kept) == 0 or len(held) == 0:
        raise DataError(f"holding out {fraction:.0%} of {len(frame)} rows ({how}) leaves {len(kept)} rows to keep and "
                        f"{len(held)} to hold out; both need rows: give a larger table or another fraction")
    return kept, held


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

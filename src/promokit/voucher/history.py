"""Leak-free redeemed-voucher history (DMBGN §3.5), the time split of the sessions and the times that select them.

A session's history may only hold sessions whose outcome was known when it was collected: the published
DMBGN code built histories from all of a user's redeemed sessions regardless of when the redemption
happened, which lets a model read the future. Here a history entry j of session i satisfies

    user(j) = user(i),  redeemed(j) = 1,  outcome_time(j) < collect_time(i),

so a redeemed session whose outcome became known only after i's collection is excluded, and since a
session's outcome is never before its own collection, a session never sees itself or any later-collected one
whose outcome is not yet known.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.history import last_events_before


def redeemed_history(sessions: pd.DataFrame, max_len: int = 6) -> np.ndarray:
    """The user's last ``max_len`` redeemed sessions known before each session's collection.

    Returns an ``(n_sessions, max_len)`` int64 array of row positions in ``sessions``, most recent first
    (by ``outcome_time``, ties by ``collect_time`` then row), padded with −1. Sessions with a missing
    ``redeemed`` (outcome unknown) or a missing ``outcome_time`` are never history. The rule above is
    :func:`promokit.data.history.last_events_before` with the redeemed sessions as events at their
    ``outcome_time`` and every session as a target at its ``collect_time`` (vectorised: sorts and
    ``searchsorted``, no loop over rows).
    """
    user = sessions["user_id"].to_numpy()
    collect = sessions["collect_time"].to_numpy().astype("datetime64[ns]")
    outcome = sessions["outcome_time"].to_numpy().astype("datetime64[ns]")
    redeemed = pd.to_numeric(sessions["redeemed"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan) == 1

    # equal outcome times: the later-collected (then later-row) session is the more recent, so order the
    # events by (collect_time, row) — the core breaks ties by position
    events = np.flatnonzero(redeemed)
    events = events[np.lexsort((events, collect[events].view(np.int64)))]
    history = last_events_before(user[events], outcome[events], user, collect, max_len)
    entries = history >= 0
    history[entries] = events[history[entries]]
    return history


@dataclass(frozen=True)
class TimeSplit:
    """Row positions of the train / validation / test sessions (each sorted); unpacks as a 3-tuple."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    valid_from: pd.Timestamp
    test_from: pd.Timestamp

    def __iter__(self):
        return iter((self.train, self.valid, self.test))


@dataclass(frozen=True)
class TimeCuts:
    """Cut times: sessions collected at/after ``test_from`` are test, in [valid_from, test_from) validation."""

    valid_from: pd.Timestamp
    test_from: pd.Timestamp

    def __iter__(self):
        return iter((self.valid_from, self.test_from))


def split_by_time(sessions: pd.DataFrame, valid_from, test_from) -> TimeSplit:
    """Split the sessions by ``collect_time``: [valid_from, test_from) is validation, ≥ test_from is test.

    Training sessions are those collected before ``valid_from``; their histories (see
    :func:`redeemed_history`) can only hold sessions known before their collection, hence never a
    validation or test session, whatever those sessions' labels are.
    """
    valid_from, test_from = pd.Timestamp(valid_from), pd.Timestamp(test_from)
    if pd.isna(valid_from) or pd.isna(test_from) or valid_from > test_from:
        raise DataError(f"split_by_time needs valid_from ≤ test_from, got {valid_from} and {test_from}")
    collect = sessions["collect_time"].to_numpy().astype("datetime64[ns]")
    valid_start, test_start = np.datetime64(valid_from, "ns"), np.datetime64(test_from, "ns")
    test = collect >= test_start
    valid = (collect >= valid_start) & ~test
    return TimeSplit(train=np.flatnonzero(~valid & ~test), valid=np.flatnonzero(valid), test=np.flatnonzero(test),
                     valid_from=valid_from, test_from=test_from)


def default_cuts(sessions: pd.DataFrame, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> TimeCuts:
    """Cut times at the ``fractions`` quantiles of ``collect_time``.

    A cut is a collection time present in the data, so sessions sharing a time never straddle it; with
    coarse times (AmExpert's campaign start dates) the parts are only roughly the fractions. Raises
    :class:`DataError` when a part would be empty.
    """
    if len(fractions) != 3 or any(f <= 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
        raise DataError(f"fractions must be three positive numbers summing to 1, got {fractions}")
    times = np.sort(sessions["collect_time"].to_numpy().astype("datetime64[ns]"))
    n = len(times)
    if n < 3:
        raise DataError(f"a time split needs at least 3 sessions, got {n}")
    positions = np.minimum(np.round(np.cumsum(fractions[:2]) * n).astype(int), n - 1)
    valid_from, test_from = times[positions[0]], times[positions[1]]
    if not (times[0] < valid_from < test_from):
        distinct = len(np.unique(times))
        raise DataError(f"cannot cut {n} sessions with {distinct} distinct collection times into non-empty "
                        f"train / validation / test parts by fractions {fractions}")
    return TimeCuts(valid_from=pd.Timestamp(valid_from), test_from=pd.Timestamp(test_from))


def hold_out_latest(sessions: pd.DataFrame, rows: np.ndarray, fraction: float,
                    seed: int = 0, argument: str = "validation") -> tuple[np.ndarray, np.ndarray]:
    """Split the sessions ``rows`` into (kept, held-out) rows, held out the latest ``fraction`` of them: those
    collected at or after the ``1 − fraction`` quantile of their ``collect_time`` (sessions sharing a time stay
    together). When that leaves either side empty (the sessions share one collection time), a random ``fraction``
    of them drawn with ``seed`` is held out instead. Both are returned sorted; an error names ``argument``."""
    rows = np.sort(np.asarray(rows, dtype=np.int64))
    collect = sessions["collect_time"].iloc[rows]
    valid = (collect >= collect.quantile(1 - fraction)).to_numpy()
    if valid.all() or not valid.any():
        k = int(round(fraction * len(rows)))
        if not 0 < k < len(rows):
            raise DataError(f"{argument}: a fraction {fraction} of {len(rows)} sessions leaves "
                            f"{'none held out' if k == 0 else 'none to train on'}; pass {argument}=0 or more sessions")
        valid = np.zeros(len(rows), dtype=bool)
        valid[np.random.default_rng(seed).choice(len(rows), k, replace=False)] = True
    return rows[~valid], rows[valid]


def as_time(argument: str, value) -> pd.Timestamp:
    """A time given as ``value`` (``"2024-06-01"``, ``"2024-06-01 12:00"``, a Timestamp …) as the tables hold times
    (naive UTC), or a one-line error naming ``argument``."""
    try:
        time = pd.Timestamp(value)
    except (TypeError, ValueError):
        time = pd.NaT
    if pd.isna(time):
        raise DataError(f"`{argument}` {value!r} is not a time; use e.g. '2024-06-01' or '2024-06-01 12:00'")
    return time.tz_convert("UTC").tz_localize(None) if time.tzinfo else time


def sessions_from(sessions: pd.DataFrame, start, argument: str = "start") -> np.ndarray:
    """The rows of the sessions collected from ``start`` on (every row when ``start`` is None); a ``start`` that
    selects none is an error naming ``argument``."""
    collect = sessions["collect_time"]
    if start is None:
        return np.arange(len(collect))
    rows = np.flatnonzero(collect >= as_time(argument, start))
    if len(rows) == 0:
        raise DataError(f"`{argument}` {start} selects none of the {len(collect)} sessions, collected from "
                        f"{collect.min()} to {collect.max()}")
    return rows


def describe_holdout(holdout: dict) -> str | None:
    """What a fitted model held out (``VoucherModel.holdout_``) in words; None when nothing."""
    if not holdout["held_out"]:
        return None
    rule = (f"collected from {holdout['test_from'] or holdout['cut']}" if holdout["how"] == "time" else
            f"drawn at random, seed {holdout['seed']}, as all share one collection time")
    share = "" if holdout["test_from"] else f", the latest {holdout['test_fraction']:.0%}"
    return f"{holdout['held_out']:,} of {holdout['rows']:,} sessions ({rule}{share})"

"""Leak-free event histories: each target's last events strictly before its time, vectorised.

Several domains read a per-target history off an event log — the voucher domain the user's earlier redeemed
sessions, the value domain the user's earlier behaviour events before a delivery. The rule is the same: a
history entry j of target i satisfies

    key(j) = key(i),  time(j) < time(i),

strictly, so an event at exactly the target's time (e.g. the click the delivery itself caused) is never in
its history, and nothing later is. Among qualifying events the history is ordered most recent first by
(time(j), position(j)) — a later position in the event arrays is more recent at equal times — and cut at
``max_len``:

    H(i) = the first max_len of { j : key(j) = key(i), time(j) < time(i) } sorted by (time(j), j) descending.

Events or targets with a missing key or time match nothing: such an event is never history, such a target
gets an empty one.
"""

from __future__ import annotations

import operator

import numpy as np
import pandas as pd

from promokit.data.errors import DataError


def last_events_before(event_keys, event_times, target_keys, target_times, max_len: int) -> np.ndarray:
    """For each target, positions of the ``max_len`` most recent events with its key strictly before its time.

    ``event_keys`` / ``target_keys`` are array-likes of hashable ids (strings, ints, ...), factorised together
    so equal ids match across the two; missing ids (None, NaN) match nothing. ``event_times`` /
    ``target_times`` are datetimes (compared as int64 nanoseconds; tz-aware ones in UTC) or numbers, the same
    kind on both sides — mixing them is a :class:`DataError`. Event j is in target i's history iff

        key(j) = key(i)  and  time(j) < time(i)   (strict: an event at the target's own time never is),

    and the history is ordered most recent first by (time(j), j): at equal times the event later in the
    input counts as more recent, so callers pre-order the events to set tie-breaking. Events with a missing
    time (NaT / NaN) are never history; a target with a missing time gets an empty history.

    Returns an ``(n_targets, max_len)`` int64 array of positions into the events, padded with −1.
    Vectorised: one stable sort of the events by time, one sort of (key, time-rank) codes and a
    ``searchsorted`` per target; memory O(n_events + n_targets · max_len).
    """
    max_len = _max_len(max_len)
    event_codes, target_codes = _factorize_together(event_keys, target_keys)
    event_time, event_missing, event_kind = _time_values(event_times, "event_times")
    target_time, target_missing, target_kind = _time_values(target_times, "target_times")
    for codes, times, side in ((event_codes, event_time, "event"), (target_codes, target_time, "target")):
        if len(codes) != len(times):
            raise DataError(f"{side}_keys and {side}_times must have the same length, got {len(codes)} and "
                            f"{len(times)}")
    if len(event_time) and len(target_time) and event_kind != target_kind:
        raise DataError(f"event_times are {event_kind} but target_times are {target_kind}; both must be datetimes "
                        "or both numbers")
    if event_time.dtype != target_time.dtype:  # int and float numbers: compare as float
        event_time, target_time = event_time.astype(np.float64), target_time.astype(np.float64)

    n_targets = len(target_time)
    history = np.full((n_targets, max_len), -1, dtype=np.int64)
    valid = np.flatnonzero((event_codes >= 0) & ~event_missing)
    n_valid = len(valid)
    if n_valid == 0 or n_targets == 0:
        return history

    # rank the valid events by (time, position): rank r means r events come strictly before it in that order
    order = np.argsort(event_time[valid], kind="stable")
    by_time = valid[order]
    sorted_times = event_time[by_time]
    rank = np.empty(n_valid, dtype=np.int64)
    rank[order] = np.arange(n_valid, dtype=np.int64)
    del order
    # (key, rank) as one int64 code, unique per event; the product stays below (n_events + n_targets)²
    base = np.int64(n_valid + 1)
    codes = event_codes[valid].astype(np.int64) * base
    codes += rank
    codes.sort()
    del rank

    # the events strictly before time t are exactly ranks [0, number of event times < t); the queries go to
    # searchsorted in increasing order, which lets it narrow each search from the previous one
    active = (target_codes >= 0) & ~target_missing
    by_target_time = np.argsort(target_time)
    before = np.empty(n_targets, dtype=np.int64)
    before[by_target_time] = np.searchsorted(sorted_times, target_time[by_target_time], side="left")
    del by_target_time
    key_start = target_codes.astype(np.int64) * base
    query = key_start + before
    by_query = np.argsort(query)
    end = np.empty(n_targets, dtype=np.int64)
    end[by_query] = np.searchsorted(codes, query[by_query], side="left")
    start = np.empty(n_targets, dtype=np.int64)
    start[by_query] = np.searchsorted(codes, key_start[by_query], side="left")
    count = np.where(active, np.minimum(end - start, max_len), 0)
    del key_start, before, query, start

    rows = by_query[count[by_query] > 0]  # in query order, so the reads of ``codes`` below run forward
    for slot in range(max_len):  # a loop over history slots, not rows
        rows = rows[count[rows] > slot]
        if len(rows) == 0:
            break
        history[rows, slot] = by_time[codes[end[rows] - 1 - slot] % base]
    return history


def _max_len(max_len) -> int:
    try:
        value = operator.index(max_len)
    except TypeError:
        raise DataError(f"max_len must be an integer of at least 1, got {max_len!r}") from None
    if value < 1:
        raise DataError(f"max_len must be at least 1, got {max_len}")
    return value


def _factorize_together(event_keys, target_keys) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of both key arrays from one factorisation (−1 for a missing key)."""
    parts = []
    for keys, name in ((event_keys, "event_keys"), (target_keys, "target_keys")):
        if isinstance(keys, (np.ndarray, pd.DataFrame)) and keys.ndim != 1:
            raise DataError(f"{name} must be one-dimensional, got shape {keys.shape}")
        parts.append(keys.reset_index(drop=True) if isinstance(keys, pd.Series) else pd.Series(keys, copy=False))
    n_events = len(parts[0])
    codes = pd.factorize(pd.concat(parts, ignore_index=True))[0]
    return codes[:n_events], codes[n_events:]


def _time_values(values, name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(values as int64 ns or numbers, missing mask, kind) with kind "datetimes", "durations" or "numbers"."""
    if not isinstance(values, np.ndarray) or values.dtype == object:
        series = values if isinstance(values, pd.Series) else pd.Series(values, copy=False)
        if isinstance(series.dtype, pd.DatetimeTZDtype):
            series = series.dt.tz_convert("UTC").dt.tz_localize(None)
        elif series.dtype == object:
            inferred = pd.api.types.infer_dtype(series, skipna=True)
            if inferred in ("datetime", "datetime64", "date"):
                series = pd.to_datetime(series, utc=True).dt.tz_localize(None)
            elif inferred in ("integer", "floating", "mixed-integer-float", "decimal", "empty"):
                series = pd.to_numeric(series)
            elif inferred == "timedelta":
                series = pd.to_timedelta(series)
        if pd.api.types.is_extension_array_dtype(series.dtype) and pd.api.types.is_numeric_dtype(series.dtype) \
                and not pd.api.types.is_bool_dtype(series.dtype):
            values = series.to_numpy(dtype=np.float64, na_value=np.nan) if series.hasnans else series.to_numpy()
        else:
            values = series.to_numpy()
    if values.ndim != 1:
        raise DataError(f"{name} must be one-dimensional, got shape {values.shape}")
    kind = values.dtype.kind
    if kind in "mM":
        missing = np.isnat(values)
        unit = "datetime64[ns]" if kind == "M" else "timedelta64[ns]"
        return values.astype(unit).view(np.int64), missing, "datetimes" if kind == "M" else "durations"
    if kind in "iu":
        return values.astype(np.int64, copy=False), np.zeros(len(values), dtype=bool), "numbers"
    if kind == "f":
        values = values.astype(np.float64, copy=False)
        return values, np.isnan(values), "numbers"
    raise DataError(f"{name} must be datetimes or numbers, got values of dtype {values.dtype}")

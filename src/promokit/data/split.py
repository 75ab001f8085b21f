"""Train / validation / test splits as index arrays, and ``fit(validation=…)`` read the same way in every domain
(:func:`parse_validation`)."""

from __future__ import annotations

import datetime
import math
import numbers
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

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


# ---- fit(validation=…): one argument, four forms, one meaning in every domain (docs/conventions.md) ----------------

#: The forms of ``fit(validation=…)``: a share of the rows fit keeps after the test hold-out, a table given apart, a
#: time (the rows from it on) and row positions of the data fit is given.
FRACTION, TABLE, TIME, ROWS = "fraction", "table", "time", "rows"
#: How a string names a table's path rather than a time: its suffix.
TABLE_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".json", ".jsonl", ".feather", ".arrow", ".gz", ".zst")


@dataclass(frozen=True)
class Validation:
    """``fit(validation=…)`` as :func:`parse_validation` classified it: its ``form`` (:data:`FRACTION`,
    :data:`TABLE`, :data:`TIME` or :data:`ROWS`) and ``value`` (the fraction as a float, the table as given, the time
    as a naive-UTC Timestamp, the rows as sorted distinct int64 positions, not yet checked against the data's
    length), and ``takes``: what the domain takes, in words, for its one-line errors."""

    form: str
    value: object
    takes: str = ""

    @property
    def fraction(self) -> float:
        """The share of the rows to validate on: the fraction given, 0 for the other forms."""
        return float(self.value) if self.form == FRACTION else 0.0

    @property
    def table(self):
        """The table given apart, or None for the other forms."""
        return self.value if self.form == TABLE else None

    def refused(self, why: str) -> DataError:
        """The one-line error of a form these data cannot give a meaning (``why``), with what the domain takes."""
        return DataError(f"`validation`: {why}; {self.takes}")


def parse_validation(validation, *, default: float, takes: Mapping[str, str], refuses: Mapping[str, str] | None = None,
                     tables: tuple[type, ...] = (), model: str = "this model") -> Validation:
    """``fit(validation=…)`` classified into one of its four forms, read the same way in every domain:

    - None: the domain's ``default`` fraction;
    - a number: a fraction of the rows fit keeps after the test hold-out, in [0, 1) (0: no validation); NaN, a
      bool, a negative number or one ≥ 1 is refused;
    - a table given apart: an instance of ``tables`` (what the domain's ``fit`` takes as data), an ``os.PathLike``, or
      a string that names an existing file or folder, ends in a table's suffix, is a URI, or holds a path separator
      and is no time;
    - a time: a Timestamp, ``datetime``, ``date``, ``datetime64`` or a string that parses as one (``"2024-06-01"``),
      in UTC when it has a zone (the tables' times are naive UTC): the rows from it on validate;
    - rows: a 1-D list or array of whole numbers, row positions of the data fit is given.

    ``takes`` maps each form the domain takes to its words, in the order its errors list them (``model``, e.g.
    "a voucher model", names it there); ``refuses`` maps a form it does not take to why. A form not taken, a bad
    value or any other type is a one-line :class:`~promokit.data.DataError` naming ``validation`` and saying what the
    domain takes. A :class:`Validation` is returned as it is."""
    if isinstance(validation, Validation):
        return validation
    says = f"{model} takes None (a fraction of {default:g}), " + _listed([takes[form] for form in takes])

    def form(kind: str, value) -> Validation:
        if kind in takes:
            return Validation(kind, value, says)
        why = (refuses or {}).get(kind) or f"{model} cannot validate on {_FORM_WORDS[kind]}"
        raise DataError(f"`validation`: {why}; {says}")

    if validation is None:
        return Validation(FRACTION, float(default), says)
    if isinstance(validation, (bool, np.bool_)):
        raise DataError(f"`validation`: {validation!r} is not a fraction; {says}")
    if isinstance(validation, numbers.Real):
        value = float(validation)
        if math.isnan(value) or not 0 <= value < 1:
            raise DataError(f"`validation`: a fraction must be in [0, 1) (0: no validation), got {validation!r}")
        return form(FRACTION, value)
    if isinstance(validation, (pd.Timestamp, datetime.date, np.datetime64)):
        time = _as_time(validation)
        if time is None:
            raise DataError(f"`validation`: {validation!r} is not a time; {says}")
        return form(TIME, time)
    if isinstance(validation, os.PathLike) or (tables and isinstance(validation, tables)):
        return form(TABLE, validation)
    if isinstance(validation, str):
        text = validation.strip()
        if os.path.exists(text) or "://" in text or text.lower().endswith(TABLE_SUFFIXES):
            return form(TABLE, validation)
        time = _as_time(text) if text else None
        if time is not None:
            return form(TIME, time)
        if "/" in text or os.sep in text:
            return form(TABLE, validation)
        path = " nor a table's path" if TABLE in takes else ""
        raise DataError(f"`validation` {validation!r} is not a time (e.g. '2024-06-01'){path}; {says}")
    if isinstance(validation, (list, tuple, range, np.ndarray, pd.Series, pd.Index)):
        rows = np.asarray(validation)
        if rows.ndim != 1 or not len(rows) or rows.dtype.kind not in "iu":
            raise DataError(f"`validation`: row positions are a 1-D list of whole numbers, got "
                            f"{type(validation).__name__} of shape {rows.shape} and dtype {rows.dtype}; {says}")
        return form(ROWS, np.unique(rows.astype(np.int64)))
    raise DataError(f"`validation`: a {type(validation).__name__} is none of its forms; {says}")


_FORM_WORDS = {FRACTION: "a fraction", TABLE: "a table given apart", TIME: "a time", ROWS: "row positions"}


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _as_time(value) -> pd.Timestamp | None:
    """``value`` as a naive-UTC Timestamp, or None when it is none."""
    try:
        with warnings.catch_warnings():  # dateutil's "could not infer format"
            warnings.simplefilter("ignore")
            time = pd.Timestamp(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if pd.isna(time):
        return None
    return time.tz_convert("UTC").tz_localize(None) if time.tzinfo else time


def at_or_after(times, start: pd.Timestamp) -> np.ndarray | None:
    """Whether each of ``times`` (datetimes, or text that parses as them; with a zone, taken in UTC) is at or after
    ``start`` (naive UTC, as :func:`parse_validation` gives it); None when they are not times (numbers, say).
    A missing time is not after it."""
    series = pd.Series(times)
    if pd.api.types.is_datetime64_any_dtype(series):
        if getattr(series.dt, "tz", None) is not None:
            series = series.dt.tz_convert("UTC").dt.tz_localize(None)
    elif series.dtype.kind == "O" or pd.api.types.is_string_dtype(series):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            series = pd.to_datetime(series, errors="coerce", utc=True, format="mixed").dt.tz_localize(None)
        if series.isna().all():
            return None
    else:
        return None
    return (series >= start).to_numpy()


def split_at_time(later: np.ndarray, rows: np.ndarray, start, what: str,
                  held: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows): the positions ``rows`` split by ``later`` (:func:`at_or_after` of the whole
    table at the time ``start``). Both must be non-empty, else a one-line error counting ``what`` ("sessions") and
    the ``held`` rows held out for evaluation."""
    rows = np.asarray(rows, dtype=np.int64)
    chosen = later[rows]
    train, valid = rows[~chosen], rows[chosen]
    if not len(train) or not len(valid):
        if isinstance(start, pd.Timestamp) and start == start.normalize():
            start = start.date()  # a day, as it was likely given
        raise DataError(f"`validation` {start} leaves {len(train):,} training and {len(valid):,} validation {what} "
                        f"({held:,} held out for evaluation); both must be non-empty")
    return train, valid

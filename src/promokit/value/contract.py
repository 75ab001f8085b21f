"""The expected-transaction-value contract: deliveries of promoted funds, users, funds, behaviours, payments.

Tables (CSV or Parquet)
-----------------------
``deliveries`` — one row per promotion shown to a user:

=============  ==============================================================================================
``user_id``    the user, a key of ``users``
``fund``       the promoted fund (or fund type), a key of ``funds``
``click``      0/1
``convert``    0/1, only after a click
``amount``     the purchase amount PA, ≥ 0; > 0 exactly when ``convert`` = 1
``time``       when it was shown: a datetime (or text that parses as one) or a number
other columns  context features of the delivery, typed by :func:`~promokit.data.spec.infer_feature_columns`
=============  ==============================================================================================

``users`` — ``user_id``, optional ``tolerance`` (whole-number risk tolerance t_i, the allocation's eq. 5) and
profile features (``tolerance`` is one of them). ``funds`` — ``fund``, optional ``risk`` (whole-number risk
level r_j) and fund features; the fund key is always a categorical feature.

``behaviors`` (optional) — the users' history: ``user_id``, ``fund``, ``action`` (any labels: click, purchase,
sell, favorite …) and ``time`` (of the same kind as the deliveries' times). A delivery sees only the events
strictly before its own time. ``consumption`` (optional) — the payment graph: ``user_id``, ``merchant_id``,
``amount`` (≥ 0, the edge weight). Rows of either whose user is not in ``users`` are dropped and counted; a
behaviour on a fund not in ``funds`` is kept as an unknown fund.

The label rules are strict: a conversion without a click, an amount without a conversion or a conversion
without an amount is an error naming the count and an example, or, with ``repair_labels``, is repaired (the
conversion or the amount set to 0) and counted. Every other broken rule is a one-line :class:`DataError`
naming the table, the column, the count and an example row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.io import read_table
from promokit.data.spec import (FeatureSpec, check_label_roles, infer_feature_columns, keyed_table, map_labels,
                                require_columns, require_label_columns, table_types)
from promokit.data import datasets

USER, FUND, CLICK, CONVERT, AMOUNT, TIME = "user_id", "fund", "click", "convert", "amount", "time"
TOLERANCE, RISK, ACTION, MERCHANT = "tolerance", "risk", "action", "merchant_id"
DELIVERY_CONTRACT = (USER, FUND, CLICK, CONVERT, AMOUNT, TIME)
LABELS = (CLICK, CONVERT, AMOUNT)


@dataclass
class ValueTables:
    """Validated tables with a RangeIndex each; ``user`` / ``fund`` give each delivery's row in ``users`` /
    ``funds``. ``time`` is int64 nanoseconds for datetimes, float64 for numbers, in every table. Labels are
    float32 arrays (NaN when the deliveries carry none). ``consumption`` holds ``user`` (row in ``users``),
    ``merchant_id`` and ``amount``; ``behaviors`` holds ``user``, ``fund``, ``action`` and ``time``."""

    deliveries: pd.DataFrame
    users: pd.DataFrame
    funds: pd.DataFrame
    behaviors: pd.DataFrame | None
    consumption: pd.DataFrame | None
    user: np.ndarray
    fund: np.ndarray
    time: np.ndarray
    click: np.ndarray
    convert: np.ndarray
    amount: np.ndarray
    context_spec: FeatureSpec
    user_spec: FeatureSpec
    fund_spec: FeatureSpec
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def has_labels(self) -> bool:
        return bool(len(self.convert)) and not np.isnan(self.convert).any()

    @property
    def log_amount(self) -> np.ndarray:
        """v = log(PA + 1), eq. 7."""
        return np.log1p(self.amount)

    @property
    def fund_names(self) -> list[str]:
        return [str(f) for f in self.funds[FUND]]

    def tolerance(self) -> np.ndarray | None:
        return _whole(self.users, "users", TOLERANCE) if TOLERANCE in self.users.columns else None

    def risk(self) -> np.ndarray | None:
        return _whole(self.funds, "funds", RISK) if RISK in self.funds.columns else None


def check_tables(deliveries: pd.DataFrame | None, users: pd.DataFrame, funds: pd.DataFrame,
                 behaviors: pd.DataFrame | None = None, consumption: pd.DataFrame | None = None, *,
                 require_labels: bool = True, repair_labels: bool = False,
                 specs: dict[str, FeatureSpec] | None = None, part: bool = False,
                 types: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> ValueTables:
    """Validate the tables and return them in contract form.

    Feature columns are inferred from the remaining columns (:func:`~promokit.data.spec.infer_feature_columns`;
    ``types``, column → ``"categorical"`` / ``"numeric"``, sets the type of those it names in any table) unless
    ``specs`` (``context``, ``users``, ``funds``) name them — a trained model passes its own, so scoring tables may
    carry extra columns.
    ``part``: the tables are one part of a dataset co-partitioned by user (``promokit.value.parts``): users and
    deliveries may have no rows, and a behaviour or payment whose user is not in ``users`` is an error, not
    dropped (its user is in another part, or nowhere); whether some deliveries convert and some do not is a
    question for the whole dataset, not for a part. ``deliveries`` None (scoring users × funds from users and funds
    alone, without labels): no delivery, and times of the behaviours' kind. ``labels`` maps the deliveries' labels
    (``click``, ``convert``, ``amount``) to the columns that hold them (``{"convert": "purchased"}``).
    """
    check_label_roles(labels, LABELS)
    specs = specs or {}
    given = deliveries is not None
    if not given:
        if require_labels:
            raise DataError("deliveries: training and evaluation need the deliveries table")
        context = specs["context"].features if "context" in specs else []
        deliveries = pd.DataFrame({name: pd.Series(dtype=object) for name in [USER, FUND, TIME, *context]})
    if part and len(users) == 0:
        require_columns(users, [USER], "users")
        users = users.reset_index(drop=True)
    else:
        users = keyed_table(users, "users", USER)
    funds = keyed_table(funds, "funds", FUND)
    if len(deliveries) == 0 and given and not part:
        raise DataError("deliveries: the table is empty")
    deliveries = map_labels(deliveries.reset_index(drop=True), labels, LABELS, "deliveries")
    require_columns(deliveries, [USER, FUND, TIME], "deliveries")
    if require_labels:
        require_label_columns(deliveries, LABELS, "deliveries")
    user = _lookup(deliveries, "deliveries", USER, users, _owners(part)[0])
    fund = _lookup(deliveries, "deliveries", FUND, funds, "the funds table")
    time, kind = parse_times(deliveries, "deliveries", None) if given else (None, None)
    counts = {"deliveries": len(deliveries), "users": len(users), "funds": len(funds)}
    if require_labels:
        click, convert, amount = _labels(deliveries, repair_labels, counts, part)
    else:
        click = convert = amount = np.full(len(deliveries), np.nan, dtype=np.float32)
    for name, column in ((TOLERANCE, users), (RISK, funds)):
        if name in column.columns:
            _whole(column, "users" if column is users else "funds", name)
    contract = {"context": DELIVERY_CONTRACT, "users": (USER,), "funds": ()}
    tables = {"context": deliveries, "users": users, "funds": funds}
    named = {"deliveries": deliveries, "users": users, "funds": funds}  # the tables as the user knows them
    given_types = dict(zip(tables, table_types(types or {}, named).values()))
    if given_types["funds"].get(FUND) == "numeric":
        raise DataError(f"funds: the fund key {FUND!r} is always a categorical feature; it cannot be numeric")
    feature_specs = {name: _features(tables[name], name, contract[name], specs.get(name), given_types[name])
                     for name in tables}
    if FUND not in feature_specs["funds"].categorical:
        feature_specs["funds"].categorical.insert(0, FUND)
    feature_specs["funds"].numeric = [c for c in feature_specs["funds"].numeric if c != FUND]
    behaviors = None if behaviors is None else _behaviors(behaviors, users, kind, counts, part)
    if not given:  # no delivery: the scoring time is of the behaviours' kind
        time = np.empty(0, dtype=np.int64 if behaviors is None else behaviors[TIME].dtype)
    return ValueTables(
        deliveries=deliveries, users=users, funds=funds, behaviors=behaviors,
        consumption=None if consumption is None else _consumption(consumption, users, counts, part),
        user=user, fund=fund, time=time, click=click, convert=convert, amount=amount,
        context_spec=feature_specs["context"], user_spec=feature_specs["users"], fund_spec=feature_specs["funds"],
        counts=counts)


def _lookup(frame: pd.DataFrame, table: str, key: str, side: pd.DataFrame, side_name: str,
            drop_unknown: bool = False) -> np.ndarray:
    """Row of each ``frame[key]`` in ``side`` (matched as text, so 7 and "7" are one id; ``side_name`` says what
    ``side`` is, e.g. "the users table"); -1 when dropped."""
    position = pd.Index(side[key].astype("string")).get_indexer(frame[key].astype("string"))
    unknown = position < 0
    if unknown.any() and not drop_unknown:
        raise DataError(f"{table}: column {key!r} has {int(unknown.sum())} values in {len(frame)} rows that are not "
                        f"in {side_name}, e.g. {example_row(frame, unknown, [key])}")
    return position.astype(np.int64)


def _owners(part: bool) -> tuple[str, bool]:
    """What a row's user is looked up in, and whether a row of an unknown user is dropped (else an error)."""
    return ("this part's users", False) if part else ("the users table", True)


def parse_times(frame: pd.DataFrame, table: str, kind: str | None) -> tuple[np.ndarray, str]:
    """The ``time`` column as int64 ns (datetimes, or text that parses as dates) or float64 (numbers)."""
    series = frame[TIME]
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        values, found = series.to_numpy(dtype=np.float64, na_value=np.nan), "number"
        bad = ~np.isfinite(values)
    else:
        parsed = pd.to_datetime(series, errors="coerce", format="mixed") if not \
            pd.api.types.is_datetime64_any_dtype(series) else series
        if getattr(parsed.dt, "tz", None) is not None:
            parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
        bad = parsed.isna().to_numpy()
        values, found = parsed.to_numpy(dtype="datetime64[ns]").view(np.int64), "datetime"
    if bad.any():
        raise DataError(f"{table}: column 'time' has {int(bad.sum())} missing or unreadable values in {len(frame)} "
                        f"rows, e.g. {example_row(frame, bad, [TIME])}; give datetimes or numbers")
    if kind is not None and found != kind:
        raise DataError(f"{table}: column 'time' holds {found}s but the deliveries' times are {kind}s; "
                        "give both tables times of one kind")
    return values, found


def _binary(frame: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        raise DataError(f"deliveries: label column {column!r} must be 0/1 but has {int(bad.sum())} missing or other "
                        f"values in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values


def _labels(frame: pd.DataFrame, repair: bool, counts: dict, part: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(frame)
    click, convert = _binary(frame, CLICK), _binary(frame, CONVERT)
    amount = pd.to_numeric(frame[AMOUNT], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(amount) | (amount < 0)
    if bad.any():
        raise DataError(f"deliveries: column 'amount' must hold finite numbers ≥ 0 but has {int(bad.sum())} other "
                        f"values in {n} rows, e.g. {example_row(frame, bad, [AMOUNT])}")
    rules = (("conversions without a click", lambda: (convert == 1) & (click == 0), "convert", [CLICK, CONVERT]),
             ("amounts without a conversion", lambda: (convert == 0) & (amount > 0), "amount", [CONVERT, AMOUNT]),
             ("conversions without an amount", lambda: (convert == 1) & (amount == 0), "convert", [CONVERT, AMOUNT]))
    for what, rule, fix, columns in rules:
        broken = rule()  # on the labels as the earlier repairs left them, so no row is counted twice
        if not broken.any():
            continue
        if not repair:
            raise DataError(f"deliveries: {int(broken.sum())} {what} in {n} rows, e.g. "
                            f"{example_row(frame, broken, columns)}; a purchase needs a click and an amount > 0 "
                            "(repair_labels=True sets the conversion or the amount to 0)")
        counts[f"repaired {what}"] = int(broken.sum())
        if fix == "convert":
            convert = np.where(broken, 0.0, convert)
        amount = np.where(broken, 0.0, amount)
    if not part:
        check_conversions(int(convert.sum()), n)
    return click.astype(np.float32), convert.astype(np.float32), amount


def check_conversions(converted: int, n: int) -> None:
    """A value model needs deliveries that converted and deliveries that did not (``converted`` of ``n``)."""
    if converted in (0, n):
        raise DataError(f"deliveries: 'convert' is {int(converted > 0)} on all {n} rows; a value model needs "
                        "deliveries that converted and deliveries that did not")


def _whole(frame: pd.DataFrame, table: str, column: str) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        raise DataError(f"{table}: column {column!r} must hold whole numbers but has {int(bad.sum())} other values "
                        f"in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values.astype(np.int64)


def _features(frame: pd.DataFrame, table: str, contract: tuple[str, ...], given: FeatureSpec | None,
              types: dict[str, str]) -> FeatureSpec:
    if given is not None:
        require_columns(frame, given.features, table)
        return FeatureSpec(categorical=list(given.categorical), numeric=list(given.numeric), group_key=None,
                           min_count=given.min_count)
    categorical, numeric = infer_feature_columns(frame, set(contract), types)
    return FeatureSpec(categorical=categorical, numeric=numeric, group_key=None, types=types)


def _behaviors(frame: pd.DataFrame, users: pd.DataFrame, kind: str, counts: dict, part: bool) -> pd.DataFrame:
    frame = frame.reset_index(drop=True)
    require_columns(frame, [USER, FUND, ACTION, TIME], "behaviors")
    for column in (FUND, ACTION):
        missing = frame[column].isna().to_numpy()
        if missing.any():
            raise DataError(f"behaviors: column {column!r} has {int(missing.sum())} missing values in {len(frame)} "
                            f"rows, e.g. {example_row(frame, missing, [column])}")
    time, _ = parse_times(frame, "behaviors", kind)
    user = _lookup(frame, "behaviors", USER, users, *_owners(part))
    keep = user >= 0
    counts["behaviors"] = int(keep.sum())
    counts["behaviors of unknown users (dropped)"] = int((~keep).sum())
    return pd.DataFrame({"user": user[keep], FUND: frame[FUND].astype("string").to_numpy()[keep],
                         ACTION: frame[ACTION].astype("string").to_numpy()[keep], TIME: time[keep]})


def _consumption(frame: pd.DataFrame, users: pd.DataFrame, counts: dict, part: bool) -> pd.DataFrame:
    frame = frame.reset_index(drop=True)
    require_columns(frame, [USER, MERCHANT, AMOUNT], "consumption")
    missing = frame[MERCHANT].isna().to_numpy()
    if missing.any():
        raise DataError(f"consumption: column 'merchant_id' has {int(missing.sum())} missing values in {len(frame)} "
                        f"rows, e.g. {example_row(frame, missing, [MERCHANT])}")
    amount = pd.to_numeric(frame[AMOUNT], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(amount) | (amount < 0)
    if bad.any():
        raise DataError(f"consumption: column 'amount' must hold finite numbers ≥ 0 but has {int(bad.sum())} other "
                        f"values in {len(frame)} rows, e.g. {example_row(frame, bad, [AMOUNT])}")
    user = _lookup(frame, "consumption", USER, users, *_owners(part))
    keep = user >= 0
    counts["payments"] = int(keep.sum())
    counts["payments of unknown users (dropped)"] = int((~keep).sum())
    return pd.DataFrame({"user": user[keep], MERCHANT: frame[MERCHANT].astype("string").to_numpy()[keep],
                         AMOUNT: amount[keep]})


TABLES = ("deliveries", "users", "funds", "behaviors", "consumption")
OPTIONAL_TABLES = ("behaviors", "consumption")


def table_paths(folder, deliveries_optional: bool = False) -> dict[str, Path]:
    """Where each table of a value dataset folder is: ``<name>.parquet``, ``<name>.csv`` or a directory ``<name>/``
    of Parquet parts (a dataset in parts, :mod:`promokit.value.parts`); ``behaviors`` and ``consumption`` only
    when present, and ``deliveries`` too with ``deliveries_optional`` (scoring users × funds alone)."""
    return datasets.table_paths(folder, TABLES, _required(not deliveries_optional), "a value dataset")


def read_folder(folder, require_labels: bool = True, repair_labels: bool = False,
                specs: dict[str, FeatureSpec] | None = None, types: dict[str, str] | None = None,
                labels: dict[str, str] | None = None) -> ValueTables:
    """The tables of a value dataset folder (:func:`table_paths`), each read whole (a directory of parts as its
    parts in order), validated by :func:`check_tables` (``types``: the types it gives inferred features;
    ``labels``: the deliveries' label columns); without labels the deliveries may be absent."""
    frames = {name: read_table(path) for name, path in table_paths(folder, not require_labels).items()}
    return check_tables(frames.get("deliveries"), frames["users"], frames["funds"], frames.get("behaviors"),
                        frames.get("consumption"), require_labels=require_labels, repair_labels=repair_labels,
                        specs=specs, types=types, labels=labels)


def value_tables(data, *, require_labels: bool = True, specs: dict[str, FeatureSpec] | None = None,
                 labels: dict[str, str] | None = None) -> ValueTables:
    """``data`` as :class:`ValueTables`: the tables themselves, as given; a dataset folder (:func:`read_folder`); or
    a mapping of table name (deliveries, users, funds [, behaviors, consumption]) → DataFrame or table path,
    validated by :func:`check_tables` (``specs``: the features a trained model reads; ``labels``: the deliveries'
    label columns; without labels the deliveries may be absent)."""
    if isinstance(data, ValueTables):
        return data
    if isinstance(data, (str, os.PathLike)):
        return read_folder(data, require_labels, specs=specs, labels=labels)
    frames = datasets.read_tables(data, TABLES, _required(require_labels), "a value dataset")
    return check_tables(frames.get("deliveries"), frames["users"], frames["funds"], frames.get("behaviors"),
                        frames.get("consumption"), require_labels=require_labels, specs=specs, labels=labels)


def _required(deliveries: bool) -> tuple[str, ...]:
    """The tables a value dataset must hold: users and funds, and the deliveries to train or evaluate."""
    return tuple(name for name in TABLES if name not in OPTIONAL_TABLES and (deliveries or name != "deliveries"))

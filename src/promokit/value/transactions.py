"""Value tables from a transaction log: features from one window, the spend to predict from a later one.

A platform's usual record of customer value is a transactions table — one row per purchase: the customer, when,
how much and, optionally, what (CDNOW's shape: :mod:`promokit.value.cdnow`). :func:`from_transactions` maps it
onto the value contract (:mod:`promokit.value.contract`) the way customer-value studies do (Fader, Hardie & Lee
2005): what happened in the **feature window** is known, the label is each customer's spend in the later **target
window**. Windows are half-open, [start, end).

* ``users`` — every customer with a purchase in the feature window (the others have nothing to predict from:
  those who buy in the target window only are left out, and counted — :attr:`TransactionTables.new_customers`),
  with RFM and spend features as of the window's end: ``log_purchases`` (frequency), ``log_purchase_days``
  (calendar days with a purchase), ``log_<quantity>`` (the total of the ``quantity`` column, when given),
  ``log_total_spend`` (monetary), ``log_mean_spend``, ``log_first_spend`` — each log(1 + ·) — and
  ``days_since_first`` (tenure) and ``days_since_last`` (recency), in days to the window's end.
* ``funds`` — one fund (``fund``, default "all") or, with ``product``, the products bought in either window.
* ``deliveries`` — one per customer × fund at the target window's start, as if the fund were shown then:
  ``click`` = 1, ``amount`` = the customer's spend on the fund in the target window (PA), ``convert`` = whether
  it is > 0. With several funds each also carries the customer's ``log_fund_purchases`` and ``log_fund_spend``
  on that fund in the feature window (context features: what lets a model give customers different best funds).
* ``behaviors`` — the feature window's purchases (``action`` = purchase, on their fund), all before every delivery.

Rows repeated exactly are kept: a log may hold two like purchases on one day (CDNOW holds 255).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.durations import parse_duration
from promokit.data.errors import DataError, example_row
from promokit.data.io import write_table
from promokit.data.uris import as_path
from promokit.data.spec import missing_column_message
from promokit.value.contract import ACTION, AMOUNT, CLICK, CONVERT, FUND, TIME, USER

#: The fund of a log without a product column, and the customer column's default name.
ONE_FUND, CUSTOMER = "all", "customer_id"
DAY = pd.Timedelta(days=1)


class TransactionTables(dict):
    """The value tables of :func:`from_transactions` by name (``deliveries``, ``users``, ``funds``, ``behaviors``),
    and what the mapping left out: ``new_customers``, those who bought in the target window but not in the feature
    window (no history to predict from), of the ``target_customers`` who bought in the target window."""

    def __init__(self, tables: dict[str, pd.DataFrame], new_customers: int, target_customers: int):
        super().__init__(tables)
        self.new_customers, self.target_customers = new_customers, target_customers

    def __getattr__(self, name: str) -> pd.DataFrame:
        """A table as an attribute too (``tables.users``), as every other table bundle gives it."""
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no table {name!r}; the tables are {list(self)}") from None

    def summary(self) -> dict:
        """Counts to report: customers, funds, deliveries, the share of the deliveries with a spend, the behaviours
        and the customers left out (``new_customers`` of ``target_customers``)."""
        deliveries = self["deliveries"]
        return {"customers": len(self["users"]), "funds": len(self["funds"]), "deliveries": len(deliveries),
                "spend_share": float(deliveries[CONVERT].mean()), "behaviors": len(self["behaviors"]),
                "new_customers": self.new_customers, "target_customers": self.target_customers}


def from_transactions(transactions: pd.DataFrame, *, feature_window, target_window, customer: str = CUSTOMER,
                      time: str = TIME, amount: str = AMOUNT, product: str | None = None,
                      quantity: str | None = None, fund: str = ONE_FUND,
                      time_format: str | None = None) -> TransactionTables:
    """The value tables (``deliveries``, ``users``, ``funds``, ``behaviors``; the module docstring says what each
    holds) of the purchase log ``transactions``, whose columns ``customer``, ``time`` (datetimes, or text that
    parses as one — with ``time_format``, e.g. ``"%Y%m%d"``, as that format) and ``amount`` (numbers ≥ 0) are
    named by those arguments, with ``product`` the column whose values are the funds (else one fund, ``fund``)
    and ``quantity`` an optional numeric column summed as a feature (CDNOW's CDs).

    ``feature_window`` and ``target_window``: each a pair (start, end) of times (or text ``"START,END"``), or a
    duration (``parse_duration``: ``"273D"``) — the target window then starts where the feature window ends, the
    feature window ends where the target window starts; one of them needs times. The feature window's start may
    be None (from the first purchase). The target window starts at or after the feature window's end.

    The customers who bought in the target window only are left out (no feature-window history); the tables returned
    count them (:class:`TransactionTables`: ``new_customers``, ``summary()``).
    """
    _columns(transactions, customer=customer, time=time, amount=amount, product=product, quantity=quantity)
    log = transactions.reset_index(drop=True)
    when = _times(log, time, time_format)
    spend = _numbers(log, amount, "amount")
    _no_missing(log, customer, "customer")
    if product is not None:
        _no_missing(log, product, "product")
    (start, cut), (begin, end) = windows(feature_window, target_window, when)
    log = pd.DataFrame({USER: log[customer], TIME: when, AMOUNT: spend,
                        FUND: log[product].astype("string") if product is not None else fund,
                        **({quantity: _numbers(log, quantity, "quantity")} if quantity is not None else {})})
    features = log[(log[TIME] >= start) & (log[TIME] < cut)]
    target = log[(log[TIME] >= begin) & (log[TIME] < end)]
    for name, window, rows in (("feature_window", (start, cut), features), ("target_window", (begin, end), target)):
        if rows.empty:
            raise DataError(f"`{name}` [{_show(window[0])}, {_show(window[1])}) holds no transaction of the "
                            f"{len(log)}, which run from {_show(when.min())} to {_show(when.max())}")
    users = _rfm(features, cut, quantity)
    funds = pd.DataFrame({FUND: sorted(set(features[FUND]) | set(target[FUND]))})
    deliveries = _deliveries(users[USER], funds[FUND], features, target, begin, several=product is not None)
    behaviors = pd.DataFrame({USER: features[USER].to_numpy(), FUND: features[FUND].to_numpy(), ACTION: "purchase",
                              TIME: features[TIME].to_numpy()})
    target_customers = target[USER].unique()
    return TransactionTables({"deliveries": deliveries, "users": users, "funds": funds, "behaviors": behaviors},
                             new_customers=int((~pd.Index(target_customers).isin(users[USER])).sum()),
                             target_customers=len(target_customers))


def write_value_tables(tables: dict[str, pd.DataFrame], folder: str | os.PathLike) -> dict[str, Path]:
    """Write ``tables`` (:func:`from_transactions`) as ``<folder>/<name>.parquet``, a value dataset folder (local, or
    a URI: :mod:`promokit.data.uris`)."""
    folder = as_path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    taken = [f"{name}.csv" for name in tables if (folder / f"{name}.csv").exists()]
    if taken:
        raise DataError(f"`out` {folder} already holds {', '.join(taken)}: a table as both CSV and Parquet would "
                        "make the folder unreadable; write to another folder")
    return {name: write_table(frame, folder / f"{name}.parquet") for name, frame in tables.items()}


def windows(feature_window, target_window, when: pd.Series) -> tuple[tuple, tuple]:
    """The windows as ((start, cut), (begin, end)) timestamps; a duration is measured from the other window."""
    feature, target = _window(feature_window, "feature_window"), _window(target_window, "target_window")
    if isinstance(feature, pd.Timedelta) and isinstance(target, pd.Timedelta):
        raise DataError("`feature_window` and `target_window` are both durations: give one of them as times "
                        "(START,END)")
    if isinstance(target, pd.Timedelta):
        target = (feature[1], feature[1] + target)
    if isinstance(feature, pd.Timedelta):
        feature = (target[0] - feature, target[0])
    for name, (first, last) in (("feature_window", feature), ("target_window", target)):
        if first is not None and not first < last:
            raise DataError(f"`{name}` [{_show(first)}, {_show(last)}) is empty or reversed: its start must come "
                            "before its end")
    if target[0] < feature[1]:
        raise DataError(f"`target_window` starts at {_show(target[0])}, before `feature_window` ends at "
                        f"{_show(feature[1])}: the windows overlap, so the features would see the target's purchases")
    start = min(when.min(), feature[1]) if feature[0] is None else feature[0]  # open: from the first purchase
    return (start, feature[1]), target


def _window(value, name: str):
    """A window as a (start, end) pair of timestamps (the start None where open) or a duration."""
    if isinstance(value, str) and "," in value:
        value = tuple(part.strip() or None for part in value.split(","))
    if not isinstance(value, (tuple, list)):
        return parse_duration(value, f"`{name}`")
    if len(value) != 2:
        raise DataError(f"`{name}` {value!r}: give (start, end), START,END or a duration")
    start, end = (_timestamp(part, name) for part in value)
    if end is None or (start is None and name == "target_window"):
        raise DataError(f"`{name}` {value!r}: give its {'end' if end is None else 'start'}")
    return start, end


def _timestamp(value, name: str) -> pd.Timestamp | None:
    if value is None:
        return None
    try:
        stamp = pd.NaT if isinstance(value, (int, float, np.number)) else pd.Timestamp(value)
    except (ValueError, TypeError):
        stamp = pd.NaT
    if pd.isna(stamp):
        raise DataError(f"`{name}`: {value!r} is not a time; give dates or datetimes (1997-10-01)")
    return stamp.tz_convert("UTC").tz_localize(None) if stamp.tz is not None else stamp


def _show(stamp: pd.Timestamp) -> str:
    """A time as a date when it is midnight, else in full."""
    return str(stamp.date()) if stamp == stamp.normalize() else str(stamp)


def _columns(frame: pd.DataFrame, **roles) -> None:
    """Every column a role names is in ``frame`` once, and no column plays two roles."""
    if not isinstance(frame, pd.DataFrame):
        raise DataError(f"`transactions` must be a DataFrame, got {type(frame).__name__}")
    if frame.empty:
        raise DataError("`transactions` has no rows")
    repeated = frame.columns[frame.columns.duplicated()]
    if len(repeated):
        raise DataError(f"transactions: column {repeated[0]!r} appears more than once")
    given = {role: column for role, column in roles.items() if column is not None}
    for role, column in given.items():
        if column not in frame.columns:
            raise DataError(f"transactions: `{role}` names no column: "
                            + missing_column_message(column, list(frame.columns), role, len(frame)))
    seen: dict[str, str] = {}
    for role, column in given.items():
        if column in seen:
            raise DataError(f"transactions: `{seen[column]}` and `{role}` both name column {column!r}")
        seen[column] = role


def _times(frame: pd.DataFrame, column: str, time_format: str | None) -> pd.Series:
    series = frame[column]
    if time_format is not None:
        parsed = pd.to_datetime(series.astype("string"), format=time_format, errors="coerce")
    elif pd.api.types.is_datetime64_any_dtype(series):
        parsed = series
    elif pd.api.types.is_numeric_dtype(series):
        raise DataError(f"transactions: `time` column {column!r} holds numbers, e.g. {series.iloc[0]}; give "
                        "datetimes, or text with its `time_format` (19970101: '%Y%m%d')")
    else:
        parsed = pd.to_datetime(series, errors="coerce", format="mixed")
    if getattr(parsed.dt, "tz", None) is not None:
        parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
    bad = parsed.isna().to_numpy()
    if bad.any():
        how = f"in the format {time_format!r}" if time_format else "as datetimes"
        raise DataError(f"transactions: `time` column {column!r} has {int(bad.sum())} missing values or values "
                        f"that do not read {how} in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return parsed.astype("datetime64[ns]")


def _numbers(frame: pd.DataFrame, column: str, role: str) -> np.ndarray:
    """``column`` as finite float64 numbers ≥ 0."""
    series = frame[column]
    if pd.api.types.is_bool_dtype(series):
        raise DataError(f"transactions: `{role}` column {column!r} holds booleans; give numbers ≥ 0")
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        raise DataError(f"transactions: `{role}` column {column!r} must hold finite numbers ≥ 0 but has "
                        f"{int(bad.sum())} other values in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}"
                        + ("; net refunds out of the purchases first" if (values < 0).any() else ""))
    return values


def _no_missing(frame: pd.DataFrame, column: str, role: str) -> None:
    missing = frame[column].isna().to_numpy()
    if missing.any():
        raise DataError(f"transactions: `{role}` column {column!r} has {int(missing.sum())} missing values in "
                        f"{len(frame)} rows, e.g. {example_row(frame, missing, [column])}")


def _rfm(features: pd.DataFrame, cut: pd.Timestamp, quantity: str | None) -> pd.DataFrame:
    """Per customer of the feature window: frequency, monetary and recency features as of ``cut``."""
    grouped = features.groupby(USER)
    first = features.sort_values(TIME, kind="stable").groupby(USER).first()
    columns = {"log_purchases": np.log1p(grouped.size()),
               "log_purchase_days": np.log1p(features[TIME].dt.normalize().groupby(features[USER]).nunique())}
    if quantity is not None:
        columns[f"log_{quantity}"] = np.log1p(grouped[quantity].sum())
    columns.update({"log_total_spend": np.log1p(grouped[AMOUNT].sum()),
                    "log_mean_spend": np.log1p(grouped[AMOUNT].mean()),
                    "log_first_spend": np.log1p(first[AMOUNT]),
                    "days_since_first": (cut - grouped[TIME].min()) / DAY,
                    "days_since_last": (cut - grouped[TIME].max()) / DAY})
    return pd.DataFrame(columns).rename_axis(USER).reset_index()


def _deliveries(users: pd.Series, funds: pd.Series, features: pd.DataFrame, target: pd.DataFrame,
                at: pd.Timestamp, several: bool) -> pd.DataFrame:
    """One delivery per user × fund at ``at``, labelled by the target window's spend on the fund."""
    pairs = pd.MultiIndex.from_product([users, funds], names=[USER, FUND])
    spend = target.groupby([USER, FUND])[AMOUNT].sum().reindex(pairs, fill_value=0.0).to_numpy()
    frame = pairs.to_frame(index=False).assign(**{CLICK: 1, CONVERT: (spend > 0).astype(int), AMOUNT: spend,
                                                  TIME: at})
    if several:
        bought = features.groupby([USER, FUND])[AMOUNT]
        frame["log_fund_purchases"] = np.log1p(bought.size().reindex(pairs, fill_value=0).to_numpy(np.float64))
        frame["log_fund_spend"] = np.log1p(bought.sum().reindex(pairs, fill_value=0.0).to_numpy())
    return frame

"""The voucher-redemption contract: sessions, behaviour events and items (DMBGN §3.1).

Tables
------
``sessions`` — one row per voucher session S(u, o, C) (a user collecting a voucher):

===============  ============================================================================================
``session_id``   unique id
``user_id``      the user u
``voucher_id``   the voucher o (a marketing activity)
``min_spend``    voucher threshold, ≥ 0 (optional as a pair: pass ``terms=False`` when the data has none)
``discount``     voucher amount, ≥ 0
``collect_time`` when the user collected the voucher
``outcome_time`` when the outcome (redeemed or expired) became known, ≥ ``collect_time``. When the column is
                 absent (or a value is missing), pass ``validity`` (e.g. ``"7D"``): outcome_time =
                 collect_time + validity, i.e. the voucher's expiry
``redeemed``     label, 0/1 (missing only with ``require_labels=False``: an outcome still unknown)
profile columns  optional user / voucher features, named explicitly (``categorical`` / ``numeric``)
===============  ============================================================================================

``events`` — behaviour C^{u,o}: ``session_id``, ``item_id``, ``action`` (``atc`` add-to-cart, ``ord`` order,
``click``), ``action_time``. Events before ``collect_time`` are the pre-collection behaviour C_b, events in
[collect_time, outcome_time] the post-collection behaviour C_a. Clicks are accepted and dropped unless
``keep_clicks`` (the paper found them noise, footnote 3). A user-level log (``user_id`` instead of
``session_id``) is attached to the sessions: each session gets its user's last ``max_pre_events`` events
before collection ("the nearest behaviour items before voucher collection, up to a specified number", §3.1)
and all events from collection to outcome; an event may belong to several sessions.

``items`` — ``item_id`` and the item features ``item_features`` (default ``category, brand, price_level``).

``voucher_items`` (optional) — ``voucher_id, item_id``: the items a voucher applies to. With a behaviour log they
mark each item node of a session's graph in or out of its voucher's scope; without one (AmExpert 2019) the
voucher–item graph takes the place of the behaviour graph.

Times are datetimes, strings ``pd.to_datetime`` reads, or numbers (Unix seconds); they come out as
``datetime64[ns]`` (time-zone aware values are converted to UTC).

Leak guards
-----------
Only whitelisted session columns survive :func:`check_tables`: the contract columns and the profile columns
named by the caller; anything else (``redeem_time``, order amounts …) is dropped, and naming a time, label or
redemption column as a feature is an error. Post-collection events after ``outcome_time`` are dropped and
counted: a historical session's behaviour must be complete when its outcome is known, otherwise it could
reach past a later target's collection time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import datasets
from promokit.data.durations import parse_duration
from promokit.data.encoders import check_numeric_columns
from promokit.data.errors import DataError, example_row
from promokit.data.io import write_parquet
from promokit.data.uris import as_path
from promokit.data.spec import (
    FeatureSpec,
    check_label_roles,
    map_labels,
    missing_column_message,
    require_columns,
    require_label_columns,
)

ID_COLUMNS = ("session_id", "user_id", "voucher_id")
TERM_COLUMNS = ("min_spend", "discount")
TIME_COLUMNS = ("collect_time", "outcome_time")
LABEL = "redeemed"
EVENT_COLUMNS = ("session_id", "item_id", "action", "action_time")
ACTIONS = ("atc", "ord", "click")
ITEM_FEATURES = ("category", "brand", "price_level")
VOUCHER_ITEM_COLUMNS = ("voucher_id", "item_id")
#: The tables of a voucher dataset by name (a mapping's keys, a folder's file stems); events and voucher_items
#: are optional.
TABLES = ("sessions", "events", "items", "voucher_items")
REQUIRED_TABLES = ("sessions", "items")
#: Never features: the label, the contract times and any column named after the redemption or outcome.
FORBIDDEN_FEATURE_WORDS = ("redeem", "redemption", "outcome")


@dataclass
class VoucherTables:
    """Validated voucher tables; ``sessions`` sorted by ``collect_time`` with a RangeIndex (row = session index).

    ``events`` carries ``session`` (the session's row index) and ``pre`` (action_time < collect_time) and is
    sorted by (session, action_time). ``categorical`` / ``numeric`` are the whitelisted session features.
    """

    sessions: pd.DataFrame
    events: pd.DataFrame
    items: pd.DataFrame
    categorical: list[str]
    numeric: list[str]
    item_features: list[str] = field(default_factory=lambda: list(ITEM_FEATURES))
    voucher_items: pd.DataFrame | None = None
    #: rows removed or filled by the documented repairs, by reason
    repairs: dict[str, int] = field(default_factory=dict)
    #: the label's column when it is not ``redeemed`` (``{"redeemed": "is_redeemed"}``), as mapped when read
    labels: dict[str, str] | None = None

    @property
    def spec(self) -> FeatureSpec:
        """The session features as a :class:`FeatureSpec` for a ``TableEncoder``."""
        return FeatureSpec(categorical=list(self.categorical), numeric=list(self.numeric),
                           labels={LABEL: LABEL}, group_key="user_id")

    @property
    def options(self) -> dict:
        """The :func:`check_tables` options that read these tables (what a model directory keeps, so that predict
        needs only the tables): see :func:`table_options`."""
        return table_options(self.categorical, self.numeric, self.item_features)


def table_options(categorical: Sequence[str], numeric: Sequence[str], item_features: Sequence[str] | None) -> dict:
    """The :func:`check_tables` options whose tables have the session features ``categorical`` / ``numeric``:
    the ``categorical`` / ``numeric`` profile columns (the features minus the ids and terms), ``terms`` and
    ``item_features`` (``None`` stays unknown)."""
    return {"categorical": [c for c in categorical if c not in ("user_id", "voucher_id")],
            "numeric": [c for c in numeric if c not in TERM_COLUMNS], "terms": set(TERM_COLUMNS) <= set(numeric),
            "item_features": None if item_features is None else list(item_features)}


def check_tables(sessions: pd.DataFrame, events: pd.DataFrame | None, items: pd.DataFrame, *,
                 categorical: Sequence[str] = (), numeric: Sequence[str] = (), validity=None, terms: bool = True,
                 require_labels: bool = True, keep_clicks: bool = False, unknown_items: str = "error",
                 item_features: Sequence[str] | None = ITEM_FEATURES, voucher_items: pd.DataFrame | None = None,
                 labels: dict[str, str] | None = None,
                 max_pre_events: int | None = 50) -> VoucherTables:
    """Validate the three tables (and optional ``voucher_items``) and return them in contract form.

    ``categorical`` / ``numeric`` name the profile columns to keep as features besides ``user_id``,
    ``voucher_id`` (categorical) and ``min_spend``, ``discount`` (numeric, when ``terms``).
    ``unknown_items``: ``"error"`` (default) or ``"drop"`` — events / voucher items whose item is not in
    ``items`` are dropped and counted in ``repairs``. ``max_pre_events`` bounds the pre-collection events
    per session taken from a user-level log (``None``: all). ``labels`` maps the label ``redeemed`` to the
    sessions' column that holds it (``{"redeemed": "is_redeemed"}``); where labels are optional
    (``require_labels=False``), a mapped column that is absent means no labels. ``item_features`` None: the
    default ones. Every broken rule raises a one-line :class:`DataError`.
    """
    check_label_roles(labels, (LABEL,))
    labels = {role: column for role, column in (labels or {}).items()
              if column != role and (require_labels or column in sessions.columns)} or None
    sessions = map_labels(sessions, labels, (LABEL,), "sessions")
    item_features = ITEM_FEATURES if item_features is None else item_features
    if unknown_items not in ("error", "drop"):
        raise DataError(f"unknown_items must be 'error' or 'drop', got {unknown_items!r}")
    if max_pre_events is not None and max_pre_events < 0:
        raise DataError(f"max_pre_events must be ≥ 0 or None, got {max_pre_events}")
    repairs: dict[str, int] = {}
    out = _check_sessions(sessions, list(categorical), list(numeric), validity, terms, require_labels, repairs)
    item_table = _check_items(items, list(item_features))
    known_items = pd.Index(item_table["item_id"])
    event_table = _check_events(events, out, known_items, keep_clicks, unknown_items, max_pre_events, repairs)
    pairs = None
    if voucher_items is not None:
        pairs = _check_voucher_items(voucher_items, known_items, unknown_items, repairs)
        _check_voucher_ids(pairs, out)
    features_cat = ["user_id", "voucher_id", *[c for c in categorical if c not in ("user_id", "voucher_id")]]
    features_num = [*(TERM_COLUMNS if terms else ()), *numeric]
    return VoucherTables(sessions=out, events=event_table, items=item_table, categorical=features_cat,
                         numeric=features_num, item_features=list(item_features), voucher_items=pairs,
                         repairs=repairs, labels=labels)


def read_tables(data, **options) -> VoucherTables:
    """The :class:`VoucherTables` of ``data``: tables already checked, as they are (``options`` unused); a mapping
    of table name (:data:`TABLES`) → DataFrame or path (:func:`~promokit.data.read_table`: CSV, Parquet or a
    directory of Parquet parts); or a folder holding ``sessions``, ``items`` and optionally ``events``,
    ``voucher_items`` as ``<name>.parquet``, ``<name>.csv`` or a directory ``<name>/`` of parts (what ``promokit
    voucher synth`` and ``amexpert`` write). The tables read are validated by :func:`check_tables` with
    ``options`` (``categorical``, ``numeric``, ``terms``, ``item_features``, ``validity``, ``require_labels`` …)."""
    if isinstance(data, VoucherTables):
        return data
    frames = datasets.read_tables(data, TABLES, REQUIRED_TABLES, "voucher data")
    return check_tables(frames["sessions"], frames.get("events"), frames["items"],
                        voucher_items=frames.get("voucher_items"), **options)


def agreed_options(trained: dict, categorical: Sequence[str] | None = None, numeric: Sequence[str] | None = None,
                   terms: bool | None = None, item_features: Sequence[str] | None = None) -> dict:
    """The :func:`check_tables` options a model was trained with (``trained``: its :func:`table_options`), to read
    other tables as its training tables were. Options given must name the same columns (in any order): one that
    contradicts the model is an error (``no_terms`` in it is ``terms=False``). Item features a model did not keep
    (a format-1 directory without the table options) follow ``item_features``, by default :data:`ITEM_FEATURES`."""
    given = {"categorical": categorical, "numeric": numeric, "item_features": item_features}
    for name, columns in given.items():
        if columns is not None and trained[name] is not None and set(columns) != set(trained[name]):
            raise DataError(f"`{name}` {','.join(columns)!r} contradicts the model, trained with `{name}` "
                            f"{','.join(trained[name])!r}; the model directory remembers its columns: leave `{name}` "
                            "out")
    if terms is not None and terms != trained["terms"]:
        word = {True: "terms", False: "no_terms"}
        raise DataError(f"`{word[terms]}` contradicts the model, trained with `{word[trained['terms']]}`; the model "
                        "directory remembers it: leave it out")
    features = trained["item_features"] if trained["item_features"] is not None else item_features
    return {"categorical": trained["categorical"], "numeric": trained["numeric"], "terms": trained["terms"],
            "item_features": list(features or ITEM_FEATURES)}


def write_tables(tables: VoucherTables, folder) -> dict[str, Path]:
    """Write checked tables as ``<name>.parquet`` files into ``folder`` (what :func:`read_tables` reads back with
    ``tables.options``): sessions, items, and the events and voucher_items when there are any. Returns the files by
    table name."""
    frames = {"sessions": tables.sessions, "items": tables.items}
    if len(tables.events):
        frames["events"] = tables.events[list(EVENT_COLUMNS)]
    if tables.voucher_items is not None:
        frames["voucher_items"] = tables.voucher_items
    files = {name: as_path(folder) / f"{name}.parquet" for name in frames}  # a URI folder: its URIs, whole
    for name, frame in frames.items():
        write_parquet(frame, files[name])
    return files


# ------------------------------------------------------------------------------------------------ sessions
def _check_sessions(sessions: pd.DataFrame, categorical: list[str], numeric: list[str], validity, terms: bool,
                    require_labels: bool, repairs: dict[str, int]) -> pd.DataFrame:
    n = len(sessions)
    _check_profile_names(categorical, numeric)
    has_outcome = "outcome_time" in sessions.columns
    if not has_outcome and validity is None:
        raise DataError(missing_column_message("outcome_time", list(sessions.columns), "when the outcome is known",
                                               n) + "; or pass validity (e.g. '7D') to use collect_time + validity")
    required = [*ID_COLUMNS, *(TERM_COLUMNS if terms else ()), "collect_time",
                *categorical, *numeric]
    require_columns(sessions, required, "sessions")
    if require_labels:
        require_label_columns(sessions, [LABEL], "sessions")
    for column in ID_COLUMNS:
        _no_missing(sessions, column, "sessions")
    check_numeric_columns(sessions, numeric)  # here, so that an error counts and shows the rows as written
    duplicated = sessions["session_id"].duplicated(keep=False).to_numpy()
    if duplicated.any():
        raise DataError(f"sessions: column 'session_id' has {int(duplicated.sum())} rows with a duplicate id in "
                        f"{n} rows, e.g. {example_row(sessions, duplicated, ['session_id'])}")

    out = pd.DataFrame({c: sessions[c].to_numpy() for c in ID_COLUMNS}, index=sessions.index)
    if terms:
        for column in TERM_COLUMNS:
            out[column] = _non_negative(sessions, column)
    out["collect_time"] = _times(sessions, "collect_time", "sessions")
    outcome = (_times(sessions, "outcome_time", "sessions", allow_missing=validity is not None)
               if has_outcome else pd.Series(pd.NaT, index=sessions.index, dtype="datetime64[ns]"))
    if validity is not None:
        filled = outcome.isna()
        outcome = outcome.where(~filled, out["collect_time"] + parse_duration(validity, "validity"))
        repairs["outcome_time_from_validity"] = int(filled.sum())
    out["outcome_time"] = outcome
    early = (out["outcome_time"] < out["collect_time"]).to_numpy()
    if early.any():
        example = example_row(out, early, ["session_id", *TIME_COLUMNS])
        raise DataError(f"sessions: times out of order: 'outcome_time' is before 'collect_time' in "
                        f"{int(early.sum())} of {n} rows, e.g. {example}")
    out[LABEL] = _labels(sessions, require_labels)
    for column in (*categorical, *numeric):
        out[column] = sessions[column].to_numpy()
    order = np.argsort(out["collect_time"].to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True)


def _check_profile_names(categorical: list[str], numeric: list[str]) -> None:
    contract = {*ID_COLUMNS, *TERM_COLUMNS, *TIME_COLUMNS, LABEL}
    forbidden = [c for c in (*categorical, *numeric)
                 if (c in contract and c not in ("user_id", "voucher_id"))
                 or any(w in str(c).lower() for w in FORBIDDEN_FEATURE_WORDS)]
    if forbidden:
        raise DataError(f"profile features {forbidden} are contract, time or post-outcome columns; "
                        "labels, times and redemption columns are never features")
    both = set(categorical) & set(numeric)
    if both:
        raise DataError(f"profile columns {sorted(both)} are listed as both categorical and numeric")


def _labels(sessions: pd.DataFrame, require_labels: bool) -> np.ndarray:
    if LABEL not in sessions.columns:
        return np.full(len(sessions), np.nan, dtype=np.float32)
    values = pd.to_numeric(sessions[LABEL], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    unknown = sessions[LABEL].isna().to_numpy()  # an outcome not yet known: allowed where labels are optional
    allowed = np.isin(values, (0.0, 1.0)) | (unknown & (not require_labels))
    if not allowed.all():
        bad = ~allowed
        kinds = "missing or other" if require_labels else "other"
        raise DataError(f"sessions: label column {LABEL!r} must be 0/1 but has {int(bad.sum())} {kinds} values in "
                        f"{len(sessions)} rows, e.g. {example_row(sessions, bad, ['session_id', LABEL])}")
    return values.astype(np.float32)


def _non_negative(frame: pd.DataFrame, column: str) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        raise DataError(f"sessions: column {column!r} has {int(bad.sum())} missing, non-numeric or infinite values in "
                        f"{len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    negative = values < 0
    if negative.any():
        raise DataError(f"sessions: column {column!r} has {int(negative.sum())} negative values in {len(frame)} "
                        f"rows, e.g. {example_row(frame, negative, [column])}")
    return values


# ------------------------------------------------------------------------------------------------ events
def _check_events(events: pd.DataFrame | None, sessions: pd.DataFrame, known_items: pd.Index, keep_clicks: bool,
                  unknown_items: str, max_pre_events: int | None, repairs: dict[str, int]) -> pd.DataFrame:
    if events is None:
        events = pd.DataFrame({"session_id": pd.Series([], dtype=sessions["session_id"].dtype),
                               "item_id": pd.Series([], dtype=known_items.dtype),
                               "action": pd.Series([], dtype=object),
                               "action_time": pd.Series([], dtype="datetime64[ns]")})
    n = len(events)
    by_user = "session_id" not in events.columns and "user_id" in events.columns
    key = "user_id" if by_user else "session_id"
    require_columns(events, [key, *EVENT_COLUMNS[1:]], "events")
    if not by_user:
        session = pd.Index(sessions["session_id"]).get_indexer(events["session_id"])
        unknown = session < 0
        if unknown.any():
            raise DataError(f"events: column 'session_id' has {int(unknown.sum())} values of unknown sessions in "
                            f"{n} rows, e.g. {example_row(events, unknown, ['session_id', 'item_id'])}"
                            + _id_types(events["session_id"], sessions["session_id"], "sessions"))
    action = events["action"].astype("string").str.strip().str.lower()
    bad = ~action.isin(ACTIONS).fillna(False).to_numpy(dtype=bool)
    if bad.any():
        raise DataError(f"events: column 'action' has {int(bad.sum())} values outside {list(ACTIONS)} in {n} rows, "
                        f"e.g. {example_row(events, bad, [key, 'action'])}")
    action = action.to_numpy(dtype=object)
    time = _times(events, "action_time", "events").to_numpy()
    keep = np.ones(n, dtype=bool)
    if not keep_clicks:
        keep &= action != "click"
        repairs["click_events_ignored"] = int(n - keep.sum())
    missing_item = ~events["item_id"].isin(known_items).to_numpy()
    if missing_item.any() and unknown_items == "error":
        raise DataError(f"events: column 'item_id' has {int(missing_item.sum())} items missing from the items "
                        f"table in {n} rows, e.g. {example_row(events, missing_item, [key, 'item_id'])}"
                        f"{_id_types(events['item_id'], known_items, 'items')}; pass unknown_items='drop' to drop them")
    repairs["events_of_unknown_items_dropped"] = int((missing_item & keep).sum())
    keep &= ~missing_item
    if by_user:
        kept = np.flatnonzero(keep)
        session, position = _assign_user_log(sessions, events[key].to_numpy()[kept], time[kept], max_pre_events)
        rows = kept[position]
        repairs["user_log_events_in_no_session"] = int(len(kept) - len(np.unique(position)))
    else:
        late = time > sessions["outcome_time"].to_numpy()[session]
        repairs["events_after_outcome_dropped"] = int((late & keep).sum())
        rows = np.flatnonzero(keep & ~late)
        session = session[rows]
    out = pd.DataFrame({"session": session.astype(np.int64), "session_id": sessions["session_id"].to_numpy()[session],
                        "item_id": events["item_id"].to_numpy()[rows], "action": action[rows],
                        "action_time": time[rows]})
    out["pre"] = out["action_time"].to_numpy() < sessions["collect_time"].to_numpy()[session]
    order = np.lexsort((out["action_time"].to_numpy(), out["session"].to_numpy()))
    return out.iloc[order].reset_index(drop=True)


def _assign_user_log(sessions: pd.DataFrame, user: np.ndarray, time: np.ndarray,
                     max_pre_events: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Sessions and log positions of a user-level behaviour log: each session gets its user's last
    ``max_pre_events`` events before ``collect_time`` and all events in [collect_time, outcome_time].

    One searchsorted per bound on (user, time) keys; an event can belong to several sessions.
    """
    users = pd.Index(pd.unique(sessions["user_id"]))
    session_user = users.get_indexer(sessions["user_id"]).astype(np.int64)
    event_user = users.get_indexer(user).astype(np.int64)  # −1: a user without sessions
    event_time, collect, outcome = (_nanoseconds(time), _nanoseconds(sessions["collect_time"].to_numpy()),
                                    _nanoseconds(sessions["outcome_time"].to_numpy()))
    order = np.lexsort((event_time, event_user))
    ranks = np.unique(np.concatenate([event_time, collect, outcome]), return_inverse=True)[1]
    width = int(ranks.max()) + 2 if len(ranks) else 2
    m, k = len(event_time), len(collect)
    event_key = (event_user[order] + 1) * width + ranks[:m][order]
    base = (session_user + 1) * width
    user_start = np.searchsorted(event_key, base, side="left")
    pre_end = np.searchsorted(event_key, base + ranks[m:m + k], side="left")
    post_end = np.searchsorted(event_key, base + ranks[m + k:], side="right")
    start = user_start if max_pre_events is None else np.maximum(user_start, pre_end - max_pre_events)
    counts = post_end - start
    session = np.repeat(np.arange(k), counts)
    offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return session, order[np.repeat(start, counts) + offset]


# ------------------------------------------------------------------------------------------------ items
def _check_items(items: pd.DataFrame, item_features: list[str]) -> pd.DataFrame:
    require_columns(items, ["item_id", *item_features], "items")
    _no_missing(items, "item_id", "items")
    duplicated = items["item_id"].duplicated(keep=False).to_numpy()
    if duplicated.any():
        raise DataError(f"items: column 'item_id' has {int(duplicated.sum())} rows with a duplicate id in "
                        f"{len(items)} rows, e.g. {example_row(items, duplicated, ['item_id'])}")
    return items[["item_id", *item_features]].reset_index(drop=True)


def _check_voucher_items(pairs: pd.DataFrame, known_items: pd.Index, unknown_items: str,
                         repairs: dict[str, int]) -> pd.DataFrame:
    require_columns(pairs, VOUCHER_ITEM_COLUMNS, "voucher_items")
    missing_item = ~pairs["item_id"].isin(known_items).to_numpy()
    if missing_item.any() and unknown_items == "error":
        raise DataError(f"voucher_items: column 'item_id' has {int(missing_item.sum())} items missing from the "
                        f"items table in {len(pairs)} rows, e.g. {example_row(pairs, missing_item)}"
                        f"{_id_types(pairs['item_id'], known_items, 'items')}; pass unknown_items='drop' to drop them")
    repairs["voucher_items_of_unknown_items_dropped"] = int(missing_item.sum())
    return pairs.loc[~missing_item, list(VOUCHER_ITEM_COLUMNS)].drop_duplicates().reset_index(drop=True)


def _check_voucher_ids(pairs: pd.DataFrame, sessions: pd.DataFrame) -> None:
    """voucher_items whose voucher ids are none of the sessions' (ids of another type, or of another dataset) would
    leave every session's scope unknown in silence: a one-line error."""
    vouchers = pd.Index(pd.unique(sessions["voucher_id"]))
    if len(pairs) and len(vouchers) and not pairs["voucher_id"].isin(vouchers).any():
        raise DataError(f"voucher_items: column 'voucher_id' holds none of the sessions' vouchers in {len(pairs)} "
                        f"rows, e.g. {example_row(pairs, np.ones(len(pairs), bool), ['voucher_id'])}"
                        f"{_id_types(pairs['voucher_id'], vouchers, 'sessions')}")


# ------------------------------------------------------------------------------------------------ helpers
def _no_missing(frame: pd.DataFrame, column: str, table: str) -> None:
    missing = frame[column].isna().to_numpy()
    if missing.any():
        raise DataError(f"{table}: column {column!r} has {int(missing.sum())} missing values in {len(frame)} rows, "
                        f"e.g. {example_row(frame, missing)}")


def _id_types(values: pd.Series, known, table: str) -> str:
    """Why ids do not match when one side holds numbers and the other text (a numeric id column spoiled by a few
    text values is read as text): the text side and a value of it that is not a number; empty otherwise."""
    known = pd.Series(known)
    for side, other, name in ((values, known, "its ids"), (known, values, f"the {table} table's ids")):
        if pd.api.types.is_numeric_dtype(other) and not pd.api.types.is_numeric_dtype(side):
            text = side[side.notna() & pd.to_numeric(side, errors="coerce").isna()]
            detail = f" ({len(text)} values are not numbers, e.g. {text.iloc[0]!r})" if len(text) else ""
            return f"; {name} hold text{detail} and the other side numbers, and text never equals a number"
    return ""


def _nanoseconds(values: np.ndarray) -> np.ndarray:
    return values.astype("datetime64[ns]").view(np.int64)


def _times(frame: pd.DataFrame, column: str, table: str, allow_missing: bool = False) -> pd.Series:
    """A time column as ``datetime64[ns]``; unparseable values are an error (missing ones too unless allowed)."""
    series = frame[column]
    if pd.api.types.is_datetime64_any_dtype(series):
        parsed = series
    elif pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        parsed = pd.to_datetime(series, unit="s", errors="coerce")
    else:
        parsed = pd.to_datetime(series, errors="coerce", format="mixed")
    if isinstance(parsed.dtype, pd.DatetimeTZDtype):
        parsed = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
    parsed = parsed.astype("datetime64[ns]")
    bad = (parsed.isna() & ~(series.isna() & allow_missing)).to_numpy()
    if bad.any():
        raise DataError(f"{table}: column {column!r} has {int(bad.sum())} values that are not times in "
                        f"{len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return parsed

"""KuaiRand-Pure as an entire-space conversion table: impression → click → DAction / micro-behaviours → purchase.

Data and licence
----------------
KuaiRand (Kuaishou, 2022): "KuaiRand: An Unbiased Sequential Recommendation Dataset with Randomly Exposed
Videos", Chongming Gao et al., CIKM 2022 — https://kuairand.com. The data is licensed under
CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/): credit the authors, and share tables derived
from it under the same licence. promokit ships no KuaiRand data; this module only reads a local copy
(the folder layout of the public repository wmyh-0416/kuairand-short-video-recommender):

- a log Parquet file, by default ``kuairand_pure_val_20220425_0430.parquet`` (standard, non-random exposure,
  2022-04-25 … 04-30);
- ``user_features_pure.csv`` and ``video_features_basic_pure.csv`` (side features, one row per id).

Mapping to the conversion contract (:mod:`promokit.conversion.contract`)
------------------------------------------------------------------------
============  =============================================================================================
``click``     ``is_click``
``daction``   ``is_like OR is_comment OR is_forward OR is_profile_enter`` (the ``daction`` argument), on
              clicked rows — the "deterministic actions" of ESM² become the engagement behaviours
``purchase``  ``is_follow`` (the ``purchase`` argument), on clicked rows: following the author is the rare,
              high-value conversion (≈ 0.1 % of impressions)
============  =============================================================================================

Micro-behaviours (GMCM)
-----------------------
The post-click behaviours are also written one by one as 0/1 micro-behaviour label columns, the nodes of
GMCM's micro-behaviour graph (the ``micro`` argument, default :data:`MICRO_BEHAVIOURS`), named without the
``is_`` prefix: ``like, comment, forward, profile_enter, long_view, hate`` (:data:`MICRO_NAMES`).
``is_follow`` (the purchase) and ``is_click`` are never micro-behaviours; the default leaves the purchase
column out when it is one of them (e.g. ``purchase="is_like"``). They are labels, never features:
:func:`kuairand_spec` lists them under ``micro_behaviors``. The log's other post-click signals are
duplicates or derived from play time: ``like`` = ``is_like``, ``long_watch`` = ``long_view``, ``finish``
(played to the end; 0/1, can be named in ``micro``), ``is_positive`` (≈ an OR of the others), ``watch_ratio``,
``play_time_ms``, ``profile_stay_time`` and ``comment_stay_time`` (not 0/1). ``is_hate`` is mostly used
*without* a click (38 of its 65 rows in the val log), so its node sees only 27 positives.

Nesting repair: in this log the post-click behaviours are not strictly nested under the click (the
val log has 291 likes, 128 profile entries, 104 long views, 38 hates and 21 follows on rows with
``is_click = 0``). ESM²'s composition (p_ctcvr = p_ctr · p_cvr) and GMCM's graph need them nested, so
:func:`load_kuairand` sets ``daction``, ``purchase`` and each micro-behaviour to 0 on unclicked rows and counts
the changed rows, per label and per source behaviour, in :class:`KuaiRandReport`. The micro-behaviour columns
are computed from the log independently of the other labels: asking for them changes no other column.

Features
--------
Only columns known at impression time are kept (a whitelist, so nothing else can slip through):

- log: ``user_id``, ``item_id`` (= ``video_id``), ``author_id``, ``tab`` (scenario), ``hourmin`` (hour of
  day), ``tag``, ``video_duration`` (ms; missing for ~2 % of rows), ``freshness_days`` (video age on the
  impression day), and ``date`` (yyyymmdd: kept for time splits, not a feature);
- ``user_features_pure.csv``: ``user_active_degree``, the bucketed ``follow/fans/friend_user_num_range`` and
  ``register_days_range``, ``is_live_streamer`` / ``is_video_author`` (renamed ``user_live_streamer`` /
  ``user_video_author``) and the anonymised categorical ``onehot_feat0`` … ``onehot_feat17`` (missing → −1);
  constant or raw-count columns are left out (the ranges carry them);
- ``video_features_basic_pure.csv``: ``video_type``, ``upload_type``, ``music_type`` (missing → −1) and
  ``orientation`` (portrait / landscape / square from ``server_width`` / ``server_height``).

The outcomes of the impression (:data:`OUTCOME_COLUMNS`: play time, watch ratio, long view, finish, hate,
stay times and every ``is_*`` behaviour) are never features. :func:`kuairand_spec` names the feature roles.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.conversion.contract import micro_behavior_columns
from promokit.data import DataError, FeatureSpec, write_json, write_parquet, write_text
from promokit.data.errors import unique_index

LOG_FILE = "kuairand_pure_val_20220425_0430.parquet"
USER_FILE = "user_features_pure.csv"
VIDEO_FILE = "video_features_basic_pure.csv"

CLICK = "is_click"
DACTION_BEHAVIOURS = ("is_like", "is_comment", "is_forward", "is_profile_enter")
PURCHASE_BEHAVIOUR = "is_follow"
#: Default micro-behaviours (GMCM's graph nodes): the 0/1 post-click behaviours of the log other than the purchase.
MICRO_BEHAVIOURS = ("is_like", "is_comment", "is_forward", "is_profile_enter", "long_view", "is_hate")
#: Their column names in the table (the log column without its ``is_`` prefix).
MICRO_NAMES = tuple(c.removeprefix("is_") for c in MICRO_BEHAVIOURS)

#: Log columns measured during or after the impression: labels or outcomes, never features.
OUTCOME_COLUMNS = frozenset({
    "is_click", "is_like", "is_follow", "is_comment", "is_forward", "is_hate", "is_profile_enter", "long_view",
    "play_time_ms", "profile_stay_time", "comment_stay_time", "watch_ratio", "finish", "like", "long_watch",
    "is_positive",
})

#: Log columns copied into the table (``video_id`` becomes ``item_id``).
LOG_COLUMNS = ("user_id", "video_id", "author_id", "tab", "date", "hourmin", "tag", "video_duration",
               "freshness_days")
#: User side features: column in the CSV → column in the table.
USER_COLUMNS = {
    "user_active_degree": "user_active_degree",
    "is_live_streamer": "user_live_streamer",
    "is_video_author": "user_video_author",
    "follow_user_num_range": "follow_user_num_range",
    "fans_user_num_range": "fans_user_num_range",
    "friend_user_num_range": "friend_user_num_range",
    "register_days_range": "register_days_range",
    **{f"onehot_feat{i}": f"onehot_feat{i}" for i in range(18)},
}
#: Video side features read from the CSV (``server_width`` / ``server_height`` become ``orientation``).
VIDEO_COLUMNS = ("video_type", "upload_type", "music_type", "server_width", "server_height")

CATEGORICAL_FEATURES = ("user_id", "item_id", "author_id", "tab", "hourmin", "tag", *USER_COLUMNS.values(),
                        "video_type", "upload_type", "music_type", "orientation")
NUMERIC_FEATURES = ("video_duration", "freshness_days")
LABELS = ("click", "daction", "purchase")


@dataclass(frozen=True)
class KuaiRandReport:
    """What :func:`load_kuairand` read and changed."""

    log: str
    rows: int
    users: int
    items: int
    dates: tuple[int, ...]
    clicks: int
    dactions: int                  # after the repair, i.e. on clicked rows
    purchases: int                 # after the repair
    purchases_after_daction: int
    purchase_behaviour: str = PURCHASE_BEHAVIOUR
    daction_behaviours: tuple[str, ...] = DACTION_BEHAVIOURS
    #: rows whose label was 1 on an unclicked row and was set to 0, per label (daction, purchase)
    repaired: dict[str, int] = field(default_factory=dict)
    #: the same per source behaviour (is_like, …, is_follow): rows where it was 1 without a click
    unclicked_behaviours: dict[str, int] = field(default_factory=dict)
    #: rows whose user / video had no side-feature row (features set to missing)
    missing_side_features: dict[str, int] = field(default_factory=dict)
    #: micro-behaviour column in the table → its log column (empty when none were asked for)
    micro_behaviours: dict[str, str] = field(default_factory=dict)
    #: micro-behaviour column → its 1s after the repair (i.e. on clicked rows)
    micro_counts: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        repaired = ", ".join(f"{k} {v}" for k, v in self.repaired.items()) or "none"
        behaviours = ", ".join(f"{k} {v}" for k, v in self.unclicked_behaviours.items())
        text = (f"{self.log}: {self.rows:,} impressions, {self.users:,} users, {self.items:,} videos, "
                f"dates {self.dates[0]}–{self.dates[-1]} ({len(self.dates)} days); clicks {self.clicks:,}, "
                f"dactions ({' | '.join(self.daction_behaviours)}) {self.dactions:,}, purchases "
                f"({self.purchase_behaviour}) {self.purchases:,} "
                f"({self.purchases_after_daction} after a DAction). Nesting repair (set to 0 without a click): "
                f"{repaired} [behaviours on unclicked rows: {behaviours}]")
        if self.micro_behaviours:
            counts = ", ".join(f"{k} {v:,}" for k, v in self.micro_counts.items())
            text += f"; micro-behaviours (labels, 1 only after a click): {counts}"
        missing = {k: v for k, v in self.missing_side_features.items() if v}
        if missing:
            text += f"; rows without side features: {missing}"
        return text


def load_kuairand(directory: str | os.PathLike, log: str = LOG_FILE, daction: tuple[str, ...] = DACTION_BEHAVIOURS,
                  purchase: str = PURCHASE_BEHAVIOUR, side_features: bool = True,
                  micro: tuple[str, ...] | None = MICRO_BEHAVIOURS) -> tuple[pd.DataFrame, KuaiRandReport]:
    """Read a KuaiRand-Pure folder as a conversion table (one row per impression) and a report.

    Columns: ``user_id, item_id, author_id, tab, date, hourmin, tag, video_duration, freshness_days``, the
    side features of the module docstring when ``side_features``, the labels ``click, daction, purchase``
    (int8, nested: daction and purchase are 1 only on clicked rows) and, last, one int8 micro-behaviour label
    per log column of ``micro`` (named without ``is_``, 1 only on clicked rows; ``None`` or ``()`` for none,
    giving the table without them). The default :data:`MICRO_BEHAVIOURS` leaves out the ``purchase`` column;
    naming the purchase or the click in ``micro`` is an error. Raises :class:`DataError` when the folder, a
    file or a needed column is missing or a label is not 0/1.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise DataError(f"KuaiRand folder {folder} does not exist; download KuaiRand-Pure (https://kuairand.com) "
                        f"and pass the folder holding {log}")
    if not daction:
        raise DataError("daction: name at least one behaviour column, e.g. ('is_like', 'is_comment')")
    if purchase in daction:
        raise DataError(f"the purchase behaviour {purchase!r} cannot also be a DAction behaviour {list(daction)}")
    micro_columns = _micro_columns(micro, purchase)
    behaviours = [*dict.fromkeys((*daction, purchase, *micro_columns.values()))]
    raw = _read(folder / log, "log")
    _require(raw, [*LOG_COLUMNS, CLICK, *behaviours], folder / log)

    table = pd.DataFrame({
        "user_id": _int(raw, "user_id", folder / log),
        "item_id": _int(raw, "video_id", folder / log),
        "author_id": _int(raw, "author_id", folder / log),
        "tab": _int(raw, "tab", folder / log),
        "date": _int(raw, "date", folder / log),
        "hourmin": _int(raw, "hourmin", folder / log),
        "tag": raw["tag"].astype("string").fillna("unknown").astype(str).to_numpy(),
        "video_duration": _float(raw, "video_duration"),
        "freshness_days": _float(raw, "freshness_days"),
    })

    flags = {c: _binary(raw, c, folder / log) for c in [CLICK, *behaviours]}
    clicked = flags[CLICK] == 1
    any_daction = np.logical_or.reduce([flags[c] == 1 for c in daction])
    is_purchase = flags[purchase] == 1
    unclicked = {c: int((~clicked & (flags[c] == 1)).sum()) for c in behaviours}
    repaired = {"daction": int((any_daction & ~clicked).sum()), "purchase": int((is_purchase & ~clicked).sum())}
    table["click"] = clicked.astype(np.int8)
    table["daction"] = (any_daction & clicked).astype(np.int8)
    table["purchase"] = (is_purchase & clicked).astype(np.int8)
    for name, source in micro_columns.items():  # from the log flags only: no other column depends on them
        table[name] = ((flags[source] == 1) & clicked).astype(np.int8)
        repaired[name] = unclicked[source]

    missing_side = {}
    if side_features:
        table, missing_side["user"] = _join_users(table, _read(folder / USER_FILE, "user features"), folder / USER_FILE)
        table, missing_side["video"] = _join_videos(table, _read(folder / VIDEO_FILE, "video features"),
                                                    folder / VIDEO_FILE)
    label_columns = [*LABELS, *micro_columns]
    table = table[[c for c in table.columns if c not in label_columns] + label_columns]

    report = KuaiRandReport(
        log=log, rows=len(table), users=int(table["user_id"].nunique()), items=int(table["item_id"].nunique()),
        dates=tuple(int(d) for d in np.unique(table["date"])), clicks=int(table["click"].sum()),
        dactions=int(table["daction"].sum()), purchases=int(table["purchase"].sum()),
        purchases_after_daction=int(((table["purchase"] == 1) & (table["daction"] == 1)).sum()),
        purchase_behaviour=purchase, daction_behaviours=tuple(daction), repaired=repaired,
        unclicked_behaviours=unclicked, missing_side_features=missing_side, micro_behaviours=micro_columns,
        micro_counts={name: int(table[name].sum()) for name in micro_columns})
    return table, report


def _micro_columns(micro: tuple[str, ...] | None, purchase: str) -> dict[str, str]:
    """Table column → log column of the micro-behaviours asked for (see :func:`load_kuairand`)."""
    if not micro:
        return {}
    if isinstance(micro, str):
        raise DataError(f"micro: give a tuple of log columns, e.g. ('is_like', 'long_view'), not the string {micro!r}")
    micro = tuple(micro)
    if micro == MICRO_BEHAVIOURS:  # the default: every post-click behaviour but the purchase
        micro = tuple(c for c in micro if c != purchase)
    repeated = sorted({c for c in micro if micro.count(c) > 1})
    if repeated:
        raise DataError(f"micro: the behaviours {repeated} are listed more than once")
    for column, role in ((purchase, "the purchase"), (CLICK, "the click")):
        if column in micro:
            raise DataError(f"micro: {column!r} is {role}, not a micro-behaviour; micro-behaviours are the other "
                            f"post-click behaviours, e.g. {list(MICRO_BEHAVIOURS)}")
    columns = {c.removeprefix("is_"): c for c in micro}
    taken = sorted(set(columns) & {*LOG_COLUMNS, "item_id", *CATEGORICAL_FEATURES, *NUMERIC_FEATURES, *LABELS})
    if len(columns) < len(micro) or taken:
        raise DataError(f"micro: the behaviours {list(micro)} would write the columns {list(columns)}, which repeat "
                        f"or clash with the table's own {taken}")
    return columns


def kuairand_spec(table: pd.DataFrame, ids: bool = True, micro_behaviors: list[str] | None = None) -> FeatureSpec:
    """Feature roles of a :func:`load_kuairand` table: its categorical and numeric features (those present),
    the three labels, ``user_id`` as the GAUC group key and ``date`` as the time key (not a feature: with a
    time split the test days are unseen values; training validates on the latest days). ``ids=False`` leaves out
    the user / item / author ids. ``micro_behaviors`` (labels, never features) defaults to the table's columns
    after ``purchase``: where :func:`load_kuairand` writes them."""
    id_columns = set() if ids else {"user_id", "item_id", "author_id"}
    missing_labels = [c for c in LABELS if c not in table.columns]
    if missing_labels or "user_id" not in table.columns:
        raise DataError(f"not a load_kuairand table: columns {missing_labels or ['user_id']} are missing")
    columns = list(table.columns)
    if micro_behaviors is None:
        micro_behaviors = columns[columns.index("purchase") + 1:]
    micro = list(micro_behaviors)
    missing = [c for c in micro if c not in table.columns]
    clash = [c for c in micro if c in (*CATEGORICAL_FEATURES, *NUMERIC_FEATURES, *LABELS, "date")]
    if missing or clash:
        what = "missing from the table" if missing else "features, labels or the date, never micro-behaviours"
        raise DataError(f"kuairand_spec: micro_behaviors {missing or clash} are {what}")
    return FeatureSpec(categorical=[c for c in CATEGORICAL_FEATURES if c in table.columns and c not in id_columns],
                       numeric=[c for c in NUMERIC_FEATURES if c in table.columns],
                       labels={label: label for label in LABELS}, group_key="user_id",
                       time_key="date" if "date" in table.columns else None, micro_behaviors=micro)


def write_kuairand(src: str | os.PathLike, out: str | os.PathLike, log: str | None = None, ids: bool = True,
                   purchase: str = PURCHASE_BEHAVIOUR, daction=None,
                   micro_behaviors=None) -> tuple[KuaiRandReport, Path]:
    """Read the KuaiRand-Pure folder ``src`` (:func:`load_kuairand`) and write its conversion table to ``out``
    (Parquet), the table's feature spec beside it as ``OUT.spec.yaml`` (:func:`kuairand_spec`, with the ids as
    features unless ``ids`` is False) and the load report as ``OUT.json``; returns the report and the spec's path.

    ``log`` defaults to :data:`LOG_FILE`; ``daction`` (log columns, a list or comma-separated) to
    :data:`DACTION_BEHAVIOURS` without ``purchase``; ``micro_behaviors`` (log columns, a list or comma-separated
    names, or ``"none"``) to :data:`MICRO_BEHAVIOURS` without ``purchase``."""
    import yaml

    if isinstance(daction, str):
        daction = daction.split(",")
    behaviours = tuple(daction) if daction else tuple(b for b in DACTION_BEHAVIOURS if b != purchase)
    none = isinstance(micro_behaviors, str) and micro_behaviors.strip().lower() == "none"
    micro = (MICRO_BEHAVIOURS if micro_behaviors is None else
             () if none else tuple(micro_behavior_columns(micro_behaviors)))
    table, report = load_kuairand(src, log=log or LOG_FILE, daction=behaviours, purchase=purchase, micro=micro)
    out = Path(out)
    write_parquet(table, out)
    spec_path = out.with_suffix(".spec.yaml")
    write_text(yaml.safe_dump(kuairand_spec(table, ids=ids).to_dict(), sort_keys=False), spec_path)
    write_json({"summary": report.summary(), **report.__dict__}, out.with_suffix(".json"))
    return report, spec_path


# ---------------------------------------------------------------------------------------------- helpers
def _read(path: Path, what: str) -> pd.DataFrame:
    if not path.is_file():
        present = sorted(p.name for p in path.parent.iterdir())
        raise DataError(f"KuaiRand {what} file {path} is missing (the folder holds {present})")
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # unreadable file: one clear line rather than an engine traceback
        raise DataError(f"cannot read KuaiRand {what} file {path}: {exc}") from None


def _require(frame: pd.DataFrame, columns, path: Path) -> None:
    absent = [c for c in dict.fromkeys(columns) if c not in frame.columns]
    if absent:
        raise DataError(f"{path}: needed columns {absent} are missing from its {len(frame)} rows; "
                        f"columns present: {list(frame.columns)}")


def _int(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna()
    if bad.any():
        raise DataError(f"{path}: column {column!r} has {int(bad.sum())} missing or non-integer values in "
                        f"{len(frame)} rows (first at row {int(np.flatnonzero(bad.to_numpy())[0])})")
    return values.to_numpy(dtype=np.int64)


def _float(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A numeric feature as float64; missing or non-numeric values become NaN (the encoder flags them)."""
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _binary(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        raise DataError(f"{path}: label column {column!r} must be 0/1 but has {int(bad.sum())} missing or other "
                        f"values in {len(frame)} rows (first at row {int(np.flatnonzero(bad)[0])})")
    return values.astype(np.int8)



def _codes(series: pd.Series) -> np.ndarray:
    """Integer-coded categorical (possibly float with NaN) → int64 with −1 for missing."""
    return pd.to_numeric(series, errors="coerce").fillna(-1).to_numpy(dtype=np.float64).astype(np.int64)


def _join_users(table: pd.DataFrame, users: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, int]:
    _require(users, ["user_id", *USER_COLUMNS], path)
    side = unique_index(users, "user_id", str(path)).reindex(table["user_id"].to_numpy())
    missing = int(side["user_active_degree"].isna().sum())
    out = table.copy()
    for source, name in USER_COLUMNS.items():
        column = side[source]
        if pd.api.types.is_numeric_dtype(column):
            out[name] = _codes(column)
        else:
            out[name] = column.astype("string").fillna("missing").astype(str).to_numpy()
    return out, missing


def _join_videos(table: pd.DataFrame, videos: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, int]:
    _require(videos, ["video_id", *VIDEO_COLUMNS], path)
    side = unique_index(videos, "video_id", str(path)).reindex(table["item_id"].to_numpy())
    missing = int(side["video_type"].isna().sum())
    out = table.copy()
    for name in ("video_type", "upload_type"):
        out[name] = side[name].astype("string").fillna("missing").astype(str).to_numpy()
    out["music_type"] = _codes(side["music_type"])
    width = pd.to_numeric(side["server_width"], errors="coerce").to_numpy(dtype=np.float64)
    height = pd.to_numeric(side["server_height"], errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = width / height
    out["orientation"] = np.select([~np.isfinite(ratio) | (ratio <= 0), ratio < 0.9, ratio > 1.1],
                                   ["unknown", "portrait", "landscape"], "square")
    return out, missing

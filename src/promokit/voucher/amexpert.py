"""AmExpert 2019 (coupon redemption) as voucher tables, without a behaviour log.

Data
----
The AMExpert 2019 hackathon data (Analytics Vidhya / American Express, competition terms), folder layout of
the public repository j9rds/Predicting-Coupon-Redemption: ``train.csv`` (``id, campaign_id, coupon_id,
customer_id, redemption_status``), ``campaign_data.csv`` (``campaign_id, campaign_type, start_date,
end_date``, dates dd/mm/yy), ``coupon_item_mapping.csv`` (``coupon_id, item_id``), ``item_data.csv``
(``item_id, brand, brand_type, category``) and ``customer_demographics.csv``. promokit ships none of it.

Mapping to the voucher contract (:mod:`promokit.voucher.contract`)
-------------------------------------------------------------------
==================  ==========================================================================================
session             one ``train.csv`` row; ``session_id`` = ``id``
``user_id``         ``customer_id``
``voucher_id``      ``coupon_id``; its marketing activity is the campaign (``campaign_id``, ``campaign_type``
                    are categorical voucher features)
``collect_time``    the campaign's start date (coupons are handed out when the campaign starts)
``outcome_time``    the campaign's end date: the data has no redemption date, so whether a coupon was
                    redeemed is only known for sure when its campaign ends. A coupon therefore enters a later
                    session's history only when its campaign ended before that session's campaign started
``redeemed``        ``redemption_status``
``min_spend``,      not in the data: the tables are built with ``terms=False`` (no such columns, no such
``discount``        features) rather than with made-up values
profile             ``customer_demographics.csv`` columns as categorical features (``age_range``,
                    ``marital_status``, ``rented``, ``family_size``, ``no_of_children``,
                    ``income_bracket``); customers without a row (about half) get ``"missing"``
coupon descriptors  what the coupon covers, from ``coupon_item_mapping.csv`` and ``item_data.csv`` (fixed
                    when the coupon is defined, so leak-free): ``coupon_log_items`` = log(1 + its items),
                    ``coupon_log_brands`` = log(1 + its distinct brands) (numeric), ``coupon_category``
                    and ``coupon_brand_type`` = the most common category / brand type of its items
                    (categorical, ``"missing"`` for a coupon without known items)
==================  ==========================================================================================

Coupon descriptors stand in for the voucher terms the data lacks: about 72 % of the coupons of the last
10 % of campaigns never occur earlier, so their ``voucher_id`` is out of vocabulary and, without the
descriptors, only DMBGN (through the voucher–item graph) could tell two unseen coupons apart. On the time
split the item count alone ranks the test sessions of the largest test campaign (27) with AUC 0.78.

There is no add-to-cart / order log (the competition's transaction table is not in this copy), so
``events`` is empty. In its place ``voucher_items`` holds the coupon's applicable items from
``coupon_item_mapping.csv`` (restricted to the coupons of ``train.csv``) and ``items`` the item table with
features ``category, brand, brand_type``: the voucher–item graph is the voucher node linked to the items it
applies to, and DMBGN runs in its history-attention + voucher–item-graph form. Split by time on
``collect_time`` (campaign start dates).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, unique_index
from promokit.data.io import read_table, write_json
from promokit.voucher.contract import VoucherTables, check_tables, write_tables

TRAIN_FILE = "train.csv"
CAMPAIGN_FILE = "campaign_data.csv"
COUPON_ITEM_FILE = "coupon_item_mapping.csv"
ITEM_FILE = "item_data.csv"
DEMOGRAPHICS_FILE = "customer_demographics.csv"
DEMOGRAPHICS = ("age_range", "marital_status", "rented", "family_size", "no_of_children", "income_bracket")
ITEM_FEATURES = ("category", "brand", "brand_type")
DATE_FORMAT = "%d/%m/%y"
COUPON_NUMERIC = ("coupon_log_items", "coupon_log_brands")
COUPON_CATEGORICAL = ("coupon_category", "coupon_brand_type")


@dataclass(frozen=True)
class AmExpertReport:
    """What :func:`load_amexpert` read."""

    rows: int
    users: int
    coupons: int
    campaigns: int
    redeemed: int
    first_start: pd.Timestamp
    last_start: pd.Timestamp
    items: int
    voucher_item_pairs: int
    users_with_demographics: int
    #: voucher_items rows whose item is not in item_data.csv (dropped)
    unknown_item_pairs: int

    @property
    def redemption_rate(self) -> float:
        return self.redeemed / self.rows if self.rows else float("nan")

    def summary(self) -> str:
        return (f"AmExpert 2019: {self.rows:,} sessions, {self.users:,} customers "
                f"({self.users_with_demographics:,} with demographics), {self.coupons:,} coupons, "
                f"{self.campaigns} campaigns starting {self.first_start.date()}–{self.last_start.date()}; "
                f"{self.redeemed:,} redeemed ({100 * self.redemption_rate:.2f} %); voucher–item graph: "
                f"{self.voucher_item_pairs:,} coupon–item pairs over {self.items:,} items "
                f"({self.unknown_item_pairs} pairs of unknown items dropped)")


def load_amexpert(directory: str | os.PathLike) -> tuple[VoucherTables, AmExpertReport]:
    """Read an AmExpert 2019 folder as :class:`VoucherTables` (mapping in the module docstring) and a report."""
    folder = Path(directory)
    if not folder.is_dir():
        raise DataError(f"AmExpert folder {folder} does not exist; pass the folder holding {TRAIN_FILE}")
    train = _read(folder, TRAIN_FILE, ["id", "campaign_id", "coupon_id", "customer_id", "redemption_status"])
    campaigns = _read(folder, CAMPAIGN_FILE, ["campaign_id", "campaign_type", "start_date", "end_date"])
    mapping = _read(folder, COUPON_ITEM_FILE, ["coupon_id", "item_id"])
    items = _read(folder, ITEM_FILE, ["item_id", *ITEM_FEATURES])
    demographics = _read(folder, DEMOGRAPHICS_FILE, ["customer_id", *DEMOGRAPHICS])

    campaigns = unique_index(campaigns, "campaign_id", CAMPAIGN_FILE)
    campaigns = campaigns[campaigns.index.isin(train["campaign_id"])].copy()
    for column in ("start_date", "end_date"):
        campaigns[column] = _dates(campaigns[column], column)
    campaign = campaigns.reindex(train["campaign_id"].to_numpy())
    unknown = campaign["start_date"].isna().to_numpy()
    if unknown.any():
        raise DataError(f"{TRAIN_FILE}: column 'campaign_id' has {int(unknown.sum())} campaigns missing from "
                        f"{CAMPAIGN_FILE} in {len(train)} rows, e.g. campaign_id="
                        f"{train['campaign_id'].to_numpy()[unknown][0]!r}")
    sessions = pd.DataFrame({
        "session_id": train["id"].to_numpy(), "user_id": train["customer_id"].to_numpy(),
        "voucher_id": train["coupon_id"].to_numpy(), "campaign_id": train["campaign_id"].to_numpy(),
        "campaign_type": campaign["campaign_type"].astype("string").fillna("missing").to_numpy(dtype=object),
        "collect_time": campaign["start_date"].to_numpy(), "outcome_time": campaign["end_date"].to_numpy(),
        "redeemed": train["redemption_status"].to_numpy(),
    })
    people = unique_index(demographics, "customer_id", DEMOGRAPHICS_FILE).reindex(sessions["user_id"].to_numpy())
    for column in DEMOGRAPHICS:
        values = people[column]
        if pd.api.types.is_float_dtype(values):  # integer codes read as floats because of missing values
            values = values.astype("Int64")
        sessions[column] = values.astype("string").fillna("missing").to_numpy(dtype=object)

    coupons = mapping[mapping["coupon_id"].isin(sessions["voucher_id"])]
    voucher_items = pd.DataFrame({"voucher_id": coupons["coupon_id"].to_numpy(),
                                  "item_id": coupons["item_id"].to_numpy()})
    descriptors = coupon_descriptors(voucher_items, items).reindex(sessions["voucher_id"].to_numpy())
    for column in COUPON_NUMERIC:
        sessions[column] = descriptors[column].fillna(0.0).to_numpy()
    for column in COUPON_CATEGORICAL:
        sessions[column] = descriptors[column].astype("string").fillna("missing").to_numpy(dtype=object)
    tables = check_tables(sessions, None, items,
                          categorical=["campaign_id", "campaign_type", *DEMOGRAPHICS, *COUPON_CATEGORICAL],
                          numeric=list(COUPON_NUMERIC), terms=False, item_features=ITEM_FEATURES,
                          voucher_items=voucher_items, unknown_items="drop")
    s = tables.sessions
    report = AmExpertReport(
        rows=len(s), users=int(s["user_id"].nunique()), coupons=int(s["voucher_id"].nunique()),
        campaigns=int(s["campaign_id"].nunique()), redeemed=int(s["redeemed"].sum()),
        first_start=s["collect_time"].min(), last_start=s["collect_time"].max(),
        items=int(tables.voucher_items["item_id"].nunique()), voucher_item_pairs=len(tables.voucher_items),
        users_with_demographics=int(np.isin(s["user_id"].unique(), demographics["customer_id"]).sum()),
        unknown_item_pairs=tables.repairs["voucher_items_of_unknown_items_dropped"])
    return tables, report


def convert_amexpert(directory: str | os.PathLike, folder: str | os.PathLike) -> tuple[VoucherTables,
                                                                                     AmExpertReport, dict[str, Path]]:
    """:func:`load_amexpert`, the tables written into ``folder`` (:func:`~promokit.voucher.contract.write_tables`)
    with the report as ``amexpert.json`` (its summary and facts, dates as text); returns the tables, the report and
    the tables' files by name."""
    tables, report = load_amexpert(directory)
    files = write_tables(tables, folder)
    facts = {k: v if isinstance(v, int) else str(v) for k, v in report.__dict__.items()}
    write_json({"summary": report.summary(), **facts}, Path(folder) / "amexpert.json")
    return tables, report, files


def coupon_descriptors(voucher_items: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """Per coupon (index ``voucher_id``): ``coupon_log_items``, ``coupon_log_brands``, ``coupon_category``,
    ``coupon_brand_type`` (module docstring) from its items that are in ``items``; a tie goes to the smallest
    value."""
    pairs = voucher_items.merge(items[["item_id", "brand", "brand_type", "category"]], on="item_id", how="inner")
    grouped = pairs.groupby("voucher_id")
    out = pd.DataFrame({"coupon_log_items": np.log1p(grouped.size()),
                        "coupon_log_brands": np.log1p(grouped["brand"].nunique())})
    for column, source in (("coupon_category", "category"), ("coupon_brand_type", "brand_type")):
        counts = pairs.groupby(["voucher_id", source]).size().rename("n").reset_index()
        counts = counts.sort_values(["voucher_id", "n", source], ascending=[True, False, True])
        out[column] = counts.drop_duplicates("voucher_id").set_index("voucher_id")[source]
    return out


def _read(folder: Path, name: str, columns: list[str]) -> pd.DataFrame:
    path = folder / name
    if not path.is_file():
        present = sorted(p.name for p in folder.iterdir())
        raise DataError(f"AmExpert file {path} is missing (the folder holds {present})")
    frame = read_table(path)  # unreadable, empty or with a repeated column name: one clear line
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise DataError(f"{path}: needed columns {absent} are missing from its {len(frame)} rows; "
                        f"columns present: {list(frame.columns)}")
    return frame



def _dates(values: pd.Series, column: str) -> np.ndarray:
    parsed = pd.to_datetime(values.astype("string"), format=DATE_FORMAT, errors="coerce")
    bad = parsed.isna().to_numpy()
    if bad.any():
        raise DataError(f"{CAMPAIGN_FILE}: column {column!r} has {int(bad.sum())} dates not in dd/mm/yy form in the "
                        f"{len(values)} campaigns of {TRAIN_FILE}, e.g. {values.to_numpy()[bad][0]!r}")
    return parsed.to_numpy().astype("datetime64[ns]")

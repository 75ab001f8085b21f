"""The CDNOW purchase log as a zero-inflated spend problem in the value contract.

``CDNOW_master.txt`` (Fader, Hardie & Lee 2005; the file as the ``lifetimes`` package ships it, read here as
plain text — ``lifetimes`` itself is never imported): 69,659 purchases of 23,570 customers who first bought in
Q1 1997, with columns customer_id, date (YYYYMMDD), number_of_cds, dollar_value.

The study: everything up to ``calibration_end`` (default 1997-09-30, the first 39 weeks) is known; the label is
each customer's spend in the holdout window after it (to 1998-06-30), zero for 70 %. In the value contract that
is one delivery per customer at the end of calibration (``fund`` = "cd", ``click`` = 1, ``convert`` = spent in
the holdout, ``amount`` = the holdout spend), the calibration purchases as behaviours (``action`` = purchase,
on the day bought, all strictly before the delivery), and numeric customer features from the calibration
window: log(1 + ·) of the purchases, days with a purchase, CDs, total, mean and first spend, and the days since
the first and the last purchase. No context, no consumption graph.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.spec import FeatureSpec
from promokit.value.contract import ValueTables, check_tables

FILE = "CDNOW_master.txt"
CALIBRATION_END = "1997-09-30"
HOLDOUT_END = "1998-06-30"


def read_cdnow(path: str | os.PathLike) -> pd.DataFrame:
    """The purchase log: ``customer_id`` (str), ``date`` (datetime), ``cds`` (int), ``amount`` (float)."""
    path = Path(path)
    if path.is_dir():
        path = path / FILE
    if not path.exists():
        raise DataError(f"{path}: no such file; CDNOW_master.txt is the whitespace-separated purchase log "
                        "(customer_id date number_of_cds dollar_value)")
    log = pd.read_csv(path, sep=r"\s+", header=0, names=["customer_id", "date", "cds", "amount"],
                      dtype={"customer_id": str, "date": str})
    date = pd.to_datetime(log["date"], format="%Y%m%d", errors="coerce")
    bad = date.isna() | pd.to_numeric(log["amount"], errors="coerce").isna()
    if bad.any():
        raise DataError(f"{path}: {int(bad.sum())} of {len(log)} rows have an unreadable date or amount, e.g. row "
                        f"{int(np.flatnonzero(bad)[0])}")
    return log.assign(date=date, amount=log["amount"].astype(float), cds=log["cds"].astype(int))


def cdnow_tables(log: pd.DataFrame, calibration_end: str = CALIBRATION_END,
                 holdout_end: str = HOLDOUT_END) -> ValueTables:
    """The study's value tables (see the module docstring); customers without a calibration purchase are left out."""
    cut, end = pd.Timestamp(calibration_end), pd.Timestamp(holdout_end)
    if not cut < end:
        raise DataError(f"calibration_end {cut.date()} must come before holdout_end {end.date()}")
    calibration = log[log["date"] <= cut]
    holdout = log[(log["date"] > cut) & (log["date"] <= end)]
    grouped = calibration.groupby("customer_id")
    first = calibration.sort_values(["date"], kind="stable").groupby("customer_id").first()
    users = pd.DataFrame({
        "log_purchases": np.log1p(grouped.size()), "log_purchase_days": np.log1p(grouped["date"].nunique()),
        "log_cds": np.log1p(grouped["cds"].sum()), "log_total_spend": np.log1p(grouped["amount"].sum()),
        "log_mean_spend": np.log1p(grouped["amount"].mean()), "log_first_spend": np.log1p(first["amount"]),
        "days_since_first": (cut - grouped["date"].min()).dt.days.astype(float),
        "days_since_last": (cut - grouped["date"].max()).dt.days.astype(float)}).reset_index()
    spend = holdout.groupby("customer_id")["amount"].sum().reindex(users["customer_id"], fill_value=0.0).to_numpy()
    spent = (spend > 0).astype(int)
    at = cut + pd.Timedelta(days=1)
    deliveries = pd.DataFrame({"user_id": users["customer_id"], "fund": "cd", "click": 1, "convert": spent,
                               "amount": spend, "time": at})
    behaviors = pd.DataFrame({"user_id": calibration["customer_id"], "fund": "cd", "action": "purchase",
                              "time": calibration["date"]})
    users = users.rename(columns={"customer_id": "user_id"})
    features = FeatureSpec(numeric=[c for c in users.columns if c != "user_id"], group_key=None)
    return check_tables(deliveries, users, pd.DataFrame({"fund": ["cd"]}), behaviors,
                        specs={"users": features, "context": FeatureSpec(group_key=None)})

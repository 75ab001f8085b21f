"""The CDNOW purchase log as a zero-inflated spend problem in the value contract.

``CDNOW_master.txt`` (Fader, Hardie & Lee 2005; the file as the ``lifetimes`` package ships it, read here as
plain text — ``lifetimes`` itself is never imported): 69,659 purchases of 23,570 customers who first bought in
Q1 1997, with columns customer_id, date (YYYYMMDD), number_of_cds, dollar_value.

The study: everything up to ``calibration_end`` (default 1997-09-30, the first 39 weeks) is known; the label is
each customer's spend in the holdout window after it (to 1998-06-30), zero for 70 %. In the value contract that
is one delivery per customer at the end of calibration (``fund`` = "cd", ``click`` = 1, ``convert`` = spent in
the holdout, ``amount`` = the holdout spend), the calibration purchases as behaviours (``action`` = purchase,
on the day bought, all strictly before the delivery), and numeric customer features from the calibration
window: log(1 + ·) of the purchases, days with a purchase, CDs, total, mean and first spend, and the days from
the first and the last purchase to the calibration's end (the next midnight: a purchase on 1997-09-30 is 1 day
before it). No context, no consumption graph. :func:`~promokit.value.transactions.from_transactions` builds them:
the same mapping serves any purchase log.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.spec import FeatureSpec
from promokit.value.contract import ValueTables, check_tables
from promokit.value.transactions import DAY, from_transactions

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
    """The study's value tables (see the module docstring) by :func:`~promokit.value.transactions.from_transactions`:
    the calibration window up to ``calibration_end``, the holdout after it up to ``holdout_end``, both days
    included; customers without a calibration purchase are left out."""
    cut, end = pd.Timestamp(calibration_end), pd.Timestamp(holdout_end)
    if not cut < end:
        raise DataError(f"calibration_end {cut.date()} must come before holdout_end {end.date()}")
    frames = from_transactions(log, customer="customer_id", time="date", quantity="cds", fund="cd",
                               feature_window=(None, cut + DAY), target_window=(cut + DAY, end + DAY))
    features = FeatureSpec(numeric=[c for c in frames["users"].columns if c != "user_id"], group_key=None)
    return check_tables(frames["deliveries"], frames["users"], frames["funds"], frames["behaviors"],
                        specs={"users": features, "context": FeatureSpec(group_key=None)})


def load_cdnow(path: str | os.PathLike, calibration_end: str = CALIBRATION_END,
               holdout_end: str = HOLDOUT_END) -> ValueTables:
    """The CDNOW study's value tables from the purchase log at ``path`` (the file, or the folder holding
    ``CDNOW_master.txt``): :func:`read_cdnow`, then :func:`cdnow_tables`."""
    return cdnow_tables(read_cdnow(path), calibration_end, holdout_end)

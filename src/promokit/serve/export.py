"""The ledger as a log of the campaign's decisions and their outcomes: ``promokit campaign export``.

One row per subject of a population, its first decision (or, ``every_decision``, one row per decision), in the
incentive contract (``customer_id`` or ``merchant_id``, ``level``, ``redeemed``) with what evaluating another
policy on it needs: ``paid`` (money, in the currency's major unit), ``propensity`` (of the level served, under the
service's policy at that decision), ``bucket``, ``request_id`` and ``decided_at`` (UTC).

Left out, and counted: the later decisions of a subject already in the log, the other bucket (``bucket``),
decisions that issued no coupon (no level of the contract was offered: the cap, or a cold start answered with
none), and decisions whose coupon is still open (no outcome reported and its lifetime not over, so its outcome is
unknown). A coupon past its lifetime without an outcome was not redeemed.

With ``features`` the result is a customers table for ``incentive train``: id, ``level``, ``redeemed`` and the
feature columns joined by id. The log's other columns are left out of it, because ``incentive train`` reads every
other column as a feature: ``paid`` is the label again, ``request_id`` an id per row, and a model that learnt
from ``propensity`` or ``bucket`` could not score a table without them.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from promokit.campaign.directory import LEDGER, Campaign, load_campaign
from promokit.data.errors import DataError
from promokit.data.io import read_table
from promokit.data.spec import keyed_table
from promokit.serve.explore import EXPLOIT, EXPLORE
from promokit.serve.ledger import EXPIRED, NO_LEVEL, Ledger

ID = {"customer": "customer_id", "merchant": "merchant_id"}
LABELS = ("level", "redeemed")
LOG = (*LABELS, "paid", "propensity", "bucket", "request_id", "decided_at")
BUCKETS = ("all", EXPLORE, EXPLOIT)
_READ = ("SELECT request_id, subject_id, level_index, face, state, redeemed, paid, created_at, expires_at, {tagged} "
         "FROM decisions WHERE population = :population ORDER BY seq")
#: What a ledger of schema version 2 (without the exploration columns) holds: every decision the rule's, for sure.
_UNTAGGED = f"'{EXPLOIT}' AS bucket, 1.0 AS propensity"


@dataclass
class Export:
    log: pd.DataFrame
    decisions: int  # the population's decisions in the ledger
    left_out: dict[str, int] = field(default_factory=dict)  # rows left out, by reason, in the order applied

    def keep(self, frame: pd.DataFrame, mask, why: str) -> pd.DataFrame:
        """The rows of ``frame`` where ``mask`` holds; the others are counted as left out for ``why``."""
        self.left_out[why] = int((~mask).sum())
        return frame[mask]


def export_log(campaign_dir: str | os.PathLike, ledger_url: str | None = None, *, population: str = "customer",
               bucket: str = "all", every_decision: bool = False, features=None, now: float | None = None) -> Export:
    """The log of ``population``'s decisions in the campaign's ledger (module docstring). ``ledger_url``
    defaults to the campaign's SQLite ledger; ``features`` is a table (a frame or a path) keyed by the
    population's id; ``now`` (tests) is the time that decides which coupons are still open."""
    if features is not None and population != "customer":
        raise DataError("`features` joins customer features; the merchants' outcomes in the ledger are 0/1, not "
                        "the share counts a merchants table for `incentive train` needs")
    if population not in ID:
        raise DataError(f"population must be one of {list(ID)}, got {population!r}")
    if bucket not in BUCKETS:
        raise DataError(f"bucket must be one of {list(BUCKETS)}, got {bucket!r}")
    campaign = load_campaign(campaign_dir)
    if population not in campaign.populations:
        raise DataError(f"the campaign at {campaign.path} has no {population}s")
    frame, exponent = _read(_ledger(campaign, ledger_url), population)
    export = Export(pd.DataFrame(), len(frame))
    if not every_decision:
        frame = export.keep(frame, ~frame["subject_id"].duplicated(), "later decisions of a subject")
    if bucket != "all":
        frame = export.keep(frame, frame["bucket"] == bucket, "other bucket")
    frame = export.keep(frame, frame["level_index"] != NO_LEVEL, "no coupon")
    now = time.time() if now is None else now
    ended = frame["redeemed"].notna() | (frame["state"] == EXPIRED) | (frame["expires_at"] <= now)
    frame = export.keep(frame, ended, "open")
    if export.left_out["open"]:
        warnings.warn(f"{export.left_out['open']:,} {population} decisions have an open coupon (no outcome yet) and "
                      f"are left out: if only redemptions are reported, most of them will not redeem, and the log "
                      f"overstates the redemption rate until they expire")
    scale = 10**exponent
    export.log = pd.DataFrame({
        ID[population]: frame["subject_id"].to_numpy(), "level": frame["face"].to_numpy() / scale,
        "redeemed": frame["redeemed"].fillna(0).to_numpy(dtype="int64"), "paid": frame["paid"].to_numpy() / scale,
        "propensity": frame["propensity"].to_numpy(dtype="float64"), "bucket": frame["bucket"].to_numpy(),
        "request_id": frame["request_id"].to_numpy(),
        "decided_at": pd.to_datetime(frame["created_at"].to_numpy(), unit="s", utc=True)})
    if features is not None:
        export.log = _with_features(export, features, ID[population])
    if export.log.empty:
        reasons = ", ".join(f"{n:,} {why}" for why, n in export.left_out.items() if n)
        raise DataError(f"nothing to export: every one of the {export.decisions:,} {population} decisions in the "
                        f"ledger is left out ({reasons})")
    return export


def _ledger(campaign: Campaign, url: str | None) -> Ledger:
    if url is None and not (campaign.path / LEDGER).is_file():
        raise DataError(f"no ledger at {campaign.path / LEDGER}: the campaign has not been served, or its ledger is "
                        f"elsewhere (`ledger_url`)")
    url = campaign.ledger_url(url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
        raise DataError(f"no ledger at {url.removeprefix('sqlite:///')}")
    return Ledger(url)


def _read(ledger: Ledger, population: str) -> tuple[pd.DataFrame, int]:
    """The population's decision rows in commit order and the currency exponent of their money."""
    try:
        version = ledger.schema_version()
        if version < 2:
            raise DataError(f"the ledger at {ledger.where} " + ("holds no decisions table" if version == 0 else
                            "is at schema version 1: `promokit serve` migrates it"))
        with ledger.reader.connect() as conn:
            exponent = conn.execute(text("SELECT exponent FROM budget WHERE id = 1")).scalar()
            frame = pd.read_sql(text(_READ.format(tagged="bucket, propensity" if version >= 3 else _UNTAGGED)),
                                conn, params={"population": population})
    except SQLAlchemyError as exc:
        raise DataError(f"cannot read the ledger at {ledger.where}: "
                        f"{str(getattr(exc, 'orig', exc)).strip().splitlines()[0]}") from None
    finally:
        ledger.close()
    if frame.empty:
        raise DataError(f"the ledger at {ledger.where} holds no {population} decisions")
    return frame, exponent


def _with_features(export: Export, features, key: str) -> pd.DataFrame:
    """The log's id and labels with the feature columns of ``features`` joined by id (ids compared as text)."""
    table = keyed_table(features if isinstance(features, pd.DataFrame) else read_table(features), "features", key)
    table = keyed_table(table.assign(**{key: table[key].astype(str)}), "features", key)  # 7 and "7" are one id
    labels = [column for column in LABELS if column in table.columns]
    if labels:
        warnings.warn(f"features: columns {labels} are another experiment's labels and are left out (the log's "
                      f"own are kept)")
        table = table.drop(columns=labels)
    log = export.log[[key, *LABELS]]
    known = log[key].isin(table[key])
    if not known.all():
        warnings.warn(f"features: {int((~known).sum()):,} of the log's {len(log):,} rows have an id the table does "
                      f"not hold and are left out, e.g. {log.loc[~known, key].iloc[0]!r}")
    return export.keep(log, known, "not in features").merge(table, on=key, how="left", validate="many_to_one")

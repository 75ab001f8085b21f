"""The voucher domain of :func:`~promokit.experiments.compare.compare`: ranked by the AUC of p_redeem over the
held-out sessions (DMBGN Table 3), resampled by session."""

from __future__ import annotations

import time

from promokit.experiments.compare import Domain, Scored
from promokit.metrics import auc
from promokit.voucher.contract import read_tables
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.models import MODELS


def score(model: VoucherModel, tables) -> Scored:
    """The held-out sessions' redemption against p_redeem."""
    rows = model.held_out(tables)
    started = time.perf_counter()
    p_redeem = model.predict(tables, rows=rows)["p_redeem"].to_numpy()
    seconds = time.perf_counter() - started
    redeemed = tables.sessions["redeemed"].to_numpy(dtype=float)[rows]
    return Scored(rows, {"auc": (redeemed, p_redeem, None)}, seconds)


DOMAIN = Domain("voucher", VoucherModel, tuple(MODELS), "lr", {"auc": auc},
                lambda data, options: read_tables(data, require_labels=True), score)

"""The incentive domain of :func:`~promokit.experiments.compare.compare`: ranked by AUC_c, the response f_c at the
offered value against the redemption of the held-out customers (the paper's section 5), resampled by customer."""

from __future__ import annotations

import time

import numpy as np

from promokit.experiments.compare import Domain, Scored
from promokit.incentive.contract import read_tables
from promokit.incentive.estimator import MODELS, IncentiveModel
from promokit.metrics import auc


def score(model: IncentiveModel, tables) -> Scored:
    """The held-out customers' redemption against f_c at the value each was offered."""
    rows, _ = model.held_out(tables)
    started = time.perf_counter()
    f_c = model.responses(tables).customers[rows]
    seconds = time.perf_counter() - started
    offered = f_c[np.arange(len(rows)), tables.customer_level[rows]]
    return Scored(rows, {"auc_c": (tables.redeemed[rows], offered, None)}, seconds)


DOMAIN = Domain("incentive", IncentiveModel, tuple(MODELS), "lr", {"auc_c": auc},
                lambda data, options: read_tables(data), score)

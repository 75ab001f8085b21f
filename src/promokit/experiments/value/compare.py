"""The value domain of :func:`~promokit.experiments.compare.compare`: ranked by the AUC of pCTCVR over the held-out
deliveries, then the normalised Gini of their ETV against the amounts (EOCA Tables 1–2), resampled by delivery."""

from __future__ import annotations

import time

import numpy as np

from promokit.experiments.compare import Domain, Scored
from promokit.metrics import auc, normalized_gini
from promokit.value.contract import value_tables
from promokit.value.estimator import ValueModel
from promokit.value.evaluate import FLOOR
from promokit.value.models import MODELS


def score(model: ValueModel, tables) -> Scored:
    """The held-out deliveries' conversion against pCTCVR, and their amount against the ETV."""
    rows = model.held_out(tables)
    started = time.perf_counter()
    predictions = model.predict(tables, rows=rows)
    seconds = time.perf_counter() - started
    return Scored(rows, {"auc": (tables.convert[rows], predictions["p_ctcvr"].to_numpy(), None),
                         "gini": (tables.amount[rows], predictions["etv"].to_numpy(), None)}, seconds)


def gini(amount: np.ndarray, etv: np.ndarray) -> float:
    """The normalised Gini of the ETV; NaN on deliveries that bought nothing (a resample may draw only those)."""
    return normalized_gini(amount, etv) if amount.sum() > 0 else float("nan")


DOMAIN = Domain("value", ValueModel, tuple(MODELS), FLOOR, {"auc": auc, "gini": gini},
                lambda data, options: value_tables(data, labels=options.get("labels")), score)

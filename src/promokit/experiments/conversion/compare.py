"""The conversion domain of :func:`~promokit.experiments.compare.compare`: ranked by the CTCVR AUC over every held-out
impression, then the CVR AUC over the clicked ones (ESM² Table 3), each resampled by impression."""

from __future__ import annotations

import time

from promokit.conversion.estimator import ConversionModel
from promokit.conversion.models import MODELS
from promokit.data.datasets import as_table
from promokit.experiments.compare import Domain, Scored
from promokit.metrics import auc


def score(model: ConversionModel, table) -> Scored:
    """The held-out impressions' purchase (click and purchase) against p_ctcvr, and the clicked ones' purchase
    against p_cvr."""
    rows = model.held_out(table)
    held = table.iloc[rows]
    started = time.perf_counter()
    predictions = model.predict(held)
    seconds = time.perf_counter() - started
    columns = model.feature_spec_.labels
    click = held[columns["click"]].to_numpy() == 1
    purchase = (held[columns["purchase"]].to_numpy() == 1) & click
    return Scored(rows, {"ctcvr_auc": (purchase, predictions["p_ctcvr"].to_numpy(), None),
                         "cvr_auc": (purchase[click], predictions["p_cvr"].to_numpy()[click], None)}, seconds)


DOMAIN = Domain("conversion", ConversionModel, tuple(MODELS), "lr", {"ctcvr_auc": auc, "cvr_auc": auc},
                lambda data, options: as_table(data, "data"), score)

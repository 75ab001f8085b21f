"""A hyper-parameter search for one voucher model, scored on the validation sessions only."""

from __future__ import annotations

import math
from dataclasses import replace

from promokit.experiments.tuning import GBDT_SPACE, LINEAR_SPACE, NEURAL_SPACE, TuneResult, tune
from promokit.training import TrainConfig
from promokit.voucher.estimator import DEFAULT_TRAIN, VoucherModel

#: The search space of each model (neural models share one).
SPACES = {"lr": LINEAR_SPACE, "gbdt": GBDT_SPACE}


def tune_voucher(model: str, tables, train_rows, valid_rows, train: TrainConfig | None = None,
                 params: dict | None = None, trials: int = 30, timeout: float | None = None,
                 storage: str = "tune.db", study: str | None = None, on_trial=None) -> TuneResult:
    """Search ``model``'s parameters (:data:`SPACES`, on top of the fixed ``params``) for the best validation
    AUC of the sessions ``valid_rows``; neural models pick their epoch on it and are pruned on it epoch by epoch.
    The best parameters are flat — model parameters, ``min_count``, training fields (``lr``,
    ``embedding_decay``) — as ``train --params`` reads them."""
    train = replace(train or DEFAULT_TRAIN, progress=False, monitor="auc")
    VoucherModel(model, params, train)  # a bad model name or parameter fails before any search
    space = SPACES.get(model, NEURAL_SPACE)

    def score(candidate: dict, report) -> float:
        config, net = train.merged(candidate)
        estimator = VoucherModel(model, {**(params or {}), **net}, config, test_fraction=0)  # the caller's rows
        estimator.fit(tables, rows=train_rows, validation=valid_rows,
                      on_epoch=lambda epoch, record: report(epoch, record.get("valid_auc", math.nan)))
        history = estimator.report.history
        if history is not None and history.stopped == "interrupted":
            raise KeyboardInterrupt
        return estimator.evaluate(tables, rows=valid_rows)["auc"]

    result = tune(score, space, storage, study or f"voucher-{model}-auc", trials, timeout, train.seed,
                  prune=space is NEURAL_SPACE, on_trial=on_trial)
    result.best_params = {**(params or {}), **result.best_params}
    return result

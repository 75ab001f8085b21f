"""The voucher models' search spaces for :func:`~promokit.experiments.tuning.tune`, scored on the validation
sessions only."""

from __future__ import annotations

from dataclasses import replace

from promokit.experiments.tuning import TuneResult, space_for, tune
from promokit.training import TrainConfig
from promokit.voucher.estimator import DEFAULT_TRAIN, VoucherModel


def tune_voucher(model: str, tables, train_rows, valid_rows, train: TrainConfig | None = None,
                 params: dict | None = None, trials: int = 30, timeout: float | None = None,
                 storage: str | None = "tune.db", study: str | None = None, on_trial=None) -> TuneResult:
    """Search ``model``'s parameters (:func:`~promokit.experiments.tuning.space_for`, on top of the fixed
    ``params``) for the best validation AUC of the sessions ``valid_rows``; neural models pick their epoch on it and
    are pruned on it epoch by epoch. The best parameters are flat — ``params``, model parameters, ``min_count``,
    training fields (``lr``, ``embedding_decay``) — as ``train --params`` reads them."""
    train = replace(train or DEFAULT_TRAIN, progress=False, monitor="auc")
    estimator = VoucherModel(model, params, train, test_fraction=0, refit=False)  # the caller's rows; a bad name fails here
    return tune(estimator, space_for(model), tables, validation=valid_rows, metric="auc",
                trials=trials, timeout=timeout, storage=storage, study_name=study or f"voucher-{model}-auc",
                seed=train.seed, fit_params={"rows": train_rows},
                score=lambda fitted: fitted.evaluate(tables, rows=valid_rows)["auc"], on_trial=on_trial)

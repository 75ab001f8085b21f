"""The conversion models' search spaces and metrics for :func:`~promokit.experiments.tuning.tune`, scored on
validation rows only (never the test rows)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from promokit.conversion.estimator import DEFAULT_TRAIN, MONITORS, ConversionModel
from promokit.data import DataError, FeatureSpec, holdout_split
from promokit.data.uris import local_dir
from promokit.experiments.tuning import NEURAL_SPACE, TuneResult, space_for, tune
from promokit.training import TrainConfig

#: What a search can maximise: the validation AUCs the estimator monitors.
METRICS = tuple(name for name in MONITORS if name != "loss")


def tune_conversion(model: str, table: pd.DataFrame, valid: pd.DataFrame | None = None,
                    spec: FeatureSpec | None = None, train: TrainConfig | None = None, metric: str = "ctcvr_auc",
                    trials: int = 30, timeout: float | None = None, storage: str | None = "tune.db",
                    study: str | None = None, valid_fraction: float = 0.1, valid_split: str | None = None,
                    repair_labels: bool = False, on_trial=None) -> TuneResult:
    """Search ``model``'s parameters (:func:`~promokit.experiments.tuning.space_for`) for the best validation
    ``metric``.

    The validation rows are ``valid``, or else cut once from ``table`` as ``ConversionModel.fit`` would (the
    latest rows by the spec's ``time_key``, or ``valid_split``). Neural models pick their epoch on ``metric``
    and are pruned on it epoch by epoch. The best parameters are flat — model parameters, ``min_count`` and
    training fields (``lr``, ``embedding_decay``, ``monitor``) — as ``train --params`` reads them.
    """
    if metric not in METRICS:
        raise DataError(f"`metric` must be one of {list(METRICS)}, got {metric!r}")
    if storage is not None:
        local_dir(storage, "storage")  # a local SQLite file: a URI is refused before the table is split
    spec = spec or FeatureSpec()
    train = replace(train or DEFAULT_TRAIN, progress=False)
    space = space_for(model)
    if space is NEURAL_SPACE:
        train = replace(train, monitor=metric)
    estimator = ConversionModel(model, None, train, spec, repair_labels, refit=False)  # a bad model name fails before any search
    if valid is None:
        how = valid_split or (f"time:{spec.time_key}" if spec.time_key else "random")
        kept, held = holdout_split(table, valid_fraction, how, train.seed)
        table, valid = table.iloc[kept], table.iloc[held]
    result = tune(estimator, space, table, validation=valid, metric=metric, trials=trials, timeout=timeout,
                  storage=storage, study_name=study or f"conversion-{model}-{metric}", seed=train.seed,
                  on_trial=on_trial)
    if space is NEURAL_SPACE:
        result.best_params["monitor"] = metric
    return result

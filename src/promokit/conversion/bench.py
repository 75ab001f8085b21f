"""Run several conversion models over seeds on one split and summarise them like the ESM² paper's Table 3."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from promokit.conversion.contract import OPTIONAL_LABELS, REQUIRED_LABELS, check_labels
from promokit.conversion.estimator import DEFAULT_TRAIN, ConversionModel
from promokit.conversion.evaluate import conversion_metrics
from promokit.data import FeatureSpec, holdout_split
from promokit.metrics import rela_impr
from promokit.training import TrainConfig

#: The columns of the paper's Table 3, then what the demo adds.
HEADLINE = ("cvr_auc", "ctcvr_auc", "ctcvr_gauc", "ctr_auc", "ctcvr_logloss")
AUC_METRICS = ("ctr_auc", "cvr_auc", "ctcvr_auc", "ctcvr_gauc")


#: Models without a network to pass bench network parameters to.
SHALLOW = ("lr", "gbdt")


@dataclass
class Split:
    train: pd.DataFrame
    valid: pd.DataFrame
    test: pd.DataFrame


def split_table(table: pd.DataFrame, spec: FeatureSpec, split: str | None = None, valid_split: str | None = None,
                seed: int = 0) -> Split:
    """80/10/10: the test rows (the last 10 %) cut by ``split``, then the validation rows (10 % of the table)
    from the rest by ``valid_split`` — each ``"random"`` or ``"time:<column>"`` (the latest rows). ``split``
    defaults to ``time:<spec.time_key>`` when the spec names one, else random; ``valid_split`` to ``split``."""
    split = split or (f"time:{spec.time_key}" if spec.time_key else "random")
    rest, test = holdout_split(table, 0.1, split, seed)
    train, valid = holdout_split(table.iloc[rest], 1 / 9, valid_split or split, seed)
    return Split(table.iloc[rest[train]], table.iloc[rest[valid]], table.iloc[test])


def run(split: Split, models: list[str], seeds: list[int], spec: FeatureSpec | None = None,
        params: dict[str, dict] | None = None, train: TrainConfig | None = None, gauc_weight: str = "impressions",
        repair_labels: bool = False, on_result=None, on_fitted=None) -> pd.DataFrame:
    """Fit every model with every seed on ``split.train`` (early stopping on ``split.valid``) and score it on
    ``split.test``. Returns one row per (model, seed) with the metrics and the fit time in seconds.

    ``params[name]`` are flat parameters of one model, as ``tune`` writes them: training fields among them
    (``lr``, ``embedding_decay`` …) replace those of ``train`` for that model. ``on_fitted(model)`` sees each
    fitted :class:`ConversionModel` (its history, its predictions) before ``on_result(row)`` sees its metrics."""
    rows = []
    train = train or DEFAULT_TRAIN
    for seed in seeds:
        for name in models:
            config, model_params = replace(train, seed=seed).merged((params or {}).get(name))
            model = ConversionModel(name, model_params, config, spec, repair_labels)
            started = time.perf_counter()
            model.fit(split.train, split.valid)
            seconds = time.perf_counter() - started
            if on_fitted is not None:
                on_fitted(model)
            row = {"model": name, "seed": seed, **model.evaluate(split.test, gauc_weight), "fit_seconds": seconds}
            rows.append(row)
            if on_result is not None:
                on_result(row)
    return pd.DataFrame(rows)


def oracle_row(test: pd.DataFrame, truth: pd.DataFrame, spec: FeatureSpec, gauc_weight: str = "impressions") -> dict:
    """Metrics of the generator's true probabilities: the best any model can do on this test set."""
    spec = spec.resolve(test, REQUIRED_LABELS, OPTIONAL_LABELS)
    labels, _ = check_labels(test, spec.labels)
    predictions = {k: truth[k].to_numpy() for k in ("p_ctr", "p_ctavr", "p_cvr", "p_ctcvr")}
    groups = test[spec.group_key].to_numpy() if spec.group_key else None
    return {"model": "oracle", **conversion_metrics(labels, predictions, groups, gauc_weight)}


def summarise(results: pd.DataFrame, base: str | None = None, metrics=HEADLINE) -> pd.DataFrame:
    """Mean ± std over seeds per model, plus RelaImpr (DMBGN eq. 11) of each AUC metric against ``base``."""
    metrics = [m for m in metrics if m in results.columns]
    grouped = results.groupby("model", sort=False)
    mean, std = grouped[metrics].mean(), grouped[metrics].std(ddof=1).fillna(0.0)
    table = pd.DataFrame(index=mean.index)
    for metric in metrics:
        table[metric] = [f"{m:.4f} ± {s:.4f}" if np.isfinite(m) else "—" for m, s in zip(mean[metric], std[metric])]
    if base is not None and base in mean.index:
        for metric in (m for m in metrics if m in AUC_METRICS):
            table[f"RelaImpr {metric} vs {base}"] = [
                f"{rela_impr(value, mean.loc[base, metric]):+.2f}%" for value in mean[metric]]
    table["fit_seconds"] = grouped["fit_seconds"].mean().map("{:.1f}".format)
    table.index.name = "model"
    return table

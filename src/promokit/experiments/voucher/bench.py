"""Several voucher models over seeds on one time split, summarised like the DMBGN paper's Table 3."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from promokit.experiments.voucher.world import DEMO_WORLD, make_world
from promokit.metrics import auc, gauc, logloss, rela_impr
from promokit.training import TrainConfig
from promokit.training.params import without_foreign_wide
from promokit.voucher.amexpert import AmExpertReport, load_amexpert
from promokit.voucher.estimator import DEFAULT_TRAIN, GRAPH_PARAMS, VoucherModel
from promokit.voucher.history import default_cuts, split_by_time
from promokit.voucher.item_embedding import ITEM_PARAMS

#: RelaImpr is shown against the linear floor and the two bases of the paper's Table 3.
BASES = ("lr", "dnn", "din")
#: Models without a network to pass bench network parameters to.
SHALLOW = ("lr", "gbdt")


@dataclass
class Split:
    """Session rows of the train / validation / test parts of one tables object."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray


def time_split(tables) -> Split:
    """80/10/10 by collection time (validation and test are the future of training)."""
    cuts = default_cuts(tables.sessions)
    parts = split_by_time(tables.sessions, cuts.valid_from, cuts.test_from)
    return Split(parts.train, parts.valid, parts.test)


@dataclass
class BenchData:
    """The tables of a bench split by time (:func:`time_split`): the synthetic world with its true probabilities
    (``truth``, the oracle), or AmExpert 2019 with its load report and GAUC within campaigns by default."""

    tables: object
    split: Split
    truth: np.ndarray | None = None
    report: AmExpertReport | None = None
    group_by: str | None = None


def bench_data(source: str) -> BenchData:
    """``"synthetic"``: the demo's world (:data:`DEMO_WORLD`, seed 0); else the AmExpert 2019 folder ``source``."""
    if source == "synthetic":
        world = make_world(**DEMO_WORLD, seed=0)
        return BenchData(world.tables, time_split(world.tables), truth=world.truth)
    tables, report = load_amexpert(source)
    return BenchData(tables, time_split(tables), report=report, group_by="campaign_id")


def net_for(name: str, net: dict) -> dict:
    """The bench network of model ``name``: the graph and item-embedding parameters only for DMBGN models (the
    others have no graph), so that one network serves every model."""
    model = VoucherModel(name)
    net = without_foreign_wide(model.model_class, net)
    if model.uses_graphs:
        return net
    return {k: v for k, v in net.items() if k not in (*ITEM_PARAMS, *GRAPH_PARAMS)}


def bench_params(names: list[str], net: dict, min_count: int | None = None,
                 tuned: dict[str, dict] | None = None) -> dict[str, dict]:
    """Each model's parameters: the bench network ``net`` (neural models, :func:`net_for`), ``min_count``, then
    what tuning found for it (``tuned[name]``)."""
    vocabulary = {} if min_count is None else {"min_count": min_count}
    return {name: {**(net_for(name, net) if name not in SHALLOW else {}), **vocabulary, **(tuned or {}).get(name, {})}
            for name in names}


@dataclass
class BenchRun:
    """A bench's per-seed ``results``, the ``oracle`` row (synthetic data) and the Table 3 ``summary``."""

    results: pd.DataFrame
    oracle: dict | None
    summary: pd.DataFrame


def run_bench(data: BenchData, models: list[str], seeds: list[int], params: dict[str, dict] | None = None,
              train: TrainConfig | None = None, group_by: str | None = None, on_result=None) -> BenchRun:
    """:func:`run` on the bench data (GAUC within ``group_by``, by default the data's), the oracle where the truth
    is known, and :func:`summarise`."""
    group_by = group_by or data.group_by
    results = run(data.tables, data.split, models, seeds, params, train, on_result=on_result, group_by=group_by)
    oracle = None if data.truth is None else oracle_row(data.tables, data.split.test, data.truth, group_by)
    return BenchRun(results, oracle, summarise(results, oracle))


def run(tables, split: Split, models: list[str], seeds: list[int], params: dict[str, dict] | None = None,
        train: TrainConfig | None = None, on_result=None, group_by: str | None = None) -> pd.DataFrame:
    """Fit every model with every seed on ``split.train`` (epochs / trees / LR's L2 strength selected on
    ``split.valid``) and score it on ``split.test``: one row per (model, seed) with auc, logloss (and gauc
    within the ``group_by`` groups) and the fit time in seconds. ``params[name]`` are one model's flat
    parameters as ``tune`` writes them: training fields among them replace those of ``train`` for that model."""
    rows = []
    train = train or DEFAULT_TRAIN
    for seed in seeds:
        for name in models:
            config, model_params = replace(train, seed=seed).merged((params or {}).get(name))
            model = VoucherModel(name, model_params, config, test_fraction=0, refit=False)
            started = time.perf_counter()
            model.fit(tables, rows=split.train, validation=split.valid)
            seconds = time.perf_counter() - started
            metrics = model.evaluate(tables, rows=split.test, group_by=group_by)
            row = {"model": name, "seed": seed, "auc": metrics["auc"], "logloss": metrics["logloss"],
                   **({"gauc": metrics["gauc"]} if group_by else {}), "fit_seconds": seconds}
            rows.append(row)
            if on_result is not None:
                on_result(row)
    return pd.DataFrame(rows)


def oracle_row(tables, rows: np.ndarray, truth: np.ndarray, group_by: str | None = None) -> dict:
    """AUC and logloss (and GAUC) of the generator's true probabilities: the best any model can do on these rows."""
    y = tables.sessions["redeemed"].to_numpy(dtype=np.float64)[rows]
    row = {"model": "oracle", "auc": auc(y, truth[rows]), "logloss": logloss(y, truth[rows])}
    if group_by:
        row["gauc"] = gauc(y, truth[rows], tables.sessions[group_by].to_numpy()[rows]).value
    return row


def summarise(results: pd.DataFrame, oracle: dict | None = None, bases=BASES) -> pd.DataFrame:
    """Table 3: AUC (and GAUC, when ``results`` has it) mean ± std over seeds (the mean alone for one seed),
    RelaImpr (eq. 11) of the mean AUC vs each base, mean logloss; the oracle (``oracle_row``) as a last row."""
    grouped = results.groupby("model", sort=False)
    mean = grouped["auc"].mean()
    table = pd.DataFrame(index=[*mean.index, *(["oracle"] if oracle is not None else [])])
    for metric, title in (("auc", "AUC"), ("gauc", "GAUC")):
        if metric in results:
            column = pd.Series([_mean_std(m, s) for m, s in zip(grouped[metric].mean(), grouped[metric].std(ddof=1))],
                               index=mean.index)
            if oracle is not None:
                column.loc["oracle"] = f"{oracle[metric]:.4f}"
            table[f"{title} mean ± std"] = column
    logloss_mean = grouped["logloss"].mean()
    seconds = grouped["fit_seconds"].mean().map("{:.1f}".format)
    if oracle is not None:
        mean.loc["oracle"], logloss_mean.loc["oracle"], seconds.loc["oracle"] = oracle["auc"], oracle["logloss"], "—"
    for base in bases:
        if base in results["model"].values:
            table[f"RelaImpr ({base.upper()})"] = [f"{rela_impr(v, mean[base]):+.2f}%" for v in mean]
    table["Logloss mean"] = logloss_mean.map("{:.4f}".format)
    table["fit_seconds"] = seconds
    table.index.name = "model"
    return table


def _mean_std(mean: float, std: float) -> str:
    return f"{mean:.4f} ± {std:.4f}" if np.isfinite(std) else f"{mean:.4f}"

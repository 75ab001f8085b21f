"""Run several conversion models over seeds on one split and summarise them like the ESM² paper's Table 3 (or,
with RI, like the GMCM paper's Tables 2–3)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from promokit.conversion.contract import (
    OPTIONAL_LABELS,
    REQUIRED_LABELS,
    check_labels,
    check_micro_behaviors,
    conversion_spec,
    micro_behavior_columns,
)
from promokit.conversion.defaults import REPAIR_LABELS
from promokit.conversion.estimator import DEFAULT_TRAIN, ConversionModel
from promokit.conversion.evaluate import conversion_metrics
from promokit.conversion.models import MODELS
from promokit.data import DataError, FeatureSpec, holdout_split, random_split
from promokit.data.datasets import as_table
from promokit.experiments.conversion.world import ConversionWorld, make_world, micro_behavior_names
from promokit.metrics import expected_auc, rela_impr, relative_improvement_permille
from promokit.training import TrainConfig
from promokit.training.params import without_foreign_wide

#: The columns of the paper's Table 3, then what the demo adds.
HEADLINE = ("cvr_auc", "ctcvr_auc", "ctcvr_gauc", "ctr_auc", "ctcvr_logloss")
AUC_METRICS = ("ctr_auc", "cvr_auc", "ctcvr_auc", "ctcvr_gauc")
#: The columns of the GMCM paper's Tables 2 and 3.
GMCM_TABLE = ("cvr_auc", "ctcvr_auc", "ctcvr_gauc", "cvr_mse", "ctcvr_mse")
#: AUCs against a synthetic world's true probabilities (:func:`truth_metrics`), where a truth exists.
TRUTH_AUCS = ("cvr_auc_truth", "cvr_auc_truth_all", "ctcvr_auc_truth")
#: GMCM's RI groups: column ``ri_permille_<group>`` averages the relative improvements over the group's metrics
#: (Table 2 over the AUC-type metrics, Table 3 over the MSEs); the metrics where lower is better.
RI_GROUPS = {"auc": ("cvr_auc", "ctcvr_auc", "ctcvr_gauc"), "mse": ("cvr_mse", "ctcvr_mse")}
LOWER_IS_BETTER = ("cvr_mse", "ctcvr_mse", "ctr_mse", "ctr_logloss", "cvr_logloss", "ctcvr_logloss")


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


def world_split(world: ConversionWorld, seed: int = 0) -> tuple[Split, pd.DataFrame, FeatureSpec]:
    """80/10/10 random split of the world's impressions; returns the split, the test truth and the spec."""
    train, valid, test = random_split(len(world.table), (0.8, 0.1, 0.1), seed)
    t = world.table
    spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id")
    return Split(t.iloc[train], t.iloc[valid], t.iloc[test]), world.truth.iloc[test], spec


@dataclass
class BenchRun:
    """What :func:`run_bench` gives: one row per model and seed (``results``), the mean ± std over seeds with
    RelaImpr (``summary``), GMCM's Tables 2–3 by title (``tables``, with micro-behaviours), the oracle's metrics
    (``oracle``, on the synthetic world; the summary and tables then have its row) and the ``split``."""

    results: pd.DataFrame
    summary: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    oracle: dict | None
    split: Split


def run_bench(models: list[str], seeds: list[int], data=None, spec=None, split: str | None = None,
              valid_split: str | None = None, micro_behaviors=None, n_users: int = 2000, n_items: int = 800,
              n_impressions: int = 300_000, train: TrainConfig | None = None, params: dict | None = None,
              tuned: dict[str, dict] | None = None, base: str | None = "lr", min_count: int | None = None,
              repair_labels: bool = REPAIR_LABELS, on_result=None) -> BenchRun:
    """``models`` × ``seeds`` (:func:`run`) on one split, summarised (:func:`summarise`, RelaImpr against ``base``
    when it is among the models; :func:`gmcm_summary` with micro-behaviours).

    ``data`` (a table or a path) is split by :func:`split_table` (``split``, ``valid_split``), its spec
    ``spec`` (a FeatureSpec or a spec file; inferred when None) with ``micro_behaviors`` (columns, a list or
    comma-separated) in place of its own. Without ``data``: the synthetic world of ``n_users`` × ``n_items`` ×
    ``n_impressions`` (seed 0) split by :func:`world_split`, with the micro-behaviours of
    :func:`synthetic_micro_behaviors` and the oracle. ``params`` go to every neural model (less a wide term it has
    no use for), ``tuned[name]`` over them for one model; ``min_count`` sets the spec's vocabulary threshold."""
    truth = None
    if data is None:
        nodes, n_micro = synthetic_micro_behaviors(micro_behaviors) if micro_behaviors is not None else ([], 0)
        world = make_world(n_users=n_users, n_items=n_items, n_impressions=n_impressions, seed=0, n_micro=n_micro)
        parts, truth, feature_spec = world_split(world)
        feature_spec = replace(feature_spec, micro_behaviors=nodes)
        truth = truth.drop(columns=[f"p_node_{n}" for n in world.micro_behaviors if n not in nodes])
    else:
        feature_spec = conversion_spec(spec, micro_behaviors=micro_behaviors)
        parts = split_table(as_table(data, "data"), feature_spec, split, valid_split)
    if min_count is not None:
        feature_spec = replace(feature_spec, min_count=min_count)
    per_model = {name: {**(without_foreign_wide(MODELS[name][0], params or {})
                           if name in MODELS and name not in SHALLOW else {}), **(tuned or {}).get(name, {})}
                 for name in models}
    results = run(parts, models, seeds, feature_spec, per_model, train, repair_labels=repair_labels,
                  on_result=on_result, truth=truth)
    summary = summarise(results, base if base in models else None, (*HEADLINE, *TRUTH_AUCS))
    tables = {}
    if feature_spec.micro_behaviors:
        tables["GMCM's Tables 2–3: mean ± std over seeds, RI of gmcm in ‰, node AUCs"] = gmcm_summary(
            results, feature_spec.micro_behaviors)
    oracle = None
    if truth is not None:
        oracle = oracle_row(parts.test, truth, feature_spec)
        summary = with_oracle(summary, oracle)
        tables = {title: with_oracle(table, oracle) for title, table in tables.items()}
    return BenchRun(results, summary, tables, oracle, parts)


def synthetic_micro_behaviors(value) -> tuple[list[str], int]:
    """The synthetic world's micro-behaviours that ``value`` asks for — a count N (the first N of
    :func:`~promokit.experiments.conversion.world.micro_behavior_names`: cart, favorite, review, qa, zoom, sku,
    share, detail, coupon, buy_button, micro_11 …) or their names (a list or comma-separated) — and how many the
    world must generate to have them."""
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        return micro_behavior_names(int(value)), int(value)
    names = micro_behavior_columns(value)
    numbered = [int(n.removeprefix("micro_")) for n in names if n.startswith("micro_") and n[6:].isdigit()]
    known = micro_behavior_names(max([10, *numbered]))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise DataError(f"`micro_behaviors`: the synthetic world has no micro-behaviours {unknown}; it has "
                        f"{', '.join(known[:10])}, micro_11, micro_12 … (or give a count, e.g. 10)")
    return names, max(known.index(name) for name in names) + 1


def run(split: Split, models: list[str], seeds: list[int], spec: FeatureSpec | None = None,
        params: dict[str, dict] | None = None, train: TrainConfig | None = None, gauc_weight: str = "impressions",
        repair_labels: bool = False, on_result=None, on_fitted=None, truth: pd.DataFrame | None = None) -> pd.DataFrame:
    """Fit every model with every seed on ``split.train`` (early stopping on ``split.valid``) and score it on
    ``split.test``. Returns one row per (model, seed) with the metrics and the fit time in seconds; with the test
    rows' ``truth`` (a synthetic world's, in their order), also :func:`truth_metrics`.

    ``params[name]`` are flat parameters of one model, as ``tune`` writes them: training fields among them
    (``lr``, ``embedding_decay`` …) replace those of ``train`` for that model. ``on_fitted(model)`` sees each
    fitted :class:`ConversionModel` (its history, its predictions) before ``on_result(row)`` sees its metrics."""
    rows = []
    train = train or DEFAULT_TRAIN
    for seed in seeds:
        for name in models:
            config, model_params = replace(train, seed=seed).merged((params or {}).get(name))
            model = ConversionModel(name, model_params, config, spec, repair_labels, test_fraction=0, refit=False)
            started = time.perf_counter()
            model.fit(split.train, validation=split.valid)
            seconds = time.perf_counter() - started
            if on_fitted is not None:
                on_fitted(model)
            predictions = model.predict(split.test)
            row = {"model": name, "seed": seed,
                   **model.evaluate(split.test, gauc_weight=gauc_weight, predictions=predictions)}
            if truth is not None:
                click = split.test[model.feature_spec_.labels["click"]].to_numpy()
                row.update(truth_metrics(predictions, truth, click))
            row["fit_seconds"] = seconds
            rows.append(row)
            if on_result is not None:
                on_result(row)
    return pd.DataFrame(rows)


def oracle_row(test: pd.DataFrame, truth: pd.DataFrame, spec: FeatureSpec, gauc_weight: str = "impressions") -> dict:
    """Metrics of the generator's true probabilities: the best any model can do on this test set.

    ``truth`` holds p_ctr, p_ctavr, p_cvr and p_ctcvr per test row (in its row order); its ``p_node_<name>``
    columns, if any, are the true micro-behaviour probabilities, scored as ``node_auc_<name>`` against the test
    column ``<name>`` (nodes whose column the test table lacks are left out)."""
    spec = spec.resolve(test, REQUIRED_LABELS, OPTIONAL_LABELS)
    labels, report = check_labels(test, spec.labels)
    predictions = {k: truth[k].to_numpy() for k in ("p_ctr", "p_ctavr", "p_cvr", "p_ctcvr")}
    # true micro-behaviour probabilities p_node_<name>, scored against the test column <name> (node AUCs)
    nodes = [c.removeprefix("p_node_") for c in truth.columns if c.startswith("p_node_")]
    nodes = [name for name in nodes if name in test.columns]
    if nodes:
        micro = check_micro_behaviors(test, nodes, labels["click"], spec.labels["click"], False, report)
        labels.update({f"micro_{name}": micro[:, j] for j, name in enumerate(nodes)})
        predictions.update({f"p_node_{name}": truth[f"p_node_{name}"].to_numpy() for name in nodes})
    groups = test[spec.group_key].to_numpy() if spec.group_key else None
    return {"model": "oracle", **conversion_metrics(labels, predictions, groups, gauc_weight),
            **truth_metrics(truth, truth, labels["click"])}


def truth_metrics(predictions: pd.DataFrame, truth: pd.DataFrame, click: np.ndarray) -> dict[str, float]:
    """AUCs against a synthetic world's true probabilities rather than its drawn labels
    (:func:`~promokit.metrics.expected_auc`: no test-label noise): ``cvr_auc_truth`` on the clicked rows (where
    the CVR AUC is measured), ``cvr_auc_truth_all`` over every impression (the entire space, where the CVR is
    used to rank and where inverse-propensity weighting and ESMM claim to remove the selection bias) and
    ``ctcvr_auc_truth``. ``predictions`` and ``truth`` hold ``p_cvr`` and ``p_ctcvr`` per test row, in order."""
    clicked = np.asarray(click) == 1
    p_cvr, true_cvr = predictions["p_cvr"].to_numpy(), truth["p_cvr"].to_numpy()
    return {"cvr_auc_truth": expected_auc(true_cvr[clicked], p_cvr[clicked]),
            "cvr_auc_truth_all": expected_auc(true_cvr, p_cvr),
            "ctcvr_auc_truth": expected_auc(truth["p_ctcvr"].to_numpy(), predictions["p_ctcvr"].to_numpy())}


def relative_improvements(results: pd.DataFrame, model: str, groups=None) -> pd.DataFrame:
    """GMCM's RI in permille (:func:`~promokit.metrics.relative_improvement_permille`) of ``model`` against every
    model of ``results``, one column ``ri_permille_<group>`` per group of ``groups`` (default ``RI_GROUPS``: the
    AUC-type metrics of Table 2 and the MSEs of Table 3), computed from the means over seeds. The row of
    ``model`` itself is NaN. A group with a metric that ``results`` lacks gets no column (with a warning)."""
    groups = RI_GROUPS if groups is None else groups
    means = results.groupby("model", sort=False).mean(numeric_only=True)
    if model not in means.index:
        raise KeyError(f"no results for model {model!r}; models: {list(means.index)}")
    table = pd.DataFrame(index=means.index)
    for group, metrics in groups.items():
        missing = [m for m in metrics if m not in means.columns]
        if missing:
            warnings.warn(f"no RI over {group}: the results have no {missing}", stacklevel=2)
            continue
        table[f"ri_permille_{group}"] = [
            float("nan") if base == model else
            relative_improvement_permille(means.loc[model], means.loc[base], metrics, LOWER_IS_BETTER)
            for base in means.index]
    table.index.name = "model"
    return table


def summarise(results: pd.DataFrame, base: str | None = None, metrics=HEADLINE, ri: str | None = None,
              ri_groups=None) -> pd.DataFrame:
    """Mean ± std over seeds per model, plus RelaImpr (DMBGN eq. 11) of each AUC metric against ``base``.

    With ``ri`` (a model name, e.g. ``"gmcm"``), also the GMCM paper's RI of that model against each other model,
    in permille (:func:`relative_improvements`, columns ``ri_permille_<group>`` before ``fit_seconds``; "—" on the
    row of ``ri`` itself). MSE columns get six decimals. ``metrics=GMCM_TABLE`` with ``ri`` gives the layout of
    the paper's Tables 2–3."""
    metrics = [m for m in metrics if m in results.columns]
    grouped = results.groupby("model", sort=False)
    mean, std = grouped[metrics].mean(), grouped[metrics].std(ddof=1).fillna(0.0)
    table = pd.DataFrame(index=mean.index)
    for metric in metrics:
        digits = 6 if metric.endswith("_mse") else 4
        table[metric] = [f"{m:.{digits}f} ± {s:.{digits}f}" if np.isfinite(m) else "—"
                         for m, s in zip(mean[metric], std[metric])]
    if base is not None and base in mean.index:
        for metric in (m for m in metrics if m in AUC_METRICS):
            table[f"RelaImpr {metric} vs {base}"] = [
                f"{rela_impr(value, mean.loc[base, metric]):+.2f}%" for value in mean[metric]]
    if ri is not None:
        for column, values in relative_improvements(results, ri, ri_groups).items():
            table[column] = [f"{v:+.2f}‰" if np.isfinite(v) else "—" for v in values]
    table["fit_seconds"] = grouped["fit_seconds"].mean().map("{:.1f}".format)
    table.index.name = "model"
    return table


def with_oracle(summary: pd.DataFrame, oracle: dict) -> pd.DataFrame:
    """``summary`` with an ``oracle`` row: the oracle's value in every metric column it has, "—" elsewhere."""
    summary = summary.copy()
    summary.loc["oracle"] = [f"{oracle[c]:.{6 if c.endswith('_mse') else 4}f}" if c in oracle else "—"
                             for c in summary.columns]
    return summary


def gmcm_summary(results: pd.DataFrame, nodes: list[str], ri: str = "gmcm") -> pd.DataFrame:
    """The GMCM paper's Tables 2–3 in one: CVR AUC, CTCVR AUC, CTCVR GAUC, CVR MSE, CTCVR MSE (mean ± std over
    seeds), the AUCs against the truth (on a synthetic world), the RI of ``ri`` against each other model in
    permille (when ``ri`` is among the results) and the node AUC of each micro-behaviour in ``nodes`` (models
    without node heads: "—")."""
    metrics = (*GMCM_TABLE, *TRUTH_AUCS, *(f"node_auc_{name}" for name in nodes))
    table = summarise(results, metrics=metrics, ri=ri if ri in set(results["model"]) else None)
    return table.fillna("—")

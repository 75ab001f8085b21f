"""Learning curves: each domain's floor and paper models trained on growing shares of the training rows and scored
on the same later test rows, each headline metric with a paired bootstrap interval against the floor (the machinery
of ``pk.compare``: each domain's scorer and headline metrics, :func:`~promokit.metrics.paired_bootstrap`).

Sets (``--domains`` picks them by domain; the test rows are fixed, the training shares nested):

- ``conversion-world``: the synthetic conversion world (100,000 impressions of 2,000 users and 800 items), 20 % of
  the impressions at random are the test; ``kuairand``: KuaiRand-Pure, purchase = like, the latest day (04-30) is
  the test; lr, esmm, esm2;
- ``voucher-world``: the demo's synthetic voucher world (20,000 sessions); ``amexpert``: AmExpert 2019; the latest
  10 % of the sessions by collection time are the test; lr, dmbgn;
- ``value-world``: the synthetic value world (5,000 users, 8 funds; the latest 20 % of the deliveries are the test):
  hurdle, esdpm, esdpm-ncg; ``cdnow``: CDNOW (20 % of the customers at random): hurdle, esdpm-ncg (CDNOW has no
  consumption graph);
- ``incentive-world``: the synthetic incentive world (20,000 customers, 500 merchants; 20 % of the customers at
  random are the test): lr, gnn-hazard. No real set has offered values and redemptions on a customer–merchant graph.

A synthetic world's test rows are also scored by its truth (the ``oracle`` row): how far the floor is from the best
any model can do there.

Every model is fitted with its domain's defaults (``--train`` and ``--params`` change them) on the share of the
training rows, validates on the estimator's own validation rows cut from them (the latest 10 % where the data have
a time), is kept as selected (``refit=False``) and is scored on the test rows.

Usage::

    .venv/bin/python benchmarks/learning_curves.py                                  # every set, seed 0
    .venv/bin/python benchmarks/learning_curves.py --domains conversion --sizes 0.1,0.3,1 --seeds 0,1
    .venv/bin/python benchmarks/learning_curves.py --domains value --params '{"esdpm": {"wide": "offset"}}'
    .venv/bin/python benchmarks/learning_curves.py --sets value-world --world-scale 4 --sizes 1   # 20,000 users
    .venv/bin/python benchmarks/learning_curves.py --quick                          # small worlds, 2 shares

KuaiRand (Gao et al., CIKM 2022) is CC BY-SA 4.0, AmExpert 2019 competition data and CDNOW (Fader and Hardie) a
public sample: the script reads local copies and writes only metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.experiments.compare import LEVEL, domain_spec, standing
from promokit.metrics.bootstrap import paired_bootstrap, signed
from promokit.report import markdown_table

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
TEST_SHARE = 0.2
#: The row of a synthetic world's truth: the test rows scored by the probabilities the world drew them from.
ORACLE = "oracle"
#: The synthetic worlds' sizes, the first of each the one ``--world-scale`` scales (``--quick``: a quarter).
WORLDS = {"conversion": {"n_impressions": 100_000, "n_users": 2000, "n_items": 800},
          "voucher": {"n_sessions": 20_000, "n_users": 3000, "n_vouchers": 120, "n_items": 1000},
          "incentive": {"n_customers": 20_000, "n_merchants": 500},
          "value": {"n_users": 5000, "n_funds": 8}}


@dataclass(frozen=True)
class Curve:
    """One set's data as its domain reads them, the rows that may train (``pool``) and the fixed ``test`` rows, the
    estimators' ``options`` and, for a synthetic world, the ``truth``: per headline metric the true probabilities
    (or values) of the test rows that metric scores, in the order the domain's scorer gives them."""

    data: object
    pool: np.ndarray
    test: np.ndarray
    options: dict
    truth: dict[str, np.ndarray] | None = None


def random_rows(n: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(pool, test): a seeded random ``share`` of ``n`` rows as the test, the rest the pool."""
    drawn = np.random.default_rng(0).random(n) < share
    return np.flatnonzero(~drawn), np.flatnonzero(drawn)


def world(domain: str, scale: float):
    """The synthetic world of ``domain`` at the sizes of :data:`WORLDS`, its first size times ``scale``, seed 0."""
    from importlib import import_module

    size = dict(WORLDS[domain])
    first = next(iter(size))
    size[first] = int(round(size[first] * scale))
    return import_module(f"promokit.experiments.{domain}.world").make_world(**size, seed=0)


def conversion_world(scale: float) -> Curve:
    from promokit.data import FeatureSpec

    built = world("conversion", scale)
    spec = FeatureSpec(categorical=built.categorical, numeric=built.numeric, group_key="user_id")
    pool, test = random_rows(len(built.table), TEST_SHARE)
    clicked = built.table["click"].to_numpy()[test] == 1
    truth = {"ctcvr_auc": built.truth["p_ctcvr"].to_numpy()[test],
             "cvr_auc": built.truth["p_cvr"].to_numpy()[test][clicked]}
    return Curve(built.table, pool, test, {"spec": spec}, truth)


def kuairand(scale: float) -> Curve:
    from promokit.conversion.kuairand import DACTION_BEHAVIOURS, kuairand_spec, load_kuairand

    table, _ = load_kuairand(DATA / "kuairand_pure", purchase="is_like",
                             daction=tuple(b for b in DACTION_BEHAVIOURS if b != "is_like"))
    later = (table["date"] == table["date"].max()).to_numpy()
    return Curve(table, np.flatnonzero(~later), np.flatnonzero(later), {"spec": kuairand_spec(table)})


def voucher_curve(tables, truth: np.ndarray | None = None) -> Curve:
    from promokit.experiments.voucher.bench import time_split
    from promokit.voucher.contract import read_tables

    tables = read_tables(tables, require_labels=True)
    split = time_split(tables)
    return Curve(tables, np.sort(np.concatenate([split.train, split.valid])), split.test, {},
                 None if truth is None else {"auc": truth[split.test]})


def voucher_world(scale: float) -> Curve:
    built = world("voucher", scale)
    return voucher_curve(built.tables, built.truth)


def amexpert(scale: float) -> Curve:
    from promokit.voucher.amexpert import load_amexpert

    return voucher_curve(load_amexpert(DATA / "amexpert2019")[0])


def value_world(scale: float) -> Curve:
    from promokit.value.contract import value_tables
    from promokit.value.estimator import delivery_split

    built = world("value", scale)
    tables = value_tables({"deliveries": built.deliveries, "users": built.users, "funds": built.funds,
                           "behaviors": built.behaviors, "consumption": built.consumption})
    pool, _, test = delivery_split(tables, TEST_SHARE, 0.0, "time")
    truth = {"auc": built.truth["true_p_ctcvr"].to_numpy()[test], "gini": built.truth["true_etv"].to_numpy()[test]}
    return Curve(tables, pool, test, {"split": "time"}, truth)


def cdnow(scale: float) -> Curve:
    from promokit.value.cdnow import cdnow_tables, read_cdnow

    tables = cdnow_tables(read_cdnow(DATA / "cdnow"))
    return Curve(tables, *random_rows(len(tables.deliveries), TEST_SHARE), {"split": "random"})


def incentive_world(scale: float) -> Curve:
    from promokit.incentive.contract import read_tables

    built = world("incentive", scale)
    tables = read_tables({"customers": built.customers, "merchants": built.merchants, "edges": built.edges})
    labelled = tables.labelled_customers
    pool, test = (labelled[rows] for rows in random_rows(len(labelled), TEST_SHARE))
    offered = built.customer_truth[test, tables.customer_level[test]]
    return Curve(tables, pool, test, {}, {"auc_c": offered})


def conversion_training(data: pd.DataFrame, rows: np.ndarray) -> tuple[object, dict]:
    return data.iloc[rows], {}


def voucher_training(tables, rows: np.ndarray) -> tuple[object, dict]:
    return tables, {"rows": rows}


def value_training(tables, rows: np.ndarray) -> tuple[object, dict]:
    """The value tables with the deliveries ``rows`` only (users, funds and their histories whole)."""
    per_delivery = {name: getattr(tables, name)[rows]
                    for name in ("user", "fund", "time", "click", "convert", "amount")}
    return replace(tables, deliveries=tables.deliveries.iloc[rows].reset_index(drop=True), **per_delivery), {}


def incentive_training(tables, rows: np.ndarray) -> tuple[object, dict]:
    """The whole graph, with the redemption of the customers outside ``rows`` unknown (nodes of the graph only)."""
    redeemed = np.full_like(tables.redeemed, np.nan)
    redeemed[rows] = tables.redeemed[rows]
    return replace(tables, redeemed=redeemed), {}


#: set → (domain, models, its curve from the worlds' scale (a real set ignores it), the data one share of its pool
#: trains on and fit's arguments)
SETS: dict[str, tuple[str, tuple[str, ...], Callable[[float], Curve], Callable]] = {
    "conversion-world": ("conversion", ("lr", "esmm", "esm2"), conversion_world, conversion_training),
    "kuairand": ("conversion", ("lr", "esmm", "esm2"), kuairand, conversion_training),
    "voucher-world": ("voucher", ("lr", "dmbgn"), voucher_world, voucher_training),
    "amexpert": ("voucher", ("lr", "dmbgn"), amexpert, voucher_training),
    "value-world": ("value", ("hurdle", "esdpm", "esdpm-ncg"), value_world, value_training),
    "cdnow": ("value", ("hurdle", "esdpm-ncg"), cdnow, value_training),
    "incentive-world": ("incentive", ("lr", "gnn-hazard"), incentive_world, incentive_training),
}


class HeldOut:
    """A fitted estimator whose held-out rows are the curve's test rows, so that its domain's compare scorer
    scores exactly those."""

    def __init__(self, model, test: np.ndarray, domain: str):
        self.model, self.test, self.domain = model, test, domain

    def held_out(self, data):
        return (self.test, np.empty(0, dtype=np.int64)) if self.domain == "incentive" else self.test

    def __getattr__(self, name):
        return getattr(self.model, name)


def fit_and_score(domain: str, name: str, curve: Curve, rows: np.ndarray, training: Callable, seed: int,
                  train: dict, params: dict):
    """The model ``name`` fitted on the pool rows ``rows`` and scored on the test rows (:class:`Scored`), its fit
    seconds and the epochs it kept (None for a model without epochs)."""
    spec = domain_spec(domain)
    estimator = spec.estimator(name, params.get(name), {**train, "seed": seed, "progress": False}, test_fraction=0,
                               **curve.options)
    if "refit" in estimator.get_params(deep=False):
        estimator.set_params(refit=False)
    data, fit_options = training(curve.data, rows)
    started = time.perf_counter()
    estimator.fit(data, **fit_options)
    seconds = time.perf_counter() - started
    return spec.score(HeldOut(estimator, curve.test, domain), curve.data), seconds, kept_epochs(estimator)


def kept_epochs(estimator) -> int | None:
    history = getattr(estimator, "history_", None)
    if history is None or getattr(history, "unit", "epoch") != "epoch" or history.best_epoch < 0:
        return None
    return history.best_epoch + 1


def against_floor(domain: str, scored, floor, resamples: int, seed: int) -> dict:
    """Each headline metric of ``scored``, and its difference against ``floor`` with a paired bootstrap interval."""
    spec, row = domain_spec(domain), {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for metric, fn in spec.headlines.items():
            labels, scores, groups = scored.pairs[metric]
            row[metric] = fn(labels, scores)
            if floor is not scored:
                d = paired_bootstrap(fn, labels, scores, floor.pairs[metric][1], groups=groups,
                                     resamples=resamples, seed=seed, level=LEVEL)
                row.update({f"{metric}_diff": d.observed, f"{metric}_low": d.low, f"{metric}_high": d.high})
    return row


def run_set(name: str, args) -> list[dict]:
    """Every model of set ``name`` at every share and seed: one result row each."""
    domain, models, make, training = SETS[name]
    models = [m for m in (args.models.split(",") if args.models else models) if m in domain_spec(domain).models]
    floor_name = domain_spec(domain).floor
    models = list(dict.fromkeys([floor_name, *models]))
    curve = make(args.world_scale)
    order = np.random.default_rng(0).permutation(curve.pool)  # nested shares: each smaller one inside the larger
    print(f"\n{name} ({domain}): {len(curve.pool):,} training rows, {len(curve.test):,} test rows", flush=True)
    results = []
    for share in args.sizes:
        rows = np.sort(order[: int(round(share * len(order)))])
        for seed in args.seeds:
            floor = None
            for model in models:
                scored, seconds, epochs = fit_and_score(domain, model, curve, rows, training, seed, args.train,
                                                        args.params)
                floor = scored if model == floor_name else floor
                row = {"set": name, "domain": domain, "share": share, "train_rows": len(rows),
                       "test_rows": len(curve.test), "model": model, "seed": seed, "fit_seconds": seconds,
                       "kept_epochs": epochs,
                       **against_floor(domain, scored, floor, args.resamples, seed)}
                results.append(row)
                print(f"  {progress_line(row, domain_spec(domain), floor_name)}", flush=True)
            if curve.truth is not None:
                results.append({**results[-1], "model": ORACLE, "fit_seconds": 0.0, "kept_epochs": None,
                                **against_floor(domain, oracle(floor, curve.truth), floor, args.resamples, seed)})
    return results


def oracle(floor, truth: dict[str, np.ndarray]):
    """The floor's held-out rows scored by the world's truth."""
    return replace(floor, pairs={metric: (labels, truth[metric], groups)
                                 for metric, (labels, _, groups) in floor.pairs.items()}, seconds=0.0)


def progress_line(row: dict, spec, floor: str) -> str:
    metric = next(iter(spec.headlines))
    against = (f" ({signed(row[f'{metric}_diff'])} [{signed(row[f'{metric}_low'])}, {signed(row[f'{metric}_high'])}]"
               f" vs {floor})") if f"{metric}_diff" in row else ""
    return (f"{row['share']:.0%} ({row['train_rows']:,} rows) {row['model']} seed {row['seed']}: "
            f"{metric} {row[metric]:.4f}{against}, fit {row['fit_seconds']:.0f} s"
            + ("" if row["kept_epochs"] is None else f", kept {row['kept_epochs']} epochs"))


def curve_table(results: pd.DataFrame, name: str) -> pd.DataFrame:
    """One row per share × model of set ``name``: each headline metric's mean over seeds and, per seed, its
    difference against the floor with the interval, the epochs kept and the verdict of the first headline in every
    seed."""
    rows = results[results["set"] == name]
    spec = domain_spec(rows["domain"].iloc[0])
    shown = []
    for (share, model), group in rows.groupby(["share", "model"], sort=False):
        line = {"share": f"{share:.0%}", "training rows": f"{group['train_rows'].iloc[0]:,}", "model": model}
        for metric in spec.headlines:
            line[metric] = f"{group[metric].mean():.4f}"
            line[f"{metric} vs {spec.floor} [{LEVEL:.0%}]"] = "; ".join(
                f"{signed(r[f'{metric}_diff'])} [{signed(r[f'{metric}_low'])}, {signed(r[f'{metric}_high'])}]"
                for r in group.to_dict(orient="records")) if f"{metric}_diff" in group and group[
                    f"{metric}_diff"].notna().all() else "—"
        epochs = [e for e in group["kept_epochs"] if e is not None and np.isfinite(e)]
        line["kept epochs"] = ", ".join(f"{e:.0f}" for e in epochs) or "—"
        first = next(iter(spec.headlines))
        line["verdict"] = "floor" if model == spec.floor else "; ".join(
            standing(lo, hi) for lo, hi in zip(group[f"{first}_low"], group[f"{first}_high"]))
        shown.append(line)
    return pd.DataFrame(shown)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--domains", default="conversion,voucher,value,incentive")
    p.add_argument("--sets", default=None, help=f"comma-separated, of {', '.join(SETS)} (default: every set of "
                                                "--domains)")
    p.add_argument("--models", default=None, help="models in place of each set's own (the floor is added)")
    p.add_argument("--sizes", default=None, help="shares of each set's training rows (default 0.1,0.3,1)")
    p.add_argument("--seeds", default="0")
    p.add_argument("--train", default="{}", help="JSON: training settings over each domain's defaults")
    p.add_argument("--params", default="{}", help="JSON: model name → parameters over its defaults")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--world-scale", type=float, default=None, help="the synthetic worlds' rows (impressions, "
                                                                   "sessions, customers, users) times this")
    p.add_argument("--quick", action="store_true", help="worlds a quarter the size, shares 0.3 and 1 (unless "
                                                         "--sizes, --world-scale), at most 200 resamples")
    p.add_argument("--out", type=Path, default=Path("promokit-runs/learning_curves.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.resamples = min(args.resamples, 200)
    sizes = args.sizes or ("0.3,1" if args.quick else "0.1,0.3,1")
    args.world_scale = args.world_scale or (0.25 if args.quick else 1.0)
    args.sizes = [float(s) for s in sizes.split(",")]
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.train, args.params = json.loads(args.train), json.loads(args.params)
    domains = args.domains.split(",")
    args.sets = args.sets.split(",") if args.sets else [s for s, (d, *_) in SETS.items() if d in domains]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*imputed with the training mean.*")
    load = [os.getloadavg()[0]]
    started = time.perf_counter()
    results = pd.DataFrame([row for name in args.sets for row in run_set(name, args)])
    load.append(os.getloadavg()[0])
    for name in args.sets:
        print(f"\n{name}\n" + markdown_table(curve_table(results, name)))
    minutes = (time.perf_counter() - started) / 60
    print(f"\n{minutes:.1f} min, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {key: getattr(args, key) for key in ("sets", "sizes", "seeds", "train", "params", "resamples",
                                                     "quick", "world_scale")}
    args.out.write_text(json.dumps({**settings, "minutes": minutes, "load_average": load,
                                    "results": results.to_dict(orient="records")}, indent=1, default=float))
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

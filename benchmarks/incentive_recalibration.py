"""What recalibrating an incentive model on a later experiment does to a budget plan when the base rate moved.

Each model is trained on the synthetic incentive world (``promokit incentive synth``: 20,000 customers, 2,000
merchants, values 20 … 200 cents) with its defaults. A later period has the same customers and graph and a hazard
``k`` times the training period's at every value (f' = 1 − (1 − f)^k: k = 1 stationary, 2 the customers respond
more, 0.5 less). In it, a random half of the customers is an experiment (each offered a value drawn at random,
redeeming by f'): the model is recalibrated on it (:meth:`IncentiveModel.recalibrate`: ``isotonic``, ``platt``,
``prior-shift``; ``none`` is the raw curve) — mean predicted at the offered value against the observed rate, AUC_c —
and the other half is allocated: the plan of ``allocate budget``'s absolute form (the expected spend Σ r·f, paid on
redemption, within the budget: ``--budget-share`` of the true spend of offering 80 cents to every one of them), the
values chosen by the model's curves. Reported: the redemptions the plan expects, the true expected redemptions of the
values it chose (by f'), their ratio, the true spend against the budget, and the curve error (mean |f − f'| over the
allocated customers and every value).

Usage::

    .venv/bin/python benchmarks/incentive_recalibration.py --models lr,gnn-hazard
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import replace

import numpy as np
import torch

from promokit.allocation.budget import absolute_form, solve_budget
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.defaults import DEFAULT_TRAIN
from promokit.incentive.estimator import IncentiveModel
from promokit.metrics import auc
from promokit.training.recalibration import METHODS

#: The value whose true spend, offered to every allocated customer, the budget is a share of (cents).
REFERENCE_VALUE = 80.0


def later_period(world, k: float, seed: int):
    """The later period's true curves, its experiment's customers table (half of them labelled) and the rows of the
    other half, allocated."""
    rng = np.random.default_rng(seed)
    truth = 1.0 - (1.0 - world.customer_truth) ** k
    n = len(truth)
    experiment = rng.random(n) < 0.5
    offered = rng.integers(0, len(world.levels), n)
    redeemed = (rng.random(n) < truth[np.arange(n), offered]).astype(np.float64)
    customers = world.customers.assign(level=np.where(experiment, world.levels[offered], np.nan),
                                       redeemed=np.where(experiment, redeemed, np.nan))
    return truth, check_tables(customers, world.merchants, world.edges), np.flatnonzero(~experiment)


def row(model: IncentiveModel, tables, allocated: np.ndarray, truth: np.ndarray, levels: np.ndarray,
        budget: float) -> dict:
    curves = model.responses(tables).customers
    rows = tables.labelled_customers
    at = curves[rows, tables.customer_level[rows]]
    y = tables.redeemed[rows]
    f, true = curves[allocated], truth[allocated]
    choice = solve_budget(*absolute_form(f, levels, budget)).choice
    picked = np.arange(len(allocated)), choice
    expected, realised = f[picked].sum(), true[picked].sum()
    return {"mean_p": at.mean(), "observed": y.mean(), "auc": auc(y, at), "expected": expected, "true": realised,
            "ratio": realised / expected, "spend": (levels[choice] * true[picked]).sum() / budget,
            "curve_mae": np.abs(f - true).mean()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="lr,gnn-hazard")
    p.add_argument("--shifts", default="1,2,0.5", help="Comma-separated k: the later hazard is k times the first.")
    p.add_argument("--customers", type=int, default=20_000)
    p.add_argument("--budget-share", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the calibration warnings of the raw curves are what the table shows
    started = time.perf_counter()
    world = make_world(args.customers, args.customers // 10, seed=args.seed)
    tables = check_tables(world.customers, world.merchants, world.edges)
    levels = world.levels
    reference = int(np.flatnonzero(levels == REFERENCE_VALUE)[0])
    print(f"{'model':>10} {'k':>4} {'method':>11} {'mean p':>7} {'obs':>7} {'AUC_c':>7} {'expected':>9} {'true':>9} "
          f"{'true/exp':>8} {'spend/B':>8} {'curve':>7}")
    for name in (m.strip() for m in args.models.split(",")):
        fit_started = time.perf_counter()
        model = IncentiveModel(name, train=replace(DEFAULT_TRAIN, progress=False, seed=args.seed)).fit(tables)
        fitted = time.perf_counter() - fit_started
        for k in (float(s) for s in args.shifts.split(",")):
            truth, later, allocated = later_period(world, k, args.seed + 1)
            budget = args.budget_share * float((levels[reference] * truth[allocated, reference]).sum())
            for method in ("none", *METHODS):
                model.recalibration_ = None
                if method != "none":
                    model.recalibrate(later, method=method)
                r = row(model, later, allocated, truth, levels, budget)
                print(f"{name:>10} {k:4g} {method:>11} {r['mean_p']:7.4f} {r['observed']:7.4f} {r['auc']:7.4f} "
                      f"{r['expected']:9,.0f} {r['true']:9,.0f} {r['ratio']:8.2f} {r['spend']:8.2f} "
                      f"{r['curve_mae']:7.4f}", flush=True)
        print(f"  ({name}: fit {fitted:.0f} s)", flush=True)
    print(f"\ntotal {(time.perf_counter() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

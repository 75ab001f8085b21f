"""CDNOW as a zero-inflated spend check: the value domain's floor (hurdle: boosted P(spend) × boosted log spend),
the same network with the ESJ (ESDPM-NCG), ZILN (MTL-ZILN) and MSE (MTL-MSE) heads, and a spend-rate heuristic,
predicting each customer's holdout spend from the calibration window.

Setup (``promokit.value.cdnow``): calibration to 1997-09-30, holdout to 1998-06-30 (70 % of customers spend
nothing in it); customers split at random 60 / 20 / 20 (train / validation / test) per seed, by the models' own
``split="random"``. Reported on the test
customers: AUC of "spends at all" and its RelaImpr against the floor's, MAE in dollars, MSE and MAE in mean
purchases (the value domain's scale), normalised Gini, the share of customers off by an order of magnitude
(|log10((1 + pred) / (1 + spend))| ≥ 1), the mean prediction against the mean spend, each model minus the floor per
seed, and the decile calibration of the first seed. The heuristic ("rate") predicts the calibration spend per day
times the holdout's days.

Usage::

    .venv/bin/python benchmarks/value_cdnow.py                 # 3 seeds, about 10 minutes on one core
    .venv/bin/python benchmarks/value_cdnow.py --seeds 0 --epochs 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

from promokit.metrics import auc, normalized_gini, order_of_magnitude_share, rela_impr
from promokit.metrics.compare import half_interval
from promokit.training import TrainConfig
from promokit.value.cdnow import CALIBRATION_END, HOLDOUT_END, cdnow_tables, read_cdnow
from promokit.value.estimator import DEFAULT_TRAIN, ValueModel, delivery_split
from promokit.value.evaluate import amount_scale, calibration

FLOOR = "floor (hurdle)"
HEADS = {FLOOR: "hurdle", "ESJ (esdpm-ncg)": "esdpm-ncg", "ZILN (mtl-ziln)": "mtl-ziln", "MSE (mtl-mse)": "mtl-mse"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="../shared/data/cdnow")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=DEFAULT_TRAIN.epochs)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    tables = cdnow_tables(read_cdnow(args.data))
    spend = tables.amount
    holdout_days = (pd.Timestamp(HOLDOUT_END) - pd.Timestamp(CALIBRATION_END)).days
    users = tables.users
    rate = np.expm1(users["log_total_spend"].to_numpy()) / users["days_since_first"].to_numpy() * holdout_days
    print(f"{len(users):,} customers; {tables.convert.mean():.1%} spend in the holdout; mean holdout spend of those "
          f"${spend[tables.convert > 0].mean():.2f}", flush=True)
    rows, deciles = [], {}
    for seed in (int(s) for s in args.seeds.split(",")):
        config = TrainConfig(**{**DEFAULT_TRAIN.to_dict(), "epochs": args.epochs, "seed": seed, "progress": False})
        test = delivery_split(tables, 0.2, 0.25, "random", seed)[2]  # what each model's fit holds out
        predictions = {"rate heuristic": (rate[test], rate[test])}
        for name, model_name in HEADS.items():
            started = time.perf_counter()
            model = ValueModel(model_name, {}, config, split="random", test_fraction=0.2).fit(tables, validation=0.25)
            out = model.predict(tables, rows=test)
            predictions[name] = (out["p_ctcvr"].to_numpy(), out["etv"].to_numpy())
            history = model.history_
            print(f"  seed {seed} {name}: {time.perf_counter() - started:.0f} s, {len(history.epochs)} {history.unit}s",
                  flush=True)
        for name, (score, etv) in predictions.items():
            y = spend[test]
            error = (etv - y) / amount_scale(tables.convert[test], y)
            rows.append({"model": name, "seed": seed, "auc": auc(tables.convert[test], score),
                         "mae_dollars": float(np.mean(np.abs(etv - y))), "mse": float(np.mean(error ** 2)),
                         "mae": float(np.mean(np.abs(error))),
                         "gini": normalized_gini(y, etv), "off_by_10x": order_of_magnitude_share(y, etv),
                         "mean_predicted": float(etv.mean()), "mean_spend": float(y.mean())})
            if seed == int(args.seeds.split(",")[0]):
                deciles[name] = calibration(y, etv)
    frame = pd.DataFrame(rows)
    print("\nTest customers, mean ± std over seeds")
    summary = frame.groupby("model", sort=False).agg(["mean", "std"])
    print(summary.drop(columns="seed").round(4).to_string())
    floor_auc = frame[frame.model == FLOOR].auc.mean()
    print("\nRelaImpr of the mean AUC against the floor's: " + "; ".join(
        f"{name} {rela_impr(group.auc.mean(), floor_auc):+.2f} %"
        for name, group in frame.groupby("model", sort=False)))
    by = frame.set_index(["model", "seed"])
    for base in (FLOOR, "ESJ (esdpm-ncg)"):
        print(f"\nEach model minus {base}, per seed (Gini: higher is better; MAE, off by 10×: lower), 95 % t-interval")
        for other in [m for m in by.index.get_level_values(0).unique() if m != base]:
            columns = ["gini", "mae_dollars", "off_by_10x"]
            diff = by.loc[other][columns] - by.loc[base][columns]
            print(f"  {other}: " + "; ".join(f"{c} {diff[c].mean():+.4f} ± {half_interval(diff[c]):.4f} "
                                           f"({', '.join(f'{v:+.4f}' for v in diff[c])})" for c in diff.columns))
    for name, table in deciles.items():
        print(f"\nDeciles, {name}")
        print(table.round(2).to_string(index=False))


if __name__ == "__main__":
    main()

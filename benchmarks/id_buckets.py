"""Where the deep models lose to the linear floor, and why: learning curves by training size and test AUC by
how often the test row's id was seen in training.

Parts (``--part``, default all):

- ``kuairand``: KuaiRand-Pure (purchase = ``--purchase``), trained on a random share of the impressions of
  04-25…04-28 (the same share for every model), early-stopped on 04-29, tested on 04-30: LR against ESMM and
  ESM² with their defaults;
- ``synthetic``: the conversion synthetic world at growing sizes (80/10/10 random split), same models;
- ``buckets``: on the KuaiRand test day, CVR AUC (clicked rows) and CTCVR AUC of LR and ESM² by how many
  training impressions the row's user had (0 = a user never seen in training), seed-averaged scores;
- ``amexpert``: AmExpert 2019, a random share of the training sessions (time split by campaign start),
  LR against DIN and DMBGN with their bench settings, test AUC and GAUC by campaign.

Usage::

    .venv/bin/python benchmarks/id_buckets.py --part buckets --seeds 0,1,2
    .venv/bin/python benchmarks/id_buckets.py --part synthetic --sizes 30000,100000,300000,1000000

Each domain's floor against its paper models by training share, with paired bootstrap intervals, is
``learning_curves.py``.

KuaiRand (Gao et al., CIKM 2022) is CC BY-SA 4.0 and AmExpert 2019 is competition data: the script reads
local copies and writes only metrics.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.conversion.estimator import ConversionModel
from promokit.conversion.kuairand import DACTION_BEHAVIOURS, kuairand_spec, load_kuairand
from promokit.data import FeatureSpec, random_split
from promokit.experiments.conversion import bench
from promokit.experiments.conversion.world import make_world
from promokit.metrics import auc

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared" / "data").resolve()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=("all", "kuairand", "synthetic", "buckets", "amexpert"), default="all")
    p.add_argument("--purchase", default="is_like", help="KuaiRand log column that is the conversion")
    p.add_argument("--models", default="lr,esmm,esm2", help="conversion models of the kuairand / synthetic parts")
    p.add_argument("--voucher-models", default="lr,din,dmbgn", help="voucher models of the amexpert part")
    p.add_argument("--shares", default="0.25,0.5,1.0", help="shares of the training rows / sessions")
    p.add_argument("--sizes", default="30000,100000,300000,1000000", help="synthetic world sizes (impressions)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, default=None, help="folder for report.md / report.json")
    return p.parse_args(argv)


def kuairand_days(purchase: str) -> tuple[pd.DataFrame, FeatureSpec, bench.Split]:
    daction = tuple(b for b in DACTION_BEHAVIOURS if b != purchase)
    table, _ = load_kuairand(SHARED / "kuairand_pure", daction=daction, purchase=purchase)
    date = table["date"]
    split = bench.Split(table[date <= 20220428], table[date == 20220429], table[date == 20220430])
    return table, kuairand_spec(table), split


def fit_conversion(name: str, split: bench.Split, spec: FeatureSpec, seed: int) -> ConversionModel:
    from dataclasses import replace

    from promokit.conversion.estimator import DEFAULT_TRAIN

    model = ConversionModel(name, None, replace(DEFAULT_TRAIN, seed=seed, progress=False), spec, test_fraction=0)
    return model.fit(split.train, validation=split.valid)


def conversion_curve(splits: dict[str, bench.Split], spec: FeatureSpec, models: list[str], seeds: list[int],
                     label: str) -> pd.DataFrame:
    """Test CVR and CTCVR AUC, mean over seeds, of every model on every training set of ``splits``."""
    rows = []
    for size, split in splits.items():
        for name in models:
            for seed in seeds if name != "lr" else seeds[:1]:  # LR is solved: the seed changes nothing
                started = time.perf_counter()
                metrics = fit_conversion(name, split, spec, seed).evaluate(split.test)
                rows.append({label: size, "train_rows": len(split.train), "model": name, "seed": seed,
                             "cvr_auc": metrics["cvr_auc"], "ctcvr_auc": metrics["ctcvr_auc"],
                             "ctr_auc": metrics["ctr_auc"], "seconds": time.perf_counter() - started})
                r = rows[-1]
                print(f"  {label} {size} {name:>5} seed {seed}: CVR AUC {r['cvr_auc']:.4f} CTCVR AUC "
                      f"{r['ctcvr_auc']:.4f} CTR AUC {r['ctr_auc']:.4f} ({r['seconds']:.0f} s)", flush=True)
    frame = pd.DataFrame(rows)
    return frame.groupby([label, "train_rows", "model"], sort=False)[["cvr_auc", "ctcvr_auc", "ctr_auc"]].mean()


def kuairand_part(args, seeds) -> pd.DataFrame:
    table, spec, split = kuairand_days(args.purchase)
    rng = np.random.default_rng(0)
    splits = {}
    for share in (float(s) for s in args.shares.split(",")):
        keep = np.sort(rng.permutation(len(split.train))[: int(round(share * len(split.train)))])
        splits[share] = bench.Split(split.train.iloc[keep], split.valid, split.test)
    return conversion_curve(splits, spec, args.models.split(","), seeds, "share")


def synthetic_part(args, seeds) -> pd.DataFrame:
    splits, spec = {}, None
    for size in (int(s) for s in args.sizes.split(",")):
        world = make_world(n_impressions=size, seed=0)
        parts = random_split(size, (0.8, 0.1, 0.1), 0)
        splits[size] = bench.Split(*(world.table.iloc[p] for p in parts))
        spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id")
    return conversion_curve(splits, spec, args.models.split(","), seeds, "impressions")


def buckets_part(args, seeds) -> pd.DataFrame:
    """CVR / CTCVR AUC of LR and ESM² on the test day by the user's training impressions."""
    table, spec, split = kuairand_days(args.purchase)
    counts = split.train["user_id"].value_counts()
    seen = split.test["user_id"].map(counts).fillna(0).to_numpy()
    edges = [(0, 0, "unseen"), (1, 4, "1–4"), (5, 19, "5–19"), (20, np.inf, "≥ 20")]
    scores = {}
    for name in ("lr", "esm2"):
        runs = [fit_conversion(name, split, spec, seed).predict(split.test) for seed in (seeds if name != "lr" else seeds[:1])]
        scores[name] = {k: np.mean([r[k].to_numpy() for r in runs], axis=0) for k in ("p_cvr", "p_ctcvr")}
    click = split.test["click"].to_numpy() == 1
    y = split.test["purchase"].to_numpy()
    rows = []
    for low, high, bucket in edges:
        rows_in = (seen >= low) & (seen <= high)
        row = {"user seen in training": bucket, "test impressions": int(rows_in.sum()),
               "clicks": int((rows_in & click).sum()), "purchases": int(y[rows_in].sum())}
        for name, p in scores.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row[f"{name} cvr_auc"] = auc(y[rows_in & click], p["p_cvr"][rows_in & click])
                row[f"{name} ctcvr_auc"] = auc(y[rows_in], p["p_ctcvr"][rows_in])
        rows.append(row)
        print("  " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
              flush=True)
    return pd.DataFrame(rows).set_index("user seen in training")


def amexpert_part(args, seeds) -> pd.DataFrame:
    from dataclasses import replace

    from promokit.experiments.voucher.demo import DEMO_TRAIN, time_split
    from promokit.voucher.amexpert import load_amexpert
    from promokit.voucher.estimator import VoucherModel

    tables, _ = load_amexpert(SHARED / "amexpert2019")
    split = time_split(tables)
    rng = np.random.default_rng(0)
    rows = []
    for share in (float(s) for s in args.shares.split(",")):
        train = np.sort(rng.permutation(split.train)[: int(round(share * len(split.train)))])
        for name in args.voucher_models.split(","):
            for seed in seeds if name != "lr" else seeds[:1]:
                model = VoucherModel(name, None, replace(DEMO_TRAIN, seed=seed, progress=False), test_fraction=0)
                model.fit(tables, rows=train, validation=split.valid)
                metrics = model.evaluate(tables, rows=split.test, group_by="campaign_id")
                rows.append({"share": share, "train_sessions": len(train), "model": name, "seed": seed,
                             "auc": metrics["auc"], "gauc": metrics["gauc"]})
                print(f"  share {share} {name:>6} seed {seed}: AUC {metrics['auc']:.4f} GAUC {metrics['gauc']:.4f}",
                      flush=True)
    return pd.DataFrame(rows).groupby(["share", "train_sessions", "model"], sort=False)[["auc", "gauc"]].mean()


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*imputed with the training mean.*")
    seeds = [int(s) for s in args.seeds.split(",")]
    parts = {"kuairand": kuairand_part, "synthetic": synthetic_part, "buckets": buckets_part,
             "amexpert": amexpert_part}
    chosen = list(parts) if args.part == "all" else [args.part]
    tables = {}
    for name in chosen:
        print(f"\n== {name}", flush=True)
        tables[name] = parts[name](args, seeds)
        print(tables[name].round(4).to_string())
    if args.out is not None:
        from promokit.report import Report

        report = Report("Learning curves and id-frequency buckets: the deep models against the linear floor",
                        data={name: t.reset_index().to_dict(orient="records") for name, t in tables.items()})
        for name, table in tables.items():
            report.add(name, table.reset_index())
        report.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

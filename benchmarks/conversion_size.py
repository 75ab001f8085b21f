"""Do the conversion defaults follow the data's size? The models against the floor on a synthetic world of
``--impressions`` rows (1 M by default: 800 k training rows, fourteen times KuaiRand-Pure's 58 k), with
each ``--variants`` setting, scored against the world's true probabilities.

A variant is ``label=json`` of parameters for every neural model (training fields such as ``embedding_decay``
among them), e.g. ``--variants 'decay 10={"embedding_decay": 10}' 'offset={"wide": "offset"}'``; ``default``
(the defaults as shipped) is always run. The floor ``lr`` and the oracle are printed first.

Usage::

    .venv/bin/python benchmarks/conversion_size.py --models esmm,gmcm --micro 10 --seeds 0
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import pandas as pd
import torch

from promokit.experiments.conversion import bench
from promokit.experiments.conversion.demo import world_split
from promokit.experiments.conversion.world import make_world


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impressions", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=20_000)
    p.add_argument("--items", type=int, default=8_000)
    p.add_argument("--micro", type=int, default=10, help="micro-behaviour labels (for gmcm)")
    p.add_argument("--models", default="esmm,gmcm")
    p.add_argument("--seeds", default="0")
    p.add_argument("--variants", nargs="*", default=[])
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    world = make_world(n_users=args.users, n_items=args.items, n_impressions=args.impressions, seed=0,
                       n_micro=args.micro)
    split, truth, spec = world_split(world)
    spec = replace(spec, micro_behaviors=world.micro_behaviors)
    print(f"world: {args.impressions:,} impressions ({len(split.train):,} training rows), {args.users:,} users, "
          f"{args.items:,} items, {args.micro} micro-behaviours")
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = {"default": {}, **{v.split("=", 1)[0]: json.loads(v.split("=", 1)[1]) for v in args.variants}}
    columns = ["model", "seed", "ctr_auc", "cvr_auc", "ctcvr_auc", "cvr_auc_truth", "ctcvr_auc_truth", "fit_seconds"]

    def show(row):
        print("  " + "  ".join(f"{k} {row[k]:.4f}" if isinstance(row[k], float) else f"{row[k]}" for k in columns),
              flush=True)

    rows = [bench.run(split, ["lr"], seeds[:1], spec, truth=truth, on_result=show)]
    models = [m.strip() for m in args.models.split(",")]
    for label, params in variants.items():
        result = bench.run(split, models, seeds, spec, {m: params for m in models}, truth=truth,
                           on_result=lambda row, label=label: show({**row, "model": f"{row['model']} {label}"}))
        rows.append(result.assign(model=result["model"] + " " + label))
    results = pd.concat(rows, ignore_index=True)
    oracle = bench.oracle_row(split.test, truth, spec)
    print("\n" + bench.with_oracle(bench.summarise(results, "lr", (*bench.HEADLINE, *bench.TRUTH_AUCS)),
                                   oracle).to_string())
    print(f"\ntotal {(time.perf_counter() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

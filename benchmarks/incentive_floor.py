"""Why does the linear floor match or beat GNN-hazard in `promokit incentive demo`? The demo's world (10,000
customers, 1,000 merchants) over several seeds, with the demo's training (8 epochs) and the estimator's default (30
epochs, patience 3), scored on the held-out customers and by the true redemptions each model's plan brings at the
same paced budget.

    .venv/bin/python benchmarks/incentive_floor.py --seeds 0,1,2 --out promokit-runs/incentive-floor

Prints one row per model × training, each figure the mean over seeds with its range, and the paired difference of
true redemptions against the floor; rows are kept in ``--out`` as they finish (rerun to continue).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from promokit.experiments.incentive.bench import FLOOR, run
from promokit.experiments.incentive.demo import DEMO_TRAIN
from promokit.incentive.defaults import DEFAULT_TRAIN
from promokit.training.threads import set_threads

WORLD = {"n_customers": 10_000, "n_merchants": 1_000}
TRAININGS = {"demo (8 epochs)": DEMO_TRAIN, "default (30 epochs)": replace(DEFAULT_TRAIN, progress=False)}


def one(models: list[str], seed: int, training: str, out: Path) -> pd.DataFrame:
    """The held-out metrics and paced redemptions of ``models`` on world ``seed`` (kept in ``out``)."""
    path = out / f"{training.split()[0]}-{seed}.json"
    if path.exists():
        return pd.DataFrame(json.loads(path.read_text()))
    result = run(models, [seed], WORLD, TRAININGS[training])
    sim = result.simulation
    paced = sim[(sim.budget == "paced") & (sim.population == "customers")].set_index("model")["redemptions"]
    rows = result.metrics[["model", "seed", "auc_c", "curve_mae_c", "epochs"]].copy()
    rows["redemptions"] = rows["model"].map(paced)
    rows["oracle_redemptions"] = paced.get("oracle")
    rows["training"] = training
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(rows.to_json(orient="records"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--models", default="lr,gnn-hazard,dnn-h")
    parser.add_argument("--out", type=Path, default=Path("promokit-runs/incentive-floor"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    set_threads(args.threads)
    models = args.models.split(",")
    rows = []
    for seed in map(int, args.seeds.split(",")):
        for training in TRAININGS:
            print(f"seed {seed}, {training} …", flush=True)
            rows.append(one(models, seed, training, args.out))
    table = pd.concat(rows)
    table = table[table.model != "oracle"]
    floor = table[table.model == FLOOR].set_index(["training", "seed"])["redemptions"]
    table["vs_floor"] = table["redemptions"].to_numpy() - floor.reindex(
        pd.MultiIndex.from_frame(table[["training", "seed"]])).to_numpy()
    table["share_of_oracle"] = table["redemptions"] / table["oracle_redemptions"]
    summary = table.groupby(["training", "model"], sort=False).agg(
        auc_c=("auc_c", "mean"), curve_mae_c=("curve_mae_c", "mean"), epochs=("epochs", "mean"),
        redemptions=("redemptions", "mean"), vs_floor=("vs_floor", "mean"), vs_floor_min=("vs_floor", "min"),
        vs_floor_max=("vs_floor", "max"), share_of_oracle=("share_of_oracle", "mean"))
    print(summary.round(4).to_string())


if __name__ == "__main__":
    main()

"""The incentive GNN trained from training records (:func:`promokit.incentive.record_training.fit_from_records`)
against the same model trained in memory (:meth:`IncentiveModel.fit`), on a synthetic world with known response
curves: the same split (the model's, by its seed), network, optimiser and epoch loop.

Per seed: the training customers' records (``--draws`` draws, cycled by epoch) and the validation customers' (one
draw) are written from the world as one part, then both models are scored on the held-out customers: AUC_c (f_c at
the offered value against the redemption) and curve MAE (f_c against the true curve at every value), with the
epochs run and the training seconds. The in-memory path samples with ``sample_neighbours`` (a fresh draw per
step), the records path reads the keyed draws written: the neighbourhoods differ, the network and loss do not.
With ``--workers``, the records path also trains data-parallel on that many Ray Train workers (DDP over gloo, one
CPU each, the same global batch); ``samples/s`` is the mean over epochs of the training records per second of the
epoch loop (every worker's together), ``seconds`` the whole fit (with Ray Train's start for the Ray rows).

Usage::

    .venv/bin/python benchmarks/records_training.py                       # 20,000 customers, seeds 0 1 2
    .venv/bin/python benchmarks/records_training.py --customers 5000 --seeds 0
    .venv/bin/python benchmarks/records_training.py --workers 1 2     # also on Ray Train, 1 and 2 workers
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.incentive.record_training import fit_from_records
from promokit.incentive.records import RecordSpec, write_records
from promokit.metrics import auc
from promokit.scale.executor import LocalExecutor, RayExecutor
from promokit.training import TrainConfig

PARAMS = {"width": 32, "hidden": [64, 32], "fanouts": [5, 10]}


def write_split_records(model: IncentiveModel, world, root: Path, draws: tuple[int, ...]) -> tuple[Path, Path]:
    """The records of the training and of the validation customers of ``model.split`` (other customers' labels
    removed: they pass messages only), drawn with the model's fanouts and seed, in ``root/train`` and
    ``root/valid``."""
    split = model.split(check_tables(world.customers, world.merchants, world.edges))
    for name in ("merchants", "edges"):
        (root / name).mkdir(parents=True)
        getattr(world, name).to_parquet(root / name / "part-00000.parquet", index=False)
    for name, rows, kept in (("train", split.train_customers, draws), ("valid", split.valid_customers, (0,))):
        customers = world.customers.copy()
        customers.loc[~np.isin(np.arange(len(customers)), rows), ["level", "redeemed"]] = np.nan
        (root / f"{name}_customers").mkdir()
        customers.to_parquet(root / f"{name}_customers" / "part-00000.parquet", index=False)
        spec = RecordSpec(tuple(model.levels), model.customer_spec, model.merchant_spec,
                          tuple(model.model_params["fanouts"]), seed=model.train_config.seed, draws=kept)
        write_records(root / f"{name}_customers", root / "merchants", root / "edges", root / name, model.encoders,
                      spec, LocalExecutor())
    return root / "train", root / "valid"


def scores(model: IncentiveModel, tables, truth: np.ndarray, rows: np.ndarray) -> dict:
    f_c = model.responses(tables).customers[rows]
    epochs = model.history.epochs
    return {"auc_c": auc(tables.redeemed[rows], f_c[np.arange(len(rows)), tables.customer_level[rows]]),
            "curve_mae": float(np.abs(f_c - truth[rows]).mean()), "epochs": len(epochs),
            "samples/s": float(np.mean([e["samples_per_second"] for e in epochs]))}


def run(customers: int, seed: int, epochs: int, draws: int, workers: list[int]) -> list[dict]:
    world = make_world(customers, customers // 10, seed=seed)
    tables = check_tables(world.customers, world.merchants, world.edges)
    train = TrainConfig(epochs=epochs, batch_size=512, lr=1e-3, lr_decay=0.95, patience=3,
                        monitor="customer_loglik", progress=False, seed=seed)
    rows = []
    started = time.perf_counter()
    in_memory = IncentiveModel("gnn-hazard", PARAMS, train).fit(tables)
    test = in_memory.split(tables).test_customers
    rows.append({"seed": seed, "path": "in memory", **scores(in_memory, tables, world.customer_truth, test),
                 "seconds": time.perf_counter() - started})
    model = IncentiveModel("gnn-hazard", PARAMS, train)
    model.prepare(tables)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        records, valid = write_split_records(model, world, Path(tmp), tuple(range(draws)))
        written = time.perf_counter() - started
        for n in [0, *workers]:  # 0: in this process
            model = IncentiveModel("gnn-hazard", PARAMS, train)
            model.prepare(tables)
            started = time.perf_counter()
            fit_from_records(model, records, valid, executor=RayExecutor(workers=n) if n else None)
            rows.append({"seed": seed, "path": f"records ×{draws}" + (f", ray {n}" if n else ""),
                         **scores(model, tables, world.customer_truth, test),
                         "seconds": time.perf_counter() - started, "records_seconds": written})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--draws", type=int, default=3, help="draws written for the training customers")
    parser.add_argument("--workers", type=int, nargs="*", default=[], help="Ray Train workers to train with too")
    args = parser.parse_args()
    if args.workers:
        import ray

        ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False)
    print(f"uptime: {os.getloadavg()[0]:.2f} (load average, 1 min)")
    table = pd.DataFrame([row for seed in args.seeds
                          for row in run(args.customers, seed, args.epochs, args.draws, args.workers)])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    summary = table.groupby("path", sort=False)[["auc_c", "curve_mae", "epochs", "samples/s", "seconds"]]
    print(summary.agg(["mean", "std"]).to_string(float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()

"""ESDPM (the consumption graph read, EOCA §4.1.2) trained on one folder against over parts from records:

- one folder: ``ValueModel.fit`` (``sample_neighbours`` draws every batch's neighbourhoods from the whole graph);
- over parts: ``promokit.value.parts.train_parts`` on the local executor (one worker) and on Ray Train with 1 and 2
  DDP workers: the records pass (each user's sampled neighbourhood, the encoder's fanouts, one draw) then training
  with each delivery's e_c computed on its user's record.

A synthetic value world (``promokit.experiments.value.world``) written as a dataset in parts and as the one folder it
means; every path holds out the same deliveries (the latest 10 % by time), trains with the training seeds given and
is scored there by the value domain's metrics (AUC of pCTCVR, normalised Gini of the ETV). "samples/s": training
deliveries × epochs over the training seconds (for parts: the wall time less the records pass).

Usage::

    .venv/bin/python benchmarks/value_graph_parts.py                  # 3,000 users, seeds 0 1 2: ~24 min, 2 busy cores
    .venv/bin/python benchmarks/value_graph_parts.py --quick          # 1,500 users, one seed, no Ray
    .venv/bin/python benchmarks/value_graph_parts.py --model esdpm-ncg --paths one,local   # the control
    python benchmarks/value_graph_parts.py --quick --device cuda      # on a GPU machine
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from promokit.experiments.value.world import make_world, write_world_folders
from promokit.scale.executor import make_executor
from promokit.training import TrainConfig
from promokit.value import graph_records
from promokit.value.contract import read_folder, table_paths
from promokit.value.estimator import ValueModel
from promokit.value.parts import train_parts

PARAMS = {"expert_hidden": [64], "expert_dim": 32, "tower_hidden": [16], "emb_dim": 8, "max_len": 20,
          "fanouts": [10, 10]}


def write_dataset(users: int, parts: int, root: Path):
    """The world in ``parts`` equal parts under ``root/parts`` and as one folder under ``root/whole``."""
    sizes = [users // parts + (k < users % parts) for k in range(parts)]
    write_world_folders(make_world(users, seed=0), root, sizes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=3000)
    p.add_argument("--parts", type=int, default=4)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--paths", default="one,local,ray1,ray2", help="comma-separated: one, local, ray1, ray2")
    p.add_argument("--model", default="esdpm", help="esdpm-ncg: the control without the graph")
    p.add_argument("--quick", action="store_true", help="1,500 users, seed 0, no Ray")
    p.add_argument("--device", default="auto", help="the TrainConfig device: auto, cpu, cuda, cuda:<n>")
    args = p.parse_args()
    if args.quick:
        args.users, args.seeds, args.paths = 1500, [0], "one,local"
    torch.set_num_threads(1)
    paths_run = args.paths.split(",")
    records_seconds = []
    write = graph_records.write_records

    def timed_write(*a, **k):
        started = time.perf_counter()
        try:
            return write(*a, **k)
        finally:
            records_seconds.append(time.perf_counter() - started)

    graph_records.write_records = timed_write  # train_parts imports it at call time
    executors = {}
    if "ray2" in paths_run:
        executors["ray2"] = make_executor("ray", workers=2)  # starts the local cluster with 2 CPUs
    if "ray1" in paths_run:
        executors["ray1"] = make_executor("ray", workers=1)
    executors["local"] = make_executor("local")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_dataset(args.users, args.parts, root)
        tables = read_folder(root / "whole")
        print(f"{args.users:,} users in {args.parts} parts, {len(tables.deliveries):,} deliveries, "
              f"{len(tables.consumption):,} payments, {tables.consumption['merchant_id'].nunique():,} merchants",
              flush=True)
        for seed in args.seeds:
            config = TrainConfig(epochs=args.epochs, batch_size=512, lr=3e-3, patience=args.epochs, progress=False,
                                 seed=seed, device=args.device)
            for path in paths_run:
                model = ValueModel(args.model, PARAMS, config)
                records_seconds.clear()
                started = time.perf_counter()
                if path == "one":
                    model.fit(tables)
                    trained = len(model.split_rows(tables)[0])
                else:
                    trained = train_parts(model, table_paths(root / "parts"), executors[path],
                                          root / f"scratch-{path}-{seed}" / "keys")["train"]
                wall = time.perf_counter() - started
                records = sum(records_seconds)
                test = model.held_out(tables)
                metrics = model.evaluate(tables, rows=test).metrics
                epochs = len(model.history_.epochs)
                rows.append({"seed": seed, "path": path, "auc": metrics["auc"], "gini": metrics["gini"],
                             "epochs": epochs, "wall": wall, "records": records,
                             "samples": trained * epochs / (wall - records)})
                print(f"seed {seed} {path:<5} auc {metrics['auc']:.4f} gini {metrics['gini']:.4f} "
                      f"wall {wall:6.1f} s records {records:5.1f} s samples/s {rows[-1]['samples']:7.0f}", flush=True)
    print("\n| seed | path | AUC | Gini | epochs | wall s | records s | samples/s |\n"
          "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['seed']} | {r['path']} | {r['auc']:.4f} | {r['gini']:.4f} | {r['epochs']} | {r['wall']:.1f} | "
              f"{r['records']:.1f} | {r['samples']:,.0f} |")
    for path in paths_run:
        mine = [r for r in rows if r["path"] == path]
        spread = (lambda key: statistics.stdev([r[key] for r in mine]) if len(mine) > 1 else float("nan"))
        print(f"| mean ± sd | {path} | {statistics.mean(r['auc'] for r in mine):.4f} ± {spread('auc'):.4f} | "
              f"{statistics.mean(r['gini'] for r in mine):.4f} ± {spread('gini'):.4f} | | "
              f"{statistics.mean(r['wall'] for r in mine):.1f} | {statistics.mean(r['records'] for r in mine):.1f} | "
              f"{statistics.mean(r['samples'] for r in mine):,.0f} |")


if __name__ == "__main__":
    main()

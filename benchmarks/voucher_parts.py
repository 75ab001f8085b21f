"""``voucher train`` over sessions and events in parts against one file: DMBGN and DNN on a synthetic voucher world.

A world of ``--users`` users and ``--sessions`` sessions (``promokit.experiments.voucher.world.make_world``, seed 0)
is written as single files and as ``--parts`` parts partitioned by user (part ``user_id % parts``; the events with
their sessions). Each model trains, for each seed of ``--seeds``, four ways:

- **one file**: :meth:`VoucherModel.fit` on the tables read into memory (the in-memory Trainer);
- **parts, local**: :func:`promokit.voucher.train_parts.train_parts` in this process (the local executor), streaming
  the parts: each epoch a part is read, validated, its graphs built and its sessions encoded;
- **parts, Ray × 1** and **× 2**: the same on Ray Train, DDP over gloo with 1 or 2 workers, on a local Ray cluster of
  2 CPUs started once (the global batch kept: half the rows per worker and step with 2).

Settings: the models' defaults but ``wide`` none (an ``offset`` wide term is solved on the whole table, which training
over parts falls back from), DMBGN with one epoch of UVG pre-training (eq. 6), batch 1,000, Adam lr 0.003, ``--epochs``
epochs keeping the epoch of the best validation AUC (the latest 10 % of the sessions held out for the test, the latest
10 % of the rest validating, cut by collection time over all the parts as in one file). Reported per run: the test AUC
(the held-out sessions of the one file, as ``voucher evaluate`` scores them), the validation AUC at the kept epoch, the
training samples per second (mean over epochs of the rows over the seconds of the optimisation steps; for the parts
that includes reading and encoding them each epoch; pre-training, validation, start-up and the counting maps are not
in it) and the wall seconds of the whole fit (those included); then the mean ± spread (half the range) over the seeds.

Usage::

    .venv/bin/python benchmarks/voucher_parts.py                               # 15,000 sessions in 4 parts, 3 seeds
    .venv/bin/python benchmarks/voucher_parts.py --quick                       # 1 seed, no Ray
    .venv/bin/python benchmarks/voucher_parts.py --models dnn --runs one,local --seeds 0
    python benchmarks/voucher_parts.py --quick --models dmbgn --device cuda    # on a GPU machine
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

RUNS = {"one": "one file", "local": "parts, local", "ray1": "parts, Ray × 1", "ray2": "parts, Ray × 2"}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def write_world(folder: Path, users: int, sessions: int, parts: int) -> dict:
    from promokit.experiments.voucher.world import make_world

    tables = make_world(n_users=users, n_vouchers=max(20, users // 25), n_items=max(200, users // 3),
                        n_sessions=sessions, seed=0).tables
    frames = {"sessions": tables.sessions, "events": tables.events.drop(columns=["session", "pre"])}
    for name, frame in frames.items():
        frame.to_parquet(folder / f"{name}.parquet", index=False)
    tables.items.to_parquet(folder / "items.parquet", index=False)
    part = (frames["sessions"]["user_id"].astype("int64") % parts).to_numpy()
    owner = dict(zip(frames["sessions"]["session_id"], part))
    for name, frame in frames.items():
        where = part if name == "sessions" else frame["session_id"].map(owner).to_numpy()
        (folder / name).mkdir()
        for k in range(parts):
            frame[where == k].to_parquet(folder / name / f"part-{k:05d}.parquet", index=False)
    return {"sessions": len(tables.sessions), "events": len(frames["events"])}


def run(model_name: str, how: str, seed: int, folder: Path, tables, epochs: int, device: str) -> dict:
    from promokit.scale.executor import LocalExecutor, make_executor
    from promokit.training import TrainConfig
    from promokit.voucher.estimator import VoucherModel
    from promokit.voucher.train_parts import train_parts

    params = {"wide": "none", **({"pretrain": 1} if model_name == "dmbgn" else {})}
    config = TrainConfig(epochs=epochs, batch_size=1000, lr=0.003, patience=epochs, monitor="auc", seed=seed,
                         progress=False, device=device)
    model = VoucherModel(model_name, params, config)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "one":
            model.fit(tables)
        else:
            executor = LocalExecutor() if how == "local" else make_executor("ray", workers=int(how[-1]))
            with tempfile.TemporaryDirectory() as scratch:
                train_parts(model, folder / "sessions", folder / "events", folder / "items.parquet", None, executor,
                            Path(scratch) / "keys", options={})
        wall = time.perf_counter() - start
        history = model.history_
        test = model.held_out(tables)
        auc = model.evaluate(tables, rows=test)["auc"]
    kept = history.epochs[history.best_epoch]
    return {"test": auc, "valid": kept.get("valid_auc", float("nan")), "n_test": len(test),
            "rate": float(np.mean([e["samples_per_second"] for e in history.epochs])), "wall": wall,
            "n_train": model.report_.n_train, "n_valid": model.report_.n_valid}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=15000)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--models", default="dmbgn,dnn")
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--quick", action="store_true", help="seed 0, no Ray runs")
    parser.add_argument("--device", default="auto", help="the TrainConfig device: auto, cpu, cuda, cuda:<n>")
    args = parser.parse_args()
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    runs = ["one", "local"] if args.quick else args.runs.split(",")

    import torch

    from promokit.voucher.contract import read_tables

    torch.set_num_threads(1)
    if any(r.startswith("ray") for r in runs):
        from promokit.scale.executor import make_executor

        make_executor("ray", workers=2)  # one local cluster of 2 CPUs for every Ray run
    print(f"start: {uptime()}")
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        sizes = write_world(folder, args.users, args.sessions, args.parts)
        tables = read_tables({name: folder / f"{name}.parquet" for name in ("sessions", "events", "items")},
                             require_labels=True)
        results = {}
        for model_name in args.models.split(","):
            for seed in seeds:
                for how in runs:
                    results[model_name, how, seed] = r = run(model_name, how, seed, folder, tables, args.epochs,
                                                             args.device)
                    print(f"  {model_name} {RUNS[how]} seed {seed}: test AUC {r['test']:.4f}, valid AUC "
                          f"{r['valid']:.4f}, {r['rate']:,.0f} samples/s, {r['wall']:.0f} s", flush=True)
    first = next(iter(results.values()))
    print(f"\n{sizes['sessions']:,} sessions ({first['n_train']:,} train, {first['n_valid']:,} validate, "
          f"{first['n_test']:,} test), {sizes['events']:,} events, {args.parts} parts; {args.epochs} epochs; "
          f"{time.perf_counter() - began:.0f} s in all\n")
    print("| model | run | " + " | ".join(f"test AUC seed {s}" for s in seeds)
          + " | test AUC mean ± spread | valid AUC mean | samples/s (training steps) | wall s (whole fit) |")
    print("| --- | --- | " + " | ".join("---:" for _ in seeds) + " | ---: | ---: | ---: | ---: |")
    for model_name in args.models.split(","):
        for how in runs:
            rows = [results[model_name, how, s] for s in seeds]
            test = np.array([r["test"] for r in rows])
            print(f"| {model_name} | {RUNS[how]} | " + " | ".join(f"{t:.4f}" for t in test)
                  + f" | {test.mean():.4f} ± {(test.max() - test.min()) / 2:.4f}"
                  + f" | {np.mean([r['valid'] for r in rows]):.4f} | {np.mean([r['rate'] for r in rows]):,.0f}"
                  + f" | {np.mean([r['wall'] for r in rows]):.0f} |")
    print(f"\nend: {uptime()}")


if __name__ == "__main__":
    main()

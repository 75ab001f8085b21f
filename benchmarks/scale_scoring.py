"""Partitioned batch scoring: ``conversion predict`` over Parquet parts, in this process and on Ray.

An ESM² is trained for one epoch on 200k synthetic impressions (``promokit.conversion.synthetic.make_world``),
then ``--rows`` impressions are generated straight into ``--parts`` Parquet parts (part k from seed k; never
one frame) and scored three ways through :func:`promokit.scale.batch.score_parts`, the function behind
``conversion predict --data DIR``:

- **local**: this process, one part after another (the model loaded once);
- **ray × 1**: a local Ray cluster of 2 CPUs, one actor (the model loaded once per actor);
- **ray × 2**: the same cluster, two actors.

Reported: wall seconds, rows/s, rows/s per worker, Ray's overhead per core (ray × 1 time / local time; target ≤
1.25) and the speed-up from 1 to 2 workers, with the largest absolute difference of any output against the local
run (target ≤ 1e-6) and the load average. Workers and driver share 2 cores, so ray × 2 competes with wrk-less
but real work of the driver (the progress loop) and Ray's own processes.

Usage::

    .venv/bin/python benchmarks/scale_scoring.py                       # 10⁷ rows in 40 parts
    .venv/bin/python benchmarks/scale_scoring.py --rows 1000000 --parts 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.conversion.estimator import ConversionModel
from promokit.conversion.synthetic import make_world
from promokit.scale.batch import score_parts
from promokit.scale.engine import LocalEngine, RayEngine
from promokit.scale.parts import list_parts
from promokit.training import TrainConfig


def train(folder: Path) -> Path:
    world = make_world(n_impressions=200_000, seed=0)
    model = ConversionModel("esm2", {"emb_dim": 8, "hidden": (64, 32), "dropout": 0.0},
                            TrainConfig(epochs=1, batch_size=2048, lr=0.01, progress=False))
    model.fit(world.table)
    model.save(folder / "esm2")
    return folder / "esm2"


def write_parts(folder: Path, rows: int, parts: int) -> Path:
    folder.mkdir(parents=True)
    sizes = np.full(parts, rows // parts)
    sizes[: rows % parts] += 1
    for k, size in enumerate(sizes):
        table = make_world(n_impressions=int(size), seed=1000 + k).table
        table.drop(columns=["click", "daction", "purchase"]).to_parquet(folder / f"part-{k:05d}.parquet", index=False)
    return folder


def run(engine, model: Path, source: Path, out: Path) -> float:
    started = time.perf_counter()
    scored = score_parts(engine, partial(ConversionModel.load, model), ConversionModel.predict_with_keys, source, out)
    assert sum(s.rows for s in scored) > 0
    return time.perf_counter() - started


def largest_difference(a: Path, b: Path) -> float:
    worst = 0.0
    for pa, pb in zip(list_parts(a), list_parts(b)):
        x, y = pd.read_parquet(pa), pd.read_parquet(pb)
        assert x[["user_id", "item_id"]].equals(y[["user_id", "item_id"]]), pa.name
        worst = max(worst, float(np.abs(x.filter(like="p_").to_numpy() - y.filter(like="p_").to_numpy()).max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--parts", type=int, default=40)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # one core per worker, the same in this process: a per-core comparison
    with tempfile.TemporaryDirectory(prefix="promokit-scale-") as tmp:
        tmp = Path(tmp)
        load_before = os.getloadavg()
        started = time.perf_counter()
        model = train(tmp)
        source = write_parts(tmp / "in", args.rows, args.parts)
        print(f"model trained and {args.rows:,} rows written in {args.parts} parts in "
              f"{time.perf_counter() - started:.0f} s")
        seconds = {"local": run(LocalEngine(), model, source, tmp / "local")}
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        for workers in (1, 2):
            seconds[f"ray × {workers}"] = run(RayEngine(workers=workers), model, source, tmp / f"ray{workers}")
        differences = {name: largest_difference(tmp / "local", tmp / f"ray{name[-1]}")
                       for name in seconds if name != "local"}
        ray.shutdown()
    print(f"\nconversion predict (ESM², emb 8, MLP 64-32) over {args.rows:,} rows in {args.parts} parts, 2 cores, "
          f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}\n")
    print("| engine | seconds | rows/s | rows/s per worker | max |Δ| vs local |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, s in seconds.items():
        workers = 1 if name == "local" else int(name[-1])
        diff = "—" if name == "local" else f"{differences[name]:.1e}"
        print(f"| {name} | {s:.1f} | {args.rows / s:,.0f} | {args.rows / s / workers:,.0f} | {diff} |")
    print(f"\nRay overhead per core (ray × 1 / local): {seconds['ray × 1'] / seconds['local']:.2f}×; "
          f"speed-up from 1 to 2 workers: {seconds['ray × 1'] / seconds['ray × 2']:.2f}×")


if __name__ == "__main__":
    main()

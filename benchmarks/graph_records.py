"""Generation of the incentive GNN's training records over a graph in parts (:mod:`promokit.incentive.records`,
AGL-style sampled neighbourhoods with features joined): time, size and peak resident memory.

``--customers`` customers (mean degree 4, all labelled) are generated straight into ``--parts`` parts with their
edges co-partitioned (part k a world of its own from seed 1000 + k, ids prefixed by the part, its edges reaching one
shared set of ``--customers`` / 10 merchants in 4 parts; never one frame), the encoders fitted on a 20,000-customer
world with the same columns. Then the records of every customer (the paper's fanouts 10, 25) are written twice:

- **per epoch**: one draw (``draws=(0,)``), the pass a trainer that resamples runs before every epoch;
- **fixed × 3**: three draws written once (``draws=(0, 1, 2)``), cycled by the trainer.

Reported per mode and executor: wall seconds, records/s, records size (MB and bytes per record), the part times
(mean and max of the growth map, one customer part each), and the peak RSS of the driver and of the process that
grew each part (the largest). ``--executor ray`` runs on a local Ray cluster with ``--workers`` CPUs.

Usage::

    .venv/bin/python benchmarks/graph_records.py                                  # 10⁵ customers in 10 parts
    .venv/bin/python benchmarks/graph_records.py --customers 1000000 --parts 100 --modes per-epoch
    .venv/bin/python benchmarks/graph_records.py --executor ray --workers 2
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from promokit.data.parts import part_name
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.inputs import InputEncoders
from promokit.incentive.records import RecordSpec, write_records
from promokit.scale.executor import make_executor

MODES = {"per-epoch": (0,), "fixed-x3": (0, 1, 2)}
MERCHANT_PARTS = 4


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_graph(folder: Path, customers: int, parts: int) -> None:
    merchants = max(1, customers // 10)
    for name in ("customers", "edges", "merchants"):
        (folder / name).mkdir(parents=True)
    for k, size in enumerate(np.diff(np.linspace(0, customers, parts + 1).astype(int))):
        world = make_world(int(size), merchants, seed=1000 + k)
        prefix = f"p{k:05d}-"
        world.customers.assign(customer_id=prefix + world.customers.customer_id).to_parquet(
            folder / "customers" / part_name(k), index=False)
        world.edges.assign(customer_id=prefix + world.edges.customer_id).to_parquet(
            folder / "edges" / part_name(k), index=False)
    table = make_world(merchants, merchants, seed=999).merchants
    for q, rows in enumerate(np.array_split(np.arange(merchants), MERCHANT_PARTS)):
        table.iloc[rows].to_parquet(folder / "merchants" / part_name(q), index=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--customers", type=int, default=100_000)
    p.add_argument("--parts", type=int, default=10)
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 25])
    p.add_argument("--scratch", type=Path, default=None, help="folder for the parts and records (default: a temp dir)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="graph-records-", dir=args.scratch))
    try:
        started = time.perf_counter()
        write_graph(root / "graph", args.customers, args.parts)
        print(f"graph: {args.customers:,} customers, {args.customers // 10:,} merchants in {args.parts} parts, "
              f"written in {time.perf_counter() - started:.1f} s (driver peak RSS {peak_mb():.0f} MB)", flush=True)
        sample = make_world(20_000, 2_000, seed=0)
        tables = check_tables(sample.customers, sample.merchants, sample.edges)
        encoders = InputEncoders.fit(tables)
        executor = make_executor(args.executor, workers=args.workers if args.executor == "ray" else None)
        header = (f"{'mode':<10} {'executor':<8} {'records':>10} {'seconds':>8} {'rec/s':>8} {'MB':>8} {'B/rec':>7} "
                  f"{'part s mean':>11} {'part s max':>10} {'driver MB':>9} {'worker MB':>9}")
        rows = []
        for mode in args.modes:
            spec = RecordSpec(tuple(tables.levels), tables.customer_spec, tables.merchant_spec, tuple(args.fanouts),
                              draws=MODES[mode])
            out = root / f"records-{mode}"
            started = time.perf_counter()
            summary = write_records(root / "graph" / "customers", root / "graph" / "merchants",
                                    root / "graph" / "edges", out, encoders, spec, executor)
            seconds = time.perf_counter() - started
            part_seconds = [part["seconds"] for part in summary["parts"]]
            rows.append(f"{mode:<10} {args.executor:<8} {summary['records']:>10,} {seconds:>8.1f} "
                        f"{summary['records'] / seconds:>8.0f} {summary['bytes'] / 2**20:>8.1f} "
                        f"{summary['bytes'] / max(summary['records'], 1):>7.0f} {np.mean(part_seconds):>11.2f} "
                        f"{max(part_seconds):>10.2f} {peak_mb():>9.0f} "
                        f"{max(part['peak_rss_mb'] for part in summary['parts']):>9.0f}")
            print(rows[-1], flush=True)
            shutil.rmtree(out)
        print()
        print(header)
        print("\n".join(rows))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

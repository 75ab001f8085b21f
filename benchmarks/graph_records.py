"""Generation of the incentive GNN's training records over a graph in parts (:mod:`promokit.incentive.records`,
AGL-style sampled neighbourhoods with features joined): time, size and peak resident memory.

``--customers`` customers (mean degree 4, all labelled) are generated straight into ``--parts`` parts with their
edges co-partitioned (part k a world of its own from seed 1000 + k, ids prefixed by the part, its edges reaching one
shared set of ``--customers`` / 10 merchants in 4 parts; never one frame), the encoders fitted on a 20,000-customer
world with the same columns. Then the records of every customer (the paper's fanouts 10, 25) are written twice:

- **per epoch**: one draw (``draws=(0,)``), the pass a trainer that resamples runs before every epoch;
- **fixed × 3**: three draws written once (``draws=(0, 1, 2)``), cycled by the trainer.

Reported per mode and executor: wall seconds, records/s, records size (MB and bytes per record), the seconds of
each step (sharding the graph, exporting the shards' inputs, growing the neighbourhoods), the part times (mean and
max of the growth map, one customer part each), and the peak RSS of the driver and of the process that grew each
part (the largest over the customer parts and merchant shards that grow records; the graph is written by another
process, so the driver's is the pass's own). The RSS counts the file pages a process has mapped in (the libraries,
the shard files while a gather reads one: page cache the kernel may drop) as well as its anonymous memory (the heap),
so both are reported apart (``RssAnon`` / ``RssFile``, :func:`~promokit.nn.graph_records.resident_mb`): the
driver's after each step, and the largest over the parts of each one's largest after a row group (``anon MB`` /
``file MB``; with the local executor the parts grow in the driver). ``--executor ray`` runs on a local Ray cluster
with ``--workers`` CPUs. ``--labelled`` keeps that share of the customers' labels (the rest pass messages only; the
paper's graph has 1.85·10⁶ labelled records among 99.73·10⁶ customers, 1.9 %); every merchant is labelled, so each
gets a merchant record too. ``--train-epochs E`` then trains ``gnn-hazard`` from the first mode's records in a fresh
process (one torch thread) and reports its records per second and its peak RSS, RssAnon and RssFile: the memory of a
training worker, which holds a row group or two of records and the network.

**Cost model** (``--train-rate``, the training records per second of one worker measured by
``benchmarks/records_training.py``): from the per-step rates of the first mode's run (graph items — customers,
merchants and edges — per core-second while sharding and exporting; seeds per core-second while growing), the
time of one epoch on the paper's graph (Table 1: 112.59·10⁶ vertices, 133.64·10⁶ edges, 1.85·10⁶ labelled
records) on N nodes of ``--cores`` cores: a records pass (what resampling pays each epoch, a fixed draw once) and
the training pass, assuming every step scales linearly with the cores (the maps are independent per part; DDP's
efficiency at 2 workers is what ``records_training.py`` measured, beyond 2 it is assumed, not measured).

Usage::

    .venv/bin/python benchmarks/graph_records.py                                  # 10⁵ customers in 10 parts
    .venv/bin/python benchmarks/graph_records.py --customers 1000000 --parts 100 --modes per-epoch
    .venv/bin/python benchmarks/graph_records.py --executor ray --workers 2
    .venv/bin/python benchmarks/graph_records.py --customers 10000000 --parts 100 --labelled 0.02 \
        --modes per-epoch --train-rate 700      # the issue's 10⁷ graph, with the paper's share of labels
"""

from __future__ import annotations

import argparse
import multiprocessing
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


def largest(parts: list[dict], key: str) -> float:
    """The largest ``key`` over the parts (NaN where unknown)."""
    return float(np.nanmax([part[key] for part in parts])) if parts else float("nan")


def train_from(records: Path, tables, fanouts: list[int], epochs: int, results) -> None:
    """Train ``gnn-hazard`` from ``records`` (prepared on ``tables``, whose encoders wrote them) in this process, a
    fresh one: its training records per second (mean over the epochs) and its peak RSS, RssAnon and RssFile, put on
    the queue ``results``."""
    import torch

    from promokit.incentive.estimator import IncentiveModel
    from promokit.incentive.record_training import fit_from_records
    from promokit.nn.graph_records import peak_rss_mb, resident_mb
    from promokit.training import TrainConfig

    torch.set_num_threads(1)
    model = IncentiveModel("gnn-hazard", {"fanouts": fanouts}, TrainConfig(epochs=epochs, progress=False))
    model.prepare(tables)
    fit_from_records(model, records)
    rate = float(np.mean([e["samples_per_second"] for e in model.history_.epochs]))
    results.put({"rate": rate, "peak_rss_mb": peak_rss_mb(), **resident_mb()})


def write_graph(folder: Path, customers: int, parts: int, labelled: float = 1.0) -> None:
    merchants = max(1, customers // 10)
    for name in ("customers", "edges", "merchants"):
        (folder / name).mkdir(parents=True)
    for k, size in enumerate(np.diff(np.linspace(0, customers, parts + 1).astype(int))):
        world = make_world(int(size), merchants, seed=1000 + k)
        unlabelled = np.random.default_rng(k).random(len(world.customers)) >= labelled
        world.customers.loc[unlabelled, ["level", "redeemed"]] = np.nan
        prefix = f"p{k:05d}-"
        world.customers.assign(customer_id=prefix + world.customers.customer_id).to_parquet(
            folder / "customers" / part_name(k), index=False)
        world.edges.assign(customer_id=prefix + world.edges.customer_id).to_parquet(
            folder / "edges" / part_name(k), index=False)
    table = make_world(merchants, merchants, seed=999).merchants
    for q, rows in enumerate(np.array_split(np.arange(merchants), MERCHANT_PARTS)):
        table.iloc[rows].to_parquet(folder / "merchants" / part_name(q), index=False)


#: The paper's Table 1: vertices, edges, labelled records.
PAPER = (112.59e6, 133.64e6, 1.85e6)


def project(items_rate: float, seeds_rate: float, train_rate: float, efficiency: float, cores: int) -> None:
    """Print the cost model (module docstring) for 1 to 64 nodes."""
    vertices, edges, seeds = PAPER
    print(f"\ncost model: {items_rate:,.0f} graph items and {seeds_rate:,.0f} seeds per core-second measured; "
          f"{train_rate:,.0f} training records/s per worker, DDP efficiency {efficiency:.2f}; {cores} cores a node")
    print(f"{'nodes':>5} {'records pass s':>14} {'train epoch s':>13} {'epoch, resampled s':>18}")
    for nodes in (1, 4, 16, 64):
        n = nodes * cores
        records = (vertices + edges) / (items_rate * n) + seeds / (seeds_rate * n)
        train = seeds / (train_rate * n * (efficiency if n > 1 else 1.0))
        print(f"{nodes:>5} {records:>14,.0f} {train:>13,.0f} {records + train:>18,.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--customers", type=int, default=100_000)
    p.add_argument("--parts", type=int, default=10)
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    p.add_argument("--fanouts", type=int, nargs="+", default=[10, 25])
    p.add_argument("--scratch", type=Path, default=None, help="folder for the parts and records (default: a temp dir)")
    p.add_argument("--labelled", type=float, default=1.0, help="share of the customers with a label (seeds)")
    p.add_argument("--train-rate", type=float, default=None, help="training records/s of one worker, for the cost model")
    p.add_argument("--train-efficiency", type=float, default=1.0, help="DDP efficiency (2 workers' rate / twice one's)")
    p.add_argument("--cores", type=int, default=16, help="cores per node in the cost model")
    p.add_argument("--train-epochs", type=int, default=0,
                   help="also train gnn-hazard from the first mode's records in a fresh process, reporting its memory")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="graph-records-", dir=args.scratch))
    try:
        started = time.perf_counter()
        writer = multiprocessing.get_context("spawn").Process(  # the driver's peak RSS is then the pass's own
            target=write_graph, args=(root / "graph", args.customers, args.parts, args.labelled))
        writer.start()
        writer.join()
        if writer.exitcode:
            raise SystemExit(f"writing the graph failed (exit code {writer.exitcode})")
        print(f"graph: {args.customers:,} customers, {args.customers // 10:,} merchants in {args.parts} parts, "
              f"written in {time.perf_counter() - started:.1f} s by another process (driver peak RSS "
              f"{peak_mb():.0f} MB)", flush=True)
        sample = make_world(20_000, 2_000, seed=0)
        tables = check_tables(sample.customers, sample.merchants, sample.edges)
        encoders = InputEncoders.fit(tables)
        executor = make_executor(args.executor, workers=args.workers if args.executor == "ray" else None)
        header = (f"{'mode':<10} {'executor':<8} {'records':>10} {'seconds':>8} {'rec/s':>8} {'MB':>8} {'B/rec':>7} "
                  f"{'shard s':>7} {'export s':>8} {'grow s':>7} "
                  f"{'part s mean':>11} {'part s max':>10} {'driver MB':>9} {'worker MB':>9} {'anon MB':>7} "
                  f"{'file MB':>7}")
        rows, rates = [], None
        for mode in args.modes:
            spec = RecordSpec(tuple(tables.levels), tables.customer_spec, tables.merchant_spec, tuple(args.fanouts),
                              draws=MODES[mode])
            out = root / f"records-{mode}"
            started = time.perf_counter()
            summary = write_records(root / "graph" / "customers", root / "graph" / "merchants",
                                    root / "graph" / "edges", out, encoders, spec, executor)
            seconds = time.perf_counter() - started
            part_seconds = [part["seconds"] for part in summary["parts"]]
            grown = summary["parts"] + summary.get("buckets", [])  # customer parts, merchant shards with seeds
            rows.append(f"{mode:<10} {args.executor:<8} {summary['records']:>10,} {seconds:>8.1f} "
                        f"{summary['records'] / seconds:>8.0f} {summary['bytes'] / 2**20:>8.1f} "
                        f"{summary['bytes'] / max(summary['records'], 1):>7.0f} "
                        f"{summary['phases']['shard']:>7.1f} {summary['phases']['export']:>8.1f} "
                        f"{summary['phases']['grow']:>7.1f} {np.mean(part_seconds):>11.2f} "
                        f"{max(part_seconds):>10.2f} {peak_mb():>9.0f} "
                        f"{largest(grown, 'peak_rss_mb'):>9.0f} {largest(grown, 'rss_anon_mb'):>7.0f} "
                        f"{largest(grown, 'rss_file_mb'):>7.0f}")
            print(rows[-1], flush=True)
            phases = summary["phases"]
            print("driver after each step, MB (peak RSS / RssAnon / RssFile now): " + ", ".join(
                f"{name} {phases[f'{name}_peak_rss_mb']:.0f} / {phases[f'{name}_rss_anon_mb']:.0f} / "
                f"{phases[f'{name}_rss_file_mb']:.0f}" for name in ("shard", "export", "grow")))
            if args.train_epochs and rates is None:
                context = multiprocessing.get_context("spawn")
                results = context.Queue()
                trainer = context.Process(target=train_from, args=(out, tables, args.fanouts, args.train_epochs,
                                                                   results))
                trainer.start()
                got = results.get()
                trainer.join()
                print(f"training from these records in a fresh process, one thread, {args.train_epochs} epoch(s): "
                      f"{got['rate']:,.0f} records/s; peak RSS {got['peak_rss_mb']:.0f} MB, RssAnon "
                      f"{got['rss_anon_mb']:.0f} MB, RssFile {got['rss_file_mb']:.0f} MB", flush=True)
            if rates is None:
                cores = args.workers if args.executor == "ray" else 1
                items = summary["customers"] + summary["merchants"] + summary["edges"]
                rates = (items / ((summary["phases"]["shard"] + summary["phases"]["export"]) * cores),
                         summary["records"] / len(MODES[mode]) / (summary["phases"]["grow"] * cores))
            shutil.rmtree(out)
        print()
        print(header)
        print("\n".join(rows))
        if args.train_rate:
            project(*rates, args.train_rate, args.train_efficiency, args.cores)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

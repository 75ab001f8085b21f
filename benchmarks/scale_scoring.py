"""Partitioned batch scoring over Parquet parts, in this process and on Ray: ``conversion predict`` (the default),
``value predict`` (``--domain value``) or ``incentive predict`` (``--domain incentive``).

- **conversion**: an ESM² is trained for one epoch on 200k synthetic impressions
  (``promokit.experiments.conversion.world.make_world``), then ``--rows`` impressions are generated straight into
  ``--parts`` Parquet parts (part k from seed k; never one frame) and scored through
  :func:`promokit.data.part_scoring.score_parts`, the function behind ``conversion predict --data DIR``.
- **value**: an ESDPM-NCG (ESDPM without the consumption graph: a graph model cannot score a part alone; emb 8,
  4 experts 64-32, towers 32, sequences of 20) is trained for one epoch on a 10,000-user fund world
  (``promokit.experiments.value.world.make_world``),
  then ``--users`` users × 8 funds are generated straight into ``--parts`` co-partitioned parts (part k a world of
  its own from seed 1000 + k, user ids prefixed by the part; ``users/``, ``deliveries/`` with 2 deliveries per
  user, ``behaviors/`` with 20; never one frame) and predicted through :func:`promokit.value.parts.predict_parts`,
  the function behind ``value predict --data DIR``: the ETV of every user × fund (4 delivery contexts) and the
  outputs of every delivery.
- **incentive**: the paper's gnn-hazard (GraphConv, 2 layers of 64, towers 256-128) is trained for one epoch on a
  20,000-customer world (``promokit.experiments.incentive.world.make_world``), then ``--users`` customers (mean degree 4)
  are generated straight into ``--parts`` parts with their edges co-partitioned (part k a world of its own whose
  edges reach one shared set of ``--users`` / 10 merchants, in 4 parts) and scored through
  :func:`promokit.incentive.parts.predict_parts`, the function behind ``incentive predict --customers DIR``: the
  graph in shards, one map per GNN layer. Up to ``--whole-up-to`` customers the same graph is also scored as one
  table each in this process (``IncentiveModel.score_tables``), the path without parts.

Each is scored three ways: **local** (this process, one part after another, the model loaded once), **ray × 1**
(a local Ray cluster of 2 CPUs, one actor: the model loaded once per actor) and **ray × 2** (two actors).

Reported: wall seconds, rows/s (value: users/s), per worker, Ray's overhead per core (ray × 1 time / local time;
target ≤ 1.25) and the speed-up from 1 to 2 workers, with the largest absolute difference of any output against
the local run (target ≤ 1e-6) and the load average. Workers and driver share 2 cores, so ray × 2 competes with
the driver (the progress loop) and Ray's own processes.

Usage::

    .venv/bin/python benchmarks/scale_scoring.py                                   # 10⁷ impressions in 40 parts
    .venv/bin/python benchmarks/scale_scoring.py --rows 1000000 --parts 8
    .venv/bin/python benchmarks/scale_scoring.py --domain value                    # 10⁶ users × 8 funds, 20 parts
    .venv/bin/python benchmarks/scale_scoring.py --domain value --users 20000 --parts 4
    .venv/bin/python benchmarks/scale_scoring.py --domain incentive                # 10⁶ customers, 10⁵ merchants
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

from promokit.data.parts import list_parts, part_name
from promokit.scale.executor import LocalExecutor, RayExecutor
from promokit.training import TrainConfig


def sizes(total: int, parts: int) -> np.ndarray:
    """``total`` rows cut into ``parts`` near-equal parts."""
    cut = np.full(parts, total // parts)
    cut[: total % parts] += 1
    return cut


class Conversion:
    """``conversion predict`` over impression parts."""

    title = "conversion predict (ESM², emb 8, MLP 64-32)"
    unit = "rows"
    default_parts = 40

    def __init__(self, args):
        self.rows = args.rows

    def train(self, folder: Path) -> Path:
        from promokit.conversion.estimator import ConversionModel
        from promokit.experiments.conversion.world import make_world

        model = ConversionModel("esm2", {"emb_dim": 8, "hidden": (64, 32), "dropout": 0.0},
                                TrainConfig(epochs=1, batch_size=2048, lr=0.01, progress=False))
        model.fit(make_world(n_impressions=200_000, seed=0).table)
        model.save(folder / "esm2")
        return folder / "esm2"

    def write(self, folder: Path, parts: int) -> Path:
        from promokit.experiments.conversion.world import make_world

        folder.mkdir(parents=True)
        for k, size in enumerate(sizes(self.rows, parts)):
            table = make_world(n_impressions=int(size), seed=1000 + k).table
            table.drop(columns=["click", "daction", "purchase"]).to_parquet(folder / part_name(k), index=False)
        return folder

    def run(self, executor, model: Path, source: Path, out: Path) -> int:
        from promokit.conversion.estimator import ConversionModel
        from promokit.data.part_scoring import score_parts

        scored = score_parts(executor, partial(ConversionModel.load, model), ConversionModel.predict, source, out)
        return sum(s.rows for s in scored)


class Value:
    """``value predict`` over a dataset in parts (users, deliveries and behaviors co-partitioned by user)."""

    title = "value predict (ESDPM-NCG, emb 8, experts 64-32, towers 32; 8 funds, 4 contexts)"
    network = {"emb_dim": 8, "expert_hidden": [64], "expert_dim": 32, "tower_hidden": [32], "max_len": 20}
    unit = "users"
    default_parts = 20
    tables = ("users", "deliveries", "behaviors")

    def __init__(self, args):
        self.users = args.users
        self.funds = None

    def train(self, folder: Path) -> Path:
        from promokit.experiments.value.world import make_world
        from promokit.value.contract import check_tables
        from promokit.value.estimator import ValueModel

        world = make_world(10_000, seed=0)
        self.funds = world.funds
        tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors)
        ValueModel("esdpm-ncg", self.network, TrainConfig(epochs=1, batch_size=512, lr=1e-3, progress=False)).fit(tables) \
            .save(folder / "esdpm-ncg")
        return folder / "esdpm-ncg"

    def write(self, folder: Path, parts: int) -> Path:
        from promokit.experiments.value.world import make_world

        for name in self.tables:
            (folder / name).mkdir(parents=True)
        self.funds.to_parquet(folder / "funds.parquet", index=False)
        for k, size in enumerate(sizes(self.users, parts)):
            world = make_world(int(size), deliveries_per_user=2.0, seed=1000 + k)
            for name in self.tables:
                table = getattr(world, name)
                table.assign(user_id=f"p{k:05d}-" + table["user_id"].astype(str)).to_parquet(
                    folder / name / part_name(k), index=False)
        return folder

    def run(self, executor, model: Path, source: Path, out: Path) -> int:
        from promokit.value.contract import table_paths
        from promokit.value.estimator import SCORE_CONTEXTS
        from promokit.value.parts import predict_parts

        _, values = predict_parts(model, table_paths(source), out, executor, None, SCORE_CONTEXTS)
        return sum(v.etv.rows for v in values)


class Incentive:
    """``incentive predict`` over a graph in parts: customers with their edges co-partitioned, merchants in parts."""

    title = "incentive predict (gnn-hazard: GraphConv 2 × 64, towers 256-128, the paper's settings)"
    unit = "customers"
    default_parts = 20
    merchant_parts = 4

    def __init__(self, args):
        self.customers = args.users
        self.merchants = max(1, args.users // 10)

    def train(self, folder: Path) -> Path:
        from promokit.experiments.incentive.world import make_world
        from promokit.incentive.contract import check_tables
        from promokit.incentive.estimator import IncentiveModel

        world = make_world(20_000, 2_000, seed=0)
        tables = check_tables(world.customers, world.merchants, world.edges)
        IncentiveModel("gnn-hazard", train=TrainConfig(epochs=1, batch_size=512, progress=False)).fit(tables) \
            .save(folder / "gnn-hazard")
        return folder / "gnn-hazard"

    def write(self, folder: Path, parts: int) -> Path:
        """Part k's customers and edges from a world of its own (seed 1000 + k, customer ids prefixed by the part)
        whose edges reach the one shared set of merchants; the merchants from the world of seed 999."""
        from promokit.experiments.incentive.world import make_world

        for name in ("customers", "edges", "merchants"):
            (folder / name).mkdir(parents=True)
        for k, size in enumerate(sizes(self.customers, parts)):
            world = make_world(int(size), self.merchants, seed=1000 + k)
            prefix = f"p{k:05d}-"
            world.customers.assign(customer_id=prefix + world.customers.customer_id).drop(
                columns=["level", "redeemed"]).to_parquet(folder / "customers" / part_name(k), index=False)
            world.edges.assign(customer_id=prefix + world.edges.customer_id).to_parquet(
                folder / "edges" / part_name(k), index=False)
        merchants = make_world(self.merchants, self.merchants, seed=999).merchants
        for q, rows in enumerate(np.array_split(np.arange(self.merchants), self.merchant_parts)):
            merchants.iloc[rows].to_parquet(folder / "merchants" / part_name(q), index=False)
        return folder

    def run(self, executor, model: Path, source: Path, out: Path) -> int:
        from promokit.incentive.parts import predict_parts

        summary = predict_parts(model, source / "customers", source / "merchants", source / "edges", out, executor)
        return summary["customers"]

    @staticmethod
    def whole(model: Path, source: Path) -> float:
        """The one-process predict of the same graph as one table each (seconds, reading included)."""
        from promokit.data import read_table
        from promokit.incentive.contract import check_tables
        from promokit.incentive.estimator import IncentiveModel

        started = time.perf_counter()
        estimator = IncentiveModel.load(model)
        tables = check_tables(*(read_table(source / name) for name in ("customers", "merchants", "edges")),
                              levels=estimator.levels_, require_labels=False,
                              customer_features=estimator.customer_spec_, merchant_features=estimator.merchant_spec_)
        estimator.score_tables(tables)
        return time.perf_counter() - started


DOMAINS = {"conversion": Conversion, "value": Value, "incentive": Incentive}


def largest_difference(a: Path, b: Path) -> float:
    """The largest difference of any float output between the parts written under ``a`` and ``b``, their keys
    checked equal."""
    worst = 0.0
    for pa, pb in zip(list_parts(a), list_parts(b), strict=True):
        x, y = pd.read_parquet(pa), pd.read_parquet(pb)
        keys = [c for c in ("user_id", "item_id", "fund") if c in x.columns]
        assert x[keys].equals(y[keys]), pa
        floats = x.select_dtypes("floating").columns
        worst = max(worst, float(np.abs(x[floats].to_numpy() - y[floats].to_numpy()).max(initial=0.0)))
    return worst


def timed(domain, executor, model: Path, source: Path, out: Path) -> float:
    started = time.perf_counter()
    assert domain.run(executor, model, source, out) > 0
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=sorted(DOMAINS), default="conversion")
    parser.add_argument("--rows", type=int, default=10_000_000, help="conversion: impressions scored")
    parser.add_argument("--users", type=int, default=1_000_000, help="value: users scored (× 8 funds); incentive: "
                        "customers scored (with a tenth as many merchants)")
    parser.add_argument("--whole-up-to", type=int, default=2_000_000, help="incentive: also score the graph as one "
                        "table each in this process, up to this many customers")
    parser.add_argument("--parts", type=int, default=None, help="parts (default: 40 conversion, 20 value)")
    args = parser.parse_args()
    domain = DOMAINS[args.domain](args)
    parts = args.parts or domain.default_parts
    total = args.rows if args.domain == "conversion" else args.users
    import torch

    torch.set_num_threads(1)  # one core per worker, the same in this process: a per-core comparison
    with tempfile.TemporaryDirectory(prefix="promokit-scale-") as tmp:
        tmp = Path(tmp)
        load_before = os.getloadavg()
        started = time.perf_counter()
        model = domain.train(tmp)
        source = domain.write(tmp / "in", parts)
        print(f"model trained and {total:,} {domain.unit} written in {parts} parts in "
              f"{time.perf_counter() - started:.0f} s")
        seconds = {"local": timed(domain, LocalExecutor(), model, source, tmp / "local")}
        whole = domain.whole(model, source) if hasattr(domain, "whole") and total <= args.whole_up_to else None
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        for workers in (1, 2):
            seconds[f"ray × {workers}"] = timed(domain, RayExecutor(workers=workers), model, source,
                                                tmp / f"ray{workers}")
        differences = {name: largest_difference(tmp / "local", tmp / f"ray{name[-1]}")
                       for name in seconds if name != "local"}
        ray.shutdown()
    print(f"\n{domain.title} over {total:,} {domain.unit} in {parts} parts, 2 cores, load average before "
          f"{load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}\n")
    print(f"| executor | seconds | {domain.unit}/s | {domain.unit}/s per worker | max |Δ| vs local |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, s in seconds.items():
        workers = 1 if name == "local" else int(name[-1])
        diff = "—" if name == "local" else f"{differences[name]:.1e}"
        print(f"| {name} | {s:.1f} | {total / s:,.0f} | {total / s / workers:,.0f} | {diff} |")
    if whole is not None:
        print(f"| one table each, one process | {whole:.1f} | {total / whole:,.0f} | {total / whole:,.0f} | — |")
    print(f"\nRay overhead per core (ray × 1 / local): {seconds['ray × 1'] / seconds['local']:.2f}×; "
          f"speed-up from 1 to 2 workers: {seconds['ray × 1'] / seconds['ray × 2']:.2f}×")


if __name__ == "__main__":
    main()

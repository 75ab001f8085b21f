"""Scale and speed of `promokit value` on a large synthetic fund world, on CPU:

- building the world and validating its tables; encoding the deliveries (leak-free behaviour sequences of up to
  50 events each, the consumption graph);
- training ESDPM (self-attention over the sequences, 2-layer GAT on the user–merchant–user graph with sampled
  neighbourhoods, MMoE, ESJ loss): one epoch over every training delivery, rows per second;
- scoring every user × fund (each user's sequence and graph state encoded once, the MMoE and towers per pair):
  rows per second;
- the whole predict → allocate path: the ETV table of every user, then `allocate quota` (prices and HA) under
  exact quotas and the risk rule;
- peak resident memory after each stage.

The default is the issue's scale: 500k users with a consumption graph to 50k merchants, 1M deliveries (2 per
user) and sequences of 50 (60 behaviours per user over 90 days), then 1M users × 8 funds for scoring and
allocation (a second world of 1M users: scoring needs no labels).

Usage::

    .venv/bin/python benchmarks/value_scale.py                        # the issue's scale: about half an hour
    .venv/bin/python benchmarks/value_scale.py --users 50000 --score-users 100000   # a quick run
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

import torch

from promokit.allocation.quota import solve_quota
from promokit.experiments.value.world import feasible_quotas, make_world
from promokit.training import TrainConfig, Trainer
from promokit.value.contract import check_tables
from promokit.value.estimator import DEFAULT_TRAIN, ValueModel
from promokit.value.inputs import InputEncoders
from promokit.value.models import ESDPM
from promokit.value.models.esdpm import AmountStart


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, default=500_000)
    p.add_argument("--deliveries-per-user", type=float, default=2.0)
    p.add_argument("--behaviors-per-user", type=float, default=60.0)
    p.add_argument("--score-users", type=int, default=1_000_000)
    p.add_argument("--max-len", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--contexts", type=int, default=1, help="delivery contexts averaged per user × fund")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    def stage(name: str, seconds: float, note: str = "") -> None:
        print(f"{name:<46} {seconds:9.2f} s   peak RSS {peak_gb():5.2f} GB   {note}", flush=True)

    started = time.perf_counter()
    world = make_world(args.users, deliveries_per_user=args.deliveries_per_user,
                       behaviors_per_user=args.behaviors_per_user, seed=0)
    stage("world", time.perf_counter() - started,
          f"{len(world.deliveries):,} deliveries, {len(world.behaviors):,} behaviours, "
          f"{len(world.consumption):,} payments, {world.n_merchants:,} merchants")
    started = time.perf_counter()
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    del world
    gc.collect()
    stage("check tables", time.perf_counter() - started)

    started = time.perf_counter()
    encoders = InputEncoders.fit(tables, args.max_len)
    nodes = encoders.nodes(tables)
    rows = encoders.rows(tables)
    filled = float((rows["seq"][..., 0] >= 0).sum(dim=1).float().mean())
    stage("encode deliveries (sequences, graph)", time.perf_counter() - started,
          f"mean sequence length {filled:.1f} of {args.max_len}")

    config = TrainConfig(**{**DEFAULT_TRAIN.to_dict(), "epochs": 1, "progress": False})
    net = ESDPM(encoders.sizes(), **{**_defaults(), "graph": True}).attach(nodes)
    net.init_amount(AmountStart.of(rows["v"], rows["convert"]))
    started = time.perf_counter()
    Trainer(config).fit(net, rows)
    seconds = time.perf_counter() - started
    stage("train ESDPM, one epoch", seconds, f"{len(rows['user']) / seconds:,.0f} deliveries/s")
    model = ValueModel("esdpm", {"max_len": args.max_len}, config)
    model.encoders_, model.net_, model.feature_specs_, model.recalibration_ = encoders, net, {}, None
    del rows, nodes
    gc.collect()

    started = time.perf_counter()
    world = make_world(args.score_users, deliveries_per_user=1.0, behaviors_per_user=args.behaviors_per_user / 2,
                       seed=1)
    scoring = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    del world
    gc.collect()
    stage(f"world of {args.score_users:,} users to score", time.perf_counter() - started)
    started = time.perf_counter()
    table = model.score_table(scoring, contexts=args.contexts)
    seconds = time.perf_counter() - started
    pairs = len(table) * len(scoring.funds)
    stage(f"ETV of every user × fund ({args.contexts} context)", seconds, f"{pairs / seconds:,.0f} user × fund pairs/s")
    etv = table[[c for c in table.columns if c.startswith("score_")]].to_numpy()
    quotas = feasible_quotas(scoring.tolerance(), scoring.risk(), scoring.fund_names)
    for method in ("prices", "ha"):
        started = time.perf_counter()
        plan = solve_quota(etv, quotas["quota"].to_numpy(), scoring.tolerance(), scoring.risk(), method=method)
        stage(f"allocate quota ({method})", time.perf_counter() - started, f"objective {plan.objective:,.0f}")


def _defaults() -> dict:
    from promokit.value.estimator import net_defaults

    return net_defaults()


if __name__ == "__main__":
    main()

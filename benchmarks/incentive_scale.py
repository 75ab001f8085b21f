"""Scale and speed of `promokit incentive` on a large synthetic graph (default: 1M customers, 200k merchants,
≈ 5M edges, 10 incentive values), on CPU:

- building the world, validating the tables and encoding the node inputs;
- training the GNN + hazard model: seconds per epoch over every labelled node with neighbour-sampled
  mini-batches (the default fanouts), and the full-neighbourhood validation pass;
- scoring every customer and merchant at every value (layer-wise inference, then the heads): rows per second;
- the decision path of one request, in-process: the request's scores at every value, then eq. 19 with λ*
  (``promokit.allocation.decide``), with the node's GNN state precomputed (as the paper serves it, "fetch the
  graph feature") and with its 2-hop neighbourhood sampled and encoded per request;
- peak resident memory after each stage.

Usage::

    .venv/bin/python benchmarks/incentive_scale.py                       # 1M / 200k / 5M: about 10 minutes
    .venv/bin/python benchmarks/incentive_scale.py --customers 100000 --merchants 20000   # a quick run
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from promokit.allocation.budget import decide, ratio_form, solve_budget
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import DEFAULT_TRAIN, IncentiveModel, labelled_rows, validation_metrics
from promokit.nn.bipartite import sample_neighbours
from promokit.training import TrainConfig, Trainer

LEVELS = (20, 40, 60, 80, 100, 120, 140, 160, 180, 200)


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--customers", type=int, default=1_000_000)
    p.add_argument("--merchants", type=int, default=200_000)
    p.add_argument("--degree", type=float, default=5.0)
    p.add_argument("--batch-size", type=int, default=DEFAULT_TRAIN.batch_size)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--requests", type=int, default=2000, help="requests timed on the decision path")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []

    def stage(name: str, seconds: float, note: str = "") -> None:
        rows.append((name, seconds, peak_gb(), note))
        print(f"{name:<44} {seconds:9.2f} s   peak RSS {peak_gb():5.2f} GB   {note}", flush=True)

    started = time.perf_counter()
    world = make_world(args.customers, args.merchants, args.degree, levels=LEVELS, seed=0)
    stage("synthetic world", time.perf_counter() - started, f"{len(world.edges):,} edges")
    started = time.perf_counter()
    tables = check_tables(world.customers, world.merchants, world.edges)
    stage("check_tables", time.perf_counter() - started)
    model = IncentiveModel("gnn-hazard", train=TrainConfig(**{**DEFAULT_TRAIN.to_dict(), "epochs": 1,
                                                              "batch_size": args.batch_size, "progress": False}))
    started = time.perf_counter()
    inputs = model.prepare(tables)
    stage("encode node inputs + CSR graph", time.perf_counter() - started)

    split = model.split_rows(tables)
    train = labelled_rows(tables, split.train_customers, split.train_merchants)
    valid = labelled_rows(tables, split.valid_customers, split.valid_merchants)
    started = time.perf_counter()
    history = Trainer(model.train_config).fit(model.net_, train, valid, metrics=validation_metrics())
    epoch = history.epochs[0]
    stage(f"train 1 epoch (fanouts {model.net_.fanouts})", epoch["seconds"],
          f"{len(train['node']):,} rows, {epoch['samples_per_second']:,.0f} rows/s")
    stage("  + validation (full neighbourhoods)", time.perf_counter() - started - epoch["seconds"],
          f"valid AUC_c {epoch['valid_auc_c']:.4f}")

    started = time.perf_counter()
    responses = model.responses(tables)
    seconds = time.perf_counter() - started
    n_nodes = len(responses.customers) + len(responses.merchants)
    stage("score every node at every value", seconds,
          f"{n_nodes:,} nodes × {len(LEVELS)} values: {n_nodes / seconds:,.0f} nodes/s")

    problem = ratio_form(responses.customers, tables.levels, 100.0)
    started = time.perf_counter()
    lam = solve_budget(*problem).lam
    stage("λ* for all customers (allocate budget)", time.perf_counter() - started, f"λ* = {lam:.4g}")

    rng = np.random.default_rng(0)
    requests = rng.integers(0, len(tables.customers), args.requests)
    net = model.net_.eval()
    states = net._all_states()
    timings = {"precomputed GNN state": [], "2-hop neighbourhood per request": []}
    with torch.no_grad():
        for u in requests:
            for how in timings:
                t0 = time.perf_counter()
                node = torch.tensor([int(u)])
                if how == "precomputed GNN state":
                    h = states.customers[node]
                else:
                    sub = sample_neighbours(inputs.graph, node, torch.empty(0, dtype=torch.long), net.fanouts)
                    x_c = net._node_features(inputs.customers, sub.customers, net.customer_features)
                    x_m = net._node_features(inputs.merchants, sub.merchants, net.merchant_features)
                    h = net.gnn(x_c, x_m, sub).customers
                scores = net.customer_head(torch.relu(net.customer_tower(h)))["response"][0].numpy()
                decide(scores, scores * (tables.levels - 100.0), lam)
                timings[how].append(time.perf_counter() - t0)
    for how, values in timings.items():
        ms = np.array(values) * 1000
        stage(f"decision path: {how}", ms.sum() / 1000,
              f"{len(ms)} requests: p50 {np.percentile(ms, 50):.2f} ms, p99 {np.percentile(ms, 99):.2f} ms")

    print("\n| stage | seconds | peak RSS GB | note |\n|---|---:|---:|---|")
    for name, seconds, gb, note in rows:
        print(f"| {name.strip()} | {seconds:.2f} | {gb:.2f} | {note} |")


if __name__ == "__main__":
    main()

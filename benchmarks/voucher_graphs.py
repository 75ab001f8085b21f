"""UVG throughput: graphs/second to build a UVGStore from an events table and to batch it into PyG Batches.

    .venv/bin/python benchmarks/voucher_graphs.py            # 100k sessions × ~20 events
    .venv/bin/python benchmarks/voucher_graphs.py --quick    # 10k sessions, smoke run
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from promokit.voucher.graph import UVGStore


def synthetic_tables(n_sessions: int, events_per_session: int, n_items: int, seed: int) -> SimpleNamespace:
    """Sessions one hour apart per user; Poisson(events_per_session) atc/ord/click events within ±2 days."""
    rng = np.random.default_rng(seed)
    collect = rng.uniform(0, 90 * 86400, n_sessions)
    sessions = pd.DataFrame({"session_id": np.arange(n_sessions), "user_id": rng.integers(0, n_sessions // 5,
                                                                                           n_sessions),
                             "voucher_id": rng.integers(0, 1000, n_sessions),
                             "min_spend": rng.choice([10.0, 20.0, 50.0], n_sessions),
                             "discount": rng.choice([2.0, 5.0, 10.0], n_sessions), "collect_time": collect,
                             "outcome_time": collect + 86400.0, "redeemed": rng.integers(0, 2, n_sessions)})
    counts = rng.poisson(events_per_session, n_sessions)
    owner = np.repeat(np.arange(n_sessions), counts)
    events = pd.DataFrame({"session_id": owner, "item_id": rng.integers(0, n_items, owner.size),
                           "action": rng.choice(["atc", "ord", "click"], owner.size, p=[0.5, 0.2, 0.3]),
                           "action_time": collect[owner] + rng.uniform(-2 * 86400, 86400, owner.size)})
    items = pd.DataFrame({"item_id": np.arange(n_items), "category": rng.integers(0, 500, n_items),
                          "brand": rng.integers(0, 2000, n_items), "price_level": rng.integers(0, 5, n_items)})
    return SimpleNamespace(sessions=sessions, events=events, items=items)


def timed(fn, repeat: int = 1):
    best, result = np.inf, None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=20, help="mean events per session")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n_sessions = 10_000 if args.quick else args.sessions
    tables = synthetic_tables(n_sessions, args.events, 50_000, seed=0)

    build_s, store = timed(lambda: UVGStore.build(tables), repeat=1 if not args.quick else 2)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "uvg.npz"
        save_s, _ = timed(lambda: store.save(path))
        load_s, _ = timed(lambda: UVGStore.load(path))
        size_mb = path.stat().st_size / 2**20
    rng = np.random.default_rng(1)
    n_batches = 50 if not args.quick else 10
    batches = [torch.as_tensor(rng.integers(0, n_sessions, args.batch_size)) for _ in range(n_batches)]
    all_s, _ = timed(lambda: [store.batch(rows) for rows in batches], repeat=2)
    target_s, _ = timed(lambda: [store.batch(rows, store.target_zones) for rows in batches], repeat=2)
    graphs = n_batches * args.batch_size
    figures = {
        "sessions": n_sessions, "events": len(tables.events), "nodes": int(store.node_ptr[-1]),
        "edges": int(store.edge_ptr[-1]), "build_seconds": build_s, "build_graphs_per_second": n_sessions / build_s,
        "save_seconds": save_s, "load_seconds": load_s, "npz_mb": size_mb, "batch_size": args.batch_size,
        "batch_graphs_per_second_all_zones": graphs / all_s,
        "batch_graphs_per_second_target_zones": graphs / target_s,
    }
    print(f"{n_sessions:,} sessions, {figures['events']:,} events (30% clicks, dropped) → "
          f"{figures['nodes']:,} nodes, {figures['edges']:,} edges")
    print(f"{'step (batch of ' + str(args.batch_size) + ')':<28}{'seconds':>10}{'graphs/s':>14}")
    print(f"{'build (all sessions)':<28}{build_s:>10.3f}{figures['build_graphs_per_second']:>14,.0f}")
    print(f"{'batch, all four zones':<28}{all_s / n_batches:>10.4f}"
          f"{figures['batch_graphs_per_second_all_zones']:>14,.0f}")
    print(f"{'batch, target (pre) zones':<28}{target_s / n_batches:>10.4f}"
          f"{figures['batch_graphs_per_second_target_zones']:>14,.0f}")
    print(f"save {save_s:.3f} s, load {load_s:.3f} s, {size_mb:.1f} MiB .npz")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""A campaign refreshed under load: the decision service switches to a new version and back while clients keep
sending decisions, and nothing is lost.

A campaign of ``--customers`` synthetic customers × 5 levels (λ* of eq. 16 at B = ``RATIO_B``) is built as version
``v1``; ``v2`` (other scores, as a daily re-scoring gives) is built beside it while ``v1`` is served, and its build
time is the offline cost of a refresh. ``promokit serve`` (``--workers``, the PostgreSQL ledger at ``--pg-url`` or
the campaign's SQLite) then answers ``--requests`` decisions from ``--clients`` concurrent clients
(:func:`promokit.serve.run_replay`, on the same cores). After a third of them ``POST /v1/campaign/switch`` makes
``v2`` live, after two thirds a second POST switches back to ``v1`` (a rollback). The cap is set to be reached
during the run, so it binds across both switches.

Printed: HTTP statuses (every request must be 200), answers per version, each switch's answer time and how many
answers the old version gave after it returned (the other workers follow ``live.json`` within a second), latency
percentiles of the requests sent before the first switch, in the 2 s after each switch, and the rest (requests are
windowed by their order of sending), and the ledger: money at risk against the cap, and its totals against its
rows. ``uptime`` before and after says whether the machine was shared.

Usage::

    .venv/bin/python benchmarks/serve_refresh.py                         # 10^6 customers, 2 workers, PostgreSQL
    .venv/bin/python benchmarks/serve_refresh.py --customers 100000 --requests 20000 --ledger sqlite
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
from serve_throughput import PG_URL, TOKEN, fresh_ledger, uptime

from promokit.allocation.budget import ratio_form, solve_budget
from promokit.campaign import build as build_campaign
from promokit.experiments.allocation.instances import make_budget_instance
from promokit.serve import Ledger, run_replay, running_service

LEVELS = [0.0, 5.0, 10.0, 20.0, 40.0]
RATIO_B = 8.0


def build_version(root: Path, customers: int, seed: int, version: str, cap: str) -> float:
    """Build version ``version`` of ``root`` from the scores of ``seed``; returns the build's seconds."""
    instance = make_budget_instance(customers, levels=LEVELS, seed=seed)
    plan = solve_budget(*ratio_form(instance.scores, instance.levels, RATIO_B))
    report = root.parent / f"report-{version}.json"
    report.write_text(json.dumps({"problem": "budget", "form": "ratio", "B": RATIO_B, "lam": plan.lam,
                                  "levels": LEVELS}))
    scores = pd.DataFrame({"user_id": [f"c{i}" for i in range(customers)],
                           **{f"score_{level:g}": instance.scores[:, j] for j, level in enumerate(LEVELS)}})
    started = time.perf_counter()
    build_campaign(root, scores, report, cap=cap, model_version=version)
    return time.perf_counter() - started


def post_switch(base: str, version: str) -> tuple[dict, float]:
    request = urllib.request.Request(f"{base}/v1/campaign/switch", data=json.dumps({"version": version}).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {TOKEN}",
                                                             "Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read()), (time.perf_counter() - started) * 1e3


def decisions_so_far(base: str) -> int:
    with urllib.request.urlopen(f"{base}/v1/status", timeout=10) as answer:
        return int(json.loads(answer.read())["budget"].get("decisions", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=60_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ledger", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--cap", default="60000", help="cap on money at risk; reached during the default run")
    args = parser.parse_args()
    print(f"uptime before: {uptime()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "campaign"
        root.mkdir()
        build_v1 = build_version(root, args.customers, 0, "v1", args.cap)
        ledger = fresh_ledger(root, args.ledger, args.pg_url) or f"sqlite:///{root / 'ledger.sqlite'}"
        rng = np.random.default_rng(0)
        bodies = [{"request_id": f"r{i}", "customer_id": f"c{k}"}
                  for i, k in enumerate(rng.integers(0, args.customers, args.requests))]
        with running_service(root, TOKEN, ledger=ledger, workers=args.workers, startup_seconds=120) as base:
            build_v2 = build_version(root, args.customers, 1, "v2", args.cap)  # while v1 is served
            replayed = {}
            load = threading.Thread(target=lambda: replayed.update(
                result=run_replay(base, TOKEN, bodies, concurrency=args.clients)))
            load.start()
            switches = []
            for fraction, version in ((1 / 3, "v2"), (2 / 3, "v1")):
                while (sent := decisions_so_far(base)) < fraction * args.requests:
                    time.sleep(0.01)
                answer, ms = post_switch(base, version)
                switches.append({"version": version, "at_decision": sent, "answered_ms": ms, **answer})
            load.join()
        result = replayed["result"]
        audit, totals = Ledger(ledger).audit(), Ledger(ledger).totals()
    report(args, result, switches, audit, totals, build_v1, build_v2)
    print(f"uptime after: {uptime()}")


def report(args, result, switches, audit, totals, build_v1: float, build_v2: float) -> None:
    statuses = dict(zip(*np.unique(result.statuses, return_counts=True)))
    versions = np.array([a["model_version"] if a else "" for a in result.answers])
    print(f"\n{args.requests:,} decisions, {args.clients} clients, {args.workers} workers, {args.ledger} ledger, "
          f"{args.customers:,} customers; builds: v1 {build_v1:.1f} s, v2 {build_v2:.1f} s (beside the live v1)")
    print(f"HTTP statuses: {({int(k): int(v) for k, v in statuses.items()})}; throughput "
          f"{result.throughput:,.0f} decisions/s")
    print(f"answers by version: v1 {int((versions == 'v1').sum()):,}, v2 {int((versions == 'v2').sum()):,}")
    rate = result.throughput
    windows = [("before the first switch", 0, switches[0]["at_decision"])]
    for s in switches:
        start = s["at_decision"]
        windows.append((f"2 s after the switch to {s['version']}", start, start + int(2 * rate)))
        old = versions[start + int(s["answered_ms"] / 1e3 * rate):start + int(2 * rate)]
        s["old_after"] = int((old != s["version"]).sum())
    windows.append(("after", switches[-1]["at_decision"] + int(2 * rate), args.requests))
    print("\n| switch | at decision | POST answered (ms) | answers of the old version after the POST returned |")
    print("|---|---:|---:|---:|")
    for s in switches:
        print(f"| {s['previous']} → {s['version']} | {s['at_decision']:,} | {s['answered_ms']:.1f} | "
              f"{s['old_after']:,} |")
    print("\n| requests | n | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, lo, hi in windows:
        latency = result.latency_ms[lo:hi]
        latency = latency[np.isfinite(latency)]
        if len(latency):
            p50, p90, p99 = np.percentile(latency, [50, 90, 99])
            print(f"| {name} | {len(latency):,} | {p50:.1f} | {p90:.1f} | {p99:.1f} | {latency.max():.1f} |")
    exponent = totals["exponent"]
    print(f"\nledger: at risk {audit['at_risk'] / 10**exponent:,.2f} of the cap {totals['cap'] / 10**exponent:,.2f}; "
          f"capped {totals['capped']:,}; rows {audit['decisions']:,}; running totals equal the rows: "
          f"{audit['at_risk'] == totals['committed'] + totals['paid'] and audit['decisions'] == totals['decisions']}")


if __name__ == "__main__":
    main()

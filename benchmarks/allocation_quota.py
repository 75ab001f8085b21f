"""Quota/risk customer allocation (EOCA eqs. 1–5): objective and wall time of HA, manual, exact and prices.

    .venv/bin/python benchmarks/allocation_quota.py               # N = 10k, 200k, 1M (all methods), 10M (HA, prices)
    .venv/bin/python benchmarks/allocation_quota.py --quick       # N = 10k, 100k: a smoke run
    .venv/bin/python benchmarks/allocation_quota.py --exact-10m   # also min-cost flow at 10M (~2 min, ~8 GB)

Instances come from ``promokit.experiments.allocation.instances.make_quota_instance`` (float32 ETV, k = 8, seeded). The
objective is shown as % of the optimum: the exact solver's objective when it ran, otherwise prices' certified
dual bound D(p) (≥ the optimum, so the % is a lower bound). ``gap`` is prices' D(p) − objective relative to the
objective: 0 (up to float rounding) proves prices optimal. Peak memory of prices is measured with tracemalloc
(NumPy and Python allocations during the call, inputs excluded; OR-Tools' C++ heap is not traced, and prices
only hands it the margin users).
"""

from __future__ import annotations

import argparse
import json
import os
import tracemalloc

import numpy as np

from promokit.allocation.quota import solve_quota
from promokit.experiments.allocation.instances import make_quota_instance

PAPER_HA_PERCENT_AT_200K = 98.75  # EOCA paper, section 5.1.2: HA reaches 98.75 % of the IP objective at 200k users
LARGE = 10_000_000


def run(instance, method: str) -> dict:
    plan = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method=method)
    row = {"method": method, "seconds": plan.seconds, "objective": plan.objective, "upper_bound": plan.upper_bound}
    if method == "prices":
        row["certified"] = plan.diagnostics["certified"]
        row["relative_gap"] = plan.gap / abs(plan.objective)
    return row


def peak_memory(instance, method: str) -> float:
    """GB allocated at the peak of one more solve, above what was allocated before it."""
    tracemalloc.start()
    solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method=method)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e9


def bench_size(n_users: int, n_types: int, seed: int, methods: list[str], memory: bool) -> list[dict]:
    load_before = os.getloadavg()[0]
    instance = make_quota_instance(n_users, n_types, seed=seed, dtype=np.float32)
    rows = [run(instance, method) for method in methods]
    if memory:
        next(row for row in rows if row["method"] == "prices")["peak_gb"] = peak_memory(instance, "prices")
    exact = next((row for row in rows if row["method"] == "exact"), None)
    optimum = exact["objective"] if exact else next(row["upper_bound"] for row in rows if row["method"] == "prices")
    load_after = os.getloadavg()[0]
    for row in rows:
        row.update(users=n_users, types=n_types, seed=seed, reference="exact" if exact else "prices' D(p)",
                   percent=100 * row["objective"] / optimum, load=(load_before, load_after))
        if exact:
            row["speedup"] = exact["seconds"] / row["seconds"]
    return rows


def print_table(rows: list[dict]) -> None:
    print("| users | method | seconds | objective | % of optimum | vs exact | prices' gap | peak GB | load 1-min |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        percent = f"{row['percent']:.4f}" + ("" if row["reference"] == "exact" else " (≥)")
        speed = f"{row['speedup']:.1f}×" if "speedup" in row else "–"
        gap = "–"
        if "relative_gap" in row:
            gap = f"{row['relative_gap']:.1e}" + (" certified" if row["certified"] else "")
        peak = f"{row['peak_gb']:.2f}" if "peak_gb" in row else "–"
        print(f"| {row['users']:,} | {row['method']} | {row['seconds']:.2f} | {row['objective']:.6g} | {percent} "
              f"| {speed} | {gap} | {peak} | {row['load'][0]:.1f}→{row['load'][1]:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 200_000, 1_000_000, LARGE])
    parser.add_argument("--types", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="N = 10k and 100k only")
    parser.add_argument("--exact-10m", action="store_true", help="also run min-cost flow at 10M users and more")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    sizes = [10_000, 100_000] if args.quick else args.sizes
    warm_up = make_quota_instance(1000, args.types, seed=args.seed)  # imports (OR-Tools, SciPy) are not timed
    for method in ("prices", "ha", "manual", "exact"):
        run(warm_up, method)
    rows = []
    for n_users in sizes:
        large = n_users >= LARGE
        methods = (["prices", "ha"] + (["exact"] if args.exact_10m else []) if large
                   else ["prices", "ha", "manual", "exact"])
        rows += bench_size(n_users, args.types, args.seed, methods, memory=large)
        print(f"done {n_users:,} users", flush=True)
    print_table(rows)
    for row in rows:
        if row["method"] == "ha" and row["users"] == 200_000 and row["reference"] == "exact":
            print(f"\nHA at 200k users: {row['percent']:.2f} % of exact (the EOCA paper reports "
                  f"{PAPER_HA_PERCENT_AT_200K} % of its IP solver on its own data)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()

"""Budget allocation at scale: ``solve_budget`` against HiGHS and against the paper's dual search.

Instances: response scores ``f_ij = 1 − exp(−h_i · r_j^a_i)`` (a Weibull cumulative hazard, the shape of the
paper's eq. 10) with ``h ~ Gamma(2, 0.05)``, ``a ~ U(0.6, 1.4)``, levels ``r = 1 … 10`` (``--levels`` of them),
float32 (``--float64`` to switch). Two budget forms:

- ``ratio``: eq. 16 with B = 4 (value f, cost f·(r − 4), budget 0);
- ``absolute``: Σ r·f ≤ total, the total 30 % of the way from the cheapest to the dearest spend.

For each size and form the table prints ``solve_budget``'s wall time, its objective over the LP optimum from
HiGHS (``solve_budget_lp``, run while N ≤ ``--lp-max``: HiGHS needs about a minute at 30k × 10), its
objective over the upper bound it certifies itself (the dual value at λ*, which equals the LP optimum: that
ratio is the only one at sizes HiGHS cannot reach), the requests it had to hull exactly, the solver's own
peak memory (peak RSS during the solve minus RSS before it, inputs excluded) and, for N ≤
``--bisection-max``, the paper's dual search as usually written: bisection on λ with a full NumPy argmax per
step (40 halvings after bracketing), its time and objective ratio. Then a micro-benchmark of the real-time
rule ``decide``: one request per call and batches.

Usage::

    .venv/bin/python benchmarks/allocation_budget.py              # 10k … 10M × 10 levels, ~5 minutes
    .venv/bin/python benchmarks/allocation_budget.py --quick      # 10k and 100k: a smoke run
    .venv/bin/python benchmarks/allocation_budget.py --json out.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from promokit.allocation.budget import absolute_form, decide, ratio_form, solve_budget
from promokit.allocation.budget_lp import solve_budget_lp

RATIO_B = 4.0
ABSOLUTE_SHARE = 0.3
BISECTION_STEPS = 40


def parse_size(text: str) -> int:
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def scores(n_rows: int, n_levels: int, dtype, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hazard-shaped scores, generated in blocks so that 10⁷ rows need no float64 copy of the whole matrix."""
    rng = np.random.default_rng(seed)
    levels = np.linspace(1.0, 10.0, n_levels)
    out = np.empty((n_rows, n_levels), dtype)
    for lo in range(0, n_rows, 1 << 20):
        m = min(1 << 20, n_rows - lo)
        h, a = rng.gamma(2.0, 0.05, (m, 1)), rng.uniform(0.6, 1.4, (m, 1))
        out[lo:lo + m] = -np.expm1(-h * levels ** a)
    return out, levels


def problem(form: str, f: np.ndarray, levels: np.ndarray):
    if form == "ratio":
        return ratio_form(f, levels, RATIO_B)
    value, cost, _ = absolute_form(f, levels, 0.0)
    low = float(cost.min(axis=1).sum(dtype=np.float64))
    high = float(cost.max(axis=1).sum(dtype=np.float64))
    return value, cost, low + ABSOLUTE_SHARE * (high - low)


def bisection(value, cost, budget) -> tuple[float, float]:
    """The paper's dual search as commonly written: bisection on λ, full argmax per step; (objective, seconds)."""
    started = time.perf_counter()
    rows = np.arange(value.shape[0])

    def plan(lam):
        choice = (value - np.float32(lam) * cost).argmax(axis=1)
        return choice, float(cost[rows, choice].sum(dtype=np.float64))

    low, high = 0.0, 1.0
    if plan(0.0)[1] <= budget:
        high = 0.0
    else:
        while plan(high)[1] > budget:
            low, high = high, 2 * high
        for _ in range(BISECTION_STEPS):
            middle = (low + high) / 2
            low, high = (low, middle) if plan(middle)[1] <= budget else (middle, high)
    choice, spent = plan(high)
    assert spent <= budget
    return float(value[rows, choice].sum(dtype=np.float64)), time.perf_counter() - started


class Memory:
    """Peak RSS of a block over the RSS before it, from /proc (Linux), resetting the peak with clear_refs.

    Freed heap memory is first handed back to the system (glibc ``malloc_trim``), or blocks that reuse it
    would look free.
    """

    def __enter__(self):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
        self.resettable = _reset_peak()
        self.before = _status("VmRSS")
        self.peak_mb = None
        return self

    def __exit__(self, *exc):
        peak = _status("VmHWM") if self.resettable else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.peak_mb = (peak - self.before) / 1024
        self.total_mb = peak / 1024


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _status(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])  # kB
    return 0


def decide_rates(n_levels: int, dtype) -> list[dict]:
    f, levels = scores(65_536, n_levels, dtype, seed=99)
    value, cost, budget = ratio_form(f, levels, RATIO_B)
    lam = solve_budget(value, cost, budget).lam
    rows = []
    calls = 20_000
    started = time.perf_counter()
    for i in range(calls):
        decide(value[i], cost[i], lam)
    rows.append({"batch": 1, "decisions_per_s": calls / (time.perf_counter() - started)})
    for batch in (16, 256, 4096, 65_536):
        repeats = max(3, 200_000 // batch)
        started = time.perf_counter()
        for r in range(repeats):
            lo = (r * batch) % (65_536 - batch + 1)
            decide(value[lo:lo + batch], cost[lo:lo + batch], lam)
        rows.append({"batch": batch, "decisions_per_s": repeats * batch / (time.perf_counter() - started)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10k,30k,100k,1M,10M")
    parser.add_argument("--forms", default="ratio,absolute")
    parser.add_argument("--levels", type=int, default=10)
    parser.add_argument("--lp-max", type=parse_size, default=30_000)
    parser.add_argument("--bisection-max", type=parse_size, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="10k and 100k requests, LP at 10k only")
    parser.add_argument("--json", help="write every figure to this file")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.lp_max = "10k,100k", 10_000
    dtype = np.float64 if args.float64 else np.float32
    console = Console(width=200)
    load_before = os.getloadavg()
    console.print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
                  f"{load_before[0]:.2f} (1 min) before the run; scores {np.dtype(dtype).name}")

    table = Table(title=f"solve_budget, {args.levels} levels")
    for column in ("N", "form", "seconds", "cpu s", "obj / LP", "obj / bound", "1 − obj/bound", "slack",
                   "hulled", "sweeps", "solver MB", "LP s", "bisect s", "bisect obj / LP (or bound)"):
        table.add_column(column, justify="right")
    results = []
    for size in map(parse_size, args.sizes.split(",")):
        f, levels = scores(size, args.levels, dtype, args.seed)
        for form in args.forms.split(","):
            value, cost, budget = problem(form, f, levels)
            cpu = time.process_time()
            with Memory() as memory:
                plan = solve_budget(value, cost, budget, workers=args.workers)
            cpu = time.process_time() - cpu
            row = {"n": size, "levels": args.levels, "form": form, "seconds": plan.seconds, "cpu_seconds": cpu,
                   "objective": plan.objective, "upper_bound": plan.upper_bound, "gap": plan.gap,
                   "slack": plan.slack, "lam": plan.lam, "hulled_rows": plan.hulled_rows, "sweeps": plan.sweeps,
                   "solver_peak_mb": memory.peak_mb, "process_peak_mb": memory.total_mb}
            if size <= args.lp_max:
                lp = solve_budget_lp(value, cost, budget)
                row |= {"lp_objective": lp.objective, "lp_seconds": lp.seconds}
            if size <= args.bisection_max:
                row["bisection_objective"], row["bisection_seconds"] = bisection(value, cost, budget)
            reference = row.get("lp_objective", plan.upper_bound)
            table.add_row(f"{size:,}", form, f"{plan.seconds:.3f}", f"{cpu:.2f}",
                          f"{plan.objective / row['lp_objective']:.8f}" if "lp_objective" in row else "–",
                          f"{plan.objective / plan.upper_bound:.8f}", f"{plan.gap / plan.upper_bound:.1e}",
                          f"{plan.slack:.1e}",
                          f"{plan.hulled_rows:,}", str(plan.sweeps), f"{memory.peak_mb:,.0f}",
                          f"{row['lp_seconds']:.1f}" if "lp_seconds" in row else "–",
                          f"{row['bisection_seconds']:.2f}" if "bisection_seconds" in row else "–",
                          f"{row['bisection_objective'] / reference:.8f}" if "bisection_objective" in row else "–")
            results.append(row)
            del value, cost
        del f
    console.print(table)
    console.print("obj / bound: objective over the dual bound solve_budget certifies (= the LP optimum); cpu s: "
                  "process CPU time of the solve (> seconds when both threads work); solver MB: peak RSS during "
                  "solve_budget minus RSS before it (the inputs are not counted).")

    rates = decide_rates(args.levels, dtype)
    rate_table = Table(title="decide (eqs. 19–20), one process, one thread")
    rate_table.add_column("requests per call", justify="right")
    rate_table.add_column("decisions / s", justify="right")
    for rate in rates:
        rate_table.add_row(f"{rate['batch']:,}", f"{rate['decisions_per_s']:,.0f}")
    console.print(rate_table)
    load_after = os.getloadavg()
    console.print(f"load average {load_after[0]:.2f} (1 min) after the run; process peak RSS "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"load_before": load_before, "load_after": load_after, "dtype": np.dtype(dtype).name,
                       "solve": results, "decide": rates}, handle, indent=2)


if __name__ == "__main__":
    main()

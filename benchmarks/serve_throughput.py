"""Decision service throughput: decisions/s and client-side latency by ledger, server workers and clients.

Campaign: 100k synthetic customers × 5 levels (:func:`promokit.allocation.synthetic.make_budget_instance`),
λ* from ``ratio_form`` + ``solve_budget`` (what ``allocate budget --ratio B`` does) and a cap far above what
the run can reserve, so the cap never binds. For each ledger (SQLite in the campaign directory; PostgreSQL at
``--pg-url``, its tables dropped first), number of server workers and number of concurrent clients, a fresh
ledger and a fresh ``promokit serve`` process take a 500-request warm-up, then up to ``--requests`` decisions
for random customers with unique request_ids, stopped after ``--seconds``. The load generator
(:mod:`promokit.serve.replay`) runs in this process on the same 2 cores.

Besides decisions/s and client-side p50/p99, the markdown table shows where the CPU goes while the measured requests
run: the server processes (utime + stime of this process's descendants from ``/proc/<pid>/stat``), the load
generator (``resource.getrusage`` of this process), the PostgreSQL backends (every process named ``postgres``)
and everything else on the machine (busy time from ``/proc/stat`` minus those three: a cell with several
"other" CPU seconds shared its cores with another job and reads low), in CPU seconds and per decision.

Usage::

    .venv/bin/python benchmarks/serve_throughput.py                       # 12 cells, ~4 minutes
    .venv/bin/python benchmarks/serve_throughput.py --ledgers sqlite --workers 1 --clients 64
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.allocation.budget import ratio_form, solve_budget
from promokit.allocation.synthetic import make_budget_instance
from promokit.serve.campaign import build_campaign
from promokit.serve.replay import run_replay, running_service

LEVELS = (1.0, 2.0, 3.0, 5.0, 8.0)
RATIO_B = 3.0
TOKEN = "bench-token"
PG_URL = "postgresql://postgres@127.0.0.1/test"
TABLES = ("decisions", "budget", "per_level", "timeline", "schema_version")
WARM_UP = 500
TICK = os.sysconf("SC_CLK_TCK")


def make_campaign(out: Path, n_customers: int, cap: float) -> Path:
    """A ratio-budget campaign of ``n_customers`` synthetic customers at λ* of eq. 16 with B = ``RATIO_B``."""
    instance = make_budget_instance(n_customers, levels=LEVELS, seed=0)
    plan = solve_budget(*ratio_form(instance.scores, instance.levels, RATIO_B))
    report = out / "report.json"
    report.write_text(json.dumps({"problem": "budget", "form": "ratio", "B": RATIO_B, "lam": plan.lam,
                                  "levels": list(LEVELS)}))
    scores = pd.DataFrame({"user_id": [f"c{i}" for i in range(n_customers)],
                           **{f"score_{level:g}": instance.scores[:, j] for j, level in enumerate(LEVELS)}})
    build_campaign(out / "campaign", scores, report, cap=cap)
    return out / "campaign"


def fresh_ledger(campaign: Path, ledger: str, pg_url: str) -> str | None:
    """Empty the ledger the next service will use; returns its ``--ledger`` URL (None: the campaign's SQLite)."""
    if ledger == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            (campaign / f"ledger.sqlite{suffix}").unlink(missing_ok=True)
        return None
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    return pg_url


def _stats() -> list[tuple[int, int, str, float]]:
    """(pid, ppid, name, CPU seconds) of every process readable in /proc."""
    rows = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                text = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
            rows.append((int(entry.name), int(rest[1]), name, (int(rest[11]) + int(rest[12])) / TICK))
    return rows


def cpu_seconds() -> dict[str, float]:
    """CPU seconds used so far by the server (descendants of this process), this process and PostgreSQL."""
    rows = _stats()
    children: dict[int, list[int]] = {}
    for pid, ppid, _, _ in rows:
        children.setdefault(ppid, []).append(pid)
    descendants, stack = set(), [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            descendants.add(child)
            stack.append(child)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    busy = Path("/proc/stat").read_text().split("\n")[0].split()[1:]  # user nice system idle iowait irq softirq steal
    return {"server": sum(cpu for pid, _, _, cpu in rows if pid in descendants),
            "client": usage.ru_utime + usage.ru_stime,
            "database": sum(cpu for _, _, name, cpu in rows if name == "postgres"),
            "machine": sum(int(busy[k]) for k in (0, 1, 2, 5, 6, 7)) / TICK}


def measure(campaign: Path, ledger: str, workers: int, clients: int, args, rng) -> dict:
    url = fresh_ledger(campaign, ledger, args.pg_url)
    customers = rng.integers(0, args.customers, WARM_UP + args.requests)
    bodies = [{"request_id": f"{ledger}-{workers}-{clients}-{i}", "customer_id": f"c{c}"}
              for i, c in enumerate(customers)]
    with running_service(campaign, TOKEN, ledger=url, workers=workers) as base:
        run_replay(base, TOKEN, bodies[:WARM_UP], clients)
        before = cpu_seconds()
        result = run_replay(base, TOKEN, bodies[WARM_UP:], clients, max_seconds=args.seconds)
        after = cpu_seconds()
    sent = int((result.statuses != 0).sum())
    cpu = {key: after[key] - before[key] for key in after}
    cpu["other"] = cpu.pop("machine") - cpu["server"] - cpu["client"] - cpu["database"]
    return {"ledger": ledger, "workers": workers, "clients": clients, "sent": sent,
            "per_second": result.throughput, **result.percentiles(), "errors": int((result.statuses != 200).sum())
            - (len(result.statuses) - sent), "seconds": result.seconds, **{f"cpu_{k}": v for k, v in cpu.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="Decisions per cell (after the warm-up).")
    parser.add_argument("--seconds", type=float, default=20.0, help="Time bound per cell.")
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--pg-url", default=PG_URL)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"promokit serve: {args.customers:,} customers × {len(LEVELS)} levels, ≤ {args.requests:,} decisions or "
          f"{args.seconds:g} s per cell, {os.cpu_count()} cores\n")
    print("| ledger | workers | clients | decisions | decisions/s | p50 ms | p99 ms | errors | server CPU s | "
          "client CPU s | PG CPU s | other CPU s | server ms/dec | client ms/dec |")
    print("| --- |" + " ---: |" * 13)
    with tempfile.TemporaryDirectory() as tmp:
        campaign = make_campaign(Path(tmp), args.customers, cap=1e12)
        for ledger in args.ledgers.split(","):
            for workers in map(int, args.workers.split(",")):
                for clients in map(int, args.clients.split(",")):
                    row = measure(campaign, ledger, workers, clients, args, rng)
                    per = lambda key: f"{1e3 * row[key] / max(row['sent'], 1):.2f}"
                    print(f"| {ledger} | {workers} | {clients} | {row['sent']:,} | {row['per_second']:,.0f} | "
                          f"{row['p50']:.2f} | {row['p99']:.2f} | {row['errors']} | {row['cpu_server']:.1f} | "
                          f"{row['cpu_client']:.1f} | {row['cpu_database']:.1f} | {row['cpu_other']:.1f} | "
                          f"{per('cpu_server')} | {per('cpu_client')} |", flush=True)


if __name__ == "__main__":
    main()

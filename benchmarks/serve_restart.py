"""Decision service recovery: seconds from a restart after ``kill -9`` under load to the first 200, and no
acknowledged decision lost.

Campaign: 100k synthetic customers × 5 levels (``make_campaign`` of ``serve_throughput.py``). For each ledger
(SQLite in the campaign directory; PostgreSQL at ``--pg-url``, its tables dropped first) and number of workers,
``--repeats`` rounds of:

1. a fresh ledger and ``promokit serve`` in its own process group, started and waited for (first 200 to
   ``POST /v1/decisions``: the cold start);
2. ``--load-seconds`` of load from ``--clients`` concurrent clients (:func:`promokit.serve.replay.replay`,
   unique request_ids, random known customers), then ``kill -9`` of the whole process group while requests are
   in flight (the load stops at the kill: the connections fail);
3. the same command again; timed from the ``Popen`` until the first 200 answer to ``POST /v1/decisions``
   (``first 200``, polled every 20 ms), and, with several workers, from the parent's start until it spawned its
   first worker (``parent → workers``: the start times of the processes in ``/proc``; the rest of ``first 200``
   is the workers' own start-up);
4. the ledger audit, read directly from the database: every request_id answered 200 before the kill is in
   ``decisions`` (``lost`` counts those that are not, must be 0), the rows are unique, and the budget row's
   running ``decisions`` and ``committed`` equal those recomputed from the rows.

``--breakdown`` then times the start-up's parts in fresh interpreters (no load): the interpreter itself,
``import promokit.cli``, ``import uvicorn`` (+ uvloop, httptools), ``import promokit.serve.app``,
``load_campaign`` (parquet read, checks, id index), the parent's ledger open (migrate + cap), ``create_app`` as
a worker runs it (which loads the campaign again) and the app's lifespan start-up; then ``python -X importtime``
of the service's imports, self time summed by package.

Usage::

    .venv/bin/python benchmarks/serve_restart.py                   # 2 ledgers × 1, 2 workers × 3 rounds, ~2 min
    .venv/bin/python benchmarks/serve_restart.py --ledgers sqlite --workers 2 --repeats 5 --breakdown
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from serve_throughput import (PG_URL, TICK, TOKEN, _stats, fresh_ledger, free_port, make_campaign, post_decision,
                              promokit_command, stop, tree, uptime)

from promokit.serve.replay import replay

POLL = 0.02


def _start_and_cmdline(pid: int) -> tuple[float, str]:
    """A process's start time (seconds after boot) and command line."""
    text = Path(f"/proc/{pid}/stat").read_text()
    start_ticks = int(text[text.rindex(")") + 2:].split()[19])
    return start_ticks / TICK, Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def workers_spawned(parent: int) -> float | None:
    """Seconds from the parent's start to its first worker's (None with one worker: no child process). uvicorn's
    parent loads everything, then spawns the workers (multiprocessing's resource tracker is not one)."""
    try:
        began, _ = _start_and_cmdline(parent)
        starts = [_start_and_cmdline(pid)[0] for pid in tree(_stats(), parent) - {parent}
                  if "resource_tracker" not in _start_and_cmdline(pid)[1]]
    except (OSError, ValueError):
        return None
    return min(starts) - began if starts else None


def start(command: list[str], port: int, tag: str, limit: float = 120.0) -> tuple[subprocess.Popen, dict]:
    """Popen the service in its own process group; seconds until the first 200 (and until uvicorn's parent
    spawned its workers, when there are several)."""
    stderr = tempfile.TemporaryFile()
    began = time.monotonic()
    process = subprocess.Popen(command, env={**os.environ, "PROMOKIT_API_TOKEN": TOKEN}, stdout=subprocess.DEVNULL,
                               stderr=stderr, start_new_session=True)
    times, attempt, acknowledged = {}, 0, []
    base = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            stderr.seek(0)
            raise RuntimeError(f"promokit serve exited with {process.returncode}: "
                               f"{stderr.read().decode(errors='replace')[-3000:]}")
        request_id = f"{tag}-probe-{attempt}"
        attempt += 1
        # once the socket listens, a connection waits in the backlog until a worker takes it: answered at once then
        if post_decision(base, request_id, timeout=limit) == 200:
            times["first_200"] = time.monotonic() - began
            times["spawned"] = workers_spawned(process.pid)
            acknowledged.append(request_id)
            break
        if time.monotonic() - began > limit:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise RuntimeError(f"promokit serve did not answer 200 within {limit:g} s")
        time.sleep(POLL)
    times["probes"] = acknowledged
    stderr.close()
    return process, times


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def ledger_audit(url: str) -> dict:
    """Request ids in ``decisions`` and the budget row against the rows, read with the bare drivers."""
    query_rows = "SELECT request_id FROM decisions"
    query_check = ("SELECT (SELECT decisions FROM budget WHERE id = 1), COUNT(*), "
                   "(SELECT committed FROM budget WHERE id = 1), "
                   "COALESCE(SUM(CASE WHEN state = 'issued' THEN face ELSE 0 END), 0) FROM decisions")
    if url.startswith("sqlite"):
        import sqlite3

        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            ids = [r[0] for r in db.execute(query_rows)]
            check = db.execute(query_check).fetchone()
        finally:
            db.close()
    else:
        import psycopg

        with psycopg.connect(url) as db:
            ids = [r[0] for r in db.execute(query_rows)]
            check = db.execute(query_check).fetchone()
    running, counted, committed, recomputed = check
    return {"ids": set(ids), "rows": len(ids), "unique": len(set(ids)) == len(ids),
            "consistent": running == counted and abs(float(committed) - float(recomputed)) <= 1e-6 * max(
                1.0, abs(float(recomputed)))}


def round_trip(campaign: Path, ledger: str, workers: int, args, rng, number: int) -> dict:
    url = fresh_ledger(campaign, ledger, args.pg_url) or f"sqlite:///{campaign / 'ledger.sqlite'}"
    port = free_port()
    command = promokit_command(campaign, port, workers, None if ledger == "sqlite" else url)
    tag = f"{ledger}-{workers}-{number}-{int(time.time())}"
    process, cold = start(command, port, f"{tag}-cold")
    n = 200_000
    bodies = [{"request_id": f"{tag}-{i}", "customer_id": f"c{c}"}
              for i, c in enumerate(rng.integers(0, args.customers, n))]
    result = {}

    def load() -> None:
        result["replay"] = asyncio.run(replay(f"http://127.0.0.1:{port}", TOKEN, bodies, args.clients, timeout=5.0,
                                              max_seconds=args.load_seconds + 0.3))

    thread = threading.Thread(target=load)
    thread.start()
    time.sleep(args.load_seconds)
    kill_group(process)
    thread.join(30)
    acknowledged = [b["request_id"] for b, s in zip(bodies, result["replay"].statuses) if s == 200]
    acknowledged += cold["probes"]
    process, warm = start(command, port, f"{tag}-restart")
    acknowledged += warm["probes"]
    stop(process)
    audit = ledger_audit(url)
    lost = [rid for rid in acknowledged if rid not in audit["ids"]]
    return {"ledger": ledger, "workers": workers, "round": number, "cold_first_200": cold["first_200"],
            "acknowledged": len(acknowledged), "failed": int((result["replay"].statuses == -1).sum()),
            "spawned": warm["spawned"], "first_200": warm["first_200"], "rows": audit["rows"],
            "lost": len(lost), "unique": audit["unique"], "consistent": audit["consistent"]}


# ---- where the start-up time goes ---------------------------------------------------------------------------
BREAKDOWN = r"""
import json, os, sys, time, asyncio
began = time.perf_counter()
marks = {}
def mark(name):
    global began
    now = time.perf_counter(); marks[name] = now - began; began = now
import promokit.cli; mark("import promokit.cli (typer)")
import uvicorn, uvloop, httptools, uvicorn.loops.uvloop, uvicorn.protocols.http.httptools_impl
mark("import uvicorn, uvloop, httptools")
import promokit.serve.app as app_module; mark("import promokit.serve.app")
from promokit.campaign.directory import load_campaign
from promokit.serve.ledger import Ledger
loaded = load_campaign(sys.argv[1]); mark("load_campaign (parent)")
url = sys.argv[2]
config = loaded.config
try:
    ledger = Ledger(url, exponent=config.currency_exponent); ledger.open(config.cap_minor)
except (AttributeError, TypeError):
    ledger = Ledger(url); ledger.open(config.cap)
ledger.close(); mark("ledger open + migrate (parent)")
os.environ["PROMOKIT_CAMPAIGN"], os.environ["PROMOKIT_LEDGER"] = sys.argv[1], url
app = app_module.app_from_environment(); mark("create_app (worker: load_campaign again, FastAPI, routes)")
async def lifespan():
    async with app.router.lifespan_context(app):
        mark("lifespan start-up (ledger open, gc.freeze, writer)")
asyncio.run(lifespan())
print(json.dumps(marks))
"""


def breakdown(campaign: Path, ledgers: list[str], pg_url: str, repeats: int) -> None:
    env = {**os.environ, "PROMOKIT_API_TOKEN": TOKEN}
    print("\nWhere a start-up's seconds go (fresh interpreters, no load; median of "
          f"{repeats}; a worker repeats everything from `import uvicorn` on, except the parent's ledger open):\n")
    for ledger in ledgers:
        url = fresh_ledger(campaign, ledger, pg_url) or f"sqlite:///{campaign / 'ledger.sqlite'}"
        runs, bare = [], []
        for _ in range(repeats):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare.append(time.perf_counter() - began)
            began = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", BREAKDOWN, str(campaign), url], env=env, check=True,
                                  capture_output=True, text=True)
            total = time.perf_counter() - began
            marks = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append({"python start-up + exit": total - sum(marks.values()), **marks, "total": total})
        print(f"| {ledger} | seconds |\n| --- | ---: |")
        print(f"| bare `python -c pass` | {statistics.median(bare):.3f} |")
        for key in runs[0]:
            print(f"| {key} | {statistics.median(r[key] for r in runs):.3f} |")
        print()
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import promokit.serve.app, uvicorn"],
                          capture_output=True, text=True, env=env)
    packages: dict[str, float] = {}
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[0].startswith("import time:") and parts[0].split(":")[1].strip().isdigit():
            name = parts[2].strip()
            package = ".".join(name.split(".")[:2]) if name.startswith("promokit.") else name.split(".")[0]
            packages[package] = packages.get(package, 0.0) + int(parts[0].split(":")[1]) / 1e6  # self time
    print("`python -X importtime -c 'import promokit.serve.app, uvicorn'`: self time summed by package (s)\n")
    print("| package | seconds |\n| --- | ---: |")
    for name, seconds in sorted(packages.items(), key=lambda kv: -kv[1])[:15]:
        print(f"| {name} | {seconds:.3f} |")
    print(f"| all | {sum(packages.values()):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--load-seconds", type=float, default=3.0)
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--breakdown", action="store_true", help="Also time the parts of a start-up.")
    parser.add_argument("--out", type=Path, help="Write every round as JSON here.")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    load_before = uptime()
    print(f"promokit serve restart after kill -9 under load: {args.customers:,} customers, {args.clients} clients "
          f"for {args.load_seconds:g} s before the kill, {os.cpu_count()} cores, load average {load_before}\n")
    print("| ledger | workers | round | cold start s | acknowledged | failed (at and after the kill) "
          "| restart: parent → workers s | restart → first 200 s | ledger rows | lost | unique | budget = rows |")
    print("| --- |" + " ---: |" * 11, flush=True)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        campaign = make_campaign(Path(tmp), args.customers, cap=1e12)
        for ledger in args.ledgers.split(","):
            for workers in map(int, args.workers.split(",")):
                for number in range(1, args.repeats + 1):
                    row = round_trip(campaign, ledger, workers, args, rng, number)
                    rounds.append(row)
                    print(f"| {ledger} | {workers} | {number} | {row['cold_first_200']:.2f} | "
                          f"{row['acknowledged']:,} | {row['failed']:,} | "
                          f"{'–' if row['spawned'] is None else format(row['spawned'], '.2f')} | "
                          f"{row['first_200']:.2f} | {row['rows']:,} | {row['lost']} | {row['unique']} | "
                          f"{row['consistent']} |", flush=True)
        print(f"\n| ledger | workers | restart → first 200 s, median (max) of {args.repeats} | lost |\n"
              "| --- | ---: | ---: | ---: |")
        for ledger in args.ledgers.split(","):
            for workers in map(int, args.workers.split(",")):
                cell = [r for r in rounds if r["ledger"] == ledger and r["workers"] == workers]
                times = [r["first_200"] for r in cell]
                print(f"| {ledger} | {workers} | {statistics.median(times):.2f} ({max(times):.2f}) | "
                      f"{sum(r['lost'] for r in cell)} |")
        print(f"\nload average before {load_before}, after {uptime()} (1, 5, 15 min)")
        if args.breakdown:
            breakdown(campaign, args.ledgers.split(","), args.pg_url, args.repeats)
    if args.out:
        args.out.write_text(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()

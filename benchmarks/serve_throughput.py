"""Decision service throughput against a bare FastAPI app: decisions/s, latency and server CPU per decision, by
ledger, server workers and clients, measured in one run with an independent client (wrk).

Campaign: 100k synthetic customers × 5 levels (:func:`promokit.experiments.allocation.instances.make_budget_instance`),
λ* from ``ratio_form`` + ``solve_budget`` (what ``allocate budget --ratio B`` does) and a cap far above what
the run can reserve, so the cap never binds. For each cell (ledger × workers × clients) two servers run one
after the other under the same uvicorn settings (uvloop, httptools, log level warning, no access log, the
cell's worker count), each on a fresh ledger (SQLite WAL in a temporary directory; PostgreSQL at ``--pg-url``,
its tables dropped first):

- **promokit**: ``promokit serve`` on the campaign;
- **bare**: ``benchmarks/bare_app.py``, a FastAPI app whose one POST endpoint parses a tiny pydantic body and
  does ONE INSERT per request (SQLite WAL with ``synchronous=NORMAL``, or PostgreSQL) and answers a small JSON.

Each takes ``--warm-up`` seconds of load, then ``--seconds`` of measured load from ``wrk`` (threads =
min(clients, 2), connections = clients, keep-alive). A Lua script gives every request a unique request_id
(``<run>-<thread>-<n>``), a random known customer id and the bearer token, POSTs JSON to ``/v1/decisions`` and
prints, from wrk's ``done()`` hook, JSON with the requests, duration, latency percentiles and errors (``status``
= answers with HTTP status ≥ 400). Latency is wrk's: from writing the request to reading the whole answer, on
the same cores as the server.

CPU while the measured window runs: the server's process tree (utime + stime of the uvicorn parent and its
descendants from ``/proc/<pid>/stat``), wrk (``RUSAGE_CHILDREN``), the PostgreSQL backends (every process
named ``postgres``) and everything else on the machine (busy time from ``/proc/stat`` minus those: several
"other" CPU seconds mean the cell shared its cores with another job and reads low). The ``uptime`` load
averages before and after the run are printed with the table. ``promokit / bare`` is the ratio of
decisions/s measured back to back in the same cell, which is what to compare on a busy machine.

Usage::

    .venv/bin/python benchmarks/serve_throughput.py                      # 12 cells × 2 apps, ~6 minutes
    .venv/bin/python benchmarks/serve_throughput.py --ledgers sqlite --workers 1 --clients 8 --seconds 5
    .venv/bin/python benchmarks/serve_throughput.py --out serve.json     # every figure as JSON too
    .venv/bin/python benchmarks/serve_throughput.py --apps promokit      # without the bare app
    .venv/bin/python benchmarks/serve_throughput.py --ledgers sqlite --workers 1 --clients 8 --explore 0,0.05
                                                            # each cell without and with an exploration bucket

Needs ``wrk`` (Debian: ``apt-get install -y wrk``).

``make_campaign``, ``fresh_ledger``, ``TOKEN`` and ``PG_URL`` are also used by ``serve_race.py`` and
``serve_restart.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from promokit.allocation.budget import ratio_form, solve_budget
from promokit.campaign import build as build_campaign
from promokit.experiments.allocation.instances import make_budget_instance

LEVELS = (1.0, 2.0, 3.0, 5.0, 8.0)
RATIO_B = 3.0
TOKEN = "bench-token"
PG_URL = "postgresql://postgres@127.0.0.1/test"
TABLES = ("decisions", "budget", "per_level", "timeline", "schema_version")
BARE_TABLE = "bare_decisions"
TICK = os.sysconf("SC_CLK_TCK")
HERE = Path(__file__).resolve().parent
UVICORN = ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning", "--no-access-log"]
WRK_MISSING = "wrk is not installed: `apt-get install -y wrk` (Debian/Ubuntu), then run this again"

#: The wrk script: unique request_ids across threads (setup() numbers the threads), random known customers.
#: Arguments after ``--``: run tag, number of customers, bearer token.
WRK_LUA = r"""
local threads, counter = 0, 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function init(args)
  tag, customers = args[1], tonumber(args[2])
  math.randomseed(tid * 1000003 + os.time())
  wrk.method = "POST"
  wrk.headers["Authorization"] = "Bearer " .. args[3]
  wrk.headers["Content-Type"] = "application/json"
end
function request()
  counter = counter + 1
  local body = string.format('{"request_id":"%s-%d-%d","customer_id":"c%d"}', tag, tid, counter,
                             math.random(0, customers - 1))
  return wrk.format("POST", "/v1/decisions", nil, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\nWRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,' ..
    '"write":%d,"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
"""


def make_campaign(out: Path, n_customers: int, cap: float, explore: float = 0.0) -> Path:
    """A ratio-budget campaign of ``n_customers`` synthetic customers at λ* of eq. 16 with B = ``RATIO_B``, exploring
    the share ``explore`` of them."""
    out.mkdir(parents=True, exist_ok=True)
    instance = make_budget_instance(n_customers, levels=LEVELS, seed=0)
    plan = solve_budget(*ratio_form(instance.scores, instance.levels, RATIO_B))
    report = out / "report.json"
    report.write_text(json.dumps({"problem": "budget", "form": "ratio", "B": RATIO_B, "lam": plan.lam,
                                  "levels": list(LEVELS)}))
    scores = pd.DataFrame({"user_id": [f"c{i}" for i in range(n_customers)],
                           **{f"score_{level:g}": instance.scores[:, j] for j, level in enumerate(LEVELS)}})
    # explore only when asked: the script also runs against code from before exploration (older PYTHONPATH)
    build_campaign(out / "campaign", scores, report, cap=cap, **({"explore": explore} if explore else {}))
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


def fresh_bare_ledger(directory: Path, ledger: str, pg_url: str) -> str:
    """Empty the bare app's table (created here, so its workers never race to create it); returns its URL."""
    from bare_app import SCHEMA

    if ledger == "sqlite":
        path = directory / "bare.sqlite"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        import sqlite3

        with sqlite3.connect(path) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
        return f"sqlite:///{path}"
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {BARE_TABLE}")
        conn.execute(SCHEMA)
    return pg_url


# ---- CPU accounting --------------------------------------------------------------------------------------
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


def tree(rows, root: int) -> set[int]:
    """``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for pid, ppid, _, _ in rows:
        children.setdefault(ppid, []).append(pid)
    found, stack = {root}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def cpu_seconds(server_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the server's process tree, reaped children (wrk), PostgreSQL, the machine."""
    rows = _stats()
    server = tree(rows, server_pid)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = Path("/proc/stat").read_text().split("\n")[0].split()[1:]  # user nice system idle iowait irq softirq steal
    return {"server": sum(cpu for pid, _, _, cpu in rows if pid in server),
            "client": usage.ru_utime + usage.ru_stime,
            "database": sum(cpu for _, _, name, cpu in rows if name == "postgres"),
            "machine": sum(int(busy[k]) for k in (0, 1, 2, 5, 6, 7)) / TICK}


def uptime() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    return ", ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---- servers ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post_decision(base: str, request_id: str, customer: str = "c0", timeout: float = 2.0) -> int:
    """Status of one POST /v1/decisions (0 when there is no answer)."""
    data = json.dumps({"request_id": request_id, "customer_id": customer}).encode()
    request = urllib.request.Request(f"{base}/v1/decisions", data=data, method="POST", headers={
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0


def promokit_command(campaign: Path, port: int, workers: int, ledger: str | None) -> list[str]:
    return [sys.executable, "-m", "promokit.cli", "serve", "--campaign", str(campaign), "--host", "127.0.0.1",
            "--port", str(port), "--workers", str(workers)] + (["--ledger", ledger] if ledger else [])


def bare_command(port: int, workers: int) -> list[str]:
    return [sys.executable, "-m", "uvicorn", "bare_app:create_app", "--factory", "--app-dir", str(HERE),
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), *UVICORN]


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the server, SIGKILL its process group after 10 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def running(command: list[str], env: dict, port: int, startup_seconds: float = 60.0):
    """Run a server in its own process group and yield (process, base URL) once POST /v1/decisions answers 200."""
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=stderr,
                                   start_new_session=True)
        try:
            give_up, attempt = time.monotonic() + startup_seconds, 0
            while post_decision(base, f"ready-{port}-{attempt}") != 200:
                attempt += 1
                if process.poll() is not None or time.monotonic() > give_up:
                    stderr.seek(0)
                    tail = stderr.read().decode(errors="replace")[-3000:]
                    raise RuntimeError(f"{command[2:4]} did not answer 200 (exit code {process.poll()}); "
                                       f"stderr ends with:\n{tail}")
                time.sleep(0.05)
            yield process, base
        finally:
            stop(process)


# ---- load ------------------------------------------------------------------------------------------------
def wrk(base: str, clients: int, seconds: float, tag: str, customers: int, script: Path) -> dict:
    """One wrk run; the JSON its done() hook printed, with requests/s and latencies in ms."""
    command = ["wrk", "-t", str(min(clients, 2)), "-c", str(clients), "-d", f"{seconds:g}s", "--timeout", "10s",
               "-s", str(script), base, "--", tag, str(customers), TOKEN]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    line = next((l for l in done.stdout.splitlines() if l.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    out = json.loads(line.removeprefix("WRK_JSON "))
    seconds = out["duration_us"] / 1e6
    return {"requests": out["requests"], "seconds": seconds, "per_second": out["requests"] / seconds,
            **{f"p{q}": out[f"p{q}_us"] / 1e3 for q in (50, 90, 99)}, "max": out["max_us"] / 1e3,
            "non_2xx": out["status"], "socket_errors": out["connect"] + out["read"] + out["write"] + out["timeout"]}


def measure(app: str, command: list[str], env: dict, port: int, clients: int, args, script: Path, tag: str) -> dict:
    with running(command, env, port) as (process, base):
        wrk(base, clients, args.warm_up, f"{tag}w", args.customers, script)
        before = cpu_seconds(process.pid)
        load = wrk(base, clients, args.seconds, tag, args.customers, script)
        after = cpu_seconds(process.pid)
    cpu = {key: after[key] - before[key] for key in after}
    cpu["other"] = cpu.pop("machine") - cpu["server"] - cpu["client"] - cpu["database"]
    n = max(load["requests"], 1)
    return {"app": app, **load, **{f"cpu_{k}": v for k, v in cpu.items()},
            **{f"ms_per_request_{k}": 1e3 * v / n for k, v in cpu.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="Measured seconds per cell and app.")
    parser.add_argument("--warm-up", type=float, default=2.0, help="Seconds of load before each measured window.")
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--apps", default="promokit,bare", help="promokit,bare | promokit | bare")
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--explore", default="0", help="Exploration shares, each a campaign measured in every cell "
                                                      "(0,0.05: without and with a 5 %% bucket, back to back).")
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--out", type=Path, help="Write every figure as JSON here.")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit(WRK_MISSING)
    apps = args.apps.split(",")
    started, load_before = time.time(), uptime()
    print(f"promokit serve vs bare FastAPI + 1 INSERT: {args.customers:,} customers × {len(LEVELS)} levels, "
          f"{args.warm_up:g} s warm-up + {args.seconds:g} s wrk per cell and app, {os.cpu_count()} cores, "
          f"load average {load_before} (1, 5, 15 min)\n", flush=True)
    shares = [float(share) for share in args.explore.split(",")]
    columns = ["ledger", "workers", "clients", "explore", "decisions/s", "p50 ms", "p99 ms", "non-2xx (promokit / bare)",
               "server ms CPU / dec", "bare req/s", "bare p99 ms", "bare server ms CPU / req", "promokit / bare",
               "CPU bare / promokit", "wrk ms / req", "PG ms / dec (bare)", "other CPU s"]
    print("| " + " | ".join(columns) + " |\n|" + " --- |" * 3 + " ---: |" * (len(columns) - 3), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        campaigns = {share: make_campaign(tmp / f"explore-{share:g}", args.customers, cap=1e12, explore=share)
                     for share in shares} if "promokit" in apps else {}
        script = tmp / "decisions.lua"
        script.write_text(WRK_LUA)
        sys.path.insert(0, str(HERE))
        for ledger in args.ledgers.split(","):
            for workers in map(int, args.workers.split(",")):
                for clients in map(int, args.clients.split(",")):
                    for share in shares:
                        cell = {"ledger": ledger, "workers": workers, "clients": clients, "explore": share}
                        tag = f"{ledger[0]}{workers}x{clients}e{share:g}-{int(time.time())}"
                        if "promokit" in apps:
                            url = fresh_ledger(campaigns[share], ledger, args.pg_url)
                            command = promokit_command(campaigns[share], port := free_port(), workers, url)
                            cell["promokit"] = measure("promokit", command, {"PROMOKIT_API_TOKEN": TOKEN}, port,
                                                       clients, args, script, tag)
                        if "bare" in apps:
                            url = fresh_bare_ledger(tmp, ledger, args.pg_url)
                            cell["bare"] = measure("bare", bare_command(port := free_port(), workers),
                                                   {"BARE_LEDGER": url}, port, clients, args, script, tag)
                        rows.append(cell)
                        print(table_row(cell), flush=True)
    if len(shares) > 1 and "promokit" in apps:
        print_exploration_cost(rows, shares[0])
    load_after = uptime()
    print(f"\nload average before {load_before}, after {load_after} (1, 5, 15 min); {time.time() - started:.0f} s "
          f"in all. 'other CPU s': CPU used by other processes during the promokit window (and the bare one).")
    if args.out:
        args.out.write_text(json.dumps({"load_before": load_before, "load_after": load_after,
                                        "seconds": args.seconds, "warm_up": args.warm_up,
                                        "customers": args.customers, "cores": os.cpu_count(), "cells": rows},
                                       indent=1))


def print_exploration_cost(rows: list[dict], base: float) -> None:
    """promokit's decisions/s with each exploration share against ``base``'s in the same cell."""
    print(f"\ndecisions/s with exploration against explore {base:g}, same cell:")
    reference = {(r["ledger"], r["workers"], r["clients"]): r["promokit"] for r in rows if r["explore"] == base}
    for row in rows:
        if row["explore"] != base:
            before = reference[row["ledger"], row["workers"], row["clients"]]
            print(f"  {row['ledger']} × {row['workers']} worker(s), {row['clients']} clients, explore "
                  f"{row['explore']:g}: {row['promokit']['per_second']:,.0f}/s vs {before['per_second']:,.0f}/s = "
                  f"{row['promokit']['per_second'] / before['per_second']:.3f}× (p99 {row['promokit']['p99']:.2f} vs "
                  f"{before['p99']:.2f} ms; server ms CPU / decision {row['promokit']['ms_per_request_server']:.3f} "
                  f"vs {before['ms_per_request_server']:.3f})")


def table_row(cell: dict) -> str:
    p, b = cell.get("promokit"), cell.get("bare")
    dash = "–"
    fmt = lambda row, key, spec: dash if row is None else format(row[key], spec)
    ratio = dash if not (p and b) else f"{p['per_second'] / b['per_second']:.2f}×"
    cpu_ratio = dash if not (p and b) else f"{b['ms_per_request_server'] / p['ms_per_request_server']:.2f}×"
    database = dash if cell["ledger"] != "postgresql" else " ".join(
        f"{row['ms_per_request_database']:.2f}" if i == 0 else f"({row['ms_per_request_database']:.2f})"
        for i, row in enumerate(r for r in (p, b) if r))
    other = " / ".join(f"{row['cpu_other']:.1f}" for row in (p, b) if row)
    wrk_cpu = " / ".join(f"{row['ms_per_request_client']:.3f}" for row in (p, b) if row)
    errors = " / ".join(f"{row['non_2xx']}" + (f" (+{row['socket_errors']} socket)" if row["socket_errors"] else "")
                        for row in (p, b) if row)
    return (f"| {cell['ledger']} | {cell['workers']} | {cell['clients']} | {cell['explore']:g} | "
            f"{fmt(p, 'per_second', ',.0f')} | "
            f"{fmt(p, 'p50', '.2f')} | {fmt(p, 'p99', '.2f')} | {errors} | {fmt(p, 'ms_per_request_server', '.3f')} | "
            f"{fmt(b, 'per_second', ',.0f')} | {fmt(b, 'p99', '.2f')} | {fmt(b, 'ms_per_request_server', '.3f')} | "
            f"{ratio} | {cpu_ratio} | {wrk_cpu} | {database} | {other} |")


if __name__ == "__main__":
    main()

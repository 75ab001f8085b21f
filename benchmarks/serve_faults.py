"""Gray failures of the ledger, on each ledger: what the decision service answers during and after each fault, and
what it left in the ledger.

Faults (``--faults`` selects; a PostgreSQL fault is skipped for SQLite and the other way round):

- ``lowered-cap``: version ``v1`` (cap 1,000) is served until ~300 decisions put money at risk near the cap; ``v2``
  with a cap of 300 is switched to, then the service is restarted on it: the decisions after each must answer 200;
- ``switch-race``: two workers; ``--pairs`` times, ``POST /v1/campaign/switch`` to the other version and at once back;
  after each pair (the workers read ``live.json`` every second), ``live.json``, every worker and the ledger's cap
  must be on the version asked last;
- ``stall`` (PostgreSQL): the service reaches PostgreSQL through a TCP relay that stops moving bytes for
  ``--stall-seconds`` (45) while every connection stays open, as a wedged server or a dropped route does;
- ``row-lock`` (PostgreSQL): another session holds the budget row ``FOR UPDATE`` for ``--lock-seconds`` (20);
- ``write-lock`` (SQLite): another process holds ``BEGIN IMMEDIATE`` for ``--lock-seconds`` (20).

During a timed fault (the last three), ``--clients`` clients send decisions with unique request_ids at a steady rate
(one each per ``--interval`` s) from ``--before`` s before the fault to ``--after`` s after it, and a prober asks
``/v1/status``, ``/metrics``, ``/`` and ``/readyz`` in turn every 100 ms. Printed per fault: answers by status,
p50/p99/max latency of the decisions and of the health answers, before, during and after, the ledger states the
health answers gave, the recovery time (from the end of the fault to the first decision answered 200, and to the
first health answer saying ``up``), the rows written by requests answered otherwise than 200, the acknowledged
decisions missing from the ledger, and whether the budget row equals the sums over the rows.

Then the SQLite throughput at 8 connections (one worker) against ``benchmarks/bare_app.py``, back to back, with
wrk (``serve_throughput.py``'s harness), ``--rounds`` times (the issue's target: ≥ 0.8×).

Usage::

    .venv/bin/python benchmarks/serve_faults.py            # the issue's durations, both ledgers: ~9 minutes
    .venv/bin/python benchmarks/serve_faults.py --quick    # 5 s faults, 6 pairs, 5 s throughput windows: ~4 minutes
    .venv/bin/python benchmarks/serve_faults.py --ledgers postgresql --faults stall,row-lock
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
from serve_refresh import build_version, post_switch
from serve_throughput import (
    PG_URL,
    TOKEN,
    WRK_LUA,
    bare_command,
    free_port,
    fresh_bare_ledger,
    fresh_ledger,
    make_campaign,
    measure,
    promokit_command,
    uptime,
)
from sqlalchemy import text

from promokit.campaign.versions import live_pointer
from promokit.serve import Ledger, run_replay, running_service

PROBED = ("/v1/status", "/metrics", "/", "/readyz")
FAULTS = {"lowered-cap": None, "switch-race": None, "stall": "postgresql", "row-lock": "postgresql",
          "write-lock": "sqlite"}


class StallingRelay:
    """127.0.0.1:``port`` → ``target``, a thread per direction of each connection; :meth:`stall` stops moving bytes
    (connections stay open, new ones are accepted and connected), :meth:`resume` moves them again."""

    def __init__(self, target: tuple[str, int]):
        self.target, self.flowing = target, threading.Event()
        self.flowing.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                return
            self.sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.resume()
        self.listener.close()
        for end in self.sockets:
            end.close()


class Prober(threading.Thread):
    """Asks :data:`PROBED` in turn every ``every`` seconds until stopped: (perf_counter, path, status, ms, state)."""

    def __init__(self, base: str, every: float = 0.1):
        super().__init__(daemon=True)
        self.base, self.every, self.rows, self.done = base, every, [], threading.Event()

    def run(self) -> None:
        k = 0
        while not self.done.is_set():
            path, started = PROBED[k % len(PROBED)], time.perf_counter()
            status, state = 0, None
            try:
                with urllib.request.urlopen(self.base + path, timeout=10) as answer:
                    status, body = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                status, body = exc.code, exc.read()
            except OSError:
                body = b""
            if path in ("/v1/status", "/readyz") and body:
                data = json.loads(body)
                state = data["ledger"]["state"] if path == "/v1/status" else data["ledger"]
            self.rows.append((started, path, status, (time.perf_counter() - started) * 1e3, state))
            k += 1
            self.done.wait(max(0.0, started + self.every - time.perf_counter()))


def stats(ms: np.ndarray) -> str:
    if not len(ms):
        return "– / – / –"
    p50, p99 = np.percentile(ms, [50, 99])
    return f"{p50:.1f} / {p99:.1f} / {ms.max():.1f}"


def by_status(statuses) -> str:
    values, counts = np.unique(np.asarray(statuses), return_counts=True)
    return ", ".join(f"{int(v)}: {int(c):,}" for v, c in zip(values, counts)) or "–"


def ledger_check(url: str, result, tag: str) -> dict:
    """Acknowledged decisions missing from the ledger, rows written by requests not answered 200, and whether the
    budget row equals the sums over the rows."""
    ledger = Ledger(url)
    with ledger.reader.connect() as conn:
        rows = {r[0] for r in conn.execute(text("SELECT request_id FROM decisions WHERE request_id LIKE :p"),
                                           {"p": f"{tag}%"})}
    audit, totals = ledger.audit(), ledger.totals()
    ledger.close()
    sent = result.statuses != 0
    ids = np.array([f"{tag}{i}" for i in range(len(result.statuses))])
    acknowledged, refused = set(ids[result.statuses == 200]), set(ids[sent & (result.statuses != 200)])
    return {"lost": len(acknowledged - rows), "written_by_refused": len(refused & rows), "refused": len(refused),
            "totals_equal_rows": audit["decisions"] == totals["decisions"] == audit["distinct_ids"]
            and audit["at_risk"] == totals["at_risk"]}


def timed_fault(name: str, kind: str, root: Path, args) -> dict:
    """One timed fault on a fresh ledger of ``kind``: load and probes before, during and after it."""
    direct = fresh_ledger(root, kind, args.pg_url) or f"sqlite:///{root / 'ledger.sqlite'}"
    relay = StallingRelay((urlsplit(direct).hostname, urlsplit(direct).port or 5432)) if name == "stall" else None
    served = direct if relay is None else direct.replace(urlsplit(direct).netloc.split("@")[-1],
                                                         f"127.0.0.1:{relay.port}")
    seconds = args.stall_seconds if name == "stall" else args.lock_seconds
    start, end = fault(name, direct, relay, seconds)
    tag, total = f"{name}-", args.before + seconds + args.after
    bodies = [{"request_id": f"{tag}{i}", "customer_id": f"c{i % args.customers}"}
              for i in range(int(total / args.interval * args.clients * 1.2) + 100)]
    try:
        with running_service(root, TOKEN, ledger=served, workers=args.workers, deadline=args.deadline) as base:
            prober, replayed = Prober(base), {}
            load = threading.Thread(target=lambda: replayed.update(result=run_replay(
                base, TOKEN, bodies, args.clients, max_seconds=total, interval=args.interval)))
            load.start()
            prober.start()
            time.sleep(args.before)
            start()
            t0 = time.perf_counter()  # the fault holds from here (a lock taken, the relay stalled)
            time.sleep(seconds)
            end()
            t1 = time.perf_counter()
            load.join()
            prober.done.set()
            prober.join()
    finally:
        if relay is not None:
            relay.close()
    result = replayed["result"]
    return {"fault": name, "ledger": kind, "seconds": seconds, "t0": t0, "t1": t1, "result": result,
            "probes": prober.rows, **ledger_check(direct, result, tag)}


def fault(name: str, url: str, relay: StallingRelay | None, seconds: float):
    """(start, end) of the fault ``name``."""
    if name == "stall":
        return relay.stall, relay.resume
    if name == "row-lock":
        import psycopg

        holder = {}

        def start():
            holder["conn"] = psycopg.connect(url)  # a transaction: the lock is held until it ends
            holder["conn"].execute("SELECT * FROM budget WHERE id = 1 FOR UPDATE")

        return start, lambda: holder["conn"].close()
    holder = {}

    def start_sqlite():
        holder["p"] = subprocess.Popen([sys.executable, "-c", (
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"), url.removeprefix("sqlite:///")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder["p"].stdout.readline().strip() == "locked"

    return start_sqlite, lambda: holder["p"].communicate("\n", timeout=30)


def report_timed(run: dict, deadline: float) -> list[str]:
    result, t0, t1 = run["result"], run["t0"], run["t1"]
    sent, answered = result.sent_at, result.statuses != 0
    rows = []
    for phase, low, high in (("before", -np.inf, t0), ("during", t0, t1), ("after", t1, np.inf)):
        pick = answered & (sent >= low) & (sent < high)
        probes = [p for p in run["probes"] if low <= p[0] < high]
        states = sorted({p[4] for p in probes if p[4]})
        rows.append(f"| {run['ledger']} | {run['fault']} {run['seconds']:g} s | {phase} | "
                    f"{by_status(result.statuses[pick])} | {stats(result.latency_ms[pick & (result.statuses > 0)])} | "
                    f"{by_status([p[2] for p in probes])} | {stats(np.array([p[3] for p in probes]))} | "
                    f"{', '.join(states) or '–'} |")
    ok = answered & (result.statuses == 200) & (sent >= t1)
    back = (sent[ok] + result.latency_ms[ok] / 1e3).min() - t1 if ok.any() else float("nan")
    up = [p[0] + p[3] / 1e3 - t1 for p in run["probes"] if p[0] >= t1 and p[4] == "up"]
    during = answered & (sent >= t0) & (sent < t1) & (result.statuses > 0)
    late = int((result.latency_ms[during] > (deadline + 0.1) * 1e3).sum())
    health_late = sum(1 for p in run["probes"] if t0 <= p[0] < t1 and p[3] > 100)
    rows.append(f"| {run['ledger']} | {run['fault']} {run['seconds']:g} s | summary | recovery: decisions "
                f"{back:.2f} s, health up {min(up, default=float('nan')):.2f} s | decisions past deadline + 100 ms: "
                f"{late} | health answers past 100 ms: {health_late} | rows written by {run['refused']:,} refused: "
                f"{run['written_by_refused']}; acknowledged lost: {run['lost']}; totals = rows: "
                f"{run['totals_equal_rows']} |")
    return rows


def lowered_cap(kind: str, args, tmp: Path) -> str:
    """Serve v1 near its cap, switch to v2 whose cap is below the money at risk, then restart on v2."""
    root = tmp / f"cap-{kind}"
    root.mkdir()
    build_version(root, args.customers, 0, "v1", "1000")
    build_version(root, args.customers, 1, "v2", "300")
    url = fresh_ledger(root, kind, args.pg_url)
    bodies = lambda tag: [{"request_id": f"{tag}{i}", "customer_id": f"c{i}"} for i in range(300)]  # noqa: E731
    with running_service(root, TOKEN, ledger=url, deadline=args.deadline) as base:
        first = run_replay(base, TOKEN, bodies("a"), 8)
        before = json.loads(urllib.request.urlopen(f"{base}/v1/status", timeout=10).read())["budget"]
        post_switch(base, "v2")
        switched = run_replay(base, TOKEN, bodies("b"), 8)
        status = json.loads(urllib.request.urlopen(f"{base}/v1/status", timeout=10).read())["budget"]
    with running_service(root, TOKEN, ledger=url, deadline=args.deadline) as base:
        restarted = run_replay(base, TOKEN, bodies("c"), 8)
    ledger = Ledger(url or f"sqlite:///{root / 'ledger.sqlite'}")
    audit, totals = ledger.audit(), ledger.totals()
    fives = sum(int((r.statuses >= 500).sum()) for r in (first, switched, restarted))
    return (f"| {kind} | lowered cap 1,000 → 300 | before {by_status(first.statuses)}; after the switch "
            f"{by_status(switched.statuses)}; after the restart {by_status(restarted.statuses)} | 5xx: {fives} | "
            f"at risk {before['at_risk']:,.2f} before the switch, {totals['at_risk'] / 100:,.2f} at the end; overdraft "
            f"{status['overdraft']:,.2f} | totals = rows: {audit['at_risk'] == totals['at_risk']} |")


def switch_race(kind: str, args, tmp: Path) -> str:
    """``--pairs`` switch-and-back pairs with two workers, each pair checked once the workers have followed."""
    root = tmp / f"race-{kind}"
    root.mkdir()
    build_version(root, args.customers, 0, "v1", "1000")
    build_version(root, args.customers, 1, "v2", "900")
    caps, url, right, answered = {"v1": 100_000, "v2": 90_000}, fresh_ledger(root, kind, args.pg_url), 0, []
    with running_service(root, TOKEN, ledger=url, workers=2, deadline=args.deadline) as base:
        for k in range(args.pairs):
            back = ("v1", "v2")[k % 2]
            away = "v2" if back == "v1" else "v1"
            for version in (away, back):
                answer, ms = post_switch(base, version)
                answered.append(ms)
            time.sleep(args.settle)
            workers = {}
            for _ in range(100):
                status = json.loads(urllib.request.urlopen(f"{base}/v1/status", timeout=10).read())
                workers[status["pid"]] = status["campaign"]["model_version"]
                if len(workers) == 2:
                    break
            cap = Ledger(url or f"sqlite:///{root / 'ledger.sqlite'}").totals()["cap"]
            right += live_pointer(root)[0] == back and set(workers.values()) == {back} and cap == caps[back]
    return (f"| {kind} | switch-and-back × {args.pairs}, 2 workers | {right} of {args.pairs} pairs end on the version "
            f"asked last (live.json, both workers, the ledger's cap) | POST answered p50 / max "
            f"{np.median(answered):.1f} / {max(answered):.1f} ms |")


def throughput(args, tmp: Path) -> list[str]:
    """SQLite, one worker, 8 connections: promokit and the bare app back to back, ``--rounds`` times."""
    campaign = make_campaign(tmp / "throughput", args.customers, cap=1e12)
    script = tmp / "decisions.lua"
    script.write_text(WRK_LUA)
    settings = argparse.Namespace(warm_up=2.0, seconds=args.throughput_seconds, customers=args.customers)
    rows = []
    for k in range(args.rounds):
        tag = f"tp{k}-{int(time.time())}"
        fresh_ledger(campaign, "sqlite", args.pg_url)
        mine = measure("promokit", promokit_command(campaign, port := free_port(), 1, None),
                       {"PROMOKIT_API_TOKEN": TOKEN}, port, 8, settings, script, tag)
        bare = measure("bare", bare_command(port := free_port(), 1),
                       {"BARE_LEDGER": fresh_bare_ledger(tmp, "sqlite", args.pg_url)}, port, 8, settings, script,
                       tag + "b")
        rows.append(f"| {k + 1} | {mine['per_second']:,.0f} (p99 {mine['p99']:.1f} ms, {mine['non_2xx']} non-2xx) | "
                    f"{bare['per_second']:,.0f} (p99 {bare['p99']:.1f} ms) | "
                    f"{mine['per_second'] / bare['per_second']:.2f}× | {mine['cpu_other']:.1f} / "
                    f"{bare['cpu_other']:.1f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 s faults, 6 pairs, 5 s throughput windows")
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--deadline", type=float, default=0.5, help="serve --deadline, seconds")
    parser.add_argument("--stall-seconds", type=float, default=45.0)
    parser.add_argument("--lock-seconds", type=float, default=20.0)
    parser.add_argument("--before", type=float, default=3.0)
    parser.add_argument("--after", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.02, help="each client's seconds between requests")
    parser.add_argument("--workers", type=int, default=1, help="workers of the timed faults")
    parser.add_argument("--pairs", type=int, default=24)
    parser.add_argument("--settle", type=float, default=1.5, help="seconds after a pair (workers read live.json "
                                                                 "every second)")
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds (0: none)")
    parser.add_argument("--throughput-seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.quick:
        args.stall_seconds = args.lock_seconds = 5.0
        args.pairs, args.throughput_seconds, args.after = 6, 5.0, 5.0
    print(f"uptime before: {uptime()} (1, 5, 15 min load averages); deadline {args.deadline:g} s", flush=True)
    faults, ledgers = args.faults.split(","), args.ledgers.split(",")
    timed, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for kind in ledgers:
            for name in faults:
                if FAULTS[name] not in (None, kind):
                    continue
                if name == "lowered-cap":
                    lines.append(lowered_cap(kind, args, tmp))
                elif name == "switch-race":
                    lines.append(switch_race(kind, args, tmp))
                else:
                    root = make_campaign(tmp / f"{name}-{kind}", args.customers, cap=1e12)
                    timed.append(timed_fault(name, kind, root, args))
                print(lines[-1] if name in ("lowered-cap", "switch-race") else f"{kind} {name}: done", flush=True)
        tp = throughput(args, tmp) if args.rounds else []
    print("\n| ledger | fault | answers | 5xx | money | ledger |\n|---|---|---|---|---|---|")
    print("\n".join(line for line in lines if "lowered cap" in line))
    print("\n| ledger | fault | result | switch latency |\n|---|---|---|---|")
    print("\n".join(line for line in lines if "switch-and-back" in line))
    print("\n| ledger | fault | phase | decisions by status | decision ms p50 / p99 / max | health by status | "
          "health ms p50 / p99 / max | ledger states seen |\n|---|---|---|---|---:|---|---:|---|")
    for run in timed:
        print("\n".join(report_timed(run, args.deadline)))
    if tp:
        print("\n| round | promokit decisions/s (SQLite, 1 worker, 8 connections) | bare app req/s | promokit / bare | "
              "other CPU s (promokit / bare) |\n|---:|---:|---:|---:|---:|")
        print("\n".join(tp))
    print(f"\nuptime after: {uptime()}")


if __name__ == "__main__":
    main()

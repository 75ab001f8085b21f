"""Gray failures of the ledger: another process holding SQLite's write lock, another session holding PostgreSQL's
budget row, a connection that stalls. Every decision is answered within the deadline (503 with Retry-After when
the ledger cannot commit in time, nothing written), the status endpoints answer at once from the last figures and
say the ledger is degraded or down, and once the fault ends a retry gets one decision."""

import logging
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from fastapi.testclient import TestClient
from test_serve import AUTH, TOKEN
from test_serve_outage import Relay, outage_lines, relayed  # noqa: F401 - a fixture
from test_serve_requests import make_campaign

from promokit.serve import health as health_module
from promokit.serve.app import create_app
from promokit.serve.health import LedgerHealth
from promokit.serve.ledger import Ledger, LedgerTimeout

DEADLINE = 0.5
#: What the tests allow beyond the deadline (the issue's target is 0.1 s; a shared 2-core machine adds jitter).
SLACK = 0.4
HEALTH = ("/v1/status", "/metrics", "/", "/readyz", "/livez")


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch):
    monkeypatch.setattr(health_module, "SETTLE_SECONDS", 0.3)


def timed(call):
    started = time.perf_counter()
    answer = call()
    return answer, time.perf_counter() - started


def decide(client, request_id: str):
    return timed(lambda: client.post("/v1/decisions", json={"request_id": request_id, "customer_id": "c1"},
                                     headers=AUTH))


def during_fault(client, ids: list[str]) -> tuple[list, list, dict]:
    """Decisions of ``ids`` and a round of the health endpoints while the fault lasts: (decisions, health answers,
    the status)."""
    decided = [decide(client, request_id) for request_id in ids]
    probes = [timed(lambda path=path: client.get(path)) for path in HEALTH]
    return decided, probes, client.get("/v1/status").json()


def check_refused(decided: list, probes: list) -> None:
    for answer, seconds in decided:
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
        assert answer.json()["detail"].startswith("ledger unavailable") and seconds < DEADLINE + SLACK, seconds
    for answer, seconds in probes:
        assert answer.status_code == 200 and seconds < SLACK, (answer.request.url, seconds)


def check_once(ledger_url: str, acknowledged: set[str]) -> None:
    """Every acknowledged decision in the ledger once, and the budget row equal to the sums over the rows."""
    ledger = Ledger(ledger_url)
    audit, totals = ledger.audit(), ledger.totals()
    assert audit["distinct_ids"] == audit["decisions"] == totals["decisions"]
    assert audit["at_risk"] == totals["at_risk"] and all(ledger.decision(i) is not None for i in acknowledged)
    ledger.close()


def test_sqlite_locked_by_another_process_answers_within_the_deadline(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="promokit.serve")
    campaign = make_campaign(tmp_path)
    url = f"sqlite:///{campaign.path / 'ledger.sqlite'}"
    with TestClient(create_app(campaign.path, token=TOKEN, deadline=DEADLINE)) as client:
        assert decide(client, "before")[0].status_code == 200
        holder = subprocess.Popen([sys.executable, "-c", (
            "import sqlite3, sys, time\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"
            "c.rollback()\n"), str(campaign.path / "ledger.sqlite")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            decided, probes, status = during_fault(client, ["r1", "r2", "r1"])
        finally:
            holder.communicate("\n", timeout=10)
        time.sleep(0.35)  # past the settling time (0.3 s here)
        again = [decide(client, request_id)[0] for request_id in ("r1", "r2", "r1")]
        after = client.get("/v1/status").json()["ledger"]
    check_refused(decided, probes)
    ledger = status["ledger"]
    assert ledger["state"] == "degraded" and ledger["up"] and ledger["lock_waits"] >= 3 and ledger["deadline_s"] == 0.5
    assert status["budget"]["decisions"] == 1  # read while the lock was held: WAL readers do not wait for it
    assert [a.status_code for a in again] == [200] * 3 and [a.json()["replayed"] for a in again] == [False, False, True]
    assert after["state"] == "up"
    lines = outage_lines(caplog)
    assert [line.split(" (")[0].split(" after")[0] for line in lines] == ["ledger degraded", "ledger up"]
    assert "lock" in lines[0] or "locked" in lines[0]
    check_once(url, {"before", "r1", "r2"})


def test_a_postgresql_row_lock_answers_within_the_deadline(tmp_path, postgres_url, caplog):
    caplog.set_level(logging.WARNING, logger="promokit.serve")
    app = create_app(make_campaign(tmp_path).path, ledger_url=postgres_url, token=TOKEN, deadline=DEADLINE)
    with TestClient(app) as client:
        assert decide(client, "before")[0].status_code == 200
        with psycopg.connect(postgres_url) as other:  # a transaction: the lock is held until it ends
            other.execute("SELECT * FROM budget WHERE id = 1 FOR UPDATE")
            decided, probes, status = during_fault(client, ["r1", "r2", "r1"])
        time.sleep(0.35)
        again = [decide(client, request_id)[0] for request_id in ("r1", "r2", "r1")]
        metrics = client.get("/metrics").text
    check_refused(decided, probes)
    assert status["ledger"]["state"] == "degraded" and status["ledger"]["lock_waits"] >= 3
    assert 'promokit_ledger_state{state="degraded"} 1.0' in metrics or "promokit_ledger_lock_waits_total" in metrics
    assert [a.status_code for a in again] == [200] * 3 and [a.json()["replayed"] for a in again] == [False, False, True]
    check_once(postgres_url, {"before", "r1", "r2"})


class StallingRelay(Relay):
    """A relay that can stop moving bytes (:meth:`stall`) while every connection stays open, as a wedged server or a
    dropped route does, and move them again (:meth:`resume`)."""

    def __init__(self, target):
        self.flowing = threading.Event()
        self.flowing.set()
        super().__init__(target)

    def _pump(self, source, sink) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                sink.sendall(data)
        except OSError:
            pass

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()


def test_a_stalled_postgresql_connection_answers_within_the_deadline(tmp_path, postgres_url):
    from urllib.parse import urlsplit

    where = urlsplit(postgres_url)
    relay = StallingRelay((where.hostname, where.port))
    url = postgres_url.replace(f"{where.hostname}:{where.port}", f"127.0.0.1:{relay.port}")
    try:
        app = create_app(make_campaign(tmp_path).path, ledger_url=url, token=TOKEN, deadline=DEADLINE)
        with TestClient(app) as client:
            assert decide(client, "before")[0].status_code == 200
            while client.get("/v1/status").json()["budget"]["decisions"] < 1:  # a read of it before the stall
                time.sleep(0.01)
            relay.stall()
            decided, probes, status = during_fault(client, ["r1", "r2", "r3"])
            relay.resume()
            give_up, answer = time.monotonic() + 20, None
            while time.monotonic() < give_up:  # the given-up connection is replaced, then decisions commit again
                answer = decide(client, "r1")[0]
                if answer.status_code == 200:
                    break
                time.sleep(0.1)
            again = [answer] + [decide(client, request_id)[0] for request_id in ("r2", "r3")]
    finally:
        relay.close()
    check_refused(decided, probes)
    assert status["ledger"]["state"] in ("degraded", "down") and status["ledger"]["timeouts"] >= 1
    assert status["budget"]["decisions"] == 1  # the last figures read, answered at once
    assert [a.status_code for a in again] == [200] * 3  # each decided once, whether or not a stalled commit landed
    check_once(postgres_url, {"before", "r1", "r2", "r3"})


def test_health_states_change_once_each_with_their_duration(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="promokit.serve")
    health = LedgerHealth(slow_seconds=0.1)
    health.succeeded(0.01)
    assert health.current() == "up"
    health.failed(LedgerTimeout("late"))
    health.failed(LedgerTimeout("late"))
    assert health.current() == "degraded" and health.counts["timeouts"] == 2
    health.failed(psycopg.OperationalError("connection refused"))
    health.failed(psycopg.OperationalError("connection refused"))
    assert health.current() == "down"
    health.succeeded(0.01)
    assert health.current() == "degraded"  # back, with trouble less than the settling time ago
    health.succeeded(0.5)  # slow
    assert health.counts["slow_commits"] == 1
    time.sleep(0.35)
    assert health.current() == "degraded"  # no success since the slow commit
    health.succeeded(0.01)
    assert health.current() == "up"
    lines = outage_lines(caplog)
    assert [line.split(" (")[0].split(" after")[0] for line in lines] == [
        "ledger degraded", "ledger down", "ledger degraded", "ledger up"]
    assert lines[0].startswith("ledger degraded (LedgerTimeout: late) after 0.")
    assert lines[0].endswith(" s up: a request it cannot commit within the deadline answers 503")
    assert lines[-1].startswith("ledger up after 0.") and lines[-1].endswith(" s degraded")


def test_readiness_follows_the_ledger_and_liveness_does_not(tmp_path, relayed):
    url, relay, _ = relayed
    with TestClient(create_app(make_campaign(tmp_path).path, ledger_url=url, token=TOKEN, deadline=DEADLINE)) as c:
        ready = c.get("/readyz")
        relay.cut()
        c.post("/v1/decisions", json={"request_id": "r1", "customer_id": "c1"}, headers=AUTH)
        unready, live = c.get("/readyz"), c.get("/livez")
        relay.restore()
        c.post("/v1/decisions", json={"request_id": "r1", "customer_id": "c1"}, headers=AUTH)
        back = c.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"ready": True, "ledger": "up"})
    assert (unready.status_code, unready.json()) == (503, {"ready": False, "ledger": "down"})
    assert (live.status_code, live.json()) == (200, {"live": True}) and back.status_code == 200


def test_the_deadline_must_be_a_positive_duration(tmp_path, monkeypatch):
    from test_campaign_export import invoke, one_line_error

    from promokit.data import DataError

    monkeypatch.setenv("PROMOKIT_API_TOKEN", TOKEN)
    campaign = make_campaign(tmp_path).path
    one_line_error(invoke("serve", "--campaign", campaign, "--deadline", "0"), "--deadline must be longer than 0")
    one_line_error(invoke("serve", "--campaign", campaign, "--deadline", "300ms"), "--deadline: '300ms' is not a duration")
    monkeypatch.setenv("PROMOKIT_DEADLINE", "-1")
    with pytest.raises(DataError, match=r"deadline \(\$PROMOKIT_DEADLINE\) must be a number of seconds > 0, got '-1'"):
        create_app(campaign, token=TOKEN)


def test_a_failed_attempt_on_the_loop_leaves_nothing_that_waits_for_the_writers_thread(tmp_path):
    """The batch writer tries a batch on the event loop without waiting (``wait=False``) and, the write lock held
    elsewhere, hands it to its thread, which waits on the same connection. Dropping what the failed attempt left
    (its exception, and with it the attempt's frames) must not wait for that thread: a cursor freed then resets its
    statement under the connection's mutex, and held the event loop for the thread's whole wait."""
    import concurrent.futures
    import sqlite3

    from test_serve import request

    path = tmp_path / "l.sqlite"
    ledger = Ledger(f"sqlite:///{path}")
    ledger.open(cap=10000)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            try:
                ledger.apply([request("a")], limit=0.4, wait=False)
            except Exception as exc:  # noqa: BLE001 - kept, as the writer keeps it, while the thread waits
                failed = exc
            waiting = thread.submit(ledger.apply, [request("a")], None, 0.4)
            time.sleep(0.05)  # the thread is in its wait for the lock
            started = time.perf_counter()
            del failed
            dropped = time.perf_counter() - started
            with pytest.raises(Exception, match="locked"):
                waiting.result()
    finally:
        holder.rollback()
    assert dropped < 0.05, dropped
    assert ledger.apply([request("a")])[0]["request_id"] == "a"

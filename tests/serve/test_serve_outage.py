"""The service while its ledger is unreachable: a PostgreSQL ledger behind a TCP relay that the test cuts.

Status, metrics and the page keep answering (the ledger marked down, its last figures and their age), decisions
and outcomes answer 503 and write nothing, the outage is logged once when it starts and once when it ends.
"""

import logging
import os
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest
import sqlalchemy
from fastapi.testclient import TestClient
from test_serve import TOKEN
from test_serve_metrics import families
from test_serve_requests import make_campaign, post

from promokit.serve.app import create_app
from promokit.serve.ledger import Ledger


class Relay:
    """127.0.0.1:``port`` → ``target``, one thread per direction of each connection. :meth:`cut` closes every
    connection and closes new ones as they arrive (the server is gone); :meth:`restore` forwards again."""

    def __init__(self, target: tuple[str, int]):
        self.target, self.up, self.lock = target, True, threading.Lock()
        self.live: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            with self.lock:
                if not self.up:
                    client.close()
                    continue
                server = socket.create_connection(self.target)
                self.live += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            self.up = False
            for end in self.live:
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def restore(self) -> None:
        with self.lock:
            self.up = True

    def close(self) -> None:
        self.cut()
        self.listener.close()
        for end in self.live:
            end.close()


@pytest.fixture
def relayed(postgres_url):
    """``(URL through the relay, relay, URL of the server itself)``."""
    where = urlsplit(postgres_url)
    relay = Relay((where.hostname, where.port))
    try:
        yield postgres_url.replace(f"{where.hostname}:{where.port}", f"127.0.0.1:{relay.port}"), relay, postgres_url
    finally:
        relay.close()


def metric(text: str, name: str, sample: str | None = None, **labels) -> float | None:
    return families(text).get(name, {}).get((sample or name, tuple(sorted(labels.items()))))


def outage_lines(caplog) -> list[str]:
    """The outage's log lines, without the ``worker PID: `` they start with."""
    prefix = f"worker {os.getpid()}: "
    lines = [r.getMessage() for r in caplog.records if r.name == "promokit.serve"]
    assert all(line.startswith(prefix) for line in lines)
    return [line.removeprefix(prefix) for line in lines]


def test_a_ledger_outage_keeps_status_and_metrics_answering_and_is_logged_once(tmp_path, relayed, caplog):
    url, relay, direct = relayed
    caplog.set_level(logging.WARNING, logger="promokit.serve")
    with TestClient(create_app(make_campaign(tmp_path).path, ledger_url=url, token=TOKEN)) as client:
        assert post(client, "/v1/decisions", {"request_id": "r0", "customer_id": "c0"}).status_code == 200
        before = client.get("/v1/status").json()
        assert before["ledger"]["up"] and before["ledger"]["last_read_age_s"] < 1 and before["budget"]["decisions"] == 1

        relay.cut()
        refused = [post(client, "/v1/decisions", {"request_id": "r1", "customer_id": "c1"}) for _ in range(3)]
        outcome = post(client, "/v1/outcomes", {"request_id": "r0", "redeemed": False})
        status, metrics, page = client.get("/v1/status"), client.get("/metrics"), client.get("/")
        again = client.get("/v1/status").json()
        assert outage_lines(caplog)[0].startswith("ledger down (OperationalError: ")
        assert len(outage_lines(caplog)) == 1  # four refused writes and four failed reads: one line

        relay.restore()
        decided = post(client, "/v1/decisions", {"request_id": "r1", "customer_id": "c1"})
        after, metrics_after = client.get("/v1/status").json(), client.get("/metrics").text

    assert [r.status_code for r in refused] == [503] * 3 and outcome.status_code == 503
    assert refused[0].json()["detail"].startswith("ledger unavailable") and refused[0].headers["retry-after"] == "1"
    assert status.status_code == metrics.status_code == page.status_code == 200
    down = status.json()
    assert down["ledger"]["up"] is False and down["ledger"]["state"] == "down" and down["ledger"]["read_ms"] is None
    assert down["ledger"]["error"].startswith("OperationalError: ") and down["ledger"]["down_for_s"] >= 0
    assert down["budget"] == before["budget"] and down["levels"] == before["levels"]  # the last figures read
    assert down["campaign"] == before["campaign"]
    assert 0 < down["ledger"]["last_read_age_s"] <= again["ledger"]["last_read_age_s"]
    assert down["requests"]["by_status"].get("503", 0) >= 4
    text = metrics.text
    assert metric(text, "promokit_ledger_up") == 0.0
    assert metric(text, "promokit_ledger_last_read_age_seconds") > 0
    assert metric(text, "promokit_decisions", "promokit_decisions_total") == 1
    assert metric(text, "promokit_http_requests", "promokit_http_requests_total", route="/v1/decisions",
                  status_class="5xx", status="503") >= 3
    assert metric(text, "promokit_ledger_errors", "promokit_ledger_errors_total") >= 5
    assert 'id="ledger-up" class="down">down<' in page.text

    assert decided.status_code == 200 and not decided.json()["replayed"]  # the refused requests wrote nothing
    assert after["ledger"]["up"] and after["ledger"]["down_for_s"] is None and after["budget"]["decisions"] == 2
    assert metric(metrics_after, "promokit_ledger_up") == 1.0
    lines = outage_lines(caplog)
    assert len(lines) == 2 and lines[1].startswith("ledger up after ") and lines[1].endswith(" s down")
    ledger = Ledger(direct)
    assert ledger.totals()["decisions"] == ledger.audit()["decisions"] == 2
    assert ledger.decision("r0")["redeemed"] is None  # the refused outcome wrote nothing either
    ledger.close()


def test_a_ledger_never_read_answers_a_status_without_figures(tmp_path, monkeypatch, caplog):
    """A worker whose first read fails has no figures to show: the budget is empty, the campaign still there."""
    app = create_app(make_campaign(tmp_path).path, token=TOKEN)
    ledger = app.state.service.ledger

    def lost(*_):
        raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("server closed the connection"))

    caplog.set_level(logging.WARNING, logger="promokit.serve")
    monkeypatch.setattr(ledger, "totals", lost)  # from the worker's start
    with TestClient(app) as client:
        status = client.get("/v1/status").json()
        metrics = client.get("/metrics")
        monkeypatch.undo()
        back = client.get("/v1/status").json()
    assert status["budget"] == {} and status["levels"] == [] and status["campaign"]["cap"] == 1000
    assert status["ledger"] | {"down_for_s": 0, "state_for_s": 0} == {
        "state": "down", "up": False, "why": "Exception: server closed the connection", "deadline_s": 0.5,
        "timeouts": 0, "lock_waits": 0, "slow_commits": 0, "state_for_s": 0,
        "error": "Exception: server closed the connection", "read_ms": None, "last_read_age_s": None, "down_for_s": 0,
        "last_commit_age_s": None}
    assert metrics.status_code == 200 and metric(metrics.text, "promokit_ledger_up") == 0.0
    assert metric(metrics.text, "promokit_ledger_last_read_age_seconds") is None
    assert back["ledger"]["up"] and back["budget"]["cap"] == 1000
    assert [line.split(" (")[0].split(" after")[0] for line in outage_lines(caplog)] == ["ledger down", "ledger up"]


def test_a_server_that_stops_answering_fails_a_connection_in_seconds(postgres_url):
    """A listener that accepts and never answers (a hung server, a black-holed route): the ledger gives up after
    connect_timeout instead of waiting for the kernel; the URL's own setting wins over the default."""
    from promokit.data.errors import DataError
    from promokit.serve.ledger import PG_TIMEOUTS, pg_settings

    assert pg_settings(postgres_url) == PG_TIMEOUTS
    assert "connect_timeout" not in pg_settings(f"{postgres_url}?connect_timeout=1")
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog) and never answers
    try:
        where = urlsplit(postgres_url)
        url = postgres_url.replace(f"{where.hostname}:{where.port}", f"127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        with pytest.raises(DataError, match="cannot open the ledger"):
            Ledger(f"{url}?connect_timeout=1").open(100)
        assert time.monotonic() - started < 5
    finally:
        silent.close()

"""Request metrics over workers and the /metrics exposition (promokit.serve.metrics).

This process records in prometheus_client's in-process registry, shared by every test here, so the tests
compare readings before and after their requests or use route labels of their own. The multiprocess test
runs its workers in subprocesses that find $PROMETHEUS_MULTIPROC_DIR set, as `promokit serve` workers do.
"""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from promokit.serve.metrics import (CONTENT_TYPE, ENV, LATENCY, MULTIPROCESS, RequestMetrics, multiprocess_dir,
                                    record_ledger_error, render_metrics, summary)

STATUS = {
    "budget": {"cap": 200_000.0, "at_risk": 1234.5, "committed": 1000.0, "remaining": 198_765.5, "paid": 234.5,
               "decisions": 1000, "responses": 87, "capped": 3, "replays": 2, "explored": 50},
    "pacing": {"lam": 0.0125, "target": 6.0, "realised_ratio": None},
    "levels": [{"population": "customer", "level": None, "decisions": 400, "responses": 10},
               {"population": "merchant", "level": 10.0, "decisions": 600, "responses": None}],
    "ledger": {"up": True, "read_ms": 1.5, "last_commit_age_s": 0.25},
}


def test_runs_in_process_here():
    assert not MULTIPROCESS  # the other tests rely on it: the subprocess test is the multiprocess one


# --------------------------------------------------------------------------- middleware
class RefuseEarly:
    """Answers 413 before routing when asked, like the service's body limit."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if (b"x-refuse", b"1") in scope.get("headers", []):
            await send({"type": "http.response.start", "status": 413, "headers": []})
            return await send({"type": "http.response.body", "body": b""})
        await self.app(scope, receive, send)


def tiny_app() -> FastAPI:
    app = FastAPI()

    @app.post("/t/decide/{x}")
    async def decide(x: str) -> dict:
        if x == "missing":
            raise HTTPException(404, "no such subject")
        if x == "broken":
            raise RuntimeError("a bug")
        return {"x": x}

    app.add_middleware(RefuseEarly)
    app.add_middleware(RequestMetrics)  # last: outermost, so it sees RefuseEarly's answers too
    return app


def test_middleware_counts_by_route_and_status():
    route = "/t/decide/{x}"
    before = summary(route)
    with TestClient(tiny_app(), raise_server_exceptions=False) as client:
        assert [client.post(f"/t/decide/{x}").status_code for x in ("a", "b", "c", "missing", "broken")] \
               == [200, 200, 200, 404, 500]
        assert client.get("/t/decide/a").status_code == 405  # matched the path, not the method
        assert client.post("/t/decide/a", headers={"x-refuse": "1"}).status_code == 413  # refused before routing
        assert client.get("/nowhere").status_code == 404
    after = summary(route)
    delta = lambda key: {k: v - before[key].get(k, 0) for k, v in after[key].items() if v != before[key].get(k, 0)}
    assert delta("by_class") == {"2xx": 3, "4xx": 4, "5xx": 1}
    assert delta("by_status") == {"200": 3, "404": 2, "405": 1, "413": 1, "500": 1}
    assert delta("by_route") == {route: 7, "other": 1}
    assert after["total"] - before["total"] == 8
    latency = after["latency_ms"]
    assert latency["route"] == route and latency["count"] - before["latency_ms"]["count"] == 3  # 2xx only
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= 1000


def test_latency_percentiles_are_bucket_estimates():
    route = "/t/quantiles"
    child = LATENCY.labels(route, "2xx")
    for seconds, n in ((0.0012, 50), (0.004, 40), (0.2, 10)):
        for _ in range(n):
            child.observe(seconds)
    latency = summary(route)["latency_ms"]
    # rank 50 ends the (1, 1.5] ms bucket; 90 ends (3, 4]; 99 is 9/10 into (100, 250]
    assert latency == {"route": route, "count": 100, "p50": pytest.approx(1.5), "p90": pytest.approx(4.0),
                       "p99": pytest.approx(235.0)}
    for _ in range(10):  # past the last bound: the estimate stops at it
        child.observe(5.0)
    assert summary(route)["latency_ms"]["p99"] == pytest.approx(1000.0)
    assert summary("/t/never")["latency_ms"] == {"route": "/t/never", "count": 0, "p50": None, "p90": None,
                                                  "p99": None}


def test_summary_is_json():
    assert json.loads(json.dumps(summary(), allow_nan=False))["by_class"].keys() >= {"2xx", "4xx", "5xx"}


# --------------------------------------------------------------------------- /metrics
def families(text: str) -> dict:
    """name -> {sample name + sorted labels: value} of a text exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
    return out


def test_render_metrics_holds_the_status_and_the_requests():
    with TestClient(tiny_app()) as client:
        client.post("/t/decide/x")
    errors_before = summary()["ledger_errors"]
    record_ledger_error()
    body = render_metrics(STATUS)
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")
    parsed = families(body.decode())
    value = lambda name, sample=None, **labels: parsed[name][(sample or name, tuple(sorted(labels.items())))]
    assert value("promokit_budget_cap") == 200_000.0 and value("promokit_budget_remaining") == 198_765.5
    assert value("promokit_budget_at_risk") == 1234.5 and value("promokit_budget_committed") == 1000.0
    assert value("promokit_paid", "promokit_paid_total") == 234.5
    assert value("promokit_decisions", "promokit_decisions_total") == 1000
    assert value("promokit_replays", "promokit_replays_total") == 2
    assert value("promokit_explored", "promokit_explored_total") == 50
    assert value("promokit_lambda") == 0.0125 and value("promokit_pacing_target") == 6.0
    assert value("promokit_level_decisions", "promokit_level_decisions_total", population="customer",
                 level="none") == 400
    assert value("promokit_level_decisions", "promokit_level_decisions_total", population="merchant",
                 level="10") == 600
    assert value("promokit_ledger_up") == 1.0 and value("promokit_ledger_read_seconds") == 0.0015
    assert value("promokit_ledger_last_commit_age_seconds") == 0.25
    assert value("promokit_ledger_errors", "promokit_ledger_errors_total") == errors_before + 1
    assert value("promokit_http_requests", "promokit_http_requests_total", route="/t/decide/{x}",
                 status_class="2xx", status="200") >= 1
    assert ("promokit_http_request_duration_seconds_bucket",
            (("le", "+Inf"), ("route", "/t/decide/{x}"), ("status_class", "2xx"))) \
        in parsed["promokit_http_request_duration_seconds"]
    assert b"promokit_decisions_total 1000.0\n" in body  # the line dashboards scrape today
    # None is skipped: no spend per response, no responses sample for the merchant level
    assert "promokit_spend_per_response" not in parsed
    assert [k for k in parsed["promokit_level_responses"] if ("population", "merchant") in k[1]] == []


def test_render_metrics_skips_missing_and_non_finite_values():
    status = {"budget": {"cap": 10.0, "at_risk": math.nan}, "pacing": {"lam": math.inf, "target": None},
              "ledger": {"up": False}}
    parsed = families(render_metrics(status).decode())
    assert {k for k in parsed if k.startswith(("promokit_budget", "promokit_lambda", "promokit_pacing"))} \
        == {"promokit_budget_cap"}
    assert parsed["promokit_ledger_up"] == {("promokit_ledger_up", ()): 0.0}
    assert "promokit_ledger_read_seconds" not in parsed
    assert "promokit_ledger_up" not in families(render_metrics({}).decode())  # no ledger entry, no health


def test_decision_latency_gauge_keeps_its_name():
    route = "/v1/decisions"
    LATENCY.labels(route, "2xx").observe(0.002)
    parsed = families(render_metrics({}).decode())
    quantiles = {dict(labels)["quantile"]: v for (_, labels), v in parsed["promokit_decision_latency_ms"].items()}
    latency = summary()["latency_ms"]  # the process's other tests observed decisions too: compare like with like
    assert quantiles == {q: pytest.approx(latency[f"p{q}"]) for q in ("50", "90", "99")}
    assert 0 < quantiles["50"] <= quantiles["90"] <= quantiles["99"]


# --------------------------------------------------------------------------- several processes
WORKER = textwrap.dedent("""
    import asyncio, sys
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    from promokit.serve.metrics import MULTIPROCESS, RequestMetrics, record_ledger_error

    assert MULTIPROCESS
    app = Starlette(routes=[Route("/code/{code}", lambda r: Response(status_code=int(r.path_params["code"])))])
    app.add_middleware(RequestMetrics)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        pass

    async def main(codes):
        for code in codes:
            await app({"type": "http", "method": "GET", "path": f"/code/{code}", "raw_path": f"/code/{code}".encode(),
                       "root_path": "", "query_string": b"", "headers": [], "scheme": "http",
                       "server": ("127.0.0.1", 80)}, receive, send)

    asyncio.run(main([int(c) for c in sys.argv[1:]]))
    record_ledger_error()
""")

READER = textwrap.dedent("""
    import json
    from promokit.serve.metrics import render_metrics, summary
    print(json.dumps({"summary": summary("/code/{code}"), "text": render_metrics({}).decode()}))
""")


def test_multiprocess_mode_sums_the_workers(tmp_path):
    workers = {"a": [200] * 5 + [404] * 2 + [500], "b": [200] * 3 + [422] + [503] * 2}
    with multiprocess_dir(tmp_path / "metrics") as path:
        started = [subprocess.Popen([sys.executable, "-c", WORKER, *map(str, codes)]) for codes in workers.values()]
        assert [p.wait(timeout=60) for p in started] == [0, 0]
        read = subprocess.run([sys.executable, "-c", READER], capture_output=True, text=True, timeout=60, check=True)
    assert ENV not in os.environ
    assert len(list(path.glob("histogram_*.db"))) == 2  # one file per worker that answered
    result = json.loads(read.stdout)
    totals = result["summary"]
    assert totals["by_class"] == {"2xx": 8, "4xx": 3, "5xx": 3} and totals["total"] == 14
    assert totals["by_status"] == {"200": 8, "404": 2, "422": 1, "500": 1, "503": 2}
    assert totals["by_route"] == {"/code/{code}": 14} and totals["latency_ms"]["count"] == 8
    assert totals["ledger_errors"] == 2
    parsed = families(result["text"])
    assert sum(parsed["promokit_http_requests"].values()) == 14
    count = parsed["promokit_http_request_duration_seconds"][
        ("promokit_http_request_duration_seconds_count", (("route", "/code/{code}"), ("status_class", "2xx")))]
    assert count == 8


def test_multiprocess_dir_empties_and_restores(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "/somewhere/else")
    (tmp_path / "counter_1.db").write_bytes(b"stale")
    (tmp_path / "notes.txt").write_text("kept")
    with multiprocess_dir(tmp_path) as path:
        assert os.environ[ENV] == str(path) and sorted(p.name for p in path.iterdir()) == ["notes.txt"]
    assert os.environ[ENV] == "/somewhere/else" and path.exists()
    with multiprocess_dir() as made:
        assert Path(os.environ[ENV]) == made and made.is_dir()
    assert not made.exists()

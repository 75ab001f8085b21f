"""The decision service against malformed, loose, conflicting and oversized requests, and its money kept exactly."""

import asyncio
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager

import pandas as pd
import psycopg
import pytest
import uvicorn
from fastapi.testclient import TestClient
from test_serve import AUTH, LEVELS, TOKEN, curves, plan_folder, request, score_frame

from promokit.campaign import build as build_campaign
from promokit.campaign.directory import CampaignConfig, load_campaign
from promokit.campaign.money import to_major, to_minor
from promokit.data import DataError
from promokit.serve.app import create_app
from promokit.serve.body_limit import BodyLimit
from promokit.serve.decision_rule import DecisionRule
from promokit.serve.ledger import MIGRATIONS, NO_LEVEL, Ledger, OutcomeRequest


def make_campaign(path, cap="1000", merchants=False, **options):
    f = curves(50)
    plan_folder(path / "plan", f)
    return build_campaign(path / "campaign", score_frame(f), path / "plan", cap=cap,
                          merchants=score_frame(curves(20, seed=4), prefix="m") if merchants else None, **options)


@pytest.fixture
def client(tmp_path):
    with TestClient(create_app(make_campaign(tmp_path, merchants=True).path, token=TOKEN)) as test_client:
        yield test_client


def post(client, path: str, body: bytes | dict):
    if isinstance(body, dict):
        return client.post(path, json=body, headers=AUTH)
    return client.post(path, content=body, headers={**AUTH, "content-type": "application/json"})


def field_errors(response) -> list[str]:
    return [".".join(map(str, error["loc"])) for error in response.json()["detail"]]


# ------------------------------------------------------------------------------------------ malformed bodies

NOT_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("field", ["request_id", "customer_id"])
def test_non_finite_numbers_in_a_decision_are_a_422_naming_the_field(client, field, value):
    fields = {"request_id": '"r1"', "customer_id": '"c1"', field: value}
    response = post(client, "/v1/decisions", ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode())
    assert response.status_code == 422 and field_errors(response) == [f"body.{field}"]


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize("field", ["request_id", "redeemed", "amount"])
def test_non_finite_numbers_in_an_outcome_are_a_422_naming_the_field(client, field, value):
    post(client, "/v1/decisions", {"request_id": "r1", "customer_id": "c1"})
    fields = {"request_id": '"r1"', "redeemed": "true", "amount": "1", field: value}
    response = post(client, "/v1/outcomes", ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode())
    assert response.status_code == 422 and field_errors(response) == [f"body.{field}"]
    assert client.get("/v1/status").json()["budget"]["responses"] == 0


@pytest.mark.parametrize("body, field, kind", [
    ({"request_id": "r1", "redeemed": True, "amount": "5"}, "amount", "number_type"),
    ({"request_id": "r1", "redeemed": True, "amount": False}, "amount", "number_type"),
    ({"request_id": "r1", "redeemed": True, "amount": [5]}, "amount", "number_type"),
    ({"request_id": "r1", "redeemed": "yes"}, "redeemed", "bool_type"),
    ({"request_id": "r1", "redeemed": 1}, "redeemed", "bool_type"),
    ({"request_id": "r1", "redeemed": "true"}, "redeemed", "bool_type"),
    ({"request_id": 7, "redeemed": True}, "request_id", "string_type"),
    ({"request_id": "r1", "redeemed": True, "amount": 0.001}, "amount", "value_error"),  # finer than a cent
    ({"request_id": "r1", "redeemed": True, "amount": -0.5}, "amount", "value_error"),
    ({"request_id": "r1", "redeemed": True, "amount": 1e300}, "amount", "value_error"),
])
def test_outcomes_take_strict_types(client, body, field, kind):
    post(client, "/v1/decisions", {"request_id": "r1", "customer_id": "c1"})
    response = post(client, "/v1/outcomes", body)
    assert response.status_code == 422 and field_errors(response) == [f"body.{field}"]
    assert response.json()["detail"][0]["type"] == kind


@pytest.mark.parametrize("body, where", [
    (b"", "body"), (b"[]", "body"), (b"null", "body"), (b'{"request_id": "r1", ', "body"), (b"\xff\xfe{", "body"),
    (b'{"request_id": "r1", "request_id": "r2", "customer_id": "c1"}', "body"),  # a repeated key
    (b"[" * 5000 + b"]" * 5000, "body"),
    (b'{"request_id": "r1", "customer_id": null}', "body.customer_id"),
    (b'{"request_id": "r1", "customer_id": 17}', "body.customer_id"),
    (b'{"request_id": "r1", "customer_id": "c1", "merchant_id": null}', "body.merchant_id"),
    (b'{"request_id": "r1", "customer_id": "c1", "extra": 1}', "body.extra"),
])
def test_malformed_decision_bodies_are_a_422(client, body, where):
    response = post(client, "/v1/decisions", body)
    assert response.status_code == 422 and where in field_errors(response)


def test_a_merchant_request_to_a_customer_campaign_is_a_422_with_a_detail_list(tmp_path):
    with TestClient(create_app(make_campaign(tmp_path).path, token=TOKEN)) as test_client:
        response = post(test_client, "/v1/decisions", {"request_id": "r", "merchant_id": "m1"})
    assert response.status_code == 422 and field_errors(response) == ["body.merchant_id"]
    assert "no merchant score table" in response.json()["detail"][0]["msg"]


# --------------------------------------------------------------------------------------- idempotency keys


def test_a_request_id_reused_with_another_body_is_a_409_and_writes_nothing(client):
    first = post(client, "/v1/decisions", {"request_id": "k", "customer_id": "c1"})
    assert first.status_code == 200
    for other in ({"request_id": "k", "customer_id": "c2"}, {"request_id": "k", "merchant_id": "c1"},
                  {"request_id": "k", "merchant_id": "m1"}):
        response = post(client, "/v1/decisions", other)
        assert response.status_code == 409 and "request_id 'k' was used for customer 'c1'" in response.text
    again = post(client, "/v1/decisions", {"request_id": "k", "customer_id": "c1"}).json()
    assert again == {**first.json(), "replayed": True}
    budget = client.get("/v1/status").json()["budget"]
    assert budget["decisions"] == 1 and budget["replays"] == 1


def test_a_redemption_of_no_coupon_is_refused_and_changes_nothing(tmp_path):
    campaign = make_campaign(tmp_path, cap="0", when_exhausted="none")  # nothing fits: every answer is no coupon
    with TestClient(create_app(campaign.path, token=TOKEN)) as test_client:
        decision = post(test_client, "/v1/decisions", {"request_id": "n", "customer_id": "c1"}).json()
        assert decision["level"] is None and decision["reason"] == "cap_reached"
        before = test_client.get("/v1/status").json()
        response = post(test_client, "/v1/outcomes", {"request_id": "n", "redeemed": True})
        assert response.status_code == 409 and "issued no coupon" in response.text
        after = test_client.get("/v1/status").json()
        assert after["budget"] == before["budget"] and after["levels"] == before["levels"]
        closed = post(test_client, "/v1/outcomes", {"request_id": "n", "redeemed": False})
        assert closed.status_code == 200 and closed.json()["paid"] == 0


def test_refused_outcomes_write_nothing(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.open(cap=10_000)
    ledger.apply([request("a"), request("short", ttl=1.0)], now=1000.0)
    ledger.apply([OutcomeRequest("a", True, None)], now=1000.5)
    state = lambda: (ledger.totals(), ledger.timeline(), ledger.per_level(), ledger.decision("short"))  # noqa: E731
    before = state()
    refused = ledger.apply([OutcomeRequest("nobody", True, None), OutcomeRequest("a", False, None),
                            OutcomeRequest("short", True, None)], now=2000.0)  # a sweep would be due
    assert [r.status for r in refused] == [404, 409, 409]
    assert state() == before and before[0]["last_sweep"] == 1000.0


# --------------------------------------------------------------------------------------------- body limits


def test_an_oversized_chunked_body_is_a_413(client):
    chunks = (b'{"request_id": "r", "customer_id": "' + b"a" * 8192 for _ in range(4))
    response = client.post("/v1/decisions", content=chunks, headers={**AUTH, "content-type": "application/json"})
    assert response.status_code == 413 and "16384 bytes" in response.text


@pytest.mark.parametrize("declared", [True, False])
def test_the_413_is_sent_after_the_body_is_read(declared):
    """Every chunk of the oversized body is received (discarded) before the 413 goes out, with or without a
    Content-Length; past the drain bound the answer closes the connection."""
    sent, received = [], []
    chunks = [{"type": "http.request", "body": b"x" * 10_000, "more_body": k < 9} for k in range(10)]

    async def receive():
        received.append(chunks[len(received)])
        return received[-1]

    async def send(message):
        sent.append((len(received), message))

    async def app(scope, receive, send):  # reads the whole body, as the endpoints do
        while (await receive()).get("more_body"):
            pass

    headers = [(b"content-length", b"100000")] if declared else []
    asyncio.run(BodyLimit(app, limit=16_384)({"type": "http", "headers": headers}, receive, send))
    assert len(received) == 10 and sent[0][0] == 10 and sent[0][1]["status"] == 413
    assert (b"connection", b"close") not in sent[0][1]["headers"]
    sent.clear(), received.clear()
    asyncio.run(BodyLimit(app, limit=16_384, drain=30_000)({"type": "http", "headers": headers}, receive, send))
    assert len(received) < 10 and (b"connection", b"close") in sent[0][1]["headers"]


def test_a_client_waiting_for_100_continue_gets_the_413_at_once():
    """``Expect: 100-continue`` with an oversized Content-Length: the 413 without reading (so without uvicorn's
    ``100 Continue``), and the connection closed, since the client may or may not send the body after all."""
    sent, received = [], []

    async def receive():
        received.append(1)
        return {"type": "http.request", "body": b"x" * 10_000, "more_body": True}

    async def send(message):
        sent.append(message)

    headers = [(b"content-length", b"100000"), (b"expect", b"100-Continue")]
    asyncio.run(BodyLimit(None, limit=16_384)({"type": "http", "headers": headers}, receive, send))
    assert received == [] and sent[0]["status"] == 413 and (b"connection", b"close") in sent[0]["headers"]


@contextmanager
def serving(app, http: str):
    """``app`` under a real uvicorn server in a thread; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=http, loop="asyncio", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert server.started
        yield listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()


def read_head(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_expect_100_continue_over_the_wire(tmp_path, http):
    app = create_app(make_campaign(tmp_path).path, token=TOKEN)
    body = b'{"request_id": "r1", "customer_id": "c1"}'
    head = ("POST /v1/decisions HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: {length}\r\nExpect: 100-continue\r\n\r\n")
    with serving(app, http) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.sendall(head.format(token=TOKEN, length=100_000).encode())
            answer = read_head(connection)
            while chunk := connection.recv(4096):  # the server closes the connection after the 413
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 413 ") and b"100 Continue" not in answer
        assert b"request body above 16384 bytes" in answer
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:  # a body in bounds: as before
            connection.sendall(head.format(token=TOKEN, length=len(body)).encode())
            assert read_head(connection) == b"HTTP/1.1 100 Continue\r\n\r\n"
            connection.sendall(body)
            assert read_head(connection).startswith(b"HTTP/1.1 200 ")


# ------------------------------------------------------------------------------------------------ the schema


def test_the_schema_says_what_the_service_does(client):
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    assert set(paths["/v1/decisions"]["post"]["responses"]) == {"200", "401", "409", "413", "422", "503"}
    assert set(paths["/v1/outcomes"]["post"]["responses"]) == {"200", "401", "404", "409", "413", "422", "503"}
    assert "404" in paths["/v1/assignments/{user_id}"]["get"]["responses"]
    decision = paths["/v1/decisions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert [branch["required"] for branch in decision["oneOf"]] == [["customer_id"], ["merchant_id"]]
    assert decision["properties"]["customer_id"]["type"] == "string"  # null is not a customer
    outcome = paths["/v1/outcomes"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert outcome["properties"]["amount"]["anyOf"] == [
        {"type": "number", "minimum": 0, "maximum": 9999999999999.99, "multipleOf": 0.01}, {"type": "null"}]
    assert outcome["properties"]["redeemed"]["type"] == "boolean"


def test_the_decision_schema_offers_merchant_id_only_to_a_campaign_with_merchants(tmp_path):
    """A customers-only campaign refuses merchant_id (422): its schema must not offer it (schemathesis's positive
    data would send it)."""
    app = create_app(make_campaign(tmp_path).path, token=TOKEN)
    with TestClient(app) as test_client:
        paths = test_client.get("/openapi.json").json()["paths"]
        refused = post(test_client, "/v1/decisions", {"request_id": "r1", "merchant_id": "m1"})
    decision = paths["/v1/decisions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(decision["properties"]) == {"request_id", "customer_id"} and "oneOf" not in decision
    assert decision["required"] == ["request_id", "customer_id"] and decision["additionalProperties"] is False
    assert "default" not in decision["properties"]["customer_id"]
    assert refused.status_code == 422 and field_errors(refused) == ["body.merchant_id"]


# ---------------------------------------------------------------------------------------------- cold start


@pytest.mark.parametrize("setting, level_index, reason", [("mean", None, "rule"), ("lowest", 0, "cold_start"),
                                                          ("none", NO_LEVEL, "cold_start")])
def test_cold_start_is_a_campaign_setting(tmp_path, setting, level_index, reason):
    campaign = make_campaign(tmp_path, cold_start=setting)
    assert load_campaign(campaign.path).config.cold_start == setting
    proposed, due = DecisionRule(campaign).propose("x", "customer", "somebody-new")
    assert proposed.cold_start and proposed.reason == reason and not (due and setting != "mean")
    if level_index is not None:
        assert proposed.chosen.index == level_index
    known, _ = DecisionRule(campaign).propose("y", "customer", "c1")
    assert not known.cold_start and known.reason == "rule"


def test_cold_start_setting_is_checked(tmp_path):
    with pytest.raises(DataError, match="cold_start must be one of"):
        make_campaign(tmp_path, cold_start="free")


# ---------------------------------------------------------------------------------------------- exact money


def test_money_converts_exactly_and_refuses_what_it_cannot_keep():
    assert to_minor("0.1", 2, "x") == 10 and to_minor(0.3, 2, "x") == 30 and to_minor(5, 0, "x") == 5
    assert to_major(30, 2) == 0.3 and to_major(10**15 - 1, 2) == 9999999999999.99
    for value, message in [("0.001", "more than 2 decimals"), (-1, "≥ 0"), (float("nan"), "finite"),
                           (True, "must be a number"), ("ten", "must be a number"), (10**13, "below")]:
        with pytest.raises(DataError, match=message):
            to_minor(value, 2, "x")


@pytest.mark.parametrize("cap, message", [("10.005", "cap has more than 2 decimals"), ("abc", "cap must be a number"),
                                          ("1e400", "finite number"), ("-1e400", "finite number"),
                                          ("nan", "finite number"), ("-5", "finite number ≥ 0"),
                                          ("1e15", "below 10,000,000,000,000")])
def test_campaign_cap_is_exact_money(tmp_path, cap, message):
    with pytest.raises(DataError, match=message):
        make_campaign(tmp_path, cap=cap)


def test_campaign_money_is_checked(tmp_path):
    with pytest.raises(DataError, match="currency_exponent must be an integer in 0..6"):
        make_campaign(tmp_path, currency_exponent=-1)
    with pytest.raises(DataError, match="level 0.5 has more than 0 decimals"):
        CampaignConfig(levels=[0.5, 1.0], form="ratio", B=1.0, lam=0.0, cap=10, currency_exponent=0).check()
    campaign = make_campaign(tmp_path, cap="1000.25", currency_exponent=2)
    assert campaign.config.cap_minor == 100025 and campaign.config.level_faces == [int(x * 100) for x in LEVELS]


def test_amounts_are_kept_to_the_cent_through_the_api(tmp_path):
    with TestClient(create_app(make_campaign(tmp_path, cap="100").path, token=TOKEN)) as test_client:
        for i in range(10):
            decision = post(test_client, "/v1/decisions", {"request_id": f"r{i}", "customer_id": f"c{i}"}).json()
            if decision["level"]:
                paid = post(test_client, "/v1/outcomes", {"request_id": f"r{i}", "redeemed": True, "amount": 0.1})
                assert paid.status_code == 200 and paid.json()["paid"] == 0.1
        budget = test_client.get("/v1/status").json()["budget"]
    ledger = Ledger(f"sqlite:///{tmp_path / 'campaign' / 'ledger.sqlite'}")
    totals, audit = ledger.totals(), ledger.audit()
    assert totals["paid"] == audit["paid"] == 10 * budget["responses"]  # ten 0.1s are exactly 1.00
    assert budget["paid"] == to_major(totals["paid"], 2) and totals["at_risk"] <= totals["cap"] == 10_000


def test_a_version_1_ledger_is_migrated_to_minor_units(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION)")
        for statement in MIGRATIONS[0][1]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (1, 0)")
        conn.execute("INSERT INTO budget (id, cap, committed, paid, decisions, responses) VALUES (1, 100.1, 20.2, "
                     "0.3, 3, 1)")
        for k, (face, paid, state, at) in enumerate([(10.1, 0.0, "issued", 5.0), (10.1, 0.0, "issued", 3.0),
                                                     (0.3, 0.3, "redeemed", 4.0)]):
            conn.execute("INSERT INTO decisions VALUES (?, 'customer', 'c', 1, ?, ?, 0.5, 1.0, 0.1, 'v', 'rule', 0, "
                         "'response', ?, ?, 9.0, NULL, ?, NULL)", (f"r{k}", face, face, state, at, paid))
        conn.execute("INSERT INTO per_level VALUES ('customer', 1, 3, 1, 0.3)")
        conn.execute("INSERT INTO timeline VALUES (5, 3, 1, 20.5, 0.3, 0.1)")
    ledger = Ledger(f"sqlite:///{path}")
    ledger.open(cap=10_010)
    assert ledger.migrate() == 3
    totals, audit = ledger.totals(), ledger.audit()
    assert (totals["cap"], totals["committed"], totals["paid"], totals["exponent"]) == (10_010, 2020, 30, 2)
    assert audit["committed"] == 2020 and audit["paid"] == 30 and audit["last_seq"] == 3
    assert [ledger.decision(f"r{k}")["seq"] for k in range(3)] == [3, 1, 2]  # numbered by creation time
    assert ledger.per_level()[0]["paid"] == 30 and ledger.timeline()[0]["at_risk"] == 2050
    ledger.close()
    with pytest.raises(DataError, match="currency exponent 2; this campaign's is 0"):
        Ledger(f"sqlite:///{path}", exponent=0).open(cap=100)


def test_decisions_are_stamped_after_the_ledger_lock(tmp_path):
    """A writer that waits for the lock stamps its decision after the holder commits: created_at and seq follow
    the commit order (a stamp taken before the lock showed false peaks above the cap)."""
    url = tmp_path / "l.sqlite"
    ledger = Ledger(f"sqlite:///{url}")
    ledger.open(cap=10_000)
    holder = sqlite3.connect(url, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    rows = []
    waiting = threading.Thread(target=lambda: rows.extend(ledger.apply([request("late")])))
    waiting.start()
    time.sleep(0.3)
    released = time.time()
    holder.execute("COMMIT")
    waiting.join()
    assert rows[0]["created_at"] >= released and rows[0]["seq"] == 1


def test_quota_assignments_still_served(tmp_path):
    quota = pd.DataFrame({"user_id": ["c1"], "fund": ["F1"]})
    campaign = make_campaign(tmp_path, quota_plan=quota)
    with TestClient(create_app(campaign.path, token=TOKEN)) as test_client:
        assert test_client.get("/v1/assignments/c1").json() == {"user_id": "c1", "fund": "F1"}
        missing = test_client.get("/v1/assignments/c2")
        bad = test_client.get("/v1/assignments/bad%20id")
    assert missing.status_code == 404 and bad.status_code == 422 and field_errors(bad) == ["path.user_id"]


def test_a_lost_postgresql_connection_is_a_503_then_reconnects(tmp_path, postgres_url):
    campaign = make_campaign(tmp_path, cap="1000")
    with TestClient(create_app(campaign.path, ledger_url=postgres_url, token=TOKEN)) as test_client:
        assert post(test_client, "/v1/decisions", {"request_id": "r0", "customer_id": "c0"}).status_code == 200
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # the server drops the service's sessions
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        lost = post(test_client, "/v1/decisions", {"request_id": "r1", "customer_id": "c1"})
        again = post(test_client, "/v1/decisions", {"request_id": "r1", "customer_id": "c1"})
    assert lost.status_code == 503 and lost.json()["detail"].startswith("ledger unavailable")
    assert again.status_code == 200 and not again.json()["replayed"]  # the refused request wrote nothing
    ledger = Ledger(postgres_url)
    assert ledger.totals()["decisions"] == ledger.audit()["decisions"] == 2
    ledger.close()


def test_the_api_on_a_postgresql_ledger(tmp_path, postgres_url):
    """PostgreSQL batches are awaited (psycopg's AsyncConnection; SQLite's run inline): the same answers."""
    campaign = make_campaign(tmp_path, cap="30")
    with TestClient(create_app(campaign.path, ledger_url=postgres_url, token=TOKEN)) as test_client:
        answers = [post(test_client, "/v1/decisions", {"request_id": f"r{i}", "customer_id": f"c{i}"}).json()
                   for i in range(12)]
        assert post(test_client, "/v1/decisions", {"request_id": "r0", "customer_id": "c0"}).json()["replayed"]
        assert post(test_client, "/v1/decisions", {"request_id": "r0", "customer_id": "c1"}).status_code == 409
        issued = next(a for a in answers if a["level"])
        paid = post(test_client, "/v1/outcomes", {"request_id": issued["request_id"], "redeemed": True, "amount": 0.05})
        assert paid.status_code == 200 and paid.json()["paid"] == 0.05
        budget = test_client.get("/v1/status").json()["budget"]
    assert budget["decisions"] == 12 and budget["at_risk"] <= 30 and any(a["reason"] == "cap_reached" for a in answers)
    ledger = Ledger(postgres_url)
    assert ledger.totals()["paid"] == ledger.audit()["paid"] == 5 and ledger.totals()["at_risk"] <= 3000
    ledger.close()

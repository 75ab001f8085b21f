"""The decision service: campaign directories, the ledger's budget safety, pacing, the rule and the HTTP API."""

import json
import threading

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from promokit.allocation.budget import decide, ratio_form, solve_budget
from promokit.campaign import build as build_campaign
from promokit.campaign.directory import load_campaign
from promokit.data import DataError
from promokit.serve import ledger as ledger_module
from promokit.serve.app import create_app
from promokit.serve.decision_rule import DecisionRule
from promokit.serve.ledger import NO_LEVEL, DecisionRequest, Ledger, Option, OutcomeRequest, normalise_url
from promokit.serve.pacing import Pacer, realised_ratio

LEVELS = np.array([0.0, 5.0, 10.0, 20.0])
B = 6.0
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def in_order(population, prefix: str, n: int) -> np.ndarray:
    """The population's curves of ids ``prefix0 … prefix{n-1}``, in that order."""
    return np.stack([population.scores[population.row(f"{prefix}{i}")] for i in range(n)])


def curves(n: int, seed: int = 0) -> np.ndarray:
    """Concave, increasing response curves in [0, 1) over LEVELS."""
    rng = np.random.default_rng(seed)
    base, gain = rng.uniform(0.02, 0.3, (n, 1)), rng.uniform(0.005, 0.05, (n, 1))
    return 1 - (1 - base) * np.exp(-gain * LEVELS[None, :])


def score_frame(f: np.ndarray, prefix: str = "c") -> pd.DataFrame:
    return pd.DataFrame({"user_id": [f"{prefix}{i}" for i in range(len(f))],
                         **{f"score_{level:g}": f[:, j] for j, level in enumerate(LEVELS)}})


def plan_folder(path, f: np.ndarray, ratio: float = B):
    plan = solve_budget(*ratio_form(f, LEVELS, ratio))
    path.mkdir(parents=True, exist_ok=True)
    (path / "report.json").write_text(json.dumps({"problem": "budget", "form": "ratio", "B": ratio, "lam": plan.lam,
                                                  "levels": LEVELS.tolist()}))
    return plan


@pytest.fixture
def campaign(tmp_path):
    f = curves(400)
    plan_folder(tmp_path / "plan", f)
    quota = pd.DataFrame({"user_id": ["c1", "c2"], "fund": ["F1", "F2"]})
    return build_campaign(tmp_path / "campaign", score_frame(f), tmp_path / "plan", cap=1_000.0, quota_plan=quota)


def request(request_id: str, face: int = 1000, fallback: int = 500, paid_on: str = "response",
            ttl: float = 100.0, subject: str = "c1") -> DecisionRequest:
    """A decision whose rule chose a coupon of ``face`` minor units (cents), falling back to ``fallback``."""
    chosen = Option(2, face, 0.5, face / 200)
    return DecisionRequest(request_id, "customer", subject, chosen, (Option(1, fallback, 0.2, fallback / 500),
                                                                     Option(NO_LEVEL, 0, 0.0, 0.0)),
                           0.1, "v1", False, paid_on, ttl)


# ------------------------------------------------------------------------------------------------- campaign


def test_campaign_round_trip(campaign):
    again = load_campaign(campaign.path)
    assert again.config == campaign.config and again.config.form == "ratio" and again.config.B == B
    np.testing.assert_allclose(in_order(again.populations["customer"], "c", 400), curves(400))
    assert again.assignments == {"c1": "F1", "c2": "F2"} and len(again.config.model_version) == 12


def test_the_lookup_finds_exactly_the_ids_the_table_holds(tmp_path):
    """Ids of any text (prefixes of one another, unicode, digits) are found by a binary search on the memory-mapped
    ids, and only they: a prefix, an extension, a longer id or an unknown one is not in the table."""
    ids = ["c1", "c10", "c2", "ünïcode-7", "17", "a" * 40, "c100"]
    f = curves(len(ids))
    frame = score_frame(f).assign(user_id=ids)
    plan_folder(tmp_path / "plan", f)
    population = load_campaign(build_campaign(tmp_path / "c", frame, tmp_path / "plan", cap=100.0).path) \
        .populations["customer"]
    assert isinstance(population.scores, np.memmap) and isinstance(population.ids, np.memmap)
    for i, user in enumerate(ids):
        np.testing.assert_array_equal(population.scores[population.row(user)], f[i])
    for unknown in ("c", "c1000", "c3", "", "a" * 41, "a" * 39, "ünïcode", "17 ", "c1\x00"):
        assert population.row(unknown) is None, unknown
    np.testing.assert_allclose(population.mean, f.mean(axis=0))


def test_a_campaign_built_before_the_lookup_still_loads(campaign):
    import shutil

    shutil.rmtree(campaign.path / "lookup")
    again = load_campaign(campaign.path).populations["customer"]
    np.testing.assert_allclose(in_order(again, "c", 400), curves(400))


def test_a_campaign_rebuilt_without_merchants_keeps_none_of_them(tmp_path):
    f = curves(5)
    plan_folder(tmp_path / "plan", f)
    build_campaign(tmp_path / "c", score_frame(f), tmp_path / "plan", cap=100.0, merchants=score_frame(f, "m"))
    assert set(load_campaign(tmp_path / "c").populations) == {"customer", "merchant"}
    rebuilt = build_campaign(tmp_path / "c", score_frame(f), tmp_path / "plan", cap=100.0, activate=True)
    assert set(load_campaign(tmp_path / "c").populations) == {"customer"}
    assert rebuilt.folder == tmp_path / "c" / "versions" / rebuilt.config.model_version
    assert not (rebuilt.folder / "lookup" / "merchant").exists() and not (rebuilt.folder / "merchants.parquet").exists()


def test_an_id_ending_in_nul_is_refused(tmp_path):
    f = curves(3)
    plan_folder(tmp_path / "plan", f)
    with pytest.raises(DataError, match="ends with a NUL character"):
        build_campaign(tmp_path / "c", score_frame(f).assign(user_id=["c0", "c1\x00", "c2"]), tmp_path / "plan",
                       cap=100.0)


@pytest.mark.parametrize("breach, message", [
    ("levels", "offers levels"), ("range", r"outside \[0, 1\]"), ("duplicate", "repeats users"),
    ("report", "not an `allocate budget` report"), ("cap", "cap must be a finite number"),
    ("quota", "more than one fund"),
])
def test_campaign_build_errors(tmp_path, breach, message):
    f = curves(20)
    plan_folder(tmp_path / "plan", f)
    frame, cap, quota = score_frame(f), 100.0, None
    if breach == "levels":
        frame = frame.drop(columns="score_20")
    elif breach == "range":
        frame.loc[3, "score_5"] = 1.5
    elif breach == "duplicate":
        frame.loc[4, "user_id"] = "c0"
    elif breach == "report":
        (tmp_path / "plan" / "report.json").write_text(json.dumps({"problem": "quota"}))
    elif breach == "cap":
        cap = float("inf")
    elif breach == "quota":
        quota = pd.DataFrame({"user_id": ["c1", "c1"], "fund": ["F1", "F2"]})
    with pytest.raises(DataError, match=message):
        build_campaign(tmp_path / "campaign", frame, tmp_path / "plan", cap=cap, quota_plan=quota)


def test_load_campaign_errors(tmp_path, campaign):
    with pytest.raises(DataError, match="not a campaign directory"):
        load_campaign(tmp_path)
    (campaign.path / "campaign.json").write_text("{")
    with pytest.raises(DataError, match="not valid JSON"):
        load_campaign(campaign.path)


# --------------------------------------------------------------------------------------------------- ledger


def test_ledger_cap_fallbacks_and_replays(ledger_url):
    ledger = Ledger(ledger_url)
    ledger.open(cap=2700)
    answers = ledger.apply([request("a"), request("b"), request("a"), request("c"), request("d"), request("e")])
    # 10 + 10 fit, "a" is replayed, then 5 (the fallback) fits twice in the remaining 7? only once: 25, then none.
    assert [(r["face"], r["level_index"], r["reason"], r["replayed"]) for r in answers] == [
        (1000, 2, "rule", False), (1000, 2, "rule", False), (1000, 2, "rule", True), (500, 1, "cap_reached", False),
        (0, NO_LEVEL, "cap_reached", False), (0, NO_LEVEL, "cap_reached", False)]
    assert [r["seq"] for r in answers] == [1, 2, 1, 3, 4, 5]  # numbered in commit order; a replay keeps its number
    totals, audit = ledger.totals(), ledger.audit()
    assert totals["at_risk"] == audit["at_risk"] == 2500 <= totals["cap"]
    assert totals["decisions"] == audit["decisions"] == audit["last_seq"] == 5
    assert totals["replays"] == 1 and totals["capped"] == 3
    assert ledger.migrate() == 3  # migrations are idempotent
    ledger.close()


def test_ledger_outcomes(ledger_url):
    ledger = Ledger(ledger_url)
    ledger.open(cap=10000)
    ledger.apply([request("a"), request("b"), request("c"), request("old", ttl=1.0), request("late", ttl=1.5)],
                 now=1000.0)
    results = ledger.apply([OutcomeRequest("a", True, None), OutcomeRequest("b", True, 400),
                            OutcomeRequest("c", False, None), OutcomeRequest("a", True, None),
                            OutcomeRequest("a", False, None), OutcomeRequest("b", True, 1100),
                            OutcomeRequest("nope", True, None), OutcomeRequest("old", True, None)], now=1002.0)
    assert [r["paid"] for r in results[:4]] == [1000, 400, 0, 1000] and results[3]["replayed"]
    assert [getattr(r, "status", None) for r in results[4:]] == [409, 409, 404, 409]
    assert "expired" in str(results[7]) and "different outcome" in str(results[4])
    # a coupon past its expiry cannot be redeemed; its face value no longer counts as money at risk
    assert ledger.apply([OutcomeRequest("late", True, None)], now=1002.0)[0].status == 409
    totals, audit = ledger.totals(), ledger.audit()
    assert totals["committed"] == audit["committed"] == 0  # a and b redeemed, c closed, old expired
    assert totals["paid"] == audit["paid"] == 1400 and totals["responses"] == audit["responses"] == 2
    assert realised_ratio(totals) == pytest.approx(14.0 / 2)
    ledger.close()


def test_ledger_amount_above_face_is_refused(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.open(cap=10000)
    ledger.apply([request("a")])
    result = ledger.apply([OutcomeRequest("a", True, 1001)])[0]
    assert result.status == 409 and ledger.totals()["paid"] == 0


def test_paid_on_request_settles_at_issue(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    ledger.open(cap=10000)
    row = ledger.apply([request("m", paid_on="request")])[0]
    assert row["state"] == "settled" and ledger.totals()["paid"] == 1000 and ledger.totals()["committed"] == 0
    ledger.apply([OutcomeRequest("m", True, None)])
    assert ledger.totals()["paid"] == 1000 and ledger.totals()["responses"] == 1


def count_one_statements(monkeypatch) -> list[int]:
    """Rows each one-statement attempt on PostgreSQL wrote (0: refused, the batch went the lock-first way)."""
    attempts, run = [], ledger_module._PostgresSession.one_statement

    def spy(self, params):
        rows = run(self, params)
        attempts.append(len(rows))
        return rows

    monkeypatch.setattr(ledger_module._PostgresSession, "one_statement", spy)
    return attempts


def test_one_statement_refuses_room_another_writer_spent(postgres_url, monkeypatch):
    """Writer a counts on the room its last commit left; b spends it; a's next batch is refused by the statement's
    cap check and issued by the lock-first transaction, exactly (the fallback), in commit order."""
    attempts = count_one_statements(monkeypatch)
    a, b = Ledger(postgres_url), Ledger(postgres_url)
    a.open(cap=3500)
    rows = a.apply([request("a1")]) + a.apply([request("a2")]) + b.apply([request("b1")]) + a.apply([request("a3")])
    assert attempts == [1, 0]  # a2 in one statement; a3 refused there (a counted on 1,500 of room, 500 was left)
    assert [(r["request_id"], r["face"], r["reason"], r["seq"]) for r in rows] == [
        ("a1", 1000, "rule", 1), ("a2", 1000, "rule", 2), ("b1", 1000, "rule", 3), ("a3", 500, "cap_reached", 4)]
    assert [r["created_at"] for r in rows] == sorted(r["created_at"] for r in rows)  # stamps follow commits
    totals, audit = a.totals(), a.audit()
    assert totals["at_risk"] == audit["at_risk"] == 3500 and totals["decisions"] == audit["last_seq"] == 4
    assert a.last_totals["at_risk"] == 3500 and a.per_level() == [
        {"population": "customer", "level_index": 1, "decisions": 1, "responses": 0, "paid": 0},
        {"population": "customer", "level_index": 2, "decisions": 3, "responses": 0, "paid": 0}]
    a.close()
    b.close()


def test_one_statement_leaves_a_known_request_id_to_the_replay(postgres_url, monkeypatch):
    attempts = count_one_statements(monkeypatch)
    a, b = Ledger(postgres_url), Ledger(postgres_url)
    a.open(cap=100000)
    first = a.apply([request("x")]) + a.apply([request("y"), request("z")])
    b.apply([request("w")])
    replay = b.apply([request("y")])[0]  # b's one statement hits y's primary key and writes nothing
    assert attempts == [2, 0] and replay["replayed"] and replay["created_at"] == first[1]["created_at"]
    assert [r["seq"] for r in first] == [1, 2, 3] and first[2]["expires_at"] == first[2]["created_at"] + 100.0
    totals, audit = a.totals(), a.audit()
    assert totals["decisions"] == audit["decisions"] == 4 and totals["replays"] == 1
    assert totals["at_risk"] == audit["at_risk"] == 4000 and a.timeline()[-1]["at_risk"] <= 4000
    a.close()
    b.close()


def test_ledger_cap_holds_under_concurrent_writers(ledger_url):
    """Eight writers (separate engines, as separate processes would be) race for a cap of 50 coupons."""
    Ledger(ledger_url).open(cap=50000)
    writers = [Ledger(ledger_url) for _ in range(8)]
    acknowledged, errors = [], []

    def race(k: int) -> None:
        try:
            for batch in range(10):
                ids = [f"r{(k * 10 + batch) % 40}-{i}" for i in range(5)]  # writers overlap: same ids retried
                acknowledged.extend(ledger_row for ledger_row in writers[k].apply([request(i) for i in ids]))
        except Exception as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=race, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    totals, audit = writers[0].totals(), writers[0].audit()
    assert totals["at_risk"] == audit["at_risk"] <= 50000
    assert audit["decisions"] == audit["distinct_ids"] == 200 == totals["decisions"]
    first = {}
    for row in acknowledged:  # a retried id always gets the first answer
        first.setdefault(row["request_id"], row)
        assert (row["face"], row["created_at"]) == (first[row["request_id"]]["face"],
                                                     first[row["request_id"]]["created_at"])
    for writer in writers:
        writer.close()


def test_ledger_url_errors():
    assert normalise_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    for url in ("mysql://x", "sqlite://", "/tmp/file.sqlite"):
        with pytest.raises(DataError, match="`ledger_url` must be"):
            normalise_url(url)


# ------------------------------------------------------------------------------------------- rule and pacing


def test_the_decision_rule_reproduces_the_offline_plan(campaign):
    """At λ*, eq. 19 on each customer's curve gives the plan's level except on the marginal request(s)."""
    f = in_order(campaign.populations["customer"], "c", 400)
    plan = solve_budget(*ratio_form(f, LEVELS, B))
    rule = DecisionRule(campaign)
    chosen = np.array([rule.propose(f"r{i}", "customer", f"c{i}")[0].chosen.index for i in range(len(f))])
    assert (chosen == decide(*ratio_form(f, LEVELS, B)[:2], plan.lam)).all()
    assert (chosen != plan.choice).sum() <= 2
    request_, _ = rule.propose("x", "customer", "somebody-new")
    assert request_.cold_start and request_.chosen.expected_response == pytest.approx(
        f.mean(axis=0)[request_.chosen.index])


def test_pacer_target_and_resolve():
    f = curves(500, seed=1)
    pacer = Pacer(LEVELS, B, lam=0.0, paid_on={"customer": "response"}, window=256, every=100, gain=0.5)
    assert pacer.corrected_target(None) == B and pacer.corrected_target(B) == B
    assert pacer.corrected_target(2 * B) == pytest.approx(B / np.sqrt(2))  # overspending tightens the target
    assert pacer.corrected_target(1e-9) == 4 * B and pacer.corrected_target(1e9) == B / 4  # clipped
    due = [pacer.observe("customer", row) for row in f[:300]]
    assert due.index(True) == 99  # every 100 decisions once the window holds 64
    point = pacer.resolve(realised=2 * B)
    window = f[300 - 256:300]  # the ring buffer holds the last 256 requests seen
    expected = solve_budget(*ratio_form(window, LEVELS, B / np.sqrt(2))).lam
    assert point.lam == pytest.approx(expected) and pacer.state == (point.lam, pytest.approx(B / np.sqrt(2)))
    impossible = Pacer(np.array([5.0, 10.0]), 1.0, lam=0.3, paid_on={"customer": "response"}, window=64, every=1)
    for row in f[:64, 1:3]:
        impossible.observe("customer", row)
    assert impossible.resolve(None).lam == 0.3  # the lowest level already costs more than B: keep the dearest λ


# ------------------------------------------------------------------------------------------------------ API


@pytest.fixture
def client(campaign):
    with TestClient(create_app(campaign.path, token=TOKEN)) as test_client:
        yield test_client


def test_decisions_are_authorised_idempotent_and_recorded(client, campaign):
    body = {"request_id": "r-1", "customer_id": "c3"}
    assert client.post("/v1/decisions", json=body).status_code == 401
    assert client.post("/v1/decisions", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    first = client.post("/v1/decisions", json=body, headers=AUTH).json()
    again = client.post("/v1/decisions", json=body, headers=AUTH).json()
    assert not first["replayed"] and again["replayed"] and {**again, "replayed": False} == first
    customers = campaign.populations["customer"]
    f = customers.scores[customers.row("c3")]
    expected = decide(f, f * (LEVELS - B), campaign.config.lam)
    assert first["level"] == LEVELS[expected] and first["expected_cost"] == pytest.approx(LEVELS[expected] * f[expected])
    assert first["model_version"] == campaign.config.model_version and first["reason"] == "rule"
    outcome = client.post("/v1/outcomes", json={"request_id": "r-1", "redeemed": True}, headers=AUTH).json()
    assert outcome == {"request_id": "r-1", "state": "redeemed", "redeemed": True, "paid": first["level"],
                       "replayed": False}
    status = client.get("/v1/status").json()
    assert status["budget"]["decisions"] == 1 and status["budget"]["replays"] == 1
    assert status["budget"]["paid"] == first["level"] and status["requests"]["latency_ms"]["count"] >= 2
    assert status["levels"][0]["redemption_rate"] == 1.0
    assert "promokit_decisions_total 1" in client.get("/metrics").text


@pytest.mark.parametrize("body, status, message", [
    ({"request_id": "r"}, 422, "exactly one of customer_id or merchant_id"),
    ({"request_id": "r", "customer_id": "a", "merchant_id": "b"}, 422, "exactly one"),
    ({"request_id": "bad id!", "customer_id": "a"}, 422, "string_pattern_mismatch"),
    ({"request_id": "r", "customer_id": "a", "features": {"x": 1}}, 422, "extra_forbidden"),
    ({"request_id": "", "customer_id": "a"}, 422, "string_too_short"),
    ({"request_id": "r", "customer_id": 17}, 422, "string_type"),
    ({"request_id": "r", "merchant_id": "m1"}, 422, "no merchant score table"),
])
def test_decision_validation(client, body, status, message):
    response = client.post("/v1/decisions", json=body, headers=AUTH)
    assert response.status_code == status and message in response.text


@pytest.mark.parametrize("body, status, message", [
    ({"request_id": "r", "redeemed": True, "amount": -1}, 422, "amount must be ≥ 0"),
    ({"request_id": "r", "redeemed": True, "amount": "ten"}, 422, "number_type"),
    ({"request_id": "r", "redeemed": "maybe"}, 422, "bool_type"),
    ({"request_id": "unknown", "redeemed": True}, 404, "no decision with request_id"),
])
def test_outcome_validation(client, body, status, message):
    response = client.post("/v1/outcomes", json=body, headers=AUTH)
    assert response.status_code == status and message in response.text


def test_body_limit_assignments_and_page(client):
    huge = b'{"request_id": "r", "customer_id": "' + b"a" * 20_000 + b'"}'
    response = client.post("/v1/decisions", content=huge, headers={**AUTH, "content-type": "application/json"})
    assert response.status_code == 413 and "16384 bytes" in response.text
    assert client.get("/v1/assignments/c2").json() == {"user_id": "c2", "fund": "F2"}
    assert client.get("/v1/assignments/c9").status_code == 404
    assert client.get("/").headers["content-type"].startswith("text/html")
    assert "/v1/decisions" in client.get("/openapi.json").json()["paths"]


def test_cap_is_never_exceeded_through_the_api(tmp_path):
    f = curves(200)
    plan_folder(tmp_path / "plan", f)
    campaign = build_campaign(tmp_path / "c", score_frame(f), tmp_path / "plan", cap=60.0, when_exhausted="none")
    with TestClient(create_app(campaign.path, token=TOKEN)) as test_client:
        answers = [test_client.post("/v1/decisions", json={"request_id": f"r{i}", "customer_id": f"c{i}"},
                                    headers=AUTH).json() for i in range(200)]
        budget = test_client.get("/v1/status").json()["budget"]
    assert budget["at_risk"] <= 60.0 and budget["capped"] > 0
    capped = [a for a in answers if a["reason"] == "cap_reached"]
    assert all(a["level"] is None and a["level_index"] is None for a in capped)


def test_merchants_paid_on_request_follow_eq_20(tmp_path):
    f, g = curves(50), curves(30, seed=3)
    plan_folder(tmp_path / "plan", f)
    campaign = build_campaign(tmp_path / "c", score_frame(f), tmp_path / "plan", cap=1e6,
                              merchants=score_frame(g, prefix="m"), merchant_paid_on="request")
    with TestClient(create_app(campaign.path, token=TOKEN)) as test_client:
        answer = test_client.post("/v1/decisions", json={"request_id": "q", "merchant_id": "m4"}, headers=AUTH).json()
        budget = test_client.get("/v1/status").json()["budget"]
    j = decide(g[4], LEVELS - B, campaign.config.lam)  # eq. 20: the commission r − B is paid on every request
    assert answer["population"] == "merchant" and answer["level"] == LEVELS[j] and answer["expected_cost"] == LEVELS[j]
    assert budget["paid"] == LEVELS[j] and budget["committed"] == 0.0


def test_app_needs_a_token(campaign, monkeypatch):
    monkeypatch.delenv("PROMOKIT_API_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match="PROMOKIT_API_TOKEN"):
        create_app(campaign.path)

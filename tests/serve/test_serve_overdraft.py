"""A cap lowered below the money at risk (a refresh or a restart onto a lower one) is an overdraft: decisions answer
200 with what costs nothing, the status shows what must come back, and no commit adds money at risk."""

from fastapi.testclient import TestClient
from test_serve import AUTH, TOKEN, request
from test_serve_metrics import families
from test_serve_refresh import two_versions

from promokit.serve.app import create_app
from promokit.serve.explore import EXPLORE
from promokit.serve.ledger import NO_LEVEL, DecisionRequest, Ledger, Option, OutcomeRequest


def drawn(request_id: str) -> DecisionRequest:
    """An explored decision that drew the dearest of three levels (faces 0, 500, 1000 cents)."""
    levels = tuple(Option(j, face, 0.1, face / 1000) for j, face in enumerate((0, 500, 1000)))
    return DecisionRequest(request_id, "customer", "c9", levels[2], (levels[0], Option(NO_LEVEL, 0, 0.0, 0.0)), 0.1,
                           "v1", False, "response", 100.0, "explore", EXPLORE, levels)


def test_a_ledger_over_its_cap_issues_only_what_costs_nothing(ledger_url):
    ledger = Ledger(ledger_url)
    ledger.open(5000)
    ledger.apply([request(f"r{i}") for i in range(4)])  # 4 × 1000 cents at risk
    ledger.open(1500)  # a restart onto a lower cap: 2500 over it
    plain, explored = ledger.apply([request("r4"), drawn("r5")])
    assert (plain["level_index"], plain["face"], plain["reason"], plain["propensity"]) == (NO_LEVEL, 0, "cap_reached", 1)
    # every level it could draw ends at the free level 0: that answer was certain
    assert (explored["level_index"], explored["face"], explored["propensity"]) == (0, 0, 1.0)
    totals, audit = ledger.totals(), ledger.audit()
    assert totals["at_risk"] == audit["at_risk"] == 4000 and totals["cap"] == 1500 and totals["capped"] == 2
    ledger.apply([OutcomeRequest(f"r{i}", False, None) for i in range(3)])  # 3000 come back: 500 of room
    assert ledger.apply([request("r6")])[0]["face"] == 500 and ledger.totals()["at_risk"] == 1500
    assert ledger.audit()["at_risk"] == 1500
    ledger.close()


def cents(amount: float) -> int:
    return round(amount * 100)  # the answers' floats carry the exact decimal of the ledger's cents


def decide(client, request_id: str, customer: str):
    return client.post("/v1/decisions", json={"request_id": request_id, "customer_id": customer}, headers=AUTH)


def test_a_refresh_and_a_restart_onto_a_lower_cap_answer_200(tmp_path, ledger_url):
    root = two_versions(tmp_path, cap_1="1000", cap_2="2")
    with TestClient(create_app(root, ledger_url=ledger_url, token=TOKEN, watch_seconds=0)) as client:
        assert all(decide(client, f"r{i}", f"c{i}").status_code == 200 for i in range(40))
        at_risk = client.get("/v1/status").json()["budget"]["at_risk"]
        assert at_risk > 2
        assert client.post("/v1/campaign/switch", json={"version": "v2"}, headers=AUTH).json()["switched"]
        answers = [decide(client, f"s{i}", f"c{i}") for i in range(10)]
        outcome = client.post("/v1/outcomes", json={"request_id": "r0", "redeemed": False}, headers=AUTH)
        status, metrics = client.get("/v1/status").json(), client.get("/metrics").text
    assert [a.status_code for a in answers] == [200] * 10 and outcome.status_code == 200
    assert {a.json()["level"] for a in answers} <= {None, 0.0}  # at the cap: the lowest level, free here
    budget = status["budget"]
    assert budget["cap"] == 2 and budget["remaining"] == 0 and cents(budget["at_risk"]) <= cents(at_risk)
    assert cents(budget["overdraft"]) == cents(budget["at_risk"]) - 200 > 0  # exact, in minor units
    assert families(metrics)["promokit_budget_overdraft"][("promokit_budget_overdraft", ())] == budget["overdraft"]

    with TestClient(create_app(root, ledger_url=ledger_url, token=TOKEN, watch_seconds=0)) as client:  # restart
        assert client.get("/v1/status").json()["campaign"]["model_version"] == "v2"
        again = [decide(client, f"t{i}", f"c{i}") for i in range(10)]
        replay = decide(client, "r1", "c1")
        after = client.get("/v1/status").json()["budget"]
    assert [a.status_code for a in again] == [200] * 10 and {a.json()["level"] for a in again} <= {None, 0.0}
    assert replay.status_code == 200 and replay.json()["replayed"]
    assert after["overdraft"] == budget["overdraft"] and after["decisions"] == 60
    audit = Ledger(ledger_url).audit()
    assert audit["decisions"] == 60 and audit["at_risk"] == cents(after["at_risk"])

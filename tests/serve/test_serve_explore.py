"""The exploration bucket: a keyed hash of the subject id picks who explores, a keyed hash of the request id picks
the level, the ledger records each decision's bucket and the propensity of what it served, the cap holds."""

import sqlite3
from collections import Counter

import psycopg
import pytest
from fastapi.testclient import TestClient
from test_serve import AUTH, LEVELS, TOKEN, count_one_statements, curves, plan_folder, score_frame

from promokit.campaign import build as build_campaign
from promokit.campaign.directory import load_campaign
from promokit.data import DataError
from promokit.serve.app import create_app
from promokit.serve.decision_rule import DecisionRule
from promokit.serve.explore import EXPLOIT, EXPLORE, Exploration
from promokit.serve.ledger import MIGRATIONS, NO_LEVEL, DecisionRequest, Ledger, Option

K = len(LEVELS)


def make_campaign(path, cap="1000", explore=0.3, n=200, **options):
    f = curves(n)
    plan_folder(path / "plan", f)
    return build_campaign(path / "campaign", score_frame(f), path / "plan", cap=cap, explore=explore,
                          explore_seed=11, **options)


def post(client, request_id: str, customer: str) -> dict:
    response = client.post("/v1/decisions", json={"request_id": request_id, "customer_id": customer}, headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()


# -------------------------------------------------------------------------------------------------- the hash


def test_the_bucket_is_a_function_of_the_seed_and_the_id():
    """Two instances (two workers, or a restart) agree on every id; another seed explores other subjects; a
    customer and a merchant with the same id are two subjects."""
    ids = [f"c{i}" for i in range(2000)]
    first, second = Exploration(0.2, 5), Exploration(0.2, 5)
    buckets = [first.bucket("customer", i) for i in ids]
    assert buckets == [second.bucket("customer", i) for i in ids]
    assert buckets != [Exploration(0.2, 6).bucket("customer", i) for i in ids]
    assert buckets != [first.bucket("merchant", i) for i in ids]
    assert all(Exploration(0.0, 5).bucket("customer", i) == EXPLOIT for i in ids)


@pytest.mark.parametrize("share", [0.05, 0.2, 0.5])
def test_the_share_explored_is_near_the_setting(share):
    explored = sum(Exploration(share, 3).bucket("customer", f"user-{i}") == EXPLORE for i in range(10_000))
    assert abs(explored / 10_000 - share) < 0.015  # ≈ 3 standard deviations at 0.5, 7 at 0.05


def test_the_draw_is_fixed_per_request_and_uniform():
    exploration = Exploration(0.1, 3)
    draws = [exploration.draw(f"r{i}", K) for i in range(10_000)]
    assert draws == [Exploration(0.1, 3).draw(f"r{i}", K) for i in range(10_000)]
    counts = Counter(draws)
    assert set(counts) == set(range(K)) and all(abs(n - 2500) < 200 for n in counts.values()), counts


def test_the_decision_rule_keeps_a_subject_in_its_bucket_across_requests_and_workers(tmp_path):
    campaign = make_campaign(tmp_path)
    rules = [DecisionRule(load_campaign(campaign.path)) for _ in range(2)]
    for i in range(200):
        proposals = [rule.propose(f"r{i}-{k}", "customer", f"c{i}")[0] for rule in rules for k in range(3)]
        assert len({p.bucket for p in proposals}) == 1
        retries = [rule.propose(f"r{i}", "customer", f"c{i}")[0] for rule in rules]
        assert retries[0].chosen == retries[1].chosen and retries[0].among == retries[1].among
        if proposals[0].bucket == EXPLORE:
            assert retries[0].reason == "explore" and [o.index for o in retries[0].among] == list(range(K))
        else:
            assert retries[0].reason == "rule" and retries[0].among is None


# ------------------------------------------------------------------------------------------------- the API


def test_answers_carry_the_bucket_and_propensity_and_replay_them(tmp_path):
    campaign = make_campaign(tmp_path, cap="100000")
    exploration = Exploration(0.3, 11)
    with TestClient(create_app(campaign.path, token=TOKEN)) as client:
        answers = [post(client, f"r{i}", f"c{i}") for i in range(200)]
        replays = [post(client, f"r{i}", f"c{i}") for i in range(0, 200, 7)]
        status = client.get("/v1/status").json()
    for answer in answers:
        assert answer["bucket"] == exploration.bucket("customer", answer["subject_id"])
        if answer["bucket"] == EXPLORE:
            assert answer["reason"] == "explore" and answer["propensity"] == 1 / K
            assert answer["level_index"] == exploration.draw(answer["request_id"], K)
        else:
            assert answer["reason"] == "rule" and answer["propensity"] == 1.0
    explored = sum(a["bucket"] == EXPLORE for a in answers)
    assert 40 < explored < 80 and status["budget"]["explored"] == explored and status["campaign"]["explore"] == 0.3
    assert all(r == {**answers[int(r["request_id"][1:])], "replayed": True} for r in replays)
    ledger = Ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}")
    assert ledger.audit()["explored"] == explored
    row = ledger.decision(answers[0]["request_id"])
    assert (row["bucket"], row["propensity"]) == (answers[0]["bucket"], answers[0]["propensity"])
    ledger.close()


def test_serve_explore_replaces_the_campaigns_share(tmp_path):
    campaign = make_campaign(tmp_path, explore=0.0)
    with TestClient(create_app(campaign.path, token=TOKEN, explore=0.9)) as client:
        answers = [post(client, f"r{i}", f"c{i}") for i in range(50)]
        assert client.get("/v1/status").json()["campaign"]["explore"] == 0.9
    assert sum(a["bucket"] == EXPLORE for a in answers) > 35
    assert load_campaign(campaign.path).config.explore == 0.0
    with pytest.raises(DataError, match=r"explore must be a share in \[0, 1\)"):
        create_app(campaign.path, token=TOKEN, explore=1.0)


@pytest.mark.parametrize("when_exhausted", ["lowest", "none"])
def test_the_cap_holds_with_exploration_and_propensities_follow_it(tmp_path, when_exhausted):
    """Most subjects explore and the cap binds: money at risk never passes it, and each answer's propensity is
    what the cap made of the draw (all levels that do not fit end in one fallback)."""
    campaign = make_campaign(tmp_path, cap="60", explore=0.8, when_exhausted=when_exhausted)
    with TestClient(create_app(campaign.path, token=TOKEN)) as client:
        answers = [post(client, f"r{i}", f"c{i}") for i in range(200)]
        budget = client.get("/v1/status").json()["budget"]
    assert budget["at_risk"] <= 60 and budget["capped"] > 0
    ledger = Ledger(f"sqlite:///{campaign.path / 'ledger.sqlite'}")
    rows = sorted((ledger.decision(a["request_id"]) for a in answers), key=lambda row: row["seq"])
    ledger.close()
    spent, faces = 0, [int(level * 100) for level in LEVELS]
    for row in rows:  # replay the cap in commit order: the room each decision saw
        room = 6000 - spent
        fits = sum(face <= room for face in faces)
        if row["bucket"] == EXPLORE:
            lowest = when_exhausted == "lowest"  # level 0 is face 0 here: it always fits
            expected = (1 + (K - fits) * lowest) / K if row["level_index"] == 0 else \
                (K - fits) / K if row["level_index"] == NO_LEVEL else 1 / K
            assert row["propensity"] == expected, row
        else:
            assert row["propensity"] == 1.0
        spent += row["face"]
        assert spent <= 6000
    assert any(row["bucket"] == EXPLORE and row["propensity"] > 1 / K for row in rows)  # the cap merged draws


@pytest.mark.parametrize("setting, level_index, propensity", [("mean", None, 1 / K), ("lowest", 0, 1.0),
                                                              ("none", NO_LEVEL, 1.0)])
def test_cold_start_in_the_exploration_bucket(tmp_path, setting, level_index, propensity):
    """An unknown id explores only where the campaign answers unknown ids by the rule (mean): lowest and none keep
    their answer, so minting ids cannot draw dearer coupons."""
    campaign = make_campaign(tmp_path, explore=0.999, cold_start=setting, cap="100000")
    with TestClient(create_app(campaign.path, token=TOKEN)) as client:
        answer = post(client, "r", "somebody-new")
    assert answer["cold_start"] and answer["bucket"] == EXPLORE and answer["propensity"] == propensity
    assert answer["reason"] == ("explore" if setting == "mean" else "cold_start")
    if level_index is not None:
        assert answer["level_index"] == (None if level_index == NO_LEVEL else level_index)


@pytest.mark.parametrize("explore, seed, message", [
    (1.0, 0, r"explore must be a share in \[0, 1\)"), (-0.1, 0, "explore must be"), (float("nan"), 0, "explore must"),
    (float("inf"), 0, "explore must"), (True, 0, "explore must"), ("0.1", 0, "explore must"),
    (0.1, -1, r"explore_seed must be an integer in \[0, 2\^64\)"), (0.1, 2**64, "explore_seed must"),
    (0.1, 1.5, "explore_seed must"), (0.1, True, "explore_seed must"),
])
def test_exploration_settings_are_checked(tmp_path, explore, seed, message):
    f = curves(5)
    plan_folder(tmp_path / "plan", f)
    with pytest.raises(DataError, match=message):
        build_campaign(tmp_path / "c", score_frame(f), tmp_path / "plan", cap=10, explore=explore, explore_seed=seed)


# ---------------------------------------------------------------------------------------------- the ledger


def drawn(request_id: str, faces: tuple, draw: int, fallback: bool = True) -> DecisionRequest:
    """An explored decision that drew ``faces[draw]`` among ``faces`` (minor units)."""
    among = tuple(Option(j, face, 0.1, face / 1000) for j, face in enumerate(faces))
    fallbacks = (among[0], Option(NO_LEVEL, 0, 0.0, 0.0)) if fallback else (Option(NO_LEVEL, 0, 0.0, 0.0),)
    return DecisionRequest(request_id, "customer", request_id, among[draw], fallbacks, 0.1, "v", False, "response",
                           100.0, "explore", EXPLORE, among)


def test_the_ledger_records_the_propensity_of_what_the_cap_served(ledger_url):
    faces = (100, 500, 1000, 2500)
    ledger = Ledger(ledger_url)
    ledger.open(cap=2000)
    rows = ledger.apply([drawn("a", faces, 1), drawn("b", faces, 3), drawn("c", faces, 0), drawn("d", faces, 2),
                         drawn("e", faces, 2, fallback=False)])
    # room 2000: a draws 500 (1/4); b draws 2500, which does not fit: the lowest, as would 2500 alone (2/4)
    # room 1400: c draws 100 directly, but 2500 would have given 100 too (2/4); room 1300: d's 1000 fits (1/4)
    # room 300: e draws 1000, no lowest fallback: none, as 500, 1000 and 2500 would (3/4)
    assert [(r["face"], r["reason"], r["propensity"]) for r in rows] == [
        (500, "explore", 0.25), (100, "cap_reached", 0.5), (100, "explore", 0.5), (1000, "explore", 0.25),
        (0, "cap_reached", 0.75)]
    totals, audit = ledger.totals(), ledger.audit()
    assert totals["explored"] == audit["explored"] == 5 and totals["at_risk"] == audit["at_risk"] == 1700
    ledger.close()


def test_one_statement_leaves_a_propensity_the_room_changed_to_the_lock(postgres_url, monkeypatch):
    """Writer a's guess of the room has every level of its draw fitting (propensity 1/3); b spends the room so the
    dearest no longer fits. The statement's headroom check refuses a's batch, and the lock-first transaction
    records what the room really made of the draw (2/3), not the guess."""
    attempts, faces = count_one_statements(monkeypatch), (100, 500, 1500)
    a, b = Ledger(postgres_url), Ledger(postgres_url)
    a.open(cap=3100)
    a.apply([drawn("a1", faces, 2)])  # lock first (a's first batch): 1,500 at risk
    a.apply([drawn("a2", faces, 0)])  # one statement: room 1,600 ≥ headroom 1,500; 1,600 at risk
    b.apply([drawn("b1", faces, 1)])  # 2,100 at risk, room 1,000
    row = a.apply([drawn("a3", faces, 0)])[0]  # a's guess: room 1,500, all fit; really 1,000
    assert attempts == [1, 0]
    assert (row["face"], row["reason"], row["propensity"]) == (100, "explore", pytest.approx(2 / 3))
    a.close()
    b.close()


def version_2_ledger(url: str) -> None:
    """A ledger as version 2 left it: one decision (the rule's), its budget row."""
    statements = [s.format(scale=100, exponent=2) for _, group in MIGRATIONS[:2] for s in group]
    rows = ["INSERT INTO schema_version VALUES (1, 0)", "INSERT INTO schema_version VALUES (2, 0)",
            "INSERT INTO budget (id, exponent, cap, committed, decisions) VALUES (1, 2, 10000, 500, 1)",
            "INSERT INTO decisions VALUES ('r0', 1, 'customer', 'c0', 1, 500, 0.5, 2.5, 0.1, 'v', 'rule', 0, "
            "'response', 'issued', 5.0, 9e9, NULL, 0, NULL)"]
    create = "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for statement in [create, *statements, *rows]:
                conn.execute(statement)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in [create, *statements, *rows]:
                conn.execute(statement)


def test_a_version_2_ledger_is_migrated_to_buckets_and_propensities(ledger_url):
    version_2_ledger(ledger_url)
    ledger = Ledger(ledger_url)
    assert ledger.schema_version() == 2
    ledger.open(cap=10000)
    assert ledger.schema_version() == 3
    old = ledger.decision("r0")
    assert (old["bucket"], old["propensity"], old["face"], old["seq"]) == (EXPLOIT, 1.0, 500, 1)
    rows = ledger.apply([drawn("r1", (100, 500), 1)])
    assert (rows[0]["seq"], rows[0]["propensity"]) == (2, 0.5)
    totals, audit = ledger.totals(), ledger.audit()
    assert totals["explored"] == audit["explored"] == 1 and totals["at_risk"] == audit["at_risk"] == 1000
    ledger.close()

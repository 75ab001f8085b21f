"""The load generator against the real service: a tiny campaign served by ``promokit serve`` in a subprocess."""

import json

import numpy as np
import pandas as pd
import pytest

from promokit.allocation.budget import ratio_form, solve_budget
from promokit.allocation.synthetic import make_budget_instance
from promokit.serve.campaign import build_campaign
from promokit.serve.ledger import Ledger
from promokit.serve.replay import ReplayResult, run_replay, running_service

TOKEN = "test-token"
LEVELS = (1.0, 2.0, 4.0)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign")
    instance = make_budget_instance(300, levels=LEVELS, seed=1)
    plan = solve_budget(*ratio_form(instance.scores, instance.levels, 2.0))
    report = out / "report.json"
    report.write_text(json.dumps({"problem": "budget", "form": "ratio", "B": 2.0, "lam": plan.lam,
                                  "levels": list(LEVELS)}))
    scores = pd.DataFrame({"user_id": [f"u{i}" for i in range(300)],
                           **{f"score_{level:g}": instance.scores[:, j] for j, level in enumerate(LEVELS)}})
    build_campaign(out / "campaign", scores, report, cap=1e6)
    return out / "campaign"


def test_replay_decides_each_body_once_and_retries_get_the_stored_answer(campaign):
    bodies = [{"request_id": f"r{i}", "customer_id": f"u{i % 350}"} for i in range(200)]  # some cold starts
    with running_service(campaign, TOKEN) as url:
        first = run_replay(url, TOKEN, bodies, concurrency=8)
        again = run_replay(url, TOKEN, bodies, concurrency=8)
        wrong = run_replay(url, "not-the-token", bodies[:3], concurrency=2)
    assert (first.statuses == 200).all() and (again.statuses == 200).all()
    assert [a["request_id"] for a in first.answers] == [b["request_id"] for b in bodies]
    assert not any(a["replayed"] for a in first.answers) and all(a["replayed"] for a in again.answers)
    assert [(a["level"], a["lam"], a["expires_at"]) for a in again.answers] == \
           [(a["level"], a["lam"], a["expires_at"]) for a in first.answers]
    assert (wrong.statuses == 401).all() and wrong.answers[0]["detail"]
    assert first.throughput > 0 and np.isfinite(first.latency_ms).all()
    assert first.percentiles()["p50"] <= first.percentiles()["max"]
    audit = Ledger(f"sqlite:///{campaign}/ledger.sqlite").audit()
    assert audit["decisions"] == audit["distinct_ids"] == 200


def test_replay_stops_at_max_seconds(campaign):
    with running_service(campaign, TOKEN) as url:
        result = run_replay(url, TOKEN, [{"request_id": f"t{i}", "customer_id": "u1"} for i in range(50)],
                            concurrency=1, max_seconds=0.0)
    assert (result.statuses == 0).all() and result.throughput == 0 and result.percentiles()["p50"] is None


def test_a_service_that_cannot_start_raises_with_its_stderr(tmp_path):
    with pytest.raises(RuntimeError, match="campaign.json is missing"):
        with running_service(tmp_path, TOKEN):
            pass


def test_percentiles_ignore_requests_not_answered():
    result = ReplayResult(np.array([200, 0, -1, 200]), [None] * 4, np.array([1.0, np.nan, np.nan, 3.0]), 2.0)
    assert result.throughput == 1.0 and result.percentiles()["max"] == 3.0

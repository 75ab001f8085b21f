"""The load generator against the real service: a tiny campaign served by ``promokit serve`` in a subprocess."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

from promokit.allocation.budget import ratio_form, solve_budget
from promokit.campaign import build as build_campaign
from promokit.experiments.allocation.instances import make_budget_instance
from promokit.serve.ledger import Ledger
from promokit.serve.replay import ReplayResult, free_port, run_replay, running_service

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


def test_kill_minus_9_of_the_parent_loses_nothing_and_frees_the_port(campaign, tmp_path):
    """Two workers under load; SIGKILL to uvicorn's parent only: its workers stop with it (they would otherwise
    keep the port), every decision acknowledged before the kill is in the ledger, and a restart answers."""
    port, ledger = free_port(), f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    command = [sys.executable, "-m", "promokit.cli", "serve", "--campaign", str(campaign), "--port", str(port),
               "--workers", "2", "--ledger", ledger]
    parent = subprocess.Popen(command, env={**os.environ, "PROMOKIT_API_TOKEN": TOKEN}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _answers(url, "warm", deadline=time.monotonic() + 30)
        results = []
        load = threading.Thread(target=lambda: results.append(run_replay(
            url, TOKEN, [{"request_id": f"k{i}", "customer_id": f"u{i % 300}"} for i in range(20_000)], 8,
            max_seconds=6)))
        load.start()
        time.sleep(1.0)
        workers = _children(parent.pid)
        parent.send_signal(signal.SIGKILL)
        load.join()
        assert len(workers) == 2 and _gone(workers, deadline=time.monotonic() + 10)
    finally:
        os.killpg(parent.pid, signal.SIGKILL) if parent.poll() is None else None
    acknowledged = [a["request_id"] for s, a in zip(results[0].statuses, results[0].answers) if s == 200]
    assert acknowledged and (results[0].statuses != 200).any()  # the kill came mid-load
    audit = Ledger(ledger)
    stored = {request_id for request_id in acknowledged if audit.decision(request_id) is not None}
    assert stored == set(acknowledged) and audit.totals()["decisions"] == audit.audit()["decisions"]
    audit.close()
    with running_service(campaign, TOKEN, ledger=ledger, port=port) as again:
        assert _answers(again, "after", deadline=time.monotonic() + 5)


def _answers(url: str, request_id: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        result = run_replay(url, TOKEN, [{"request_id": request_id, "customer_id": "u1"}], 1, max_seconds=2)
        if result.statuses[0] == 200:
            return True
        time.sleep(0.05)
    return False


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        children = [int(child) for child in listing.read().split()]
    return [child for child in children if "multiprocessing" in open(f"/proc/{child}/cmdline").read()
            and "resource_tracker" not in open(f"/proc/{child}/cmdline").read()]


def _gone(pids: list[int], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split()[2]
                   for pid in pids):
            return True
        time.sleep(0.05)
    return False

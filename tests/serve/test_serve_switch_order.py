"""Switches are ordered and idempotent across workers: after any sequence of switch requests, whichever worker
receives each, every worker serves the last one acknowledged, and the ledger holds its cap."""

import asyncio
import json
import time
import urllib.request

from fastapi.testclient import TestClient
from test_serve import AUTH, TOKEN
from test_serve_refresh import get_json, two_versions

from promokit.campaign.directory import activate_version
from promokit.campaign.versions import LIVE, live_pointer, point_live
from promokit.serve.app import create_app
from promokit.serve.ledger import Ledger
from promokit.serve.replay import running_service

PAIRS = 5  # benchmarks/serve_faults.py runs 24


def switch(base: str, version: str) -> dict:
    request = urllib.request.Request(f"{base}/v1/campaign/switch", data=json.dumps({"version": version}).encode(),
                                     method="POST", headers={**AUTH, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def served(base: str, workers: int = 2, tries: int = 60) -> dict[int, str]:
    """The version each worker serves, by pid, read from statuses on fresh connections until every worker answered."""
    seen = {}
    for _ in range(tries):
        status = get_json(f"{base}/v1/status")
        seen[status["pid"]] = status["campaign"]["model_version"]
        if len(seen) == workers:
            break
    return seen


def test_the_pointer_numbers_every_switch_and_keeps_the_last(tmp_path):
    root = two_versions(tmp_path)
    assert live_pointer(root) == ("v1", 0)  # no live.json: the root's version
    assert [point_live(root, v) for v in ("v2", "v1", "v1")] == [1, 2, 3] and live_pointer(root) == ("v1", 3)
    (root / LIVE).write_text('{"version": "v2"}')  # by hand: followed, not numbered
    assert live_pointer(root) == ("v2", None) and activate_version(root, "v1") and live_pointer(root) == ("v1", 1)


def test_a_worker_never_follows_a_pointer_older_than_its_own_switch(tmp_path):
    """Another worker pointed live.json at v2; this worker, on v1, acknowledges a switch to v1 while its follower,
    having seen the pointer move, waits to act: the follower reads the pointer again once the switch is done and
    stays on v1 (acting on what it had read would undo the last switch asked)."""
    root = two_versions(tmp_path)
    with TestClient(create_app(root, token=TOKEN, watch_seconds=0)) as client:
        service = client.app.state.service
        live = service.live
        point_live(root, "v2")

        async def race():
            endpoint = asyncio.ensure_future(service.switch("v1", "endpoint"))
            await asyncio.sleep(0)  # the endpoint's switch holds the worker's switching lock
            follower = asyncio.ensure_future(live._follow("pointer", service.read, service.set_cap))
            return await endpoint, await follower

        answer, _ = client.portal.call(race)
        assert answer["switched"] is False and answer["seq"] == 2  # v1 is live here: pointed again, in order
        assert live.version == "v1" and live.seen == ("v1", 2) and live_pointer(root) == ("v1", 2)


def test_rapid_switch_and_back_pairs_end_on_the_last_version_asked(tmp_path, ledger_url, monkeypatch):
    """Two workers; each pair switches away and at once back, so the second request often reaches the worker that
    has not followed the first yet (it serves the version asked already). Every pair must end with both workers,
    live.json and the ledger's cap on the version asked last."""
    monkeypatch.setenv("PROMOKIT_WATCH_SECONDS", "0.05")
    root = two_versions(tmp_path, cap_1="1000", cap_2="900")
    caps = {"v1": 100_000, "v2": 90_000}
    with running_service(root, TOKEN, ledger=ledger_url, workers=2) as base:
        ends = []
        for k in range(PAIRS):
            back = ("v1", "v2")[k % 2]
            away = "v2" if back == "v1" else "v1"
            first, last = switch(base, away), switch(base, back)
            assert last["seq"] == first["seq"] + 1
            time.sleep(0.4)  # every worker has read live.json several times since
            ends.append((live_pointer(root)[0], set(served(base).values()), Ledger(ledger_url).totals()["cap"]))
    assert ends == [(back, {back}, caps[back]) for back in (("v1", "v2")[k % 2] for k in range(PAIRS))]

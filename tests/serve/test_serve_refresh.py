"""A campaign refreshed without downtime: versions beside the live one, the switch (endpoint, pointer, signal), what
carries over (ledger, cap, pacing), what is refused, and a switch under load."""

import asyncio
import json
import os
import signal
import threading
import time
import urllib.request

import numpy as np
import pytest
from fastapi.testclient import TestClient
from test_serve import AUTH, LEVELS, TOKEN, curves, plan_folder, score_frame

from promokit.campaign import build as build_campaign
from promokit.campaign.directory import activate_version, load_campaign
from promokit.campaign.versions import LIVE, UnknownVersion, version_names
from promokit.data import DataError
from promokit.serve.app import create_app
from promokit.serve.ledger import DecisionRequest, Ledger
from promokit.serve.replay import run_replay, running_service


def two_versions(tmp_path, cap_1="1000", cap_2="1000", **options):
    """A campaign at version 'v1' and a version 'v2' of other scores built beside it."""
    for name, seed in (("plan1", 0), ("plan2", 1)):
        plan_folder(tmp_path / name, curves(400, seed))
    root = tmp_path / "campaign"
    build_campaign(root, score_frame(curves(400, 0)), tmp_path / "plan1", cap=cap_1, model_version="v1", **options)
    build_campaign(root, score_frame(curves(400, 1)), tmp_path / "plan2", cap=cap_2, model_version="v2", **options)
    return root


def test_a_build_into_a_campaign_writes_a_version_beside_the_live_one(tmp_path):
    root = two_versions(tmp_path)
    assert load_campaign(root).config.model_version == "v1" and not (root / LIVE).exists()
    assert (root / "versions" / "v2" / "campaign.json").is_file() and version_names(root) == ["v1", "v2"]
    v2 = load_campaign(root, version="v2")
    assert v2.path == root and v2.folder == root / "versions" / "v2" and v2.config.lam != load_campaign(root).config.lam
    assert activate_version(root).config.model_version == "v2"  # the newest built
    assert json.loads((root / LIVE).read_text()) == {"version": "v2", "seq": 1}
    assert load_campaign(root).folder == v2.folder
    build_campaign(root, score_frame(curves(400, 2)), tmp_path / "plan2", cap="1000", model_version="v3")
    build_campaign(root, score_frame(curves(400, 3)), tmp_path / "plan2", cap="1000", model_version="v4")
    assert version_names(root) == ["v1", "v2", "v4"]  # the live one, the new one and the root's are kept
    assert load_campaign(root).config.model_version == "v2"


def test_a_build_of_the_live_version_returns_it_or_is_refused(tmp_path):
    root = two_versions(tmp_path)
    again = build_campaign(root, score_frame(curves(400, 0)), tmp_path / "plan1", cap="1000", model_version="v1")
    assert again.folder == root and version_names(root) == ["v1", "v2"]
    with pytest.raises(DataError, match="'v1' is live in .* with other settings"):
        build_campaign(root, score_frame(curves(400, 0)), tmp_path / "plan1", cap="900", model_version="v1")
    with pytest.raises(DataError, match="model_version names the new version's folder"):
        build_campaign(root, score_frame(curves(400, 0)), tmp_path / "plan1", cap="900", model_version="../x")


def test_activate_refuses_a_version_the_ledger_cannot_take(tmp_path):
    root = two_versions(tmp_path)
    other = tmp_path / "plan3"
    other.mkdir()
    report = json.loads((tmp_path / "plan1" / "report.json").read_text())
    (other / "report.json").write_text(json.dumps({**report, "levels": LEVELS[:3].tolist()}))
    frame = score_frame(curves(400, 2)).drop(columns="score_20")
    build_campaign(root, frame, other, cap="1000", model_version="three-levels")
    with pytest.raises(DataError, match=r"has levels \[0.0, 5.0, 10.0\] where the live version 'v1' has"):
        activate_version(root, "three-levels")
    with pytest.raises(UnknownVersion, match="has no version 'v9'"):
        activate_version(root, "v9")
    assert load_campaign(root).config.model_version == "v1" and not (root / LIVE).exists()


@pytest.fixture
def refreshed(tmp_path):
    root = two_versions(tmp_path, cap_2="800")
    with TestClient(create_app(root, token=TOKEN, watch_seconds=0)) as client:
        yield root, client


def decide(client, request_id: str) -> dict:
    answer = client.post("/v1/decisions", json={"request_id": request_id, "customer_id": "c3"}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_switch_endpoint_serves_the_new_version_on_the_same_ledger(refreshed):
    root, client = refreshed
    pacer = client.app.state.service.live.rule.pacer
    pacer.target = pacer.B * 1.5  # a correction the new version must keep
    assert decide(client, "r1")["model_version"] == "v1"
    assert client.post("/v1/campaign/switch", json={"version": "v2"}).status_code == 401
    answer = client.post("/v1/campaign/switch", json={"version": "v2"}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    assert {k: answer.json()[k] for k in ("switched", "version", "previous", "how", "seq")} == {
        "switched": True, "version": "v2", "previous": "v1", "how": "endpoint", "seq": 1}
    assert json.loads((root / LIVE).read_text()) == {"version": "v2", "seq": 1}  # the other workers follow it
    assert decide(client, "r2")["model_version"] == "v2" and decide(client, "r1")["model_version"] == "v1"
    status = client.get("/v1/status").json()
    campaign, new_pacer = status["campaign"], client.app.state.service.live.rule.pacer
    assert campaign["model_version"] == "v2" and campaign["switches"] == 1 and campaign["cap"] == 800
    assert status["budget"]["cap"] == 800 and status["budget"]["decisions"] == 2  # one ledger, the new cap
    assert new_pacer.target == pytest.approx(new_pacer.B * 1.5) and len(new_pacer.trace) == 2
    metrics = client.get("/metrics").text
    assert 'promokit_campaign_info{model_version="v2"} 1.0' in metrics
    assert "promokit_campaign_switches_total 1.0" in metrics and "promokit_campaign_refused_total 0.0" in metrics
    assert 'id="model">v2<' in client.get("/").text
    same = client.post("/v1/campaign/switch", json={"version": "v2"}, headers=AUTH).json()
    assert same["switched"] is False and same["version"] == "v2" and same["seq"] == 2  # pointed again, in order
    assert json.loads((root / LIVE).read_text()) == {"version": "v2", "seq": 2}


def test_a_version_that_cannot_serve_is_refused_and_the_live_one_kept(refreshed, tmp_path):
    root, client = refreshed
    (root / "versions" / "v2" / "lookup" / "customer" / "scores.npy").write_bytes(b"not numpy")
    answer = client.post("/v1/campaign/switch", json={"version": "v2"}, headers=AUTH)
    assert answer.status_code == 409 and "cannot be read" in answer.json()["detail"]
    build_campaign(root, score_frame(curves(400, 0)), tmp_path / "plan1", cap="1000", model_version="v3",
                   merchants=score_frame(curves(5), "m"))
    answer = client.post("/v1/campaign/switch", json={"version": "v3"}, headers=AUTH)
    assert answer.status_code == 409 and "populations ['customer', 'merchant']" in answer.json()["detail"]
    assert client.post("/v1/campaign/switch", json={"version": "v9"}, headers=AUTH).status_code == 404
    for body in ('{"version": 3}', '{"version": "a b"}', '{"versions": "v2"}', "[]", "{"):
        assert client.post("/v1/campaign/switch", content=body, headers=AUTH).status_code == 422, body
    status = client.get("/v1/status").json()["campaign"]
    assert status["model_version"] == "v1" and status["refused"] == 2 and status["switches"] == 0
    assert status["last_refused"]["version"] == "v3" and decide(client, "r1")["model_version"] == "v1"
    assert not (root / LIVE).exists()


def test_a_request_in_flight_finishes_on_the_version_it_started_on(refreshed):
    _, client = refreshed
    service = client.app.state.service
    submit, gate = service.writer.submit, asyncio.Event()

    async def held(item):  # the decision waits; the switch's cap goes through
        if isinstance(item, DecisionRequest):
            await gate.wait()
        return await submit(item)

    async def scenario():
        service.writer.submit = held
        from promokit.serve.schema import DecisionIn
        in_flight = asyncio.ensure_future(service.decide(DecisionIn(request_id="r1", customer_id="c1")))
        await asyncio.sleep(0.01)
        await service.switch("v2", "endpoint")
        gate.set()
        return json.loads(await in_flight)

    assert client.portal.call(scenario)["model_version"] == "v1"
    service.writer.submit = submit
    assert decide(client, "r2")["model_version"] == "v2"


def test_the_service_follows_the_pointer(tmp_path):
    root = two_versions(tmp_path)
    with TestClient(create_app(root, token=TOKEN, watch_seconds=0.05)) as client:
        activate_version(root, "v2")
        give_up = time.monotonic() + 10
        while client.get("/v1/status").json()["campaign"]["model_version"] != "v2":
            assert time.monotonic() < give_up, "the service did not follow live.json"
            time.sleep(0.05)
        assert client.get("/v1/status").json()["campaign"]["last_switch"]["how"] == "pointer"
        (root / LIVE).write_text('{"version": "v1"}')  # back, by hand
        while client.get("/v1/status").json()["campaign"]["model_version"] != "v1":
            assert time.monotonic() < give_up
            time.sleep(0.05)


def test_watch_seconds_must_be_a_duration(tmp_path, monkeypatch):
    root = two_versions(tmp_path)
    monkeypatch.setenv("PROMOKIT_WATCH_SECONDS", "soon")
    with pytest.raises(DataError, match=r"\$PROMOKIT_WATCH_SECONDS\) must be a number of seconds ≥ 0, got 'soon'"):
        create_app(root, token=TOKEN)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def test_sighup_makes_the_service_read_the_pointer(tmp_path, monkeypatch):
    root = two_versions(tmp_path)
    monkeypatch.setenv("PROMOKIT_WATCH_SECONDS", "0")  # only the signal can make it switch
    with running_service(root, TOKEN) as base:
        pid = get_json(f"{base}/v1/status")["pid"]
        activate_version(root, "v2")
        time.sleep(0.3)
        assert get_json(f"{base}/v1/status")["campaign"]["model_version"] == "v1"
        os.kill(pid, signal.SIGHUP)
        give_up = time.monotonic() + 10
        while (status := get_json(f"{base}/v1/status"))["campaign"]["model_version"] != "v2":
            assert time.monotonic() < give_up, "SIGHUP did not switch the service"
            time.sleep(0.05)
        assert status["campaign"]["last_switch"]["how"] == "signal"


def test_a_switch_under_load_loses_no_request_and_holds_the_cap(tmp_path, ledger_url):
    """Two workers answer 12,000 decisions from 16 clients; the switch comes after the first 1,500, while they are
    sent (the status counts the ledger's decisions a little late on a loaded machine, so the load runs long enough
    for the switch to land inside it). Every request is answered 200, both versions answer, every worker answers
    from the new version a second later, the cap binds and holds, and the ledger's totals equal its rows."""
    root = two_versions(tmp_path, cap_1="60", cap_2="60")
    bodies = [{"request_id": f"r{i}", "customer_id": f"c{i % 400}"} for i in range(12_000)]
    with running_service(root, TOKEN, ledger=ledger_url, workers=2) as base:
        replayed = {}
        load = threading.Thread(target=lambda: replayed.update(result=run_replay(base, TOKEN, bodies, concurrency=16)))
        load.start()
        while get_json(f"{base}/v1/status")["budget"].get("decisions", 0) < 1500:
            assert load.is_alive(), "the load ended before the switch"
            time.sleep(0.02)
        request = urllib.request.Request(f"{base}/v1/campaign/switch", data=b'{"version": "v2"}', method="POST",
                                         headers={**AUTH, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            switched = json.loads(answer.read())
        under_load = load.is_alive()
        load.join()
        time.sleep(1.5)  # the other worker has read live.json since
        after = run_replay(base, TOKEN, [{"request_id": f"s{i}", "customer_id": f"c{i}"} for i in range(200)], 8)
        status = get_json(f"{base}/v1/status")
    result = replayed["result"]
    assert switched["switched"] and under_load and (result.statuses == 200).all(), np.unique(result.statuses,
                                                                                           return_counts=True)
    versions = [answer["model_version"] for answer in result.answers]
    assert versions.count("v1") >= 1500 and versions.count("v2") > 0, (versions.count("v1"), versions.count("v2"))
    assert (after.statuses == 200).all() and {answer["model_version"] for answer in after.answers} == {"v2"}
    audit = Ledger(ledger_url).audit()
    assert audit["decisions"] == len(bodies) + 200 and audit["at_risk"] <= 6000  # in cents: the cap of 60
    assert status["budget"]["capped"] > 0 and status["budget"]["at_risk"] == audit["at_risk"] / 100
    assert status["budget"]["cap"] == 60


def test_the_cli_builds_beside_switches_and_refuses_in_one_line(tmp_path):
    from test_campaign_export import invoke, one_line_error

    root = two_versions(tmp_path)
    score_frame(curves(400, 2)).to_parquet(tmp_path / "scores.parquet")
    built = invoke("campaign", "build", "--out", root, "--scores", tmp_path / "scores.parquet", "--budget-plan",
                   tmp_path / "plan2", "--cap", "1000", "--model-version", "v3")
    assert built.exit_code == 0 and "beside the live version v1" in " ".join(built.output.split()), built.output
    switched = invoke("campaign", "switch", "--campaign", root, "--version", "v3")
    assert switched.exit_code == 0 and "version v3 is live (was v1)" in " ".join(switched.output.split()), \
        switched.output
    assert load_campaign(root).config.model_version == "v3"
    built = invoke("campaign", "build", "--out", root, "--scores", tmp_path / "scores.parquet", "--budget-plan",
                   tmp_path / "plan1", "--cap", "1000", "--model-version", "v4", "--activate")
    assert built.exit_code == 0 and load_campaign(root).config.model_version == "v4", built.output
    one_line_error(invoke("campaign", "switch", "--campaign", root, "--version", "v9"), "has no version 'v9'")
    one_line_error(invoke("campaign", "switch", "--campaign", tmp_path / "nothing"), "is not a campaign directory")
    (root / LIVE).write_text("[1]")
    one_line_error(invoke("campaign", "switch", "--campaign", root), "does not name a version")
    (root / LIVE).write_text('{"version": "v4"}')
    one_line_error(invoke("campaign", "build", "--out", root, "--scores", tmp_path / "scores.parquet",
                          "--budget-plan", tmp_path / "plan1", "--cap", "1000", "--model-version", "a/b"),
                   "model_version names the new version's folder")

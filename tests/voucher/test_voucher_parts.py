"""``voucher predict`` over sessions and events in parts (promokit.voucher.parts): co-partitioned by user, each
part scored alone on the local or the Ray executor, equal to the one-file predict."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from promokit.cli import app
from promokit.experiments.voucher.world import make_world
from promokit.training import TrainConfig
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.history import default_cuts, split_by_time
from promokit.voucher.models.dmbgn import _top_k

torch.set_num_threads(1)
runner = CliRunner()
TINY_GRAPH = {"emb_dim": 4, "hidden": [16], "dropout": 0.0, "uvg_dim": 8, "attention_units": 8, "gnn_layers": 1}
#: the part of each user (user_id % 3) → its part file; part 1 is empty
PART_OF = {0: 0, 1: 2, 2: 3}
N_PARTS = 4


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A small synthetic world as the user has it (sessions, events keyed by session, items, voucher_items: one file
    each), and a DMBGN model trained on it."""
    folder = tmp_path_factory.mktemp("voucher_parts")
    tables = make_world(n_users=120, n_vouchers=15, n_items=100, n_sessions=800, seed=3).tables
    cuts = default_cuts(tables.sessions)
    split = split_by_time(tables.sessions, cuts.valid_from, cuts.test_from)
    train = TrainConfig(epochs=1, batch_size=256, lr=0.003, patience=1, progress=False)
    VoucherModel("dmbgn", TINY_GRAPH, train).fit(tables,
                                                 rows=split.train, validation=split.valid).save(folder / "model")
    tables.sessions.to_parquet(folder / "sessions.parquet", index=False)
    tables.events.drop(columns=["session", "pre"]).to_parquet(folder / "events.parquet", index=False)
    tables.items.to_parquet(folder / "items.parquet", index=False)
    tables.voucher_items.to_parquet(folder / "voucher_items.parquet", index=False)
    return folder


def _by_user(sessions: pd.DataFrame, events: pd.DataFrame, folder, key: str = "session_id"):
    """Sessions and their events (keyed by ``key``) cut by user into ``N_PARTS`` co-partitioned parts in row
    order, one empty; returns the two part folders."""
    part = sessions["user_id"].map(lambda user: PART_OF[user % 3])
    event_part = events[key].map(dict(zip(sessions[key], part)))  # the part of the event's session or user
    for name, frame, where in (("sessions", sessions, part), ("events", events, event_part)):
        (folder / name).mkdir(parents=True)
        for k in range(N_PARTS):
            frame[where.to_numpy() == k].to_parquet(folder / name / f"part-{k:05d}.parquet", index=False)
    return folder / "sessions", folder / "events"


def _user_log(world) -> pd.DataFrame:
    """The events as a user-level log: user_id instead of session_id."""
    sessions = pd.read_parquet(world / "sessions.parquet")
    events = pd.read_parquet(world / "events.parquet")
    user = events["session_id"].map(dict(zip(sessions["session_id"], sessions["user_id"])))
    return events.drop(columns=["session_id"]).assign(user_id=user)


def _predict(world, sessions, events, out, *options):
    return _invoke("voucher", "predict", "--model", world / "model", "--sessions", sessions, "--events", events,
                   "--items", world / "items.parquet", "--voucher-items", world / "voucher_items.parquet", "--out", out,
                   *options)


def _error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.mark.parametrize("key, start", [("session_id", None), ("session_id", "2024-05-01"), ("user_id", None)])
def test_partitioned_predict_equals_the_one_file_predict_part_by_part(world, tmp_path, key, start):
    sessions = pd.read_parquet(world / "sessions.parquet")
    events = pd.read_parquet(world / "events.parquet") if key == "session_id" else _user_log(world)
    events.to_parquet(tmp_path / "events.parquet", index=False)
    options = ["--from", start] if start else []
    whole = _predict(world, world / "sessions.parquet", tmp_path / "events.parquet", tmp_path / "whole", *options)
    assert whole.exit_code == 0, whole.output
    session_parts, event_parts = _by_user(sessions, events, tmp_path / "in", key)
    result = _predict(world, session_parts, event_parts, tmp_path / "out", *options)
    assert result.exit_code == 0, result.output

    expected = pd.read_parquet(tmp_path / "whole" / "predictions.parquet")
    written = sorted((tmp_path / "out" / "predictions").iterdir())
    assert [p.name for p in written] == [f"part-{k:05d}.parquet" for k in range(N_PARTS)]
    for k, path in enumerate(written):
        got = pd.read_parquet(path)
        part_sessions = pd.read_parquet(session_parts / f"part-{k:05d}.parquet")["session_id"]
        want = expected[expected["session_id"].isin(part_sessions)]  # in the one-file predict's order
        assert list(got.columns) == ["session_id", "user_id", "voucher_id", "p_redeem"]
        assert got["session_id"].tolist() == want["session_id"].tolist()
        assert np.abs(got["p_redeem"].to_numpy() - want["p_redeem"].to_numpy()).max(initial=0) <= 1e-6
    assert len(pd.read_parquet(written[1])) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rows"] == len(expected) > 0 and summary["parts"] == N_PARTS
    assert summary["executor"] == "local" and summary["model"] == "dmbgn"
    assert summary["means"]["p_redeem"] == pytest.approx(expected["p_redeem"].mean(), abs=1e-6)


def test_ray_predict_equals_local_predict(ray_cluster, world, tmp_path):
    sessions, events = _by_user(pd.read_parquet(world / "sessions.parquet"),
                                pd.read_parquet(world / "events.parquet"), tmp_path / "in")
    local = _predict(world, sessions, events, tmp_path / "local")
    assert local.exit_code == 0, local.output
    on_ray = _predict(world, sessions, events, tmp_path / "ray", "--executor", "ray", "--address",
                      ray_cluster.address, "--workers", 2)
    assert on_ray.exit_code == 0, on_ray.output
    for k in range(N_PARTS):
        a = pd.read_parquet(tmp_path / "local" / "predictions" / f"part-{k:05d}.parquet")
        b = pd.read_parquet(tmp_path / "ray" / "predictions" / f"part-{k:05d}.parquet")
        assert a["session_id"].equals(b["session_id"])
        assert np.abs(a["p_redeem"].to_numpy() - b["p_redeem"].to_numpy()).max(initial=0) <= 1e-6
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["executor"] == "ray"


@pytest.fixture
def parts(world, tmp_path):
    """The world's sessions and session-keyed events in co-partitioned parts."""
    return _by_user(pd.read_parquet(world / "sessions.parquet"), pd.read_parquet(world / "events.parquet"),
                    tmp_path / "in")


def test_events_in_another_number_of_parts_are_an_error(world, tmp_path, parts):
    sessions, events = parts
    (events / "part-00003.parquet").unlink()
    message = _error(_predict(world, sessions, events, tmp_path / "out"))
    assert "has 4 parts" in message and "has 3" in message and str(events) in message
    assert not (tmp_path / "out").exists()


def test_events_in_one_file_with_sessions_in_parts_are_an_error(world, tmp_path, parts):
    message = _error(_predict(world, parts[0], world / "events.parquet", tmp_path / "out"))
    assert "events must be in parts too" in message and "events.parquet" in message


def test_a_user_in_two_parts_is_an_error_naming_both_files(world, tmp_path, parts):
    sessions, events = parts
    first, last = sessions / "part-00000.parquet", sessions / "part-00003.parquet"
    moved = pd.read_parquet(last).iloc[:1]
    pd.concat([pd.read_parquet(first), moved]).to_parquet(first, index=False)
    message = _error(_predict(world, sessions, events, tmp_path / "out"))
    assert f"user_id {moved['user_id'].iloc[0]} is in two parts" in message
    assert str(first) in message and str(last) in message
    assert not list((tmp_path / "out" / "predictions").iterdir())  # nothing scored


def test_a_user_in_two_parts_of_a_user_level_log_is_an_error(world, tmp_path):
    sessions, events = _by_user(pd.read_parquet(world / "sessions.parquet"), _user_log(world), tmp_path / "in",
                                "user_id")
    source, target = events / "part-00002.parquet", events / "part-00000.parquet"
    stray = pd.read_parquet(source).iloc[:1]
    pd.concat([pd.read_parquet(target), stray]).to_parquet(target, index=False)
    message = _error(_predict(world, sessions, events, tmp_path / "out"))
    assert f"user_id {stray['user_id'].iloc[0]} is in two parts" in message
    assert str(target) in message and str(source) in message


def test_a_bad_part_is_an_error_naming_its_file_and_row(world, tmp_path, parts):
    sessions, events = parts
    bad = sessions / "part-00002.parquet"
    frame = pd.read_parquet(bad)
    frame["min_spend"] = frame["min_spend"].astype(str)  # a text column, as a spoiled export writes it
    frame.loc[3, "min_spend"] = "ten"
    frame.to_parquet(bad, index=False)
    message = _error(_predict(world, sessions, events, tmp_path / "out"))
    assert message.startswith(f"error: {bad}: sessions: column 'min_spend'") and "row 3" in message


def test_an_event_of_a_session_in_another_part_is_an_error_naming_the_events_part(world, tmp_path, parts):
    sessions, events = parts
    stray = pd.read_parquet(events / "part-00002.parquet").iloc[:1]
    target = events / "part-00000.parquet"
    pd.concat([pd.read_parquet(target), stray]).to_parquet(target, index=False)
    message = _error(_predict(world, sessions, events, tmp_path / "out"))
    assert message.startswith(f"error: {target}: events: column 'session_id' has 1 values of unknown sessions")
    assert message.endswith(f"(the events part paired with {sessions / 'part-00000.parquet'})")


def test_executor_ray_needs_sessions_in_parts(world, tmp_path):
    message = _error(_predict(world, world / "sessions.parquet", world / "events.parquet", tmp_path / "p",
                              "--executor", "ray"))
    assert "--executor ray scores a table in parts" in message


def test_dmbgn_pooling_ranks_equal_scores_by_position_so_a_graph_pools_the_same_in_any_batch():
    from torch_geometric.nn import TopKPooling

    torch.manual_seed(0)
    pool = TopKPooling(4, ratio=0.5)
    w = pool.select.weight.detach()[0]
    graph = torch.stack([0.5 * w, 0.5 * w, 3 * w, -w])  # nodes 0 and 1 tie for the second place
    x, kept = _top_k(pool, graph, torch.zeros(4, dtype=torch.long), 1)
    assert kept.tolist() == [2, 0]
    others = torch.rand(40, 4)
    batched = torch.cat([others, graph])
    x_in_batch, kept_in_batch = _top_k(pool, batched, torch.cat([torch.arange(40) // 4, torch.full((4,), 10)]), 11)
    assert kept_in_batch[-2:].tolist() == [42, 40] and torch.equal(x_in_batch[-2:], x)
    no_edges = torch.zeros(2, 0, dtype=torch.long)  # without ties: PyG's own pooling
    assert torch.equal(_top_k(pool, others, torch.arange(40) // 4, 10)[0],
                       pool(others, no_edges, batch=torch.arange(40) // 4)[0])

"""``value predict`` over a dataset in parts (users, deliveries, behaviors, consumption co-partitioned by user): the
one-folder predict part by part, on the local executor and on Ray, into ``allocate quota``; bad layouts as one-line
errors naming the file."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from conftest import write_value_parts
from promokit.cli import app
from promokit.experiments.value.world import feasible_quotas, make_world
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig
from promokit.value.contract import check_tables, table_paths
from promokit.value.estimator import ValueModel
from promokit.value.parts import predict_parts

torch.set_num_threads(1)
runner = CliRunner()
SMALL = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "max_len": 12}
PART_USERS = [150, 0, 120, 130]  # users per part; part 1 is empty


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world():
    return make_world(400, seed=11)


@pytest.fixture(scope="module")
def model_dir(world, tmp_path_factory):
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    path = tmp_path_factory.mktemp("model") / "esdpm-ncg"
    ValueModel("esdpm-ncg", SMALL, TrainConfig(epochs=1, batch_size=256, progress=False)).fit(tables).save(path)
    return path


@pytest.fixture(scope="module")
def data(world, tmp_path_factory):
    """The world's users shuffled into the parts of PART_USERS: ``parts/`` (a directory of parts per user-keyed
    table) and ``whole/`` (each table the concatenation of its parts, as one file), with quotas for both."""
    root = tmp_path_factory.mktemp("value-parts")
    write_value_parts(world, root, PART_USERS)
    feasible_quotas(world.users.tolerance.to_numpy(), world.funds.risk.to_numpy(), world.funds.fund).to_csv(
        root / "quotas.csv", index=False)
    return root


@pytest.fixture(scope="module")
def predicted(data, model_dir):
    """predict of the whole folder and, on the local executor, of its parts: the two output folders."""
    for folder in ("whole", "parts"):
        result = _invoke("value", "predict", "--model", model_dir, "--data", data / folder, "--out",
                         data / f"out-{folder}")
        assert result.exit_code == 0, result.output
    return data / "out-whole", data / "out-parts"


def _split(frame: pd.DataFrame, data, table: str) -> list[pd.DataFrame]:
    """The rows of ``frame`` (one folder's output) of each part's users, in order."""
    users = [pd.read_parquet(data / "parts" / table / f"part-{k:05d}.parquet").user_id
             for k in range(len(PART_USERS))]
    return [frame[frame.user_id.isin(set(u))].reset_index(drop=True) for u in users]


def _largest_difference(a: pd.DataFrame, b: pd.DataFrame, relative: bool = False) -> float:
    """max |a − b| over the numeric columns (``relative``: divided by max(1, |b|)), the keys checked equal."""
    assert list(a.columns) == list(b.columns) and a.user_id.tolist() == b.user_id.tolist()
    x, y = (frame.select_dtypes("number").to_numpy() for frame in (a, b))
    return float((np.abs(x - y) / (np.maximum(1.0, np.abs(y)) if relative else 1.0)).max(initial=0.0))


def test_local_parts_equal_the_one_folder_predict(data, predicted):
    """The ETV table part by part to 1e-6; the per-delivery outputs to float32 precision (1e-5 relative: the network
    runs in float32 and a part's deliveries are other batches than the whole table's, which moves last bits)."""
    whole, parts = predicted
    for name, users_table, tolerance in (("scores", "users", 1e-6), ("deliveries", "deliveries", 1e-5)):
        expected = _split(pd.read_parquet(whole / f"{name}.parquet"), data, users_table)
        got = [pd.read_parquet(parts / name / f"part-{k:05d}.parquet") for k in range(len(PART_USERS))]
        assert [len(g) for g in got] == [len(e) for e in expected] and len(got[1]) == 0
        relative = name == "deliveries"
        assert max(_largest_difference(g, e, relative) for g, e in zip(got, expected)) <= tolerance, name
    one, many = (json.loads((folder / "summary.json").read_text()) for folder in predicted)
    etv = pd.read_parquet(whole / "scores.parquet").filter(like="score_")
    assert one["mean_etv"] == etv.mean().round(6).to_dict()  # the one-folder summary as it always was
    assert one["best_fund_share"] == etv.idxmax(axis=1).value_counts(normalize=True).round(4).to_dict()
    assert list(one) == list(many) and {k: one[k] for k in ("model", "users", "funds", "deliveries")} == \
        {k: many[k] for k in ("model", "users", "funds", "deliveries")}
    assert max(abs(one["mean_etv"][f] - many["mean_etv"][f]) for f in one["mean_etv"]) <= 1e-6
    assert one["best_fund_share"] == many["best_fund_share"]


def test_at_and_contexts_reach_every_part_and_the_model_loads_once(data, model_dir, tmp_path, monkeypatch):
    result = _invoke("value", "predict", "--model", model_dir, "--data", data / "whole", "--out", tmp_path / "whole",
                     "--at", "2026-02-10", "--contexts", 2)
    assert result.exit_code == 0, result.output
    loads, load = [], ValueModel.load
    monkeypatch.setattr(ValueModel, "load", staticmethod(lambda path: loads.append(path) or load(path)))
    predict_parts(model_dir, table_paths(data / "parts"), tmp_path / "parts", LocalExecutor(), "2026-02-10", 2)
    assert loads == [model_dir]  # once for the 4 parts: the executor's setup
    expected = _split(pd.read_parquet(tmp_path / "whole" / "scores.parquet"), data, "users")
    got = [pd.read_parquet(tmp_path / "parts" / "scores" / f"part-{k:05d}.parquet") for k in range(len(PART_USERS))]
    assert max(_largest_difference(g, e) for g, e in zip(got, expected)) <= 1e-6


@pytest.mark.extra("allocation")
def test_allocate_quota_reads_the_score_parts(data, predicted):
    plans = {}
    for out in predicted:
        scores = out / "scores" if (out / "scores").is_dir() else out / "scores.parquet"
        result = _invoke("allocate", "quota", "--scores", scores, "--quotas", data / "quotas.csv", "--out", out / "plan")
        assert result.exit_code == 0, result.output
        plans[out.name] = json.loads((out / "plan" / "report.json").read_text())
    assert plans["out-whole"]["objective"] == pytest.approx(plans["out-parts"]["objective"], rel=1e-9)


def test_ray_predict_equals_local(ray_cluster, data, model_dir, predicted):
    out = data / "out-ray"
    result = _invoke("value", "predict", "--model", model_dir, "--data", data / "parts", "--out", out,
                     "--executor", "ray", "--address", ray_cluster.address, "--workers", 2)
    assert result.exit_code == 0, result.output
    for name in ("scores", "deliveries"):
        for k in range(len(PART_USERS)):
            ray_part, local_part = (pd.read_parquet(o / name / f"part-{k:05d}.parquet") for o in (out, predicted[1]))
            assert _largest_difference(ray_part, local_part) <= 1e-6
    assert json.loads((out / "summary.json").read_text()) == json.loads((predicted[1] / "summary.json").read_text())


def _drop_part(folder):
    (folder / "deliveries" / "part-00003.parquet").unlink()


def _user_in_two_parts(folder):
    users = folder / "users" / "part-00002.parquet"
    first = pd.read_parquet(folder / "users" / "part-00000.parquet").iloc[[4]]
    pd.concat([pd.read_parquet(users), first]).to_parquet(users, index=False)


def _move_row(table):
    def move(folder):
        source, target = (folder / table / f"part-{k:05d}.parquet" for k in (0, 2))
        rows = pd.read_parquet(source)
        rows.iloc[1:].to_parquet(source, index=False)
        pd.concat([pd.read_parquet(target), rows.iloc[:1]]).to_parquet(target, index=False)
    return move


def _one_file(folder):
    pd.concat([pd.read_parquet(p) for p in sorted((folder / "deliveries").glob("*.parquet"))]).to_parquet(
        folder / "deliveries.parquet", index=False)
    shutil.rmtree(folder / "deliveries")


@pytest.mark.parametrize("spoil, file, message", [
    (_drop_part, "deliveries", "3 parts, but"),
    (_user_in_two_parts, "users/part-00000.parquet", "is in two parts"),
    (_move_row("deliveries"), "deliveries/part-00002.parquet", "has 1 values in"),
    (_move_row("behaviors"), "behaviors/part-00002.parquet", "not in this part's users"),
    (_one_file, "deliveries.parquet", "is a directory of parts"),
])
def test_bad_parts_are_one_line_errors_naming_the_file(data, model_dir, tmp_path, spoil, file, message):
    folder = tmp_path / "parts"
    shutil.copytree(data / "parts", folder)
    spoil(folder)
    result = _invoke("value", "predict", "--model", model_dir, "--data", folder, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = " ".join(result.output.split())  # rich wraps at the terminal's width
    assert line.startswith("error: ") and str(folder / file) in line and message in line


@pytest.fixture(scope="module")
def graph_models(world, tmp_path_factory):
    """ESDPM with the consumption graph (its GAT, §4.1.2) and the DNN-C/DNN-V configuration, whose two networks
    each have a GNN."""
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    root = tmp_path_factory.mktemp("graph-models")
    for name, params in (("esdpm", {}), ("separate", {"bottom": "separate", "conv": "graph"})):
        ValueModel("esdpm", {**SMALL, **params}, TrainConfig(epochs=1, batch_size=256, progress=False)).fit(tables) \
            .save(root / name)
    return root


@pytest.mark.parametrize("name", ["esdpm", "separate"])
def test_a_graph_model_scores_the_parts_as_the_whole_folder(data, graph_models, tmp_path, name):
    """e_c over the payment graph in shards (merchants join users of different parts), then each part: the
    one-folder ETV and per-delivery outputs."""
    outs = {}
    for folder in ("whole", "parts"):
        outs[folder] = tmp_path / folder
        result = _invoke("value", "predict", "--model", graph_models / name, "--data", data / folder, "--out",
                         outs[folder])
        assert result.exit_code == 0, result.output
    for table, users_table, tolerance in (("scores", "users", 1e-6), ("deliveries", "deliveries", 1e-5)):
        expected = _split(pd.read_parquet(outs["whole"] / f"{table}.parquet"), data, users_table)
        got = [pd.read_parquet(outs["parts"] / table / f"part-{k:05d}.parquet") for k in range(len(PART_USERS))]
        assert max(_largest_difference(g, e, table == "deliveries") for g, e in zip(got, expected)) <= tolerance
    assert not (outs["parts"] / ".graph").exists()


def test_a_graph_model_on_ray_equals_local(ray_cluster, data, graph_models, tmp_path):
    for executor in ("local", "ray"):
        result = _invoke("value", "predict", "--model", graph_models / "esdpm", "--data", data / "parts", "--out",
                         tmp_path / executor, "--executor", executor, *(("--workers", 2) if executor == "ray" else ()))
        assert result.exit_code == 0, result.output
    for k in range(len(PART_USERS)):
        pd.testing.assert_frame_equal(*(pd.read_parquet(tmp_path / e / "scores" / f"part-{k:05d}.parquet")
                                        for e in ("local", "ray")))


def test_a_graph_model_needs_the_payments(data, graph_models, tmp_path):
    folder = tmp_path / "parts"
    shutil.copytree(data / "parts", folder)
    shutil.rmtree(folder / "consumption")
    result = _invoke("value", "predict", "--model", graph_models / "esdpm", "--data", folder, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "reads the consumption graph: give the consumption/ parts" in \
        " ".join(result.output.split())


def test_the_floor_scores_the_parts_as_the_whole_folder(world, data, tmp_path):
    """hurdle (boosted trees, no network) over parts: the one-folder ETV table and per-delivery outputs, exactly
    (a tree scores each row alone)."""
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors)
    ValueModel("hurdle").fit(tables).save(tmp_path / "floor")
    for folder in ("whole", "parts"):
        result = _invoke("value", "predict", "--model", tmp_path / "floor", "--data", data / folder, "--out",
                         tmp_path / folder)
        assert result.exit_code == 0, result.output
    for table, users_table in (("scores", "users"), ("deliveries", "deliveries")):
        expected = _split(pd.read_parquet(tmp_path / "whole" / f"{table}.parquet"), data, users_table)
        got = [pd.read_parquet(tmp_path / "parts" / table / f"part-{k:05d}.parquet") for k in range(len(PART_USERS))]
        assert max(_largest_difference(g, e, relative=True) for g, e in zip(got, expected)) <= 1e-12, table

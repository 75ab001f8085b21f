"""``promokit value …`` from the command line: synth → train → predict → allocate quota → evaluate, and bad
inputs as one-line errors."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app

runner = CliRunner()
NET = ('{"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "fanouts": [4, 4], '
       '"max_len": 10}')


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("value") / "world"
    result = _invoke("value", "synth", "--out", folder, "--users", 600, "--seed", 2)
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture(scope="module")
def model(world):
    path = world.parent / "esdpm"
    result = _invoke("value", "train", "--data", world, "--out", path, "--epochs", 1, "--params", NET)
    assert result.exit_code == 0, result.output
    assert "held out for evaluate" in result.output
    return path


def test_train_predict_allocate_evaluate(world, model, tmp_path):
    scores = tmp_path / "scores"
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", scores)
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(scores / "scores.parquet")
    funds = pd.read_parquet(world / "funds.parquet").fund.tolist()
    assert list(table.columns) == ["user_id", *[f"score_{f}" for f in funds], "tolerance"] and len(table) == 600
    assert len(pd.read_parquet(scores / "deliveries.parquet")) == len(pd.read_parquet(world / "deliveries.parquet"))
    plan = tmp_path / "plan"
    result = _invoke("allocate", "quota", "--scores", scores / "scores.parquet", "--quotas", world / "quotas.csv",
                     "--out", plan)
    assert result.exit_code == 0, result.output

    result = _invoke("value", "evaluate", "--model", model, "--data", world, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert {"auc", "logloss", "mse", "mae", "gini", "thc", "tha", "best_differs", "uplift_spread",
            "etv_bias"} <= set(report["metrics"])
    assert len(report["deciles"]) == 10 and (tmp_path / "eval" / "deciles.png").exists()
    # the floor, fitted on the deliveries the model trained on, beside it; the calibration per fund
    floor, metrics = report["floor"], report["metrics"]
    assert set(floor) == set(metrics) and floor["deliveries"] == metrics["deliveries"]
    funds = pd.DataFrame(report["funds"])
    assert funds.deliveries.sum() == report["metrics"]["deliveries"]
    bought = funds.mean_observed > 0
    assert np.allclose(funds.ratio[bought], funds.mean_predicted[bought] / funds.mean_observed[bought])
    assert funds.ratio[~bought].isna().all()
    assert "relaimpr_vs_floor" in result.output and "calibration per fund" in result.output


def _copy(world, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(world, folder)
    return folder


@pytest.mark.parametrize("table, change, message", [
    ("deliveries", lambda f: f.iloc[:1], "'convert' is 0 on all 1 rows"),
    ("deliveries", lambda f: f.assign(amount="lots"), "finite numbers ≥ 0"),
    ("deliveries", lambda f: f.iloc[:0], "the table has no rows"),
    ("deliveries", lambda f: f.assign(click=2), "must be 0/1"),
    ("users", lambda f: f.iloc[:10], "not in the users table"),
    ("funds", lambda f: f.assign(risk="high"), "must hold whole numbers"),
    ("behaviors", lambda f: f.drop(columns="action"), "column 'action'"),
])
def test_bad_tables_exit_2_with_one_line(world, tmp_path, table, change, message):
    folder = _copy(world, tmp_path)
    (folder / f"{table}.parquet").unlink()
    change(pd.read_parquet(world / f"{table}.parquet")).to_csv(folder / f"{table}.csv", index=False)
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--epochs", 1, "--params", NET)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_folder_errors(world, tmp_path):
    result = _invoke("value", "train", "--data", tmp_path / "nowhere", "--out", tmp_path / "m")
    assert result.exit_code == 2 and "not a folder" in result.output
    folder = _copy(world, tmp_path)
    (folder / "funds.parquet").unlink()
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m")
    assert result.exit_code == 2 and "funds.parquet (or .csv) is missing" in result.output
    pd.read_parquet(world / "funds.parquet").to_csv(folder / "funds.csv", index=False)
    pd.read_parquet(world / "funds.parquet").to_parquet(folder / "funds.parquet")
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m")
    assert result.exit_code == 2 and "keep one" in result.output


def test_model_and_option_errors(world, model, tmp_path):
    result = _invoke("value", "train", "--data", world, "--out", tmp_path / "m", "--model", "esdmp")
    assert result.exit_code == 2 and "unknown model 'esdmp'" in result.output
    result = _invoke("value", "predict", "--model", world, "--data", world, "--out", tmp_path / "p")
    assert result.exit_code == 2 and "not a promokit model directory" in result.output
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p", "--contexts", 0)
    assert result.exit_code == 2 and "--contexts must be at least 1" in result.output
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p", "--at", "soon")
    assert result.exit_code == 2 and "--at must be a date" in result.output


def test_simulate_scores_plans_by_the_true_model(world, model, tmp_path):
    result = _invoke("value", "simulate", "--world", world, "--model", model, "--out", tmp_path / "sim",
                     "--allocators", "ha,ours")
    assert result.exit_code == 0, result.output
    rows = pd.DataFrame(json.loads((tmp_path / "sim" / "report.json").read_text())["rows"])
    assert set(rows.allocator) == {"ha", "ours"} and "oracle" in set(rows.model)
    oracle = rows[rows.model == "oracle"].set_index("allocator").expected_tapmd
    mine = rows[rows.model != "oracle"].set_index("allocator").expected_tapmd
    assert (oracle >= mine * 0.999).all()  # the true ETV's plan is the best plan under the true ETV (ours is exact)
    folder = _copy(world, tmp_path)  # a truth that does not cover the tables' users
    truth = pd.read_parquet(world / "truth_etv.parquet")
    truth[truth.user_id != truth.user_id.iloc[0]].to_parquet(folder / "truth_etv.parquet")
    result = _invoke("value", "simulate", "--world", folder, "--model", model, "--out", tmp_path / "sim2")
    assert result.exit_code == 2 and "simulate on the world the tables come from" in result.output


def test_bench_writes_the_tables_and_the_decile_figure(tmp_path):
    result = _invoke("value", "bench", "--models", "esdpm,esmm", "--seeds", "0", "--users", 300, "--epochs", 1,
                     "--params", NET, "--out", tmp_path / "bench")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "bench" / "report.json").read_text())
    metrics = pd.DataFrame(report["results"])
    assert list(metrics.model) == ["two-part", "esdpm", "esmm", "oracle"]  # the floor first, always
    oracle = metrics.set_index("model").loc["oracle"]
    assert oracle.etv_mae_true == 0 and oracle.etv_bias_true == 0 and oracle.fund_bias_true == 0
    assert metrics.best_differs.between(0, 1).all()
    assert np.isnan(metrics.set_index("model").loc["esmm", "etv_bias_true"])  # its ETV is a pCTCVR
    assert "RelaImpr vs two-part" in (tmp_path / "bench" / "report.md").read_text()
    plans = pd.DataFrame(report["simulation"])
    assert set(plans.allocator) == {"manual", "ha", "ours"}
    assert set(plans.model) == {"two-part", "esdpm", "esmm", "oracle"}
    assert (tmp_path / "bench" / "deciles.png").exists()


def test_random_split_for_deliveries_sharing_one_time(world, tmp_path):
    folder = _copy(world, tmp_path)
    deliveries = pd.read_parquet(world / "deliveries.parquet")
    deliveries.assign(time=pd.Timestamp("2026-03-15")).to_parquet(folder / "deliveries.parquet")
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--epochs", 1, "--params", NET)
    assert result.exit_code == 2 and "leaves none to train on" in result.output
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--epochs", 1, "--params", NET,
                     "--split", "random")
    assert result.exit_code == 0, result.output
    result = _invoke("value", "evaluate", "--model", tmp_path / "m", "--data", folder, "--out", tmp_path / "e")
    assert result.exit_code == 0, result.output
    held_out = json.loads((tmp_path / "e" / "report.json").read_text())["metrics"]["deliveries"]
    assert held_out == round(0.1 * len(deliveries))
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m2", "--split", "users")
    assert result.exit_code == 2 and "a split is one of" in result.output


def test_train_prints_the_feature_types_and_numeric_overrides_an_inferred_categorical(world, tmp_path):
    """age (integers, at most 64 values among 600 users) and hour (24) are inferred categorical; --numeric makes them
    numeric in the printed summary and in config.json."""
    train = ("value", "train", "--data", world, "--model", "mtl-mse", "--epochs", 1, "--params", NET)
    result = _invoke(*train, "--out", tmp_path / "inferred")
    assert result.exit_code == 0, result.output
    assert "deliveries features: categorical (2) channel, hour; numeric (0)" in result.output
    assert "users features: categorical (6) tolerance, age, income_band" in result.output
    result = _invoke(*train, "--out", tmp_path / "given", "--numeric", "age,hour")
    assert result.exit_code == 0, result.output
    assert "deliveries features: categorical (1) channel; numeric (1) hour" in result.output
    assert "given: hour numeric, age numeric" in result.output
    specs = json.loads((tmp_path / "given" / "config.json").read_text())["specs"]
    assert "age" in specs["users"]["numeric"] and specs["users"]["types"] == {"age": "numeric"}
    result = _invoke(*train, "--out", tmp_path / "bad", "--numeric", "fund")
    assert result.exit_code == 2 and "the fund key 'fund' is always a categorical feature" in result.output

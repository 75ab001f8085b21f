"""pk.compare: the paired bootstrap on hand cases, one leaderboard per domain on tiny worlds, a model the data do not
suit skipped with its reason, an unknown model in one line, best_model, and the compare commands' files."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import promokit as pk
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.compare import best_model, standing
from promokit.metrics import auc, paired_bootstrap

FAST = {"epochs": 1, "progress": False}
COLUMNS = {"model", "seed", "status", "calibration_ratio", "fit_seconds", "predict_seconds", "test_rows", "verdict"}


def test_identical_predictions_give_a_zero_interval_and_not_better():
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 500), rng.random(500)
    difference = paired_bootstrap(auc, y, p, p.copy(), resamples=200, seed=1)
    assert (difference.observed, difference.low, difference.high) == (0.0, 0.0, 0.0)
    assert standing(difference.low, difference.high) == "not better"


def test_a_clearly_better_model_has_an_interval_above_zero_and_is_better():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 800)
    informed, noise = y + rng.normal(0, 0.7, 800), rng.random(800)
    difference = paired_bootstrap(auc, y, informed, noise, resamples=300, seed=3)
    assert 0 < difference.low < difference.observed < difference.high and difference.share_ahead == 1.0
    assert standing(difference.low, difference.high) == "better"
    assert standing(-difference.high, -difference.low) == "worse"
    again = paired_bootstrap(auc, y, informed, noise, resamples=300, seed=3)
    assert again == difference  # seeded


def test_the_bootstrap_resamples_groups_whole_and_averages_seed_runs():
    rng = np.random.default_rng(1)
    y, groups = rng.integers(0, 2, 300), np.repeat(np.arange(30), 10)
    p, q = y + rng.normal(0, 1, 300), rng.random(300)
    by_group = paired_bootstrap(auc, y, p, q, groups=groups, resamples=200, seed=0)
    by_row = paired_bootstrap(auc, y, p, q, resamples=200, seed=0)
    assert by_group.observed == by_row.observed and by_group.low > 0
    averaged = paired_bootstrap(auc, y, [p, p], q, resamples=50, seed=0)
    assert averaged.observed == pytest.approx(by_row.observed)
    with pytest.raises(ValueError, match="groups must hold one key per row"):
        paired_bootstrap(auc, y, p, q, groups=groups[:10])


def _check(comparison, models, floor):
    board = comparison.leaderboard
    assert list(board["model"]) == [floor, *models]
    assert COLUMNS <= set(board.columns)
    for metric in comparison.headlines:
        assert {metric, f"{metric}_diff", f"{metric}_low", f"{metric}_high"} <= set(board.columns)
    fitted = board[board["status"].isin(["floor", "fitted"])]
    assert board.loc[0, "status"] == "floor" and len(set(fitted["test_rows"])) == 1 and fitted["test_rows"].min() > 0
    assert all(line.startswith(name) for line, name in zip(comparison.verdicts(), board["model"]))


def test_conversion_compare_writes_one_leaderboard_row_per_model(tmp_path):
    from promokit.experiments.conversion.world import make_world

    table = make_world(300, 100, 6000, seed=1).table
    comparison = pk.compare(table, ["gbdt", "esmm"], domain="conversion", train=FAST, resamples=100,
                            out=tmp_path, progress=False)
    _check(comparison, ["gbdt", "esmm"], "lr")
    assert comparison.headlines == ("ctcvr_auc", "cvr_auc")
    written = pd.read_parquet(tmp_path / "leaderboard.parquet")
    assert list(written["model"]) == ["lr", "gbdt", "esmm"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["best"]["model"] in ("lr", "gbdt", "esmm") and "Which model?" in (tmp_path / "report.md").read_text()


def test_voucher_compare():
    from promokit.experiments.voucher.world import make_world

    tables = make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=1).tables
    _check(pk.compare(tables, ["lr", "dnn"], domain="voucher", train=FAST, resamples=50, progress=False),
           ["dnn"], "lr")


def test_incentive_compare_skips_a_graph_model_on_customers_only_data_with_its_reason(capsys):
    from promokit.experiments.incentive.world import make_world

    world = make_world(400, 40, seed=1)
    graph = {"customers": world.customers, "merchants": world.merchants, "edges": world.edges}
    _check(pk.compare(graph, ["gnn-hazard"], domain="incentive", train=FAST, resamples=50, progress=False),
           ["gnn-hazard"], "lr")
    comparison = pk.compare({"customers": world.customers}, ["gnn-hazard", "dnn"], domain="incentive", train=FAST,
                            resamples=50)
    board = comparison.leaderboard.set_index("model")
    assert list(board["status"]) == ["floor", "skipped", "fitted"]
    assert board.loc["gnn-hazard", "verdict"].startswith("gnn-hazard skipped: model 'gnn-hazard' needs a graph")
    assert np.isnan(board.loc["gnn-hazard", "auc_c"]) and np.isfinite(board.loc["dnn", "auc_c_diff"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and "gnn-hazard skipped" in lines[1] and "Traceback" not in "".join(lines)


def test_value_compare_skips_the_graph_model_without_consumption():
    from promokit.experiments.value.world import make_world

    world = make_world(n_users=300, n_funds=3, seed=1)
    data = {"deliveries": world.deliveries, "users": world.users, "funds": world.funds, "behaviors": world.behaviors}
    comparison = pk.compare(data, ["esdpm-ncg", "esdpm"], domain="value", train=FAST, resamples=50, progress=False)
    _check(comparison, ["esdpm-ncg", "esdpm"], "hurdle")
    assert list(comparison.leaderboard["status"]) == ["floor", "fitted", "skipped"]
    assert "reads the consumption graph" in comparison.verdicts()[2]


def test_an_unknown_model_is_one_line_before_anything_is_read():
    with pytest.raises(DataError, match=r"^`models`: unknown conversion model 'esm3'; choose among \[") as caught:
        pk.compare("no-such-table.parquet", ["esm2", "esm3"], domain="conversion")
    assert "\n" not in str(caught.value)
    with pytest.raises(DataError, match="^`domain`: unknown domain 'ads'"):
        pk.compare("t.parquet", ["lr"], domain="ads")


def _board(rows):
    columns = ["model", "seed", "status", "auc", "auc_diff", "auc_low", "auc_high"]
    return pd.DataFrame(rows, columns=columns)


def test_best_model_prefers_the_floor_unless_a_model_is_better():
    floor = ("lr", 0, "floor", 0.70, np.nan, np.nan, np.nan)
    board = _board([floor, ("dnn", 0, "fitted", 0.71, 0.01, -0.002, 0.02),
                    ("gnn", 0, "skipped", np.nan, np.nan, np.nan, np.nan)])
    assert best_model(board).model == "lr" and "no model is better than the floor" in best_model(board).reason
    board = _board([floor, ("dnn", 0, "fitted", 0.71, 0.01, 0.004, 0.02), ("din", 0, "fitted", 0.72, 0.02, -0.01, 0.05),
                    ("esm2", 0, "fitted", 0.715, 0.015, 0.001, 0.03)])
    choice = best_model(board)
    assert choice.model == "esm2" and choice.reason.startswith("the highest auc (0.7150) of the models better")


def test_the_compare_command_writes_the_leaderboard_and_the_report(tmp_path):
    from promokit.experiments.conversion.world import make_world

    make_world(300, 100, 6000, seed=1).table.to_parquet(tmp_path / "t.parquet")
    out = tmp_path / "cmp"
    run = CliRunner().invoke(app, ["conversion", "compare", "--data", str(tmp_path / "t.parquet"), "--models",
                                   "gbdt", "--out", str(out), "--epochs", "1", "--resamples", "50"])
    assert run.exit_code == 0, run.output
    assert {"leaderboard.parquet", "report.md", "report.json"} <= {p.name for p in out.iterdir()}
    assert "gbdt is " in run.output and "which model?" in run.output
    wrong = CliRunner().invoke(app, ["conversion", "compare", "--data", str(tmp_path / "t.parquet"), "--models",
                                     "esm3", "--out", str(out)])
    assert wrong.exit_code == 2 and "--models: unknown conversion model 'esm3'" in wrong.output

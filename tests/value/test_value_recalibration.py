"""Recalibrating a value model's pCTCVR on a later labelled period whose base rate moved: the mean predicted moves
to the observed, the ETV that multiplies pCTCVR (eq. 13) follows it, the model's own are kept as ``*_raw``, the model
directory keeps the map and ``fit`` drops it; ``promokit value recalibrate``; errors in one line."""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.value.world import make_world, write_world
from promokit.training import TrainConfig
from promokit.training.recalibration import (
    RECALIBRATION_FILE,
    GroupRecalibration,
    Recalibration,
    read_recalibration,
)
from promokit.value.contract import check_tables
from promokit.value.estimator import ValueModel
from promokit.value.workflows import recalibrate

runner = CliRunner()
FLOOR = {"n_trees": 40}


@pytest.fixture(scope="module")
def world():
    return make_world(1500, seed=5)


@pytest.fixture(scope="module")
def tables(world):
    return check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)


@pytest.fixture(scope="module")
def later(world, tables):
    """The latest 30 % of the deliveries with three in four of their non-conversions left out: a later period
    whose conversion rate is about four times the training one."""
    latest = tables.time >= np.quantile(tables.time, 0.7)
    keep = latest & ((tables.convert == 1) | (np.arange(len(tables.time)) % 4 == 0))
    deliveries = world.deliveries.iloc[np.flatnonzero(keep)].reset_index(drop=True)
    return check_tables(deliveries, world.users, world.funds, world.behaviors, world.consumption)


@pytest.fixture(scope="module")
def floor(tables):
    return ValueModel("hurdle", FLOOR).fit(tables)


@pytest.mark.parametrize("method", ["isotonic", "platt", "prior-shift"])
def test_the_mean_predicted_moves_to_the_observed_and_the_raw_is_kept(floor, later, method):
    raw = floor.predict(later)
    observed = float(later.convert.mean())
    assert raw.p_ctcvr.mean() < observed / 2  # the shift the map has to correct
    floor.recalibrate(later, method=method)
    try:
        got = floor.predict(later)
    finally:
        floor.recalibration_ = None
    assert list(got.columns) == [*raw.columns, "p_ctcvr_raw", "etv_raw"]
    np.testing.assert_array_equal(got.p_ctcvr_raw, raw.p_ctcvr)
    np.testing.assert_array_equal(got.etv_raw, raw.etv)
    tolerance = 0.25 if method == "prior-shift" else 1e-3  # one number moves the odds, not the mean exactly
    assert got.p_ctcvr.mean() == pytest.approx(observed, rel=tolerance)
    # the floor's ETV is pCTCVR times the amount if it converts: the amount is the model's own, p is recalibrated
    np.testing.assert_allclose(got.etv, got.p_ctcvr * got.amount_if_convert, rtol=1e-9)


def test_the_model_directory_keeps_the_map_and_evaluate_and_the_etv_table_apply_it(tables, later, tmp_path):
    model = ValueModel("hurdle", FLOOR).fit(tables)
    before = model.score_table(tables)
    raw_metrics = dict(model.evaluate(later))
    model.recalibrate(later, method="prior-shift")
    model.save(tmp_path / "model")
    assert (tmp_path / "model" / RECALIBRATION_FILE).exists()
    loaded = ValueModel.load(tmp_path / "model")
    assert loaded.recalibration_.to_dict() == model.recalibration_.to_dict()
    pd.testing.assert_frame_equal(loaded.predict(later), model.predict(later))
    metrics = dict(loaded.evaluate(later))
    assert abs(metrics["calibration_ratio"] - 1) < abs(raw_metrics["calibration_ratio"] - 1) / 2
    assert metrics["auc"] == pytest.approx(raw_metrics["auc"], abs=1e-9)  # a monotone map keeps the order
    after = loaded.score_table(tables)
    scores = [c for c in before.columns if c.startswith("score_")]
    assert (after[scores].to_numpy() > before[scores].to_numpy()).all()  # the base rate went up: every ETV too
    model.fit(tables)  # fit drops the map
    assert model.recalibration_ is None and "p_ctcvr_raw" not in model.predict(later).columns
    model.save(tmp_path / "refit")
    assert not (tmp_path / "refit" / RECALIBRATION_FILE).exists()


def test_a_network_scales_its_eq13_etv_and_an_mse_amount_is_left_alone():
    p = np.array([0.0, 0.01, 0.2, 0.5])
    etv = np.array([0.0, 3.0, 40.0, 100.0])
    odds_doubled = Recalibration.from_dict({"method": "prior-shift",
                                            "params": {"base_rate": 0.1, "new_rate": 2 / 11}})
    for name, scaled in (("esdpm", True), ("esmm", True), ("mtl-mse", False)):
        model = ValueModel(name)
        model.recalibration_ = odds_doubled
        new_p, new_etv = model.recalibrated(p, etv)
        np.testing.assert_allclose(new_p, [0.0, 0.02 / 1.01, 0.4 / 1.2, 1 / 1.5], atol=1e-6)  # odds · 2
        np.testing.assert_allclose(new_etv, etv * np.divide(new_p, p, out=np.zeros(4), where=p > 0) if scaled else etv)


def test_the_workflow_and_the_cli_fit_on_the_latest_period(world, tables, tmp_path):
    data = tmp_path / "world"
    write_world(world, data)
    model = tmp_path / "model"
    ValueModel("hurdle", FLOOR).fit(tables).save(model)
    start = str(pd.Timestamp(np.quantile(tables.time, 0.8)).date())
    fitted = recalibrate(model, data, start=start, method="platt")
    assert fitted["method"] == "platt" and fitted["rows"] < len(tables.time) / 4
    assert fitted["mean_p_after"] == pytest.approx(fitted["rate"], rel=1e-3)
    result = runner.invoke(app, ["value", "recalibrate", "--model", str(model), "--data", str(data), "--from", start])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"isotonic recalibration written to {model / RECALIBRATION_FILE}" in said and "recalibrated" in said
    result = runner.invoke(app, ["value", "predict", "--model", str(model), "--data", str(data),
                                 "--out", str(tmp_path / "scores")])
    assert result.exit_code == 0, result.output
    assert {"p_ctcvr_raw", "etv_raw"} <= set(pd.read_parquet(tmp_path / "scores" / "deliveries.parquet").columns)


def test_errors_are_one_line(floor, tables, later, world, tmp_path):
    for call, message in [
        (lambda: floor.recalibrate(later, method="beta"), "`method` must be one of isotonic, platt, prior-shift"),
        (lambda: floor.recalibrate(later, rows=[0.5, 1.5]), "rows must be row indices of the deliveries"),
        (lambda: floor.recalibrate(later, rows=np.arange(5)), "at least 10 labelled rows; got 5"),
        (lambda: floor.recalibrate(later, rows=np.flatnonzero(later.convert == 0)[:50]), "needs both outcomes"),
        (lambda: floor.recalibrate(later, method="platt", base_rate=0.1), "`base_rate` applies to method"),
    ]:
        with pytest.raises(DataError, match=message) as caught:
            call()
        assert "\n" not in str(caught.value)
    assert floor.recalibration_ is None
    with pytest.raises(NotFittedError, match="not fitted"):
        ValueModel("hurdle").recalibrate(tables)
    data, model = tmp_path / "world", tmp_path / "model"
    write_world(world, data)
    floor.save(model)
    for args, message in [
        (["--from", "2030-01-01"], "error: `start` 2030-01-01: no delivery is shown from then on; the latest is at"),
        (["--from", "soon"], "error: --from must be a date, like the deliveries' times; got 'soon'"),
        (["--method", "beta"], "error: --method must be one of isotonic, platt, prior-shift; got 'beta'"),
    ]:
        result = runner.invoke(app, ["value", "recalibrate", "--model", str(model), "--data", str(data), *args])
        assert result.exit_code == 2, result.output
        said = " ".join(result.output.split())
        assert said.startswith(message.replace("`start`", "--from")), said
        assert "Traceback" not in result.output
    assert not (model / RECALIBRATION_FILE).exists()


def test_a_network_recalibrates_too(tables, later):
    net = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "fanouts": [4, 4],
           "max_len": 8}
    model = ValueModel("esdpm", net, TrainConfig(epochs=1, batch_size=512, progress=False)).fit(tables)
    got = model.recalibrate(later, method="platt").predict(later)
    assert got.p_ctcvr.mean() == pytest.approx(later.convert.mean(), rel=1e-2)
    np.testing.assert_allclose(got.etv / got.etv_raw, got.p_ctcvr / got.p_ctcvr_raw, rtol=1e-6)


# ---- by fund (issue 38, item 6): one map per fund, shrunk toward the overall one --------------------------------

@pytest.fixture(scope="module")
def three_funds():
    """A world of three funds and a later period (its latest half) in which F1 converts about four times as often as
    in training and F2 a quarter as often: the funds are miscalibrated in opposite directions."""
    world = make_world(1500, n_funds=3, seed=5)
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    fund = world.deliveries["fund"].to_numpy()
    latest, every_fourth = tables.time >= np.median(tables.time), np.arange(len(fund)) % 4 == 0
    keep = latest & np.where(fund == "F1", (tables.convert == 1) | every_fourth,
                             np.where(fund == "F2", (tables.convert == 0) | every_fourth, True))
    deliveries = world.deliveries.iloc[np.flatnonzero(keep)].reset_index(drop=True)
    later = check_tables(deliveries, world.users, world.funds, world.behaviors, world.consumption)
    return world, tables, later, ValueModel("hurdle", FLOOR, refit=False).fit(tables)


def _mean_by_fund(values, tables) -> dict:
    return {name: float(np.mean(np.asarray(values)[tables.fund == j])) for j, name in enumerate(tables.fund_names)}


def test_by_fund_each_fund_reaches_its_rate_where_one_map_cannot(three_funds):
    _, _, later, model = three_funds
    observed = _mean_by_fund(later.convert, later)
    assert observed["F1"] > 2 * observed["F2"]
    try:
        overall = _mean_by_fund(model.recalibrate(later).predict(later).p_ctcvr, later)
        got = model.recalibrate(later, by="fund").predict(later)
    finally:
        model.recalibration_ = None
    by_fund = _mean_by_fund(got.p_ctcvr, later)
    for fund in ("F1", "F2"):
        assert by_fund[fund] == pytest.approx(observed[fund], rel=0.1), fund
        assert overall[fund] != pytest.approx(observed[fund], rel=0.3), fund  # one map misses both ways
    np.testing.assert_allclose(got.etv, got.p_ctcvr * got.amount_if_convert, rtol=1e-9)


def test_by_fund_a_new_fund_gets_the_overall_map_with_a_warning_and_the_directory_keeps_it(three_funds, tmp_path):
    _, tables, later, model = three_funds
    seen = np.flatnonzero(later.fund != 2)  # F3 has no delivery to fit on
    try:
        model.recalibrate(later, rows=seen, by="fund", method="platt")
        recalibration = model.recalibration_
        assert isinstance(recalibration, GroupRecalibration) and set(recalibration.groups) == {"F1", "F2"}
        new, n = int((later.fund == 2).sum()), len(later.fund)
        with pytest.warns(UserWarning, match=rf"^{new:,} of {n:,} deliveries are in 1 fund values the recalibration "
                                             r"was not fitted on \('F3'\): they get its overall map$"):
            got = model.predict(later)
        f3 = later.fund == 2
        np.testing.assert_allclose(got.p_ctcvr[f3], recalibration.overall.apply(got.p_ctcvr_raw[f3]))
        users = len(tables.users)
        with pytest.warns(UserWarning, match=rf"^{users:,} of {3 * users:,} user × fund scores are in 1 fund values"):
            scores = model.score_matrix(tables)
        model.recalibration_ = recalibration.overall
        overall = model.score_matrix(tables)
        np.testing.assert_allclose(scores[:, 2], overall[:, 2])  # F3: the overall map
        assert scores[:, 0].mean() > overall[:, 0].mean() and scores[:, 1].mean() < overall[:, 1].mean()
        model.recalibration_ = recalibration
        with pytest.warns(UserWarning, match="not fitted on"):
            table = model.evaluate(later).tables["calibration_by_fund"]
        assert table.set_index("fund")["new"].to_dict() == {"F1": False, "F2": False, "F3": True}
        model.save(tmp_path / "m")
    finally:
        model.recalibration_ = None
    saved = json.loads((tmp_path / "m" / RECALIBRATION_FILE).read_text())
    assert saved["by"] == "fund" and sorted(g["key"] for g in saved["groups"]) == ["F1", "F2"]
    loaded = ValueModel.load(tmp_path / "m")
    assert loaded.recalibration_.to_dict() == recalibration.to_dict()
    with pytest.warns(UserWarning, match="not fitted on"):
        pd.testing.assert_frame_equal(loaded.predict(later), got)
    with pytest.raises(DataError, match=r"^`by`: a value model recalibrates by 'fund' \(one map per fund\) or not by "
                                        r"group; got 'channel'$"):
        loaded.recalibrate(later, by="channel")


def test_by_fund_on_the_command_line(three_funds, tmp_path):
    world, tables, _, model = three_funds
    data, directory = tmp_path / "world", tmp_path / "model"
    write_world(world, data)
    model.save(directory)
    start = str(pd.Timestamp(np.quantile(tables.time, 0.5)).date())
    args = ["value", "recalibrate", "--model", str(directory), "--data", str(data), "--from", start]
    result = runner.invoke(app, [*args, "--by", "fund"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "isotonic recalibration by fund (3 values, 3 with a map of their own) written to" in said
    saved = read_recalibration(directory)
    assert isinstance(saved, GroupRecalibration) and saved.by == "fund" and set(saved.groups) == {"F1", "F2", "F3"}
    result = runner.invoke(app, [*args, "--by", "channel"])
    assert result.exit_code == 2 and "--by: a value model recalibrates by 'fund'" in " ".join(result.output.split())

"""Recalibrating a value model's pCTCVR on a later labelled period whose base rate moved: the mean predicted moves
to the observed, the ETV that multiplies pCTCVR (eq. 13) follows it, the model's own are kept as ``*_raw``, the model
directory keeps the map and ``fit`` drops it; ``promokit value recalibrate``; errors in one line."""

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.value.world import make_world, write_world
from promokit.training import TrainConfig
from promokit.training.recalibration import RECALIBRATION_FILE, Recalibration
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
        floor.recalibration = None
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
    assert loaded.recalibration.to_dict() == model.recalibration.to_dict()
    pd.testing.assert_frame_equal(loaded.predict(later), model.predict(later))
    metrics = dict(loaded.evaluate(later))
    assert abs(metrics["calibration_ratio"] - 1) < abs(raw_metrics["calibration_ratio"] - 1) / 2
    assert metrics["auc"] == pytest.approx(raw_metrics["auc"], abs=1e-9)  # a monotone map keeps the order
    after = loaded.score_table(tables)
    scores = [c for c in before.columns if c.startswith("score_")]
    assert (after[scores].to_numpy() > before[scores].to_numpy()).all()  # the base rate went up: every ETV too
    model.fit(tables)  # fit drops the map
    assert model.recalibration is None and "p_ctcvr_raw" not in model.predict(later).columns
    model.save(tmp_path / "refit")
    assert not (tmp_path / "refit" / RECALIBRATION_FILE).exists()


def test_a_network_scales_its_eq13_etv_and_an_mse_amount_is_left_alone():
    p = np.array([0.0, 0.01, 0.2, 0.5])
    etv = np.array([0.0, 3.0, 40.0, 100.0])
    odds_doubled = Recalibration.from_dict({"method": "prior-shift",
                                            "params": {"base_rate": 0.1, "new_rate": 2 / 11}})
    for name, scaled in (("esdpm", True), ("esmm", True), ("mtl-mse", False)):
        model = ValueModel(name)
        model.recalibration = odds_doubled
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
    assert floor.recalibration is None
    with pytest.raises(RuntimeError, match="not fitted"):
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

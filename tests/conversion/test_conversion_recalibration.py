"""ConversionModel.recalibrate: p_ctcvr and p_ctr mapped on a later labelled period, p_cvr following as their ratio,
kept in the model directory and applied by predict and evaluate; and ``promokit conversion recalibrate``."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.conversion.estimator import ConversionModel
from promokit.conversion.recalibration import apply_recalibrations
from promokit.data import DataError
from promokit.metrics import auc
from promokit.training import TrainConfig
from promokit.training.recalibration import (
    RECALIBRATION_FILE,
    Recalibration,
    read_recalibrations,
    write_recalibration,
    write_recalibrations,
)

RAW = ["p_ctr_raw", "p_cvr_raw", "p_ctcvr_raw"]
PURCHASE = "recalibrating p_ctcvr against the purchase label 'purchase'"


def _period(n: int, seed: int, shift: float = 0.0) -> pd.DataFrame:
    """Impressions whose click and purchase depend on a user segment and a price; ``shift`` raises the logits of
    both, so a later period clicks and buys more often than the training one."""
    rng = np.random.default_rng(seed)
    user, price = rng.integers(0, 50, n), rng.normal(50, 10, n)
    segment = user % 3
    click = rng.random(n) < 1 / (1 + np.exp(-(-1.5 + shift + 1.2 * (segment == 1) - 0.04 * (price - 50))))
    purchase = click & (rng.random(n) < 1 / (1 + np.exp(-(-1.0 + shift + 1.0 * (segment == 2)))))
    return pd.DataFrame({"user_id": user, "item_id": rng.integers(0, 30, n), "segment": [f"s{s}" for s in segment],
                         "price": price, "click": click.astype(int), "purchase": purchase.astype(int)})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model directory trained on the first period (its rates well below the later periods')."""
    path = tmp_path_factory.mktemp("recalibration") / "esmm"
    ConversionModel("esmm", {"emb_dim": 4, "hidden": (16,), "dropout": 0.0},
                    TrainConfig(epochs=3, batch_size=200, lr=0.01, progress=False), test_fraction=0,
                    ).fit(_period(4000, 0)).save(path)
    return path


@pytest.mark.parametrize("method", ["isotonic", "platt", "prior-shift"])
def test_recalibrated_probabilities_follow_the_later_rates_through_save_and_load(trained, tmp_path, method):
    later, test = _period(20_000, 1, shift=0.8), _period(20_000, 2, shift=0.8)
    model = ConversionModel.load(trained)
    raw = model.predict(test)
    assert raw.p_ctcvr.mean() < 0.6 * test.purchase.mean()  # the shift the recalibration is for
    model.recalibrate(later, method=method).save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / RECALIBRATION_FILE).read_text())["p_ctcvr"]["method"] == method
    out = ConversionModel.load(tmp_path / "m").predict(test)
    assert list(out.columns) == [*raw.columns, *RAW]
    for name in ("p_ctr", "p_cvr", "p_ctcvr"):
        np.testing.assert_array_equal(out[f"{name}_raw"], raw[name])
    assert out.p_ctcvr.mean() == pytest.approx(test.purchase.mean(), abs=0.01)
    assert out.p_ctr.mean() == pytest.approx(test.click.mean(), abs=0.02)
    np.testing.assert_allclose(out.p_ctcvr, out.p_ctr * out.p_cvr, rtol=1e-9)
    assert out[["p_cvr", "p_ctcvr"]].le(1).all().all()
    if method == "platt":  # strictly monotone: the order, hence the AUC, unchanged but where p_ctcvr is capped
        assert auc(test.click, out.p_ctr) == auc(test.click, raw.p_ctr)
        below = (out.p_ctcvr < out.p_ctr).to_numpy()
        assert below.mean() > 0.98
        assert auc(test.purchase[below], out.p_ctcvr[below]) == auc(test.purchase[below], raw.p_ctcvr[below])
        assert auc(test.purchase, out.p_ctcvr) == pytest.approx(auc(test.purchase, raw.p_ctcvr), abs=1e-3)
    evaluation = ConversionModel.load(tmp_path / "m").evaluate(test)  # scored on the recalibrated probabilities
    assert evaluation["mean_predicted"] == pytest.approx(out.p_ctcvr.mean())
    assert abs(evaluation["calibration_ratio"] - 1) < 0.05


def test_p_cvr_is_the_ratio_with_p_ctcvr_capped_at_p_ctr_and_raw_where_p_ctr_maps_to_0():
    identity = Recalibration.from_dict({"method": "isotonic", "params": {"x": [0.0, 1.0], "y": [0.0, 1.0]}})
    raised = Recalibration.from_dict({"method": "isotonic", "params": {"x": [0.0, 0.1, 1.0], "y": [0.0, 0.4, 1.0]}})
    outputs = {"p_ctr": np.array([0.5, 0.1, 0.0]), "p_cvr": np.array([0.4, 0.9, 0.3]),
               "p_ctcvr": np.array([0.2, 0.09, 0.0])}
    out = apply_recalibrations(outputs, {"p_ctr": identity, "p_ctcvr": raised})
    ctcvr = 0.4 + 0.6 * (0.2 - 0.1) / 0.9  # 0.2 between the thresholds 0.1 and 1
    np.testing.assert_allclose(out["p_ctcvr"], [ctcvr, 0.1, 0.0])  # 0.09 maps to 0.36 > p_ctr 0.1: capped
    np.testing.assert_allclose(out["p_cvr"], [ctcvr / 0.5, 1.0, 0.3])
    np.testing.assert_array_equal(out["p_ctcvr_raw"], outputs["p_ctcvr"])


def test_fit_drops_the_recalibration_and_recalibrate_again_replaces_it(trained, tmp_path):
    later = _period(3000, 1, shift=0.8)
    model = ConversionModel.load(trained).recalibrate(later, method="platt")
    model.recalibrate(later, method="prior-shift")
    assert {r.method for r in model.recalibrations_.values()} == {"prior-shift"}
    model.fit(_period(2000, 3))
    assert model.recalibrations_ == {} and not set(RAW) & set(model.predict(later))
    model.save(tmp_path / "m")
    assert not (tmp_path / "m" / RECALIBRATION_FILE).exists()


@pytest.mark.parametrize("change, message", [
    (lambda t: t.assign(purchase=0), f"{PURCHASE}: recalibration needs both outcomes; all 3000 rows have y = 0"),
    (lambda t: t.head(5), f"{PURCHASE}: recalibration needs at least 10 labelled rows; got 5"),
    (lambda t: t.drop(columns="click"), "column 'click' (label 'click') is missing from the table of 3000 rows"),
])
def test_recalibrate_errors_are_one_line(trained, change, message):
    model = ConversionModel.load(trained)
    with pytest.raises(DataError) as error:
        model.recalibrate(change(_period(3000, 1)))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert model.recalibrations_ == {}


def test_recalibrations_by_name_round_trip_and_a_single_one_is_refused(tmp_path):
    p, y = np.linspace(0.05, 0.5, 40), np.r_[np.ones(10), np.zeros(30)]
    fitted = {"p_ctr": Recalibration("platt").fit(p, y), "p_ctcvr": Recalibration("prior-shift").fit(p, y)}
    write_recalibrations(tmp_path, fitted)
    again = read_recalibrations(tmp_path)
    assert list(again) == ["p_ctr", "p_ctcvr"]
    np.testing.assert_array_equal(again["p_ctr"].apply(p), fitted["p_ctr"].apply(p))
    write_recalibration(tmp_path, fitted["p_ctr"])  # a model of one probability (voucher) writes one
    with pytest.raises(DataError, match="not a recalibration .expected one recalibration per probability"):
        read_recalibrations(tmp_path)
    write_recalibrations(tmp_path, {})
    assert read_recalibrations(tmp_path) == {} and not (tmp_path / RECALIBRATION_FILE).exists()


def test_the_recalibrate_command_writes_the_maps_and_answers_bad_input_in_one_line(trained, tmp_path):
    model = tmp_path / "m"
    ConversionModel.load(trained).save(model)
    _period(3000, 1, shift=0.8).rename(columns={"click": "clicked"}).to_parquet(tmp_path / "later.parquet")
    runner = CliRunner()
    args = ["conversion", "recalibrate", "--model", str(model), "--data", str(tmp_path / "later.parquet")]
    result = runner.invoke(app, [*args, "--method", "platt", "--label", "click=clicked"])
    assert result.exit_code == 0, result.output
    assert "p_ctcvr: on 3,000 impressions" in result.output and "platt recalibration written" in result.output
    assert set(read_recalibrations(model)) == {"p_ctcvr", "p_ctr"}
    for extra, expected in ([], "map it: --label click=clicked"), (["--method", "beta"], "--method must be one of"):
        refused = runner.invoke(app, [*args, *extra])
        assert refused.exit_code == 2 and expected in refused.output and "Traceback" not in refused.output

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.voucher.world import PROFILE_CATEGORICAL, make_world
from promokit.training.recalibration import (
    METHODS,
    RECALIBRATION_FILE,
    GroupRecalibration,
    Recalibration,
    read_recalibration,
    write_recalibration,
)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _odds(p):
    return p / (1 - p)


@pytest.fixture(scope="module")
def miscalibrated():
    """Scores σ(2z + 1) of outcomes drawn from σ(z): overconfident and too high."""
    rng = np.random.default_rng(0)
    z = rng.normal(0, 1.5, 20_000)
    y = (rng.random(len(z)) < _sigmoid(z)).astype(float)
    return _sigmoid(2 * z + 1), y, _sigmoid(z)


def test_prior_shift_scales_the_odds_by_the_new_base_rate_over_the_training_one():
    p = np.linspace(0.01, 0.5, 40)
    y = np.r_[np.ones(8), np.zeros(32)]  # observed rate 0.2
    fitted = Recalibration("prior-shift").fit(p, y, base_rate=0.05)
    expected_odds = _odds(p) * _odds(0.2) / _odds(0.05)
    np.testing.assert_allclose(fitted.apply(p), expected_odds / (1 + expected_odds), rtol=1e-9)
    # without the training rate, the model's own mean on the rows stands for it
    default = Recalibration("prior-shift").fit(p, y).apply(p)
    np.testing.assert_allclose(_odds(default) / _odds(p), _odds(0.2) / _odds(p.mean()), rtol=1e-9)


def test_isotonic_is_monotone_clipped_and_matches_the_observed_rate_where_fitted(miscalibrated):
    p, y, _ = miscalibrated
    fitted = Recalibration("isotonic").fit(p, y)
    grid = np.linspace(0, 1, 1001)
    mapped = fitted.apply(grid)
    assert np.all(np.diff(mapped) >= 0) and mapped.min() >= 0 and mapped.max() <= 1
    assert fitted.apply(p).mean() == pytest.approx(y.mean(), abs=1e-9)
    x = fitted.params["x"]
    assert fitted.apply([0.0])[0] == fitted.apply([x[0]])[0]  # out of bounds: clipped to the end thresholds


def test_platt_recovers_a_known_miscalibration(miscalibrated):
    p, y, truth = miscalibrated
    fitted = Recalibration("platt").fit(p, y)
    assert fitted.params["a"] == pytest.approx(0.5, abs=0.03) and fitted.params["b"] == pytest.approx(-0.5, abs=0.05)
    assert np.abs(fitted.apply(p) - truth).max() < 0.03


@pytest.mark.parametrize("method", METHODS)
def test_json_round_trip_applies_the_same_map(method, miscalibrated, tmp_path):
    p, y, _ = miscalibrated
    fitted = Recalibration(method).fit(p[:2000], y[:2000])
    again = Recalibration.from_dict(json.loads(json.dumps(fitted.to_dict())))
    np.testing.assert_array_equal(again.apply(p), fitted.apply(p))
    assert again.fitted_on == {"rows": 2000, "positives": int(y[:2000].sum()), "mean_p": pytest.approx(p[:2000].mean()),
                               "rate": pytest.approx(y[:2000].mean()),
                               "mean_p_after": pytest.approx(fitted.apply(p[:2000]).mean())}
    write_recalibration(tmp_path, fitted)
    np.testing.assert_array_equal(read_recalibration(tmp_path).apply(p), fitted.apply(p))
    write_recalibration(tmp_path, None)
    assert read_recalibration(tmp_path) is None and not (tmp_path / RECALIBRATION_FILE).exists()


@pytest.mark.parametrize("call, message", [
    (lambda: Recalibration("beta"), "`method` must be one of isotonic, platt, prior-shift; got 'beta'"),
    (lambda: Recalibration().fit(np.full(20, 0.1), np.zeros(20)), "needs both outcomes; all 20 rows have y = 0"),
    (lambda: Recalibration().fit([0.1, 0.2, 0.3], [0, 1, 0]), "needs at least 10 labelled rows; got 3"),
    (lambda: Recalibration().fit(np.r_[np.nan, np.full(19, 0.1)], np.r_[1, np.zeros(19)]), "p has 1 NaN of 20"),
    (lambda: Recalibration().fit(np.full(20, 0.1), np.r_[np.nan, 1, np.zeros(18)]), "y must be 0/1 outcomes"),
    (lambda: Recalibration().fit(np.full(20, 1.5), np.r_[1, np.zeros(19)]), "probabilities in [0, 1]"),
    (lambda: Recalibration().fit(np.full(20, 0.1), np.zeros(19)), "one value per row; got 20 and 19"),
    (lambda: Recalibration("platt").fit(np.full(20, 0.1), np.r_[1, np.zeros(19)], base_rate=0.1),
     "`base_rate` applies to method 'prior-shift' only"),
    (lambda: Recalibration.from_dict({"method": "platt", "params": {"a": 1}}), "params must hold a, b"),
])
def test_errors_are_one_line(call, message):
    with pytest.raises(DataError) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_unfitted_recalibration_refuses_to_apply():
    with pytest.raises(RuntimeError, match="not fitted"):
        Recalibration().apply([0.5])


# ---- by group -------------------------------------------------------------------------------------------------
def test_group_weight_and_shrunk_map_hand_computed():
    """Every score 0.2; group a redeems 40 of 100, b 10 of 100 (overall 0.25). Bühlmann–Straub: σ² = (100·0.4·0.6 +
    100·0.1·0.9) / 198 = 1/6, τ² = (2·100·0.15² − σ²) / (200 − 100) = 13/300, k = σ²/τ² = 50/13 rows, w = 26/27.
    Prior shift maps 0.2 to each rate it saw (the base rate is the mean score, 0.2)."""
    y = np.r_[np.ones(40), np.zeros(60), np.ones(10), np.zeros(90)]
    groups = ["a"] * 100 + ["b"] * 100
    fitted = GroupRecalibration("prior-shift").fit(np.full(200, 0.2), y, groups)
    assert fitted.k == pytest.approx(50 / 13) and fitted.weight("a") == pytest.approx(26 / 27)
    w = 26 / 27
    np.testing.assert_allclose(fitted.apply([0.2, 0.2], ["a", "b"]), [w * 0.4 + (1 - w) * 0.25,
                                                                       w * 0.1 + (1 - w) * 0.25])
    assert fitted.fitted_on["groups"] == 2 and fitted.fitted_on["own_maps"] == 2
    fixed = GroupRecalibration("prior-shift", shrinkage=50).fit(np.full(200, 0.2), y, groups)
    assert fixed.k == 50 and fixed.weight("b") == pytest.approx(100 / 150)
    alike = np.r_[np.ones(20), np.zeros(80), np.ones(20), np.zeros(80)]  # equal rates: τ² < 0, pooled
    pooled = GroupRecalibration("prior-shift").fit(np.full(200, 0.2), alike, groups)
    assert pooled.k is None and pooled.weight("a") == 0
    np.testing.assert_allclose(pooled.apply([0.2], ["a"]), [0.2])


@pytest.fixture(scope="module")
def opposite():
    """Scores p of two groups: a redeems at 1.8 p, b at p / 1.8, so a map of both is wrong for each."""
    rng = np.random.default_rng(1)
    p = rng.uniform(0.02, 0.3, 20_000)
    groups = np.where(np.arange(len(p)) % 2 == 0, "a", "b")
    y = (rng.random(len(p)) < np.where(groups == "a", 1.8 * p, p / 1.8)).astype(float)
    return p, y, groups


@pytest.mark.parametrize("method", METHODS)
def test_group_maps_fix_two_groups_miscalibrated_in_opposite_directions(method, opposite):
    p, y, groups = opposite
    fitted = GroupRecalibration(method).fit(p, y, groups)
    overall, by_group = fitted.overall.apply(p), fitted.apply(p, groups)
    for group in ("a", "b"):
        rows = groups == group
        assert not 0.8 < overall[rows].mean() / y[rows].mean() < 1.25  # the overall map leaves each group wrong
        assert by_group[rows].mean() / y[rows].mean() == pytest.approx(1, abs=0.05)  # prior shift: 0.96
    assert overall.mean() == pytest.approx(y.mean(), rel=0.03)  # right on average only


def test_a_small_group_leans_on_the_overall_map_and_unseen_or_one_outcome_groups_get_it(opposite):
    p, y, groups = opposite
    groups = groups.astype(object)
    groups[:40] = "small"
    groups[40:60] = "no redemption"
    y = y.copy()
    y[40:60] = 0
    fitted = GroupRecalibration("platt", shrinkage=200).fit(p, y, groups)
    own = fitted.groups["small"]["map"].apply(p[:40])
    w = fitted.weight("small")
    assert w == pytest.approx(40 / 240) and fitted.weight("a") > 0.95
    np.testing.assert_allclose(fitted.apply(p[:40], groups[:40]), w * own + (1 - w) * fitted.overall.apply(p[:40]))
    assert fitted.groups["no redemption"]["map"] is None and fitted.weight("no redemption") == 0
    np.testing.assert_array_equal(fitted.apply(p[40:60], groups[40:60]), fitted.overall.apply(p[40:60]))
    np.testing.assert_array_equal(fitted.apply(p[:5], ["new"] * 5), fitted.overall.apply(p[:5]))
    assert fitted.new_groups(["a", "new", "later", "new"]) == {"new": 2, "later": 1}
    assert fitted.new_groups(groups) == {}


def test_group_keys_numpy_numbers_and_missing_ones_round_trip_through_json(opposite, tmp_path):
    p, y, groups = opposite
    keys = np.where(groups == "a", 27, 13).astype(object)
    keys[:500] = None
    keys[500:1000] = np.nan  # one group with the None keys: missing
    fitted = GroupRecalibration("isotonic", by="campaign_id").fit(p, y, keys)
    assert set(fitted.groups) == {27, 13, None} and fitted.groups[None]["rows"] == 1000
    numbers = np.r_[np.full(10, np.int64(27)), np.full(10, 13.0), [np.nan]]
    write_recalibration(tmp_path, fitted)
    again = read_recalibration(tmp_path)
    assert isinstance(again, GroupRecalibration) and again.by == "campaign_id" and again.k == fitted.k
    np.testing.assert_array_equal(again.apply(p[:21], numbers), fitted.apply(p[:21], numbers))
    np.testing.assert_array_equal(again.apply(p, keys), fitted.apply(p, keys))
    assert again.fitted_on == json.loads(json.dumps(fitted.fitted_on)) and again.new_groups(numbers) == {}


@pytest.mark.parametrize("call, message", [
    (lambda: GroupRecalibration("beta"), "`method` must be one of isotonic, platt, prior-shift; got 'beta'"),
    (lambda: GroupRecalibration(shrinkage=-1), "`shrinkage` must be a number of rows ≥ 0 or None; got -1"),
    (lambda: GroupRecalibration().fit(np.full(20, 0.1), np.r_[1, np.zeros(19)], ["a"] * 19),
     "groups must have one key per row of p; got 19 keys for 20 rows"),
    (lambda: GroupRecalibration().fit(np.full(20, 0.1), np.r_[1, np.zeros(19)], [(1, 2)] * 20),
     "groups: a key must be a string or a number; got tuple (1, 2)"),
    (lambda: GroupRecalibration().fit(np.full(20, 0.1), np.zeros(20), ["a"] * 20), "needs both outcomes"),
    (lambda: GroupRecalibration.from_dict({"method": "platt", "groups": []}), "not a group recalibration: expected"),
    (lambda: GroupRecalibration.from_dict({"method": "platt", "k": 1.0, "groups": [{"key": 1}],
                                           "overall": {"method": "platt", "params": {"a": 1, "b": 0}}}),
     "each of its groups must hold key, rows and map"),
])
def test_group_errors_are_one_line(call, message):
    with pytest.raises(DataError) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_unfitted_group_recalibration_refuses_to_apply():
    with pytest.raises(RuntimeError, match="not fitted"):
        GroupRecalibration().apply([0.5], ["a"])


# ---- the voucher model ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tables():
    return make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2).tables


@pytest.fixture(scope="module")
def fitted(tables):
    from promokit.voucher.estimator import VoucherModel

    return VoucherModel("lr", test_fraction=0.3).fit(tables)


def test_voucher_model_recalibrates_saves_loads_and_predicts_with_it(tables, fitted, tmp_path):
    from promokit.voucher.estimator import VoucherModel

    rows = fitted.held_out(tables)
    raw = fitted.predict(tables, rows=rows)
    assert "p_redeem_raw" not in raw.columns
    fitted.recalibrate(tables, method="isotonic", rows=rows)
    try:
        out = fitted.predict(tables, rows=rows)
        np.testing.assert_array_equal(out["p_redeem_raw"], raw["p_redeem"])
        y = tables.sessions["redeemed"].to_numpy(dtype=np.float64)[rows]
        assert out["p_redeem"].mean() == pytest.approx(y.mean(), abs=1e-9)  # isotonic matches the rate it saw
        fitted.save(tmp_path / "m")
        assert json.loads((tmp_path / "m" / RECALIBRATION_FILE).read_text())["method"] == "isotonic"
        loaded = VoucherModel.load(tmp_path / "m")
        np.testing.assert_allclose(loaded.predict(tables, rows=rows)["p_redeem"], out["p_redeem"], rtol=1e-6)
        assert loaded.evaluate(tables, rows=rows).metrics["mean_p_redeem"] == pytest.approx(y.mean(), abs=1e-6)
    finally:
        fitted.recalibration_ = None


def test_voucher_recalibrate_refuses_unlabelled_sessions(tables, fitted):
    unlabelled = tables.sessions.copy()
    unlabelled.loc[:5, "redeemed"] = np.nan
    with pytest.raises(DataError, match=f"^6 of the {len(unlabelled)} sessions to recalibrate on have no 'redeemed'"):
        fitted.recalibrate(replace(tables, sessions=unlabelled))


runner = CliRunner()


def _table_args(folder):
    return ["--sessions", folder / "sessions.csv", "--events", folder / "events.csv",
            "--items", folder / "items.parquet", "--categorical", ",".join(PROFILE_CATEGORICAL)]


@pytest.fixture(scope="module")
def model_dir(tables, tmp_path_factory):
    from promokit.voucher.estimator import VoucherModel

    folder = tmp_path_factory.mktemp("recalibration")
    tables.sessions.to_csv(folder / "sessions.csv", index=False)
    tables.events.drop(columns=["session", "pre"]).to_csv(folder / "events.csv", index=False)
    tables.items.to_parquet(folder / "items.parquet", index=False)
    VoucherModel("lr", test_fraction=0.3).fit(tables).save(folder / "model")
    return folder


def test_cli_recalibrate_writes_the_recalibration_and_prints_before_after(model_dir):
    result = runner.invoke(app, [str(a) for a in ["voucher", "recalibrate", "--model", model_dir / "model",
                                                  *_table_args(model_dir), "--from", "2024-05-01",
                                                  "--method", "prior-shift"]])
    assert result.exit_code == 0, result.output
    assert "mean predicted" in result.output and "observed" in result.output
    saved = read_recalibration(model_dir / "model")
    assert saved.method == "prior-shift" and saved.fitted_on["rows"] > 0


@pytest.mark.parametrize("args, message", [
    (["--method", "beta"], "--method must be one of isotonic, platt, prior-shift"),
    (["--from", "2030-01-01"], "--from 2030-01-01 selects none of the"),
])
def test_cli_recalibrate_errors_name_the_options(model_dir, args, message):
    result = runner.invoke(app, [str(a) for a in ["voucher", "recalibrate", "--model", model_dir / "model",
                                                  *_table_args(model_dir), *args]])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output

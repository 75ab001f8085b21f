"""The value domain's floor ``hurdle``: its ETV is the product of its two stages, it learns a planted user × fund signal,
it saves as text (and a directory saved as ``two-part`` still loads), its settings are checked; and the reports beside it (personalisation, calibration per fund)."""

import json

import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest

from promokit.data import DataError
from promokit.experiments.value.world import make_world
from promokit.metrics import auc, fund_personalisation
from promokit.value.contract import check_tables
from promokit.value.estimator import ValueModel
from promokit.value.evaluate import beside_floor, fund_calibration


def planted(n_users: int = 600, seed: int = 0):
    """Two segments of users, each converting on its own fund (50 % against 2 %), and an amount
    log(1 + amount) = 4 + wealth + N(0, 0.3²) given a conversion, wealth ~ U(−1, 1); the true ETV of every
    user × fund and the true P(convert) of every delivery."""
    rng = np.random.default_rng(seed)
    segment = rng.choice(["a", "b"], n_users)
    wealth = rng.uniform(-1, 1, n_users)
    users = pd.DataFrame({"user_id": [f"u{i}" for i in range(n_users)], "segment": segment, "wealth": wealth})
    user = np.repeat(np.arange(n_users), 8)
    fund = np.tile(np.array(["F1", "F2"]), 4 * n_users)
    good = (segment[user] == "a") == (fund == "F1")
    convert = (rng.random(len(user)) < np.where(good, 0.5, 0.02)).astype(int)
    amount = np.where(convert == 1, np.round(np.expm1(4 + wealth[user] + 0.3 * rng.normal(size=len(user))), 2), 0.0)
    deliveries = pd.DataFrame({"user_id": users.user_id.to_numpy()[user], "fund": fund, "click": convert,
                               "convert": convert, "amount": amount, "time": rng.integers(0, 1000, len(user))})
    tables = check_tables(deliveries, users, pd.DataFrame({"fund": ["F1", "F2"]}))
    p = np.where((segment[:, None] == "a") == (np.array(["F1", "F2"])[None, :] == "F1"), 0.5, 0.02)
    truth = p * (np.exp(4 + wealth + 0.3 ** 2 / 2)[:, None] - 1)
    return tables, truth, segment, np.where(good, 0.5, 0.02)


@pytest.fixture(scope="module")
def world():
    small = make_world(500, seed=7)
    return check_tables(small.deliveries, small.users, small.funds, small.behaviors)


@pytest.fixture(scope="module")
def fitted(world):
    model = ValueModel("hurdle").fit(world)
    _, valid, test = model.split_rows(world)
    return model, valid, test


def test_etv_is_the_product_of_its_stages(world, fitted):
    model, valid, test = fitted
    out = model.predict(world, rows=test)
    assert list(out.columns) == ["user_id", "fund", "p_ctcvr", "mu", "amount_if_convert", "etv"]
    rows = model.encoders_.rows(world, test)
    x = model.net_.matrix(*(rows[k].numpy() for k in ("user", "fund", "ctx_cat", "ctx_num", "seq")))
    p, mu = (model.net_.boosters[stage].predict(x) for stage in ("convert", "amount"))
    # the smearing factor: exp of the held-out residuals of the log amount on the converted validation deliveries,
    # by the selected model's amount stage; the refit on every delivery keeps it (its training residuals are smaller)
    selected = ValueModel("hurdle", refit=False).fit(world)
    vrows = selected.encoders_.rows(world, valid)
    vx = selected.net_.matrix(*(vrows[k].numpy() for k in ("user", "fund", "ctx_cat", "ctx_num", "seq")))
    converted, v = vrows["convert"].numpy() > 0, vrows["v"].numpy().astype(np.float64)  # v = log(1 + amount)
    smearing = np.mean(np.exp(v[converted] - selected.net_.boosters["amount"].predict(vx[converted])))
    assert selected.net_.smearing == pytest.approx(smearing, rel=1e-12)
    assert model.net_.smearing == pytest.approx(smearing, rel=1e-12)
    assert model.holdout_["refit"]["rows"] == len(world.deliveries)
    np.testing.assert_allclose(out.p_ctcvr, p, rtol=1e-12)
    np.testing.assert_allclose(out.mu, mu, rtol=1e-12)
    np.testing.assert_allclose(out.amount_if_convert, np.exp(mu) * smearing - 1, rtol=1e-10)
    np.testing.assert_allclose(out.etv, out.p_ctcvr * out.amount_if_convert, rtol=1e-12)


def test_it_learns_a_planted_user_by_fund_signal():
    tables, truth, segment, p_convert = planted()
    model = ValueModel("hurdle").fit(tables)
    test = model.split_rows(tables)[2]
    oracle = auc(tables.convert[test], p_convert[test])
    # the selected model's, scored before the refit learnt the held-out deliveries
    assert model.held_out_evaluation(tables)["auc"] > oracle - 0.01
    scores = model.score_matrix(tables)
    planted_best = np.where(segment == "a", 0, 1)
    assert np.mean(scores.argmax(axis=1) == planted_best) > 0.97
    # the amount follows the user's wealth, and the mean ETV the truth's
    assert np.corrcoef(np.log(scores.max(axis=1)), np.log(truth.max(axis=1)))[0, 1] > 0.9
    assert scores.mean() == pytest.approx(truth.mean(), rel=0.15)
    personal = fund_personalisation(scores)
    assert personal["best_differs"] == pytest.approx(fund_personalisation(truth)["best_differs"], abs=0.03)


def test_model_directory_holds_text_and_scores_alike(world, fitted, tmp_path):
    model, _, test = fitted
    model.save(tmp_path / "m")
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert files == ["config.json", "encoder.json", "history.json", "hurdle.json", "hurdle_amount.txt",
                     "hurdle_convert.txt", "training_ids.npy"]
    lgb.Booster(model_file=str(tmp_path / "m" / "hurdle_convert.txt"))  # LightGBM's own text format
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model"] == "hurdle"
    loaded = ValueModel.load(tmp_path / "m")
    pd.testing.assert_frame_equal(model.predict(world, rows=test), loaded.predict(world, rows=test))
    pd.testing.assert_frame_equal(model.score_table(world), loaded.score_table(world))


def test_a_directory_saved_as_two_part_loads_as_the_hurdle(world, fitted, tmp_path):
    """The floor's former name: its config says ``two-part`` and its files start with ``two_part``."""
    model, _, test = fitted
    model.save(tmp_path / "m")
    for name in ("hurdle.json", "hurdle_amount.txt", "hurdle_convert.txt"):
        (tmp_path / "m" / name).rename(tmp_path / "m" / name.replace("hurdle", "two_part"))
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "model": "two-part"}))
    loaded = ValueModel.load(tmp_path / "m")
    assert loaded.model == "hurdle"
    pd.testing.assert_frame_equal(model.predict(world, rows=test), loaded.predict(world, rows=test))
    loaded.save(tmp_path / "again")  # saved again, it is a hurdle directory
    assert json.loads((tmp_path / "again" / "config.json").read_text())["model"] == "hurdle"
    assert (tmp_path / "again" / "hurdle.json").exists() and not (tmp_path / "again" / "two_part.json").exists()


def test_pair_scores_equal_scoring_each_pair_as_a_delivery(world, fitted):
    model, _, _ = fitted
    users, contexts, at = np.arange(6), 3, world.time.max() + 1
    fast = model.score_matrix(world, at=at, users=users, contexts=contexts, seed=2)
    drawn = np.random.default_rng(2).choice(len(world.deliveries), size=contexts, replace=False)
    n_funds = len(world.funds)
    pairs = pd.DataFrame([(u, f, c) for u in users for f in range(n_funds) for c in drawn], columns=["u", "f", "c"])
    deliveries = world.deliveries.iloc[pairs.c].reset_index(drop=True)
    one_by_one = world.__class__(**{**world.__dict__, "deliveries": deliveries, "user": pairs.u.to_numpy(),
                                    "fund": pairs.f.to_numpy(), "time": np.full(len(pairs), at)})
    slow = model.net_(model.encoders_.rows(one_by_one))["etv"].numpy().reshape(len(users), n_funds, contexts)
    np.testing.assert_allclose(fast, slow.mean(axis=2), rtol=1e-12)


@pytest.mark.parametrize("params, message", [
    ({"n_trees": 0}, "n_trees must be a whole number ≥ 1, got 0"),
    ({"n_trees": 2.5}, "n_trees must be a whole number"),
    ({"num_leaves": 1}, "num_leaves must be a whole number ≥ 2"),
    ({"threads": 0}, "threads must be a whole number ≥ 1"),
    ({"subsample": 0}, r"subsample must be in \(0, 1\]"),
    ({"colsample": 1.5}, r"colsample must be in \(0, 1\]"),
    ({"learning_rate": float("nan")}, "learning_rate must be a finite number > 0"),
    ({"learning_rate": float("inf")}, "learning_rate must be a finite number > 0"),
    ({"learning_rate": "fast"}, "learning_rate must be a finite number > 0"),
    ({"n_tree": 5}, "no parameter 'n_tree' \\(did you mean 'n_trees'\\?\\)"),
    ({"dropout": 0.1}, "no parameter 'dropout'"),
])
def test_bad_settings_are_one_line_errors(params, message):
    with pytest.raises(DataError, match=message) as caught:
        ValueModel("hurdle", params)
    assert "\n" not in str(caught.value)


def test_personalisation_hand_computed():
    # users × funds; column means 2.5, 2, 2.5 → the population's best fund is the first (ties: the first)
    scores = np.array([[1.0, 2.0, 3.0], [4.0, 2.0, 2.0]])
    got = fund_personalisation(scores)
    assert got["best_differs"] == 0.5  # user 0's best is the third fund
    # s_0 − s_1 over users: −1, 2 (std 1.5); s_0 − s_2: −2, 2 (2); s_1 − s_2: −1, 0 (0.5); mean value 14/6
    assert got["uplift_spread"] == pytest.approx(np.sqrt((1.5 ** 2 + 2 ** 2 + 0.5 ** 2) / 3) / (14 / 6))
    additive = np.array([[1.0, 3.0], [5.0, 7.0], [2.0, 4.0]])  # user part + fund part: no personal choice
    assert fund_personalisation(additive) == {"best_differs": 0.0, "uplift_spread": pytest.approx(0.0, abs=1e-12)}
    assert np.isnan(fund_personalisation(np.ones((3, 1)))["uplift_spread"])
    assert np.isnan(fund_personalisation(np.zeros((3, 2)))["uplift_spread"])
    for bad in (np.ones(3), np.ones((0, 2)), np.array([[1.0, np.nan]]), np.array([["a", "b"]])):
        with pytest.raises(ValueError, match="scores must be"):
            fund_personalisation(bad)


def test_fund_calibration_and_the_floor_beside_hand_computed():
    table = fund_calibration(["F1", "F2", "F3"], np.array([0, 0, 2, 2, 2]), np.array([1.0, 3.0, 2.0, 2.0, 2.0]),
                             np.array([0.0, 8.0, 0.0, 0.0, 0.0]))
    assert table.fund.tolist() == ["F1", "F3"] and table.deliveries.tolist() == [2, 3]  # F2 has no deliveries
    assert table.mean_predicted.tolist() == [2.0, 2.0] and table.mean_observed.tolist() == [4.0, 0.0]
    assert table.ratio[0] == 0.5 and np.isnan(table.ratio[1])
    beside = beside_floor({"auc": 0.8, "gini": 0.5}, {"auc": 0.7, "gini": 0.4}).set_index("metric")
    assert beside.loc["relaimpr_vs_floor", "value"] == pytest.approx(50.0)  # (0.3 / 0.2 − 1) · 100
    assert beside.loc["gini"].tolist() == [0.5, 0.4]
    assert list(beside_floor({"auc": 0.8}, None).columns) == ["metric", "value"]

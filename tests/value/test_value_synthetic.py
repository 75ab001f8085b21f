import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from promokit.data.errors import DataError
from promokit.experiments.value.world import (ACTIONS, CATEGORIES, CHANNELS, START, STYLES, ValueWorld, draw_outcomes,
                                      expected_value, make_world, read_truth_etv, write_world)

TABLES = ("deliveries", "users", "funds", "behaviors", "consumption", "truth", "truth_etv")


@pytest.fixture(scope="module")
def small() -> ValueWorld:
    return make_world(3000, seed=1)


@pytest.fixture(scope="module")
def dense() -> ValueWorld:
    """Few users with many deliveries each, so every user has several purchases."""
    return make_world(400, deliveries_per_user=200.0, behaviors_per_user=5.0, seed=2)


def _corr(a, b) -> float:
    return float(np.corrcoef(np.asarray(a, dtype=float), np.asarray(b, dtype=float))[0, 1])


def test_tables_have_the_documented_columns_and_types(small):
    d, u, f, b, c = small.deliveries, small.users, small.funds, small.behaviors, small.consumption
    assert list(d.columns) == ["user_id", "fund", "click", "convert", "amount", "time", "channel", "hour"]
    assert list(u.columns) == ["user_id", "tolerance", "age", "income_band", "city_tier", "tenure_days",
                               "investor_style", "device", "noise_score"]
    assert list(f.columns) == ["fund", "risk", "annual_return", "volatility", "category"]
    assert list(b.columns) == ["user_id", "fund", "action", "time"]
    assert list(c.columns) == ["user_id", "merchant_id", "amount"]
    assert list(small.truth.columns) == ["user_id", "fund", "true_p_ctr", "true_p_cvr", "true_p_ctcvr", "true_mu",
                                         "true_sigma", "true_etv"]
    assert list(small.truth_etv.columns) == ["user_id", "fund", "true_p_ctcvr", "true_mu", "true_sigma", "true_etv"]
    for frame, columns in ((d, ["user_id", "fund", "channel"]), (u, ["user_id", "investor_style", "device"]),
                           (f, ["fund", "category"]), (b, ["user_id", "fund", "action"]),
                           (c, ["user_id", "merchant_id"])):
        assert all(pd.api.types.is_string_dtype(frame[column]) for column in columns)
    for frame, columns in ((d, ["click", "convert", "hour"]), (u, ["tolerance", "age", "income_band", "city_tier"]),
                           (f, ["risk"])):
        assert all(frame[column].dtype == np.int64 for column in columns)
    for frame, columns in ((d, ["amount"]), (u, ["tenure_days", "noise_score"]), (f, ["annual_return", "volatility"]),
                           (c, ["amount"])):
        assert all(frame[column].dtype == np.float64 for column in columns)
    assert d["time"].dtype == "datetime64[ns]" and b["time"].dtype == "datetime64[ns]"
    assert u["user_id"].iloc[0] == "u000001" and u["user_id"].is_unique and len(u) == 3000
    assert f["fund"].tolist() == [f"F{j}" for j in range(1, 9)] and f["category"].tolist() == list(CATEGORIES)
    assert c["merchant_id"].str.fullmatch(r"m\d{5}").all() and small.n_merchants == 300 and small.seed == 1
    assert set(u["tolerance"]) == {1, 2, 3, 4, 5} and set(f["risk"]) <= {1, 2, 3, 4, 5}
    assert u["income_band"].between(1, 5).all() and u["city_tier"].between(1, 4).all()
    assert u["age"].between(18, 75).all() and (u["tenure_days"] > 0).all()
    assert set(u["investor_style"]) == set(STYLES) and set(d["channel"]) == set(CHANNELS)
    assert set(b["action"]) == set(ACTIONS)


def test_same_seed_gives_the_same_world_and_another_seed_another(small):
    again, other = make_world(3000, seed=1), make_world(3000, seed=2)
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(small, name), getattr(again, name))
        assert not getattr(small, name).equals(getattr(other, name)) or name == "funds"
    assert not small.funds[["annual_return", "volatility"]].equals(other.funds[["annual_return", "volatility"]])


def test_deliveries_are_randomised_sorted_and_consistent(small):
    d = small.deliveries
    assert set(d["click"]) == {0, 1} and set(d["convert"]) == {0, 1}
    assert ((d["convert"] == 1) <= (d["click"] == 1)).all()                      # convert ⇒ click
    assert ((d["amount"] > 0) == (d["convert"] == 1)).all() and (d["amount"] >= 0).all()
    assert d["time"].is_monotonic_increasing
    assert d["time"].min() >= START and d["time"].max() < START + pd.Timedelta(days=60)
    assert (d["hour"] == d["time"].dt.hour).all() and (d["time"].dt.second.nunique() > 30)
    per_user = d.groupby("user_id").size()
    assert len(per_user) == 3000 and per_user.min() >= 1 and 4.7 < per_user.mean() < 5.3
    shares = d["fund"].value_counts(normalize=True)
    assert len(shares) == 8 and shares.between(0.1, 0.15).all()                   # funds uniform at random
    assert d.groupby("channel")["click"].mean()["push"] > d.groupby("channel")["click"].mean()["banner"]


def test_rates_land_in_the_documented_ranges(small):
    d, truth = small.deliveries, small.truth
    ctr, ctcvr = d["click"].mean(), d["convert"].mean()
    cvr = d.loc[d["click"] == 1, "convert"].mean()
    assert 0.10 <= ctr <= 0.15 and 0.25 <= cvr <= 0.35 and 0.03 <= ctcvr <= 0.05
    assert 0.75 <= roc_auc_score(d["convert"], truth["true_p_ctcvr"]) <= 0.87
    assert abs(truth["true_p_ctcvr"].mean() - ctcvr) < 0.006


def test_true_etv_is_eq_13_of_the_stored_parameters(small):
    truth, table = small.truth, small.truth_etv
    np.testing.assert_allclose(truth["true_p_ctcvr"], truth["true_p_ctr"] * truth["true_p_cvr"], rtol=1e-12)
    for frame in (truth, table):
        np.testing.assert_allclose(frame["true_etv"], frame["true_p_ctcvr"] * (
            np.exp(frame["true_mu"] + frame["true_sigma"] ** 2 / 2) - 1), rtol=1e-10)
        np.testing.assert_allclose(frame["true_etv"],
                                   expected_value(frame["true_p_ctcvr"], frame["true_mu"], frame["true_sigma"]))
    assert (truth["user_id"] == small.deliveries["user_id"]).all() and (truth["fund"] == small.deliveries["fund"]).all()
    assert len(table) == 3000 * 8 and not table.duplicated(["user_id", "fund"]).any()
    # per delivery, μ and σ are the pair's; p_ctcvr varies with the context around the pair's context mean
    pairs = truth.merge(table, on=["user_id", "fund"], suffixes=("", "_pair"), validate="many_to_one")
    np.testing.assert_allclose(pairs["true_mu"], pairs["true_mu_pair"])
    np.testing.assert_allclose(pairs["true_sigma"], pairs["true_sigma_pair"])
    ratio = pairs["true_p_ctcvr"].mean() / pairs["true_p_ctcvr_pair"].mean()
    assert 0.97 < ratio < 1.03 and (pairs["true_p_ctcvr"] != pairs["true_p_ctcvr_pair"]).any()


def test_amounts_are_heteroscedastic_with_each_users_own_sigma(dense):
    d, truth = dense.deliveries, dense.truth
    sigma = dense.truth_etv["true_sigma"]
    assert sigma.quantile(0.05) < 0.4 and sigma.quantile(0.95) > 1.2
    bought = d["convert"] == 1
    log_amount = np.log1p(d.loc[bought, "amount"])
    z = (log_amount - truth.loc[bought, "true_mu"]) / truth.loc[bought, "true_sigma"]
    assert abs(z.mean()) < 0.08 and 0.92 < z.std() < 1.08                        # N(μ, σ²) on log(1 + amount)
    per_user = pd.DataFrame({"user_id": d.loc[bought, "user_id"], "v": log_amount,
                             "residual": log_amount - truth.loc[bought, "true_mu"],
                             "sigma": truth.loc[bought, "true_sigma"]}).groupby("user_id").agg(
        n=("v", "size"), std=("v", "std"), residual_std=("residual", "std"), sigma=("sigma", "mean"))
    per_user = per_user[per_user["n"] >= 5]
    assert len(per_user) > 200
    assert _corr(per_user["std"], per_user["sigma"]) > 0.45
    assert _corr(per_user["residual_std"], per_user["sigma"]) > 0.65


def test_sigma_shows_in_the_investor_style_and_in_how_often_the_user_sells(small):
    table = small.truth_etv
    user_sigma = np.exp(np.log(table["true_sigma"]).groupby(table["user_id"]).mean())  # σ_u × a common factor
    style = small.users.set_index("user_id")["investor_style"]
    by_style = user_sigma.groupby(style).mean()
    assert list(by_style.sort_values().index) == list(STYLES)
    within = user_sigma / user_sigma.groupby(style).transform("mean")                  # the part style misses
    b = small.behaviors
    sells = b["action"].eq("sell").groupby(b["user_id"]).mean()
    assert _corr(sells, user_sigma.reindex(sells.index)) > 0.45
    assert _corr(sells, within.reindex(sells.index)) > 0.1


def test_the_consumption_graph_reveals_capital_better_than_the_profile(small):
    c, users = small.consumption, small.users
    assert (c["amount"] > 0).all() and not c.duplicated(["user_id", "merchant_id"]).any()
    assert c["user_id"].nunique() == 3000 - 90                                     # 3 % without merchants
    degree = c.groupby("user_id").size()
    assert 7.0 < degree.mean() < 8.5
    popular = c["merchant_id"].value_counts()
    assert popular.max() > 5 * popular.median()                                   # log-normal popularity
    mu = small.truth_etv.groupby("user_id")["true_mu"].mean()
    log_paid = np.log(c["amount"])
    own = log_paid.groupby(c["user_id"]).mean()
    merchant_level = log_paid.groupby(c["merchant_id"]).mean()
    two_hop = c["merchant_id"].map(merchant_level).groupby(c["user_id"]).mean()
    income = users.set_index("user_id")["income_band"]
    r_income = _corr(income.reindex(own.index), mu.reindex(own.index))
    assert 0.2 < r_income < 0.55
    assert _corr(own, mu.reindex(own.index)) > r_income + 0.15
    assert _corr(two_hop, mu.reindex(two_hop.index)) > r_income + 0.2
    tolerance = users.set_index("user_id")["tolerance"]
    assert _corr(tolerance.reindex(own.index), own) > 0.1                        # tolerance follows capital


def test_every_delivery_outcome_has_its_echo_at_exactly_its_time(small):
    d, b = small.deliveries, small.behaviors
    assert b["time"].is_monotonic_increasing
    assert b["time"].min() < START - pd.Timedelta(days=25) and b["time"].max() < START + pd.Timedelta(days=60)
    keys = pd.MultiIndex.from_frame(b[["user_id", "fund", "action", "time"]])
    for label, action in (("click", "click"), ("convert", "purchase")):
        done = d[d[label] == 1]
        wanted = pd.MultiIndex.from_arrays([done["user_id"], done["fund"], pd.Series(action, index=done.index),
                                            done["time"]])
        assert wanted.isin(keys).all()
    at_delivery = b.merge(d[["user_id", "time"]].drop_duplicates(), on=["user_id", "time"])
    assert len(at_delivery) >= d["click"].sum() + d["convert"].sum()
    per_user = (b["time"] < START).groupby(b["user_id"]).sum()
    assert 5.5 < per_user.mean() < 8.0                                            # 30 of 90 days × 20 events


def test_past_behaviour_follows_the_latent_intent(small):
    b, table = small.behaviors, small.truth_etv
    past = b[b["time"] < START]
    counts = past.groupby(["user_id", "fund"]).size().rename("n")
    pairs = table.set_index(["user_id", "fund"]).join(counts).fillna({"n": 0})
    assert pairs[["n", "true_p_ctcvr"]].corr(method="spearman").iloc[0, 1] > 0.3
    bought = past.assign(purchase=past["action"].eq("purchase")).merge(table, on=["user_id", "fund"])
    assert bought.groupby("purchase")["true_p_ctcvr"].mean().diff().iloc[-1] > 0


def test_fund_features_follow_the_risk_level(small):
    f = small.funds
    assert _corr(f["risk"], f["volatility"]) > 0.6
    assert f.set_index("category").loc["money", "risk"] == 1 and f.set_index("category").loc["qdii", "risk"] == 5
    assert make_world(50, n_funds=12, seed=0).funds["category"].tolist() == list(CATEGORIES) + list(CATEGORIES[:4])


def test_draw_outcomes_follows_the_true_model(small):
    table = small.truth_etv
    users = np.tile(table["user_id"].to_numpy(), 5)
    funds = np.tile(table["fund"].to_numpy(), 5)
    drawn = draw_outcomes(table, users, funds, seed=3)
    assert list(drawn.columns) == ["convert", "amount"] and len(drawn) == len(users)
    assert drawn["convert"].dtype == np.int64 and drawn["amount"].dtype == np.float64
    assert ((drawn["amount"] > 0) == (drawn["convert"] == 1)).all()
    p = np.tile(table["true_p_ctcvr"].to_numpy(), 5)
    assert abs(drawn["convert"].mean() - p.mean()) < 4 * np.sqrt(p.mean() / len(p))
    bought = drawn["convert"].to_numpy() == 1
    z = ((np.log1p(drawn["amount"].to_numpy()[bought]) - np.tile(table["true_mu"].to_numpy(), 5)[bought])
         / np.tile(table["true_sigma"].to_numpy(), 5)[bought])
    assert abs(z.mean()) < 0.1 and 0.9 < z.std() < 1.1
    pd.testing.assert_frame_equal(drawn, draw_outcomes(table, users, funds, seed=3))
    assert not drawn.equals(draw_outcomes(table, users, funds, seed=4))
    with pytest.raises(DataError, match=r"1 of 2 .*\('u009999', 'F1'\)"):
        draw_outcomes(table, ["u000001", "u009999"], ["F1", "F1"], seed=0)
    with pytest.raises(DataError, match="same length"):
        draw_outcomes(table, ["u000001"], ["F1", "F2"], seed=0)


def test_write_world_then_reading_back_gives_the_same_frames(small, tmp_path):
    paths = write_world(small, tmp_path / "world")
    assert set(paths) == set(TABLES) | {"world"}
    for name in TABLES:
        assert paths[name] == tmp_path / "world" / f"{name}.parquet"
        pd.testing.assert_frame_equal(pd.read_parquet(paths[name]), getattr(small, name))
    facts = json.loads(paths["world"].read_text())
    assert facts["seed"] == 1 and facts["users"] == 3000 and facts["deliveries"] == len(small.deliveries)
    assert facts["merchants"] == 300 and facts["users_without_merchants"] == 90
    assert facts["ctr"] == pytest.approx(small.deliveries["click"].mean())
    assert facts["oracle_auc_ctcvr"] == pytest.approx(roc_auc_score(small.deliveries["convert"],
                                                                    small.truth["true_p_ctcvr"]))
    pd.testing.assert_frame_equal(read_truth_etv(tmp_path / "world"), small.truth_etv)
    pd.testing.assert_frame_equal(read_truth_etv(paths["truth_etv"]), small.truth_etv)
    with pytest.raises(DataError, match="truth_etv.parquet") as caught:
        read_truth_etv(tmp_path / "nowhere")
    assert "\n" not in str(caught.value)


def test_bad_sizes_are_one_line_errors():
    for kwargs in ({"n_users": 0}, {"n_funds": 0}, {"deliveries_per_user": 0.5}, {"behaviors_per_user": -1.0},
                   {"merchants": 0}):
        with pytest.raises(DataError, match="need n_users"):
            make_world(**{"n_users": 10, **kwargs})
    tiny = make_world(3, n_funds=1, behaviors_per_user=0.0, merchants=2, seed=0)
    assert len(tiny.truth_etv) == 3 and set(tiny.behaviors["action"]) <= {"click", "purchase"}

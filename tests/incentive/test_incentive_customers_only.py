"""A coupon experiment with customers only (no merchants, no edges): the graph-less models train on the customers
alone, and their scores go through `allocate budget` and `campaign build`, with a control arm as 'no coupon'."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import promokit as pk
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import GRAPHLESS, IncentiveModel
from promokit.training import TrainConfig

FAST = TrainConfig(epochs=3, batch_size=256, lr=3e-3, patience=3, progress=False)
NET = {"hidden": [16, 8], "emb_dim": 4}
BASE_RESPONSE = 0.06  # the control arm's measured response: people buy without a coupon too


@pytest.fixture(scope="module")
def customers():
    """The world's customers without its merchants and edges, a quarter of them in a control arm (level 0) that
    responds at BASE_RESPONSE."""
    world = make_world(1200, 10, seed=2)
    frame = world.customers.copy()
    rng = np.random.default_rng(0)
    control = rng.random(len(frame)) < 0.25
    frame.loc[control, "level"] = 0.0
    frame.loc[control, "redeemed"] = (rng.random(int(control.sum())) < BASE_RESPONSE).astype(np.int64)
    return frame


@pytest.fixture(scope="module")
def floor(customers):
    return IncentiveModel("lr", train=FAST).fit({"customers": customers})


def test_the_contract_takes_customers_alone(customers):
    tables = check_tables(customers)
    assert tables.customers_only and tables.levels[0] == 0 and len(tables.merchants) == len(tables.edges) == 0
    assert not tables.has_merchant_labels
    with pytest.raises(DataError, match="^merchants and edges go together: give both, or neither"):
        check_tables(customers, merchants=pd.DataFrame({"merchant_id": ["m1"]}))


@pytest.mark.parametrize("name", ["dnn-h", "dnn"])
def test_graphless_models_train_on_customers_alone(customers, name):
    model = IncentiveModel(name, NET, FAST).fit({"customers": customers})
    scores = model.predict({"customers": customers.drop(columns=["level", "redeemed"])})
    assert list(scores.columns) == ["customer_id", "score_0", *[f"score_{v:g}" for v in model.levels_[1:]]]
    assert np.isfinite(scores.iloc[:, 1:].to_numpy()).all()
    assert model.evaluate({"customers": customers}).metrics.get("mae_m") is None


@pytest.mark.parametrize("name", ["gnn-hazard", "sbbm", "cox", "dssm-c"])
def test_a_gnn_model_says_in_one_line_that_it_needs_a_graph(customers, name):
    assert set(GRAPHLESS) == {"lr", "dnn", "dnn-h"}
    with pytest.raises(DataError, match=rf"^model '{name}' needs a graph \(merchants and edges, item_edges or "
                                        r"customer_edges\); with customers only, use one of \['lr', 'dnn', 'dnn-h'\]$"):
        IncentiveModel(name, train=FAST).fit({"customers": customers})


def test_the_control_arm_is_learned_as_the_no_coupon_response(floor, customers):
    scores = floor.predict({"customers": customers})
    assert abs(scores["score_0"].mean() - BASE_RESPONSE) < 0.03
    assert (scores["score_200"] > scores["score_0"]).mean() > 0.9


def test_a_saved_customers_only_model_scores_customers_alone(floor, customers, tmp_path):
    floor.save(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "config.json").read_text())["customers_only"] is True
    loaded = IncentiveModel.load(tmp_path / "model")
    pd.testing.assert_frame_equal(loaded.predict({"customers": customers}), floor.predict({"customers": customers}))
    world = make_world(200, 20, seed=5)
    graph = {"customers": world.customers, "merchants": world.merchants, "edges": world.edges}
    with pytest.raises(DataError, match="^the model was fit on customers only: give the customers alone"):
        loaded.predict(graph)
    with pytest.raises(DataError, match="^the model was fit on a graph: give its merchants and edges"):
        IncentiveModel("lr", train=FAST).fit(graph).predict({"customers": world.customers})


def test_the_whole_customer_only_path_offers_no_coupon_at_cost_0(floor, customers, tmp_path):
    scores = floor.predict({"customers": customers}).rename(columns={"customer_id": "user_id"})
    with pytest.raises(DataError, match="ratio` 10 is below the lowest level 20"):
        pk.plan_budget(scores.drop(columns="score_0"), ratio=10)
    plan = pk.plan_budget(scores, ratio=10, out=tmp_path / "plan")  # the control arm's responses fund coupons
    no_coupon = plan.plan["level"] == 0
    assert 0 < no_coupon.sum() < len(plan.plan) and (plan.plan.loc[no_coupon, "cost"] == 0).all()
    assert plan.summary["spend_per_response"] <= 10 + 1e-6
    campaign = pk.campaign.build(tmp_path / "campaign", scores, tmp_path / "plan", "500")
    assert campaign.config.levels[0] == 0 and (tmp_path / "campaign" / "campaign.json").is_file()


def test_the_command_line_trains_and_predicts_without_merchants_and_edges(customers, tmp_path):
    customers.to_parquet(tmp_path / "customers.parquet")
    runner = CliRunner()
    result = runner.invoke(app, ["incentive", "train", "--customers", str(tmp_path / "customers.parquet"),
                                 "--model", "lr", "--out", str(tmp_path / "model")])
    assert result.exit_code == 0 and "customers only (no merchants, no edges)" in result.output, result.output
    result = runner.invoke(app, ["incentive", "predict", "--model", str(tmp_path / "model"), "--customers",
                                 str(tmp_path / "customers.parquet"), "--out", str(tmp_path / "scores")])
    assert result.exit_code == 0 and "--merchants" not in result.output, result.output
    assert (tmp_path / "scores" / "customers.parquet").is_file()
    assert not (tmp_path / "scores" / "merchants.parquet").exists()
    result = runner.invoke(app, ["incentive", "train", "--customers", str(tmp_path / "customers.parquet"),
                                 "--model", "cox", "--out", str(tmp_path / "gnn")])
    assert result.exit_code == 2 and "model 'cox' needs a graph" in result.output, result.output

"""The label-leak guard of the incentive model's fit: a customer feature that gives the redemption away is warned of
(named, with its AUC) before training, and a near-perfect validation AUC_c after; ``allow_leaky`` silences the
first; the synthetic world is silent."""

import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.incentive.world import make_world
from promokit.incentive.estimator import IncentiveModel
from promokit.training import TrainConfig

FAST = TrainConfig(epochs=2, batch_size=256, lr=3e-3, lr_decay=0.95, patience=3, progress=False)


@pytest.fixture(scope="module")
def world():
    return make_world(1500, 150, seed=5)


def _graph(world, customers=None):
    return {"customers": world.customers if customers is None else customers, "merchants": world.merchants,
            "edges": world.edges}


def _leaky(world, noise: float):
    """The world's customers with ``amount_redeemed``: the redemption times an amount, plus ``noise``."""
    rng = np.random.default_rng(0)
    amount = world.customers["redeemed"] * rng.uniform(5, 20, len(world.customers))
    return world.customers.assign(amount_redeemed=amount + noise * rng.standard_normal(len(amount)))


def _fit(model, data) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(data)
    return [str(w.message) for w in caught if "leak" in str(w.message)]


def test_a_feature_that_gives_the_redemption_away_is_named_with_its_auc(world):
    messages = _fit(IncentiveModel("dnn", None, FAST), _graph(world, _leaky(world, noise=0.0)))
    guard = [m for m in messages if "alone has AUC" in m]
    assert len(guard) == 1
    assert "feature 'amount_redeemed' alone has AUC 1.000 for redeemed" in guard[0]
    assert "allow it with `allow_leaky` amount_redeemed" in guard[0]
    assert "c_x" not in guard[0]  # the world's own features are no leak
    validation = [m for m in messages if m.startswith("validation auc_c")]
    assert len(validation) == 1 and "above 0.99" in validation[0]


def test_allow_leaky_silences_the_feature_guard_and_is_kept(world, tmp_path):
    model = IncentiveModel("dnn", None, FAST, allow_leaky=["amount_redeemed"])
    messages = _fit(model, _graph(world, _leaky(world, noise=0.0)))
    assert not [m for m in messages if "alone has AUC" in m]
    assert model.customer_spec_.allow_leaky == ["amount_redeemed"]
    model.save(tmp_path / "m")
    assert IncentiveModel.load(tmp_path / "m").allow_leaky == ["amount_redeemed"]


def test_the_synthetic_world_is_silent(world):
    assert _fit(IncentiveModel("dnn", None, FAST), _graph(world)) == []


def test_allow_leaky_must_name_customer_features(world):
    with pytest.raises(DataError, match="`allow_leaky` names 'level', which is not a customer feature; the customer "
                                        r"features are \['c_segment'"):
        IncentiveModel("dnn", None, FAST, allow_leaky="level").fit(_graph(world))
    with pytest.raises(DataError, match="`allow_leaky` must be column names"):
        IncentiveModel("lr", allow_leaky=3)


def test_the_command_line_names_its_flag(world, tmp_path):
    _leaky(world, noise=0.0).to_parquet(tmp_path / "customers.parquet")
    world.merchants.to_parquet(tmp_path / "merchants.parquet")
    world.edges.to_parquet(tmp_path / "edges.parquet")
    args = ["incentive", "train", *(x for name in ("customers", "merchants", "edges")
                                    for x in (f"--{name}", str(tmp_path / f"{name}.parquet"))),
            "--model", "dnn", "--epochs", "2"]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "m1")])
    assert result.exit_code == 0, result.output
    assert "alone has AUC 1.000 for redeemed" in result.output and "--allow-leaky amount_redeemed" in result.output
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "m2"), "--allow-leaky", "amount_redeemed"])
    assert result.exit_code == 0, result.output
    assert "alone has AUC" not in result.output
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "m3"), "--allow-leaky", "nosuch"])
    assert result.exit_code == 2 and "--allow-leaky names 'nosuch', which is not a customer feature" in result.output

"""The label-leak guard in value training: a feature measured after the outcome (of the deliveries, or of the users)
is warned of before training with its column and AUC, and a near-perfect validation AUC after; ``allow_leaky`` /
``--allow-leaky`` silence the first; the synthetic world and a table from transactions train silently."""

import warnings

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import write_value_parts
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.value.world import make_world, write_world
from promokit.scale.executor import LocalExecutor
from promokit.training import History, TrainConfig
from promokit.value.contract import check_tables, table_paths
from promokit.value.estimator import ValueModel
from promokit.value.leaks import delivery_features, warn_validation_leak
from promokit.value.parts import train_parts
from promokit.value.transactions import from_transactions

runner = CliRunner()
FLOOR = {"n_trees": 30}


@pytest.fixture(scope="module")
def world():
    return make_world(1200, seed=3)


def _leaky(world):
    """The world with ``receipt_total``, the delivery's amount plus noise: a column written after the purchase."""
    noise = np.random.default_rng(1).random(len(world.deliveries))
    return world.deliveries.assign(receipt_total=world.deliveries.amount + noise)


def _tables(world, deliveries=None, users=None):
    return check_tables(world.deliveries if deliveries is None else deliveries,
                        world.users if users is None else users, world.funds, world.behaviors, world.consumption)


def _fit(model: ValueModel, tables) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(tables)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_a_column_measured_after_the_purchase_is_named_with_its_auc(world):
    said = _fit(ValueModel("hurdle", FLOOR), _tables(world, _leaky(world)))
    assert any("feature 'receipt_total' alone has AUC 1.000 for convert (above 0.95)" in s
               and "allow it with `allow_leaky` receipt_total" in s for s in said), said
    assert any(s.startswith("validation pCTCVR AUC 1.0000 (above 0.99)") for s in said), said


def test_a_users_column_and_a_label_under_another_name(world):
    """A user column that copies whether the user's latest delivery converted, judged against ``purchased``."""
    deliveries = world.deliveries.rename(columns={"convert": "purchased"})
    # one delivery per user, so that a user-level column can give a delivery's label away
    one = deliveries.drop_duplicates("user_id", keep="last").reset_index(drop=True)
    users = world.users.merge(one[["user_id", "purchased"]].rename(columns={"purchased": "vip"}), how="left")
    tables = check_tables(one, users.fillna({"vip": 0}), world.funds, world.behaviors, world.consumption,
                          labels={"convert": "purchased"})
    said = _fit(ValueModel("hurdle", FLOOR, split="random", labels={"convert": "purchased"}), tables)
    assert any("feature 'vip' alone has AUC 1.000 for purchased" in s for s in said), said


def test_allow_leaky_silences_the_feature_and_an_unknown_name_is_a_one_line_error(world):
    tables = _tables(world, _leaky(world))
    for allow in ("receipt_total", ["receipt_total"], " receipt_total ,"):
        said = _fit(ValueModel("hurdle", FLOOR, allow_leaky=allow), tables)
        assert not any("alone has AUC" in s for s in said), said
    unknown = "`allow_leaky` names 'receipt', which is no feature of the deliveries, users or funds; the features are ["
    for allow, message in (("receipt", unknown), (3, "`allow_leaky` must be column names")):
        with pytest.raises(DataError, match=message.replace("[", r"\[")) as caught:
            ValueModel("hurdle", FLOOR, allow_leaky=allow).fit(tables)
        assert "\n" not in str(caught.value)


def test_the_world_and_a_table_from_transactions_train_silently(world):
    assert _fit(ValueModel("hurdle", FLOOR), _tables(world)) == []
    net = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "fanouts": [4, 4],
           "max_len": 8}
    assert _fit(ValueModel("esdpm", net, TrainConfig(epochs=1, batch_size=512, progress=False)), _tables(world)) == []
    rng = np.random.default_rng(0)
    rate = rng.gamma(1.0, 4.0, 400)
    rows = [(f"c{i}", pd.Timestamp("2024-01-01") + pd.Timedelta(days=float(day)), float(rng.gamma(2, 15)))
            for i in range(400) for day in rng.uniform(0, 365, rng.poisson(rate[i]) + 1)]
    log = pd.DataFrame(rows, columns=["customer_id", "time", "amount"])
    tables = from_transactions(log, feature_window=("2024-01-01", "2024-09-01"), target_window="122D")
    assert _fit(ValueModel("hurdle", FLOOR, split="random"), tables) == []


def test_the_kept_epoch_s_validation_auc_is_what_warns():
    epochs = [{"epoch": 0, "valid_auc": 0.995}, {"epoch": 1, "valid_auc": 0.97}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_validation_leak(History(epochs=epochs, best_epoch=1))
        assert caught == []
        warn_validation_leak(History(epochs=epochs, best_epoch=0))
    assert [str(w.message).split(":")[0] for w in caught] == ["validation pCTCVR AUC 0.9950 (above 0.99)"]


def test_a_column_of_two_tables_is_named_by_its_table(world):
    tables = _tables(world, world.deliveries.assign(age=1))
    frame, categorical, numeric = delivery_features(tables, np.arange(10), {
        "context": tables.context_spec, "users": tables.user_spec, "funds": tables.fund_spec})
    assert {"deliveries.age", "users.age", "channel", "fund"} <= set(frame.columns)
    np.testing.assert_array_equal(frame["users.age"], world.users.age.to_numpy()[tables.user[:10]])
    assert set(categorical) | set(numeric) == set(frame.columns)


def test_training_over_parts_judges_the_first_part(world, tmp_path):
    leaky = world.deliveries.assign(receipt_total=world.deliveries.amount * 3)
    write_value_parts(type(world)(**{**vars(world), "deliveries": leaky}), tmp_path, [600, 600])
    paths = table_paths(tmp_path / "parts")
    net = {"expert_hidden": [8], "expert_dim": 8, "tower_hidden": [4], "emb_dim": 4, "max_len": 4}
    estimator = ValueModel("esdpm-ncg", net, TrainConfig(epochs=1, batch_size=512, progress=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_parts(estimator, paths, LocalExecutor(), tmp_path / "keys")
    assert any("feature 'receipt_total' alone has AUC 1.000 for convert" in str(w.message) for w in caught)


def test_the_cli_names_the_flag_and_allow_leaky_silences_it(world, tmp_path):
    data = tmp_path / "world"
    write_world(world, data)
    pd.read_parquet(data / "deliveries.parquet").pipe(
        lambda d: d.assign(receipt_total=d.amount * 2)).to_parquet(data / "deliveries.parquet")
    train = ["value", "train", "--data", str(data), "--model", "hurdle", "--params", '{"n_trees": 20}']
    result = runner.invoke(app, [*train, "--out", str(tmp_path / "m1")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "warning: feature 'receipt_total' alone has AUC 1.000" in said
    assert "or allow it with --allow-leaky receipt_total" in said
    result = runner.invoke(app, [*train, "--out", str(tmp_path / "m2"), "--allow-leaky", "receipt_total"])
    assert result.exit_code == 0, result.output
    assert "alone has AUC" not in result.output
    assert ValueModel.load(tmp_path / "m2").allow_leaky == "receipt_total"
    result = runner.invoke(app, [*train, "--out", str(tmp_path / "m3"), "--allow-leaky", "nothing"])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("error: --allow-leaky names 'nothing', which is no feature")

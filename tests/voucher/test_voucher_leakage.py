"""The label-leak guard (promokit.data.leakage) on VoucherModel.fit and ``voucher train --allow-leaky``: a session
column measured after the redemption warns before training, naming itself and its AUC; allow_leaky silences it; the
synthetic voucher world trains without a warning."""

import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
from sklearn.base import clone
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.voucher.world import PROFILE_CATEGORICAL, make_world
from promokit.voucher.contract import read_tables
from promokit.voucher.estimator import VoucherModel

runner = CliRunner()
LEAK = "feature 'order_amount' alone has AUC 1.000 for redeemed (above 0.95)"
VALIDATION = "validation auc 1.0000 (above 0.99)"


@pytest.fixture(scope="module")
def world():
    return make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2).tables


@pytest.fixture(scope="module")
def leaky(world):
    """The world's tables with ``order_amount``, the redeemed order's amount (0 when not redeemed), a numeric
    profile column: it orders every (redeemed, unredeemed) pair, so its AUC is exactly 1."""
    sessions = world.sessions.copy()
    amount = np.random.default_rng(0).uniform(20, 80, len(sessions))
    sessions["order_amount"] = np.where(sessions["redeemed"] == 1, amount, 0.0)
    return read_tables({"sessions": sessions, "events": world.events.drop(columns=["session", "pre"]),
                        "items": world.items}, categorical=list(PROFILE_CATEGORICAL), numeric=["order_amount"])


def _fit(model: VoucherModel, tables) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(tables)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("name, params", [("lr", None), ("gbdt", {"n_trees": 20})])
def test_a_column_measured_after_the_redemption_warns_before_and_after_training(leaky, name, params):
    messages = _fit(VoucherModel(name, params), leaky)
    assert len(messages) == 2, messages
    assert messages[0].startswith(LEAK) and messages[0].endswith("allow it with `allow_leaky` order_amount")
    assert messages[1].startswith(VALIDATION)  # the model read the label through it


def test_allow_leaky_silences_the_feature_warning_only(leaky):
    for allowed in ("order_amount", ["order_amount"], " order_amount ,"):
        messages = _fit(VoucherModel("lr", allow_leaky=allowed), leaky)
        assert not any("alone has AUC" in m for m in messages), messages
        assert any(m.startswith(VALIDATION) for m in messages)  # still near perfect: said after training


def test_the_synthetic_world_trains_without_a_leak_warning(world):
    for name in ("lr", "gbdt"):
        messages = _fit(VoucherModel(name, {"n_trees": 20} if name == "gbdt" else None), world)
        assert not any("leak" in m for m in messages), messages


def test_the_guard_judges_the_training_sessions_only(leaky):
    """order_amount leaks on the training sessions and is the opposite on the validation and held-out ones: judged
    on every session it would stay below 0.95, judged on the training sessions its AUC is 1."""
    sessions = leaky.sessions.copy()
    model = VoucherModel("lr")
    _, valid, test = model.split_rows(leaky)
    later = np.r_[valid, test]
    sessions.loc[later, "order_amount"] = np.where(sessions.loc[later, "redeemed"] == 1, 0.0, 50.0)
    messages = _fit(model, replace(leaky, sessions=sessions))
    assert len(messages) == 1 and messages[0].startswith(LEAK), messages


def test_allow_leaky_is_a_parameter_checked_once_kept_by_clone_and_the_model_directory(leaky, tmp_path):
    model = VoucherModel("lr", allow_leaky="order_amount")
    assert model.get_params()["allow_leaky"] == "order_amount"
    assert clone(model).allow_leaky == "order_amount"
    with pytest.raises(DataError, match=r"^`allow_leaky` must be column names \(a list, or comma-separated\), got 3$"):
        model.set_params(allow_leaky=3)
    assert model.allow_leaky == "order_amount"  # the refused value is not kept
    _fit(model, leaky)
    model.save(tmp_path / "m")
    loaded = VoucherModel.load(tmp_path / "m")
    assert loaded.allow_leaky == ["order_amount"] and loaded.feature_spec_.allow_leaky == ["order_amount"]


@pytest.mark.parametrize("allowed, message", [
    ("order_amont", ("column 'order_amont' (allowed to leak, `allow_leaky`) is missing from the table of {n} rows; "
                     "did you mean 'order_amount'?")),
    ("collect_time", "`allow_leaky` names 'collect_time', which is not a feature; the features are ['user_id', "),
])
def test_allow_leaky_must_name_a_feature(leaky, allowed, message):
    with pytest.raises(DataError, match="^" + re.escape(message.format(n=len(leaky.sessions)))):
        VoucherModel("lr", allow_leaky=allowed).fit(leaky)


@pytest.fixture(scope="module")
def leaky_files(leaky, tmp_path_factory):
    folder = tmp_path_factory.mktemp("voucher_leak")
    leaky.sessions.to_csv(folder / "sessions.csv", index=False)
    leaky.events.drop(columns=["session", "pre"]).to_csv(folder / "events.csv", index=False)
    leaky.items.to_parquet(folder / "items.parquet", index=False)
    return ["--sessions", folder / "sessions.csv", "--events", folder / "events.csv", "--items",
            folder / "items.parquet", "--categorical", ",".join(PROFILE_CATEGORICAL), "--numeric", "order_amount",
            "--model", "lr"]


def _train(args, out, *more):
    result = runner.invoke(app, [str(a) for a in ["voucher", "train", *args, "--out", out, *more]])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_cli_train_warns_naming_the_option_and_allow_leaky_silences_it(leaky_files, tmp_path):
    output = _train(leaky_files, tmp_path / "a")
    assert LEAK in output and "allow it with --allow-leaky order_amount" in output
    assert "`allow_leaky`" not in output
    allowed = _train(leaky_files, tmp_path / "b", "--allow-leaky", "order_amount")
    assert "alone has AUC" not in allowed and VALIDATION in allowed


def test_cli_allow_leaky_naming_no_column_is_one_line(leaky_files, tmp_path):
    result = runner.invoke(app, [str(a) for a in ["voucher", "train", *leaky_files, "--out", tmp_path / "m",
                                                  "--allow-leaky", "order_amont"]])
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = " ".join(result.output.split())
    assert "column 'order_amont' (allowed to leak, --allow-leaky) is missing" in line, result.output

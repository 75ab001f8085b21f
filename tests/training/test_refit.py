"""Refit after selection (promokit.training.refit): the final model learns from every row with what the
validation chose, the held-out metrics are scored before, and refit=False keeps the selected model."""

import warnings

import numpy as np
import pytest

from promokit.conversion import ConversionModel
from promokit.data import DataError
from promokit.training import History
from promokit.training.config import TrainConfig
from promokit.training.refit import fingerprint, refit_train
from promokit.voucher.estimator import VoucherModel

NET = {"emb_dim": 4, "hidden": (16,), "dropout": 0.0}
QUIET = {"progress": False}


def test_the_refit_trains_the_kept_epochs_and_monitors_the_loss():
    history = History(epochs=[{"epoch": e} for e in range(5)], best_epoch=2, monitor="auc", unit="epoch")
    config = refit_train(TrainConfig(epochs=10, monitor="auc", lr=0.01), history)
    assert (config.epochs, config.monitor, config.lr) == (3, "loss", 0.01)
    solved = History(epochs=[{"l2": 1e-4, "chosen": True}], best_epoch=-1, monitor="auc", unit="l2 strength")
    assert refit_train(TrainConfig(epochs=10), solved).epochs == 10


def test_lr_refits_every_row_at_the_chosen_strength(impressions):
    refit = ConversionModel("lr", train=QUIET).fit(impressions)
    selected = ConversionModel("lr", train=QUIET, refit=False).fit(impressions)
    record = refit.holdout_["refit"]
    assert record["rows"] == len(impressions) and record["epochs"] is None
    assert record["params"] == {"l2_ctr": selected.model_params_["l2_ctr"], "l2_cvr": selected.model_params_["l2_cvr"]}
    # the same as fitting every row, nothing held out, at those strengths, to the solver's tolerance (the refit starts
    # from the selected weights, that fit from the intercept alone)
    every = ConversionModel("lr", record["params"], QUIET, test_fraction=0.0).fit(impressions, validation=0.0)
    np.testing.assert_allclose(refit.predict(impressions)["p_ctcvr"], every.predict(impressions)["p_ctcvr"],
                               atol=5e-4)
    held = refit.held_out(impressions)
    before = selected.evaluate(impressions, rows=held)
    assert refit.held_out_evaluation(impressions)["ctr_auc"] == pytest.approx(before["ctr_auc"])
    assert selected.held_out_evaluation(impressions) is None and "refit" not in selected.holdout_


@pytest.mark.parametrize("domain", ["conversion", "voucher"])
def test_the_floor_refit_starts_from_the_selected_weights(domain, impressions, voucher_tables, monkeypatch):
    import promokit.training.logistic as logistic

    starts, solve = [], logistic.newton_cg
    monkeypatch.setattr(logistic, "newton_cg",
                        lambda loss, l2, tol, start=None, progress=None: starts.append((len(loss.x.indptr), start)) or
                        solve(loss, l2, tol, start))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if domain == "conversion":
            model, solves = ConversionModel("lr", train=QUIET).fit(impressions), 2  # click, purchase
        else:
            model, solves = VoucherModel("lr", train=QUIET).fit(voucher_tables), 1
    refit = starts[-solves:]  # each at its chosen strength alone, over every row
    assert all(start is not None and np.abs(start[:-1]).max() > 0 for _, start in refit)
    assert max(rows for rows, _ in refit) == model.holdout_["refit"]["rows"] + 1  # CSR row pointers: rows + 1
    starts.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (ConversionModel("lr", train=QUIET, refit=False).fit(impressions) if domain == "conversion"
         else VoucherModel("lr", train=QUIET, refit=False).fit(voucher_tables))
    assert starts[0][1] is None  # a selection's first solve starts from the intercept alone


@pytest.mark.parametrize("refit, n_valid, n_test, expected", [
    (True, 10, 0, True),    # nothing scores the selected model: only the refit's start is wanted
    (True, 10, 5, False),   # the held-out rows score it before the refit
    (True, 0, 0, False),    # no validation: no refit follows
    (False, 10, 0, False),  # the selected model is the one kept
])
def test_a_floor_selected_only_to_start_the_refit_is_known(refit, n_valid, n_test, expected):
    from types import SimpleNamespace

    from promokit.training.refit import refit_next

    estimator = SimpleNamespace(refit=refit, report_=SimpleNamespace(n_train=100, n_valid=n_valid, n_test=n_test))
    assert refit_next(estimator) is expected


def test_a_validation_table_given_apart_is_refit_on_too(impressions):
    train, valid = impressions.iloc[:3000], impressions.iloc[3000:]
    model = ConversionModel("lr", train=QUIET, test_fraction=0.0).fit(train, validation=valid)
    assert model.holdout_["refit"]["rows"] == 4000 and model.holdout_["refit"]["evaluation"] is None
    assert model.held_out_evaluation(train) is None  # nothing was held out of train for evaluation


def test_a_network_refits_with_the_epochs_it_kept_and_saves_the_record(impressions, tmp_path):
    model = ConversionModel("esmm", NET, {"epochs": 3, "lr": 0.01, **QUIET}).fit(impressions)
    record = model.holdout_["refit"]
    assert record["epochs"] == model.history_.best_epoch + 1
    assert model.train_config.epochs == 3 and model.report_.n_train < len(impressions)  # the selection's, kept
    model.save(tmp_path / "m")
    loaded = ConversionModel.load(tmp_path / "m")
    assert loaded.refit and loaded.holdout_["refit"] == record
    np.testing.assert_allclose(loaded.predict(impressions)["p_ctr"], model.predict(impressions)["p_ctr"], rtol=1e-6)
    assert loaded.held_out_evaluation(impressions)["ctr_auc"] == record["evaluation"]["ctr_auc"]


def test_nothing_held_out_means_nothing_to_refit(impressions):
    model = ConversionModel("lr", train=QUIET, test_fraction=0.0).fit(impressions, validation=0.0)
    assert "refit" not in model.holdout_ and model.report_.n_train == len(impressions)


def test_a_refit_that_fails_warns_in_one_line_and_keeps_the_selected_model(impressions, monkeypatch):
    import promokit.training.refit as refit

    def gone(*args, **kwargs):
        raise RuntimeError("the executor is gone")

    monkeypatch.setattr(refit, "refit_twin", gone)
    with pytest.warns(UserWarning, match="^the refit on every row failed, so the selected model is kept: the executor"):
        model = ConversionModel("lr", train=QUIET).fit(impressions)
    assert "refit" not in model.holdout_ and model.report_.n_train < len(impressions)


def test_refit_must_be_a_bool():
    with pytest.raises(DataError, match=r"^refit must be True or False, got 'yes'$"):
        ConversionModel("lr", refit="yes")
    with pytest.raises(DataError, match=r"^refit must be True or False, got 1$"):
        VoucherModel("lr", refit=1)


def test_the_fingerprint_knows_the_rows_again_and_not_changed_ones(impressions):
    assert fingerprint(impressions) == fingerprint(impressions.copy().reset_index(drop=True))
    assert fingerprint(impressions) != fingerprint(impressions.assign(click=1 - impressions["click"]))


def test_a_voucher_model_refits_every_session_it_was_given(voucher_tables):
    tables = voucher_tables
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = VoucherModel("gbdt", {"n_trees": 30, "threads": 1}, QUIET).fit(tables)
        selected = VoucherModel("gbdt", {"n_trees": 30, "threads": 1}, QUIET, refit=False).fit(tables)
    record = model.holdout_["refit"]
    assert record["rows"] == len(tables.sessions) and record["params"]["n_trees"] == \
        selected.net_.booster.best_iteration
    held = model.held_out(tables)
    assert model.held_out_evaluation(tables)["auc"] == pytest.approx(selected.evaluate(tables, rows=held)["auc"])


@pytest.mark.parametrize("name, train", [("lr", QUIET), ("dnn", {"epochs": 2, **QUIET})])
def test_an_incentive_model_refits_every_labelled_node(incentive_tables, name, train, tmp_path):
    from promokit.incentive.estimator import IncentiveModel

    tables = incentive_tables
    model = IncentiveModel(name, train=train).fit(tables)
    selected = IncentiveModel(name, train=train, refit=False).fit(tables)
    record = model.holdout_["refit"]
    assert record["rows"] == len(tables.labelled_customers) and model.report_.n_train < record["rows"]
    if name == "lr":  # the floor's L2 strengths, chosen on the validation nodes, fixed
        assert record["params"] == {k: selected.model_params_[k] for k in ("l2_customers", "l2_merchants")}
        assert record["epochs"] is None
    else:
        assert record["epochs"] == selected.history_.best_epoch + 1 and record["params"] == {}
    held = model.held_out(tables)
    assert model.held_out_evaluation(tables).metrics == pytest.approx(dict(selected.evaluate(tables, rows=held)),
                                                                      nan_ok=True)
    assert dict(selected.evaluate(tables, rows=held)) == pytest.approx(dict(selected.evaluate(tables, held_out=True)),
                                                                  nan_ok=True)
    assert selected.held_out_evaluation(tables) is None and "refit" not in selected.holdout_
    assert model.training_ids_.size > selected.training_ids_.size  # the refit learnt the held-out nodes too
    model.save(tmp_path / "m")
    loaded = IncentiveModel.load(tmp_path / "m")
    assert loaded.refit and loaded.holdout_["refit"] == record
    assert loaded.held_out_evaluation(tables)["auc_c"] == record["evaluation"]["auc_c"]
    np.testing.assert_allclose(loaded.responses(tables).customers, model.responses(tables).customers, rtol=1e-5)


@pytest.mark.parametrize("name, params, train", [
    ("hurdle", {"n_trees": 40}, QUIET),
    ("esdpm-ncg", {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "max_len": 12},
     {"epochs": 2, "batch_size": 256, **QUIET})])
def test_a_value_model_refits_every_delivery(value_tables, name, params, train, tmp_path):
    from promokit.value.estimator import ValueModel

    tables = value_tables
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ValueModel(name, params, train).fit(tables)
        selected = ValueModel(name, params, train, refit=False).fit(tables)
    record = model.holdout_["refit"]
    assert record["rows"] == len(tables.deliveries) and model.report_.n_train < record["rows"]
    if name == "hurdle":  # each stage's trees and the smearing factor, chosen on the validation deliveries, fixed
        chosen = selected.history_.epochs
        assert record["params"] == {"n_trees": chosen[0]["trees"], "n_trees_amount": chosen[1]["trees"],
                                    "smearing": pytest.approx(chosen[2]["factor"])}
        assert model.net_.smearing == pytest.approx(selected.net_.smearing)
    else:
        assert record["epochs"] == selected.history_.best_epoch + 1
    held = model.held_out(tables)
    assert model.held_out_evaluation(tables).metrics == pytest.approx(dict(selected.evaluate(tables, rows=held)),
                                                                      nan_ok=True)
    assert selected.held_out_evaluation(tables) is None and "refit" not in selected.holdout_
    model.save(tmp_path / "m")
    loaded = ValueModel.load(tmp_path / "m")
    assert loaded.refit and loaded.holdout_["refit"] == record
    assert loaded.held_out_evaluation(tables)["auc"] == record["evaluation"]["auc"]
    np.testing.assert_allclose(loaded.predict(tables)["etv"], model.predict(tables)["etv"], rtol=1e-5)


def test_incentive_and_value_refit_must_be_a_bool():
    from promokit.incentive.estimator import IncentiveModel
    from promokit.value.estimator import ValueModel

    with pytest.raises(DataError, match=r"^refit must be True or False, got 'no'$"):
        IncentiveModel("lr", refit="no")
    with pytest.raises(DataError, match=r"^refit must be True or False, got 0$"):
        ValueModel("hurdle", refit=0)


def _invoke(*args):
    from typer.testing import CliRunner

    from promokit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_incentive_commands_refit_and_evaluate_reports_the_metrics_scored_before(tmp_path):
    import json

    from promokit.experiments.incentive.world import make_world, write_world

    write_world(make_world(400, 40, seed=1), tmp_path / "w")
    graph = [item for name in ("customers", "merchants", "edges")
             for item in (f"--{name}", tmp_path / "w" / f"{name}.parquet")]
    trained = _invoke("incentive", "train", *graph, "--model", "lr", "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    output = " ".join(trained.output.split())
    assert "refit on all 400 labelled customers with l2_customers" in output and "held out before the refit: auc_c" in output
    record = json.loads((tmp_path / "m" / "config.json").read_text())["split"]["refit"]
    evaluated = _invoke("incentive", "evaluate", "--model", tmp_path / "m", *graph, "--out", tmp_path / "e")
    assert evaluated.exit_code == 0, evaluated.output
    assert "held-out rows, scored before the refit" in " ".join(evaluated.output.split())
    metrics = json.loads((tmp_path / "e" / "report.json").read_text())["metrics"]
    assert metrics["auc_c"] == record["evaluation"]["auc_c"] and metrics["customers"] == 40
    kept = _invoke("incentive", "train", *graph, "--model", "lr", "--out", tmp_path / "k", "--no-refit")
    assert kept.exit_code == 0 and "refit on all" not in kept.output
    assert json.loads((tmp_path / "k" / "config.json").read_text())["refit"] is False


def test_the_value_commands_refit_and_evaluate_reports_the_metrics_scored_before(tmp_path):
    import json

    from promokit.experiments.value.world import make_world, write_world

    write_world(make_world(300, seed=5), tmp_path / "w")
    train = ["value", "train", "--data", tmp_path / "w", "--model", "hurdle", "--params", '{"n_trees": 40}']
    trained = _invoke(*train, "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    output = " ".join(trained.output.split())
    assert "refit on all 1,488 deliveries with n_trees" in output and "held out before the refit: auc" in output
    record = json.loads((tmp_path / "m" / "config.json").read_text())["split"]["refit"]
    evaluated = _invoke("value", "evaluate", "--model", tmp_path / "m", "--data", tmp_path / "w", "--out", tmp_path / "e")
    assert evaluated.exit_code == 0, evaluated.output
    assert "scored before the refit" in " ".join(evaluated.output.split())
    metrics = json.loads((tmp_path / "e" / "report.json").read_text())["metrics"]
    assert metrics["auc"] == record["evaluation"]["auc"]
    kept = _invoke(*train, "--out", tmp_path / "k", "--no-refit")
    assert kept.exit_code == 0 and "refit on all" not in kept.output
    selected = _invoke("value", "evaluate", "--model", tmp_path / "k", "--data", tmp_path / "w", "--out", tmp_path / "f")
    assert selected.exit_code == 0 and "calibration per fund" in selected.output
    assert json.loads((tmp_path / "f" / "report.json").read_text())["metrics"]["auc"] == pytest.approx(metrics["auc"])

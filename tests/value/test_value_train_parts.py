"""``value train`` over a dataset in parts: encoders reduced from per-part counts equal a one-process fit, the split
holds out the rows one folder would, training part by part learns and resumes, two DDP workers on Ray Train
reach the AUC of one, and bad parts are one-line errors naming the file."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from conftest import TrainsOnce, write_value_parts
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.value.world import make_world
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig
from promokit.value.contract import read_folder, table_paths
from promokit.value.estimator import TEST, TRAIN, VALID, ValueModel
from promokit.value.inputs import InputEncoders
from promokit.value.parts import _plan, train_parts

torch.set_num_threads(1)
runner = CliRunner()
SMALL = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "max_len": 12}
QUICK = TrainConfig(epochs=3, batch_size=256, lr=3e-3, patience=10, progress=False)
PART_USERS = [30, 0, 620, 550]  # the first part's 30 users hold ≤ 30 'points': inferred alone, a categorical column


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A 1,200-user world as ``parts/`` and as ``whole/`` (each table its parts concatenated, one file); its users
    have an integer column of 300 values (numeric on the whole table)."""
    root = tmp_path_factory.mktemp("value-train-parts")
    world = make_world(1200, seed=3)
    world.users["points"] = np.random.default_rng(0).integers(0, 300, len(world.users))
    return write_value_parts(world, root, PART_USERS)


@pytest.mark.parametrize("how", ["time", "random"])
def test_encoders_and_split_from_part_counts_equal_a_one_process_fit(data, tmp_path, how):
    estimator = ValueModel("esdpm-ncg", SMALL, QUICK, split=how)
    job, counts = _plan(estimator, table_paths(data / "parts"), LocalExecutor(), tmp_path / "keys", False)
    tables = read_folder(data / "whole")
    train, valid, test = estimator.split_rows(tables)
    assert counts == {"train": len(train), "valid": len(valid), "test": len(test)}
    assert estimator.holdout_ == {"test_fraction": 0.1, "valid_fraction": 0.1, "how": how, "seed": QUICK.seed,
                                  "rows": len(tables.deliveries), "held_out": len(test)}
    assert np.array_equal(estimator.held_out(tables), test)  # evaluate finds them in the tables read whole
    roles = np.concatenate([job.train_rows.split.roles(part_tables.time, offset) for part_tables, offset in
                            zip(_part_tables(data, estimator), job.train_rows.offsets)])
    for role, rows in ((TRAIN, train), (VALID, valid), (TEST, test)):
        assert np.flatnonzero(roles == role).tolist() == rows.tolist()

    local = InputEncoders.fit(tables, estimator.max_len, rows=train, graph=False)
    assert estimator.feature_specs_ == {"context": tables.context_spec, "users": tables.user_spec,
                                        "funds": tables.fund_spec}
    assert "points" in tables.user_spec.numeric
    got, expected = estimator.encoders_.to_dict(), local.to_dict()
    assert set(got) == set(expected) == {"context", "users", "funds", "actions", "max_len"}
    for name in ("context", "users", "funds"):
        assert got[name]["categorical"] == expected[name]["categorical"], name
        for column, enc in expected[name]["numeric"].items():
            assert got[name]["numeric"][column] == pytest.approx(enc, rel=1e-12), (name, column)
    assert got["actions"] == expected["actions"]

    one = ValueModel("esdpm-ncg", SMALL, QUICK, split=how, refit=False).fit(tables)  # _plan is the selection's
    assert estimator.amount_start_.converted == one.amount_start_.converted
    assert (estimator.amount_start_.mean, estimator.amount_start_.spread, estimator.amount_start_.overall) == \
        pytest.approx((one.amount_start_.mean, one.amount_start_.spread, one.amount_start_.overall), rel=1e-5)


def test_a_type_given_holds_over_the_parts_as_on_the_whole_table(data, tmp_path):
    """'points' (300 integers over every part: numeric when inferred) given categorical stays so whatever the values
    over the parts say, and is recorded in the spec, as read_folder gives it on the whole table."""
    estimator = ValueModel("esdpm-ncg", SMALL, QUICK)
    types = {"points": "categorical", "hour": "numeric"}
    _plan(estimator, table_paths(data / "parts"), LocalExecutor(), tmp_path / "keys", False, types)
    tables = read_folder(data / "whole", types=types)
    assert estimator.feature_specs_ == {"context": tables.context_spec, "users": tables.user_spec,
                                        "funds": tables.fund_spec}
    assert "points" in tables.user_spec.categorical and tables.user_spec.types == {"points": "categorical"}
    assert "hour" in tables.context_spec.numeric and tables.context_spec.types == {"hour": "numeric"}

def _part_tables(data, estimator):
    from promokit.value.part_tables import dataset_parts, read_part_tables

    return [read_part_tables(part, estimator.feature_specs_, require_labels=True)
            for part in dataset_parts(table_paths(data / "parts"))]


def test_training_part_by_part_learns_and_resumes_exactly(data, tmp_path):
    paths = table_paths(data / "parts")

    def fit(epochs, **kwargs):  # the selected model, scored on the deliveries it held out
        estimator = ValueModel("esdpm-ncg", SMALL, TrainConfig(**{**QUICK.to_dict(), "epochs": epochs}), refit=False)
        train_parts(estimator, paths, LocalExecutor(), tmp_path / "keys", **kwargs)
        return estimator

    straight = fit(3)
    assert straight.history_.epochs[-1]["valid_auc"] > 0.65
    fit(1, checkpoint_dir=tmp_path / "ck")
    resumed = fit(3, checkpoint_dir=tmp_path / "ck", resume=True)
    assert [e["epoch"] for e in resumed.history_.epochs] == [0, 1, 2]
    for (name, a), b in zip(straight.net_.state_dict().items(), resumed.net_.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    tables = read_folder(data / "whole")
    test = straight.split_rows(tables)[2]
    from promokit.metrics import auc

    assert auc(tables.convert[test], straight.predict(tables, rows=test).p_ctcvr.to_numpy()) > 0.65


def test_over_parts_the_refit_trains_on_every_delivery_and_evaluate_says_so(data, tmp_path):
    """By default the selected model is trained over the parts again on every delivery, training, validation and
    held-out, for the epochs it kept; refit=False keeps the selected model; no held-out metrics are kept, and
    evaluate warns that the deliveries it scores were learnt."""
    from promokit.data.ids import id_hashes
    from promokit.value.workflows import evaluate

    paths, tables = table_paths(data / "parts"), read_folder(data / "whole")
    model, selected = ValueModel("esdpm-ncg", SMALL, QUICK), ValueModel("esdpm-ncg", SMALL, QUICK, refit=False)
    counts = train_parts(model, paths, LocalExecutor(), tmp_path / "keys")
    train_parts(selected, paths, LocalExecutor(), tmp_path / "keys")
    assert model.history_.epochs[-1]["valid_auc"] == selected.history_.epochs[-1]["valid_auc"]  # the same selection
    refit = model.holdout_["refit"]
    assert refit["rows"] == counts["train"] + counts["valid"] + counts["test"] == len(tables.deliveries)
    assert refit["epochs"] == selected.history_.best_epoch + 1 and refit["evaluation"] is None
    assert np.array_equal(model.training_ids_, id_hashes(tables.deliveries["user_id"].to_numpy()))
    assert "refit" not in selected.holdout_ and len(selected.training_ids_) < len(model.training_ids_)
    weights = zip(model.net_.state_dict().values(), selected.net_.state_dict().values())
    assert not all(torch.equal(a, b) for a, b in weights)
    with pytest.warns(UserWarning, match="refit on every row, the held-out ones too, over parts"):
        result = evaluate(model, data / "whole")
    assert result.table is not None and "before the refit" not in result.title


@pytest.mark.parametrize("validation, words", [
    ([1, 2], "deliveries in parts have no row positions"),
    ("2024-03-01", "validates on a fraction of its deliveries"),
    (pd.DataFrame({"user_id": [1]}), "the validation deliveries belong in its parts"),
    (-0.1, "a fraction must be in [0, 1)"),
])
def test_deliveries_in_parts_read_validation_as_every_domain_does(data, tmp_path, validation, words):
    with pytest.raises(DataError) as error:
        train_parts(ValueModel("esdpm-ncg", SMALL, QUICK), table_paths(data / "parts"), LocalExecutor(),
                    tmp_path / "keys", validation=validation)
    message = str(error.value)
    assert message.startswith("`validation`") and words in message and "\n" not in message


def test_a_refit_over_parts_that_cannot_run_keeps_the_selected_model_with_one_warning(data, tmp_path):
    model = ValueModel("esdpm-ncg", SMALL, TrainConfig(**{**QUICK.to_dict(), "epochs": 1}))
    with pytest.warns(UserWarning) as caught:
        train_parts(model, table_paths(data / "parts"), TrainsOnce(), tmp_path / "keys")
    refits = [str(w.message) for w in caught if "refit" in str(w.message)]
    assert refits == ["the refit on every row failed, so the selected model is kept: the executor is gone"]
    assert "refit" not in model.holdout_ and model.holdout_["held_out"] == model.report_.n_test > 0


def test_two_ddp_workers_on_ray_train_like_one(ray_cluster, data, tmp_path):
    """The CLI on the 2-node cluster with 2 workers against the same loop in this process; the model directories
    evaluate on the one-folder tables (the same held-out deliveries) and score a dataset in parts. As selected
    (--no-refit): the refit over parts is checked in one process below, and on Ray Train by the incentive's test."""
    args = ["value", "train", "--data", data / "parts", "--model", "esdpm-ncg", "--epochs", 3, "--batch-size", 256,
            "--lr", 3e-3, "--monitor", "auc", "--params", json.dumps(SMALL), "--no-refit"]
    one = _invoke(*args, "--out", tmp_path / "one")
    assert one.exit_code == 0, one.output
    two = _invoke(*args, "--out", tmp_path / "two", "--executor", "ray", "--address", ray_cluster.address,
                  "--workers", 2)
    assert two.exit_code == 0, two.output
    assert "model written to" in two.output and not (tmp_path / ".two.checkpoint").exists()
    auc = {}
    for name in ("one", "two"):
        assert len(json.loads((tmp_path / name / "history.json").read_text())["epochs"]) == 3
        assert "refit" not in json.loads((tmp_path / name / "config.json").read_text())["split"]
        result = _invoke("value", "evaluate", "--model", tmp_path / name, "--data", data / "whole", "--out",
                         tmp_path / f"eval-{name}")
        assert result.exit_code == 0, result.output
        auc[name] = json.loads((tmp_path / f"eval-{name}" / "report.json").read_text())["metrics"]["auc"]
    assert auc["one"] > 0.65 and abs(auc["two"] - auc["one"]) < 0.03, auc
    result = _invoke("value", "predict", "--model", tmp_path / "two", "--data", data / "parts", "--out",
                     tmp_path / "scores")
    assert result.exit_code == 0, result.output


def test_a_graph_model_without_payments_in_parts_is_a_one_line_error(data, tmp_path):
    """(esdpm over parts with the payments: tests/value/test_value_graph_parts.py.)"""
    shutil.copytree(data / "parts", tmp_path / "parts", ignore=shutil.ignore_patterns("consumption"))
    result = _invoke("value", "train", "--data", tmp_path / "parts", "--model", "esdpm", "--out", tmp_path / "m")
    assert result.exit_code == 2 and "Traceback" not in result.output
    line = " ".join(result.output.split())
    assert line.startswith("error: model 'esdpm' reads the consumption graph: give the consumption/ parts") and \
        "esdpm-ncg" in line
    assert len(result.output.strip().splitlines()) <= 3  # one line, wrapped at the terminal's width
    result = _invoke("value", "train", "--data", data / "parts", "--model", "hurdle", "--out", tmp_path / "m")
    assert result.exit_code == 2 and "does not train over parts" in " ".join(result.output.split())


def _edit(table, k, edit):
    def spoil(folder):
        path = folder / table / f"part-{k:05d}.parquet"
        edit(pd.read_parquet(path)).to_parquet(path, index=False)
        return path
    return spoil


def _set(column, value, row=3):
    def edit(frame):
        if isinstance(value, str):  # a text column, as a Parquet part holds one
            frame[column] = frame[column].astype(str)
        frame.loc[row, column] = value
        return frame
    return edit


def _only_rows(n):
    """Every deliveries part emptied but the first ``n`` rows of part 2."""
    def spoil(folder):
        for path in sorted((folder / "deliveries").glob("*.parquet")):
            frame = pd.read_parquet(path)
            frame.iloc[:n if path.name == "part-00002.parquet" else 0].to_parquet(path, index=False)
        return folder / "deliveries"
    return spoil


def _drop_part(folder):
    (folder / "behaviors" / "part-00003.parquet").unlink()
    return folder / "behaviors"


@pytest.mark.parametrize("spoil, message", [
    (_edit("deliveries", 2, lambda f: f.drop(columns="channel")), "'channel'"),
    (_edit("users", 3, _set("tenure_days", "abc")), "'tenure_days' has 1 non-numeric"),
    (_edit("deliveries", 3, _set("amount", np.nan)), "'amount' must hold finite numbers"),
    (_edit("deliveries", 2, _set("time", pd.NaT)), "'time' has 1 missing or unreadable"),
    (_only_rows(1), "all 1 rows are at or after"),
    (_only_rows(0), "no deliveries in its 4 parts"),
    (_drop_part, "3 parts, but"),
])
def test_bad_parts_are_one_line_errors_naming_the_file(data, tmp_path, spoil, message):
    folder = tmp_path / "parts"
    shutil.copytree(data / "parts", folder)
    named = spoil(folder)
    result = _invoke("value", "train", "--data", folder, "--model", "esdpm-ncg", "--out", tmp_path / "m",
                     "--epochs", 1, "--params", json.dumps(SMALL))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = " ".join(result.output.split())  # rich wraps at the terminal's width
    assert line.startswith("error: ") and str(named) in line and message in line, line


def test_one_converting_delivery_is_a_one_line_error(data, tmp_path):
    folder = tmp_path / "parts"
    shutil.copytree(data / "parts", folder)
    _only_rows(1)(folder)
    result = _invoke("value", "train", "--data", folder, "--model", "esdpm-ncg", "--out", tmp_path / "m",
                     "--test-fraction", 0, "--validation", 0)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "'convert' is 0 on all 1 rows" in " ".join(result.output.split())


def test_labels_under_other_names_train_over_parts_and_the_model_keeps_the_mapping(data, tmp_path):
    """--label maps a label column of every part; the model learns what it learns from the contract names, keeps
    the mapping, and evaluate and predict on the same tables need no --label."""
    renamed = tmp_path / "renamed"
    shutil.copytree(data, renamed)
    for path in [*(renamed / "parts" / "deliveries").glob("*.parquet"), renamed / "whole" / "deliveries.parquet"]:
        pd.read_parquet(path).rename(columns={"convert": "bought"}).to_parquet(path, index=False)
    train = ["value", "train", "--model", "esdpm-ncg", "--epochs", 1, "--params", json.dumps(SMALL)]
    plain = _invoke(*train, "--data", data / "parts", "--out", tmp_path / "plain")
    mapped = _invoke(*train, "--data", renamed / "parts", "--out", tmp_path / "mapped", "--label", "convert=bought")
    assert plain.exit_code == 0 and mapped.exit_code == 0, mapped.output
    config = {name: json.loads((tmp_path / name / "config.json").read_text()) for name in ("plain", "mapped")}
    assert config["mapped"]["labels"] == {"convert": "bought"} and config["plain"]["labels"] is None
    assert config["mapped"]["split"] == config["plain"]["split"]
    assert (tmp_path / "mapped" / "encoder.json").read_text() == (tmp_path / "plain" / "encoder.json").read_text()
    losses = [[{k: v for k, v in epoch.items() if "second" not in k}
               for epoch in json.loads((tmp_path / name / "history.json").read_text())["epochs"]]
              for name in ("plain", "mapped")]
    assert losses[0] == losses[1]

    evaluated = _invoke("value", "evaluate", "--model", tmp_path / "mapped", "--data", renamed / "whole", "--out",
                        tmp_path / "eval")
    assert evaluated.exit_code == 0, evaluated.output
    assert json.loads((tmp_path / "eval" / "report.json").read_text())["metrics"]["deliveries"] == \
        config["mapped"]["split"]["held_out"]
    predicted = _invoke("value", "predict", "--model", tmp_path / "mapped", "--data", renamed / "parts", "--out",
                        tmp_path / "scores")
    assert predicted.exit_code == 0, predicted.output
    refused = _invoke(*train, "--data", renamed / "parts", "--out", tmp_path / "m", "--label", "convert=purchased")
    assert refused.exit_code == 2 and "--label convert=purchased: column 'purchased' is missing" in refused.output
    assert "part-00000.parquet" in " ".join(refused.output.split())  # the error names the part's file

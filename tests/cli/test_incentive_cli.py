"""``promokit incentive …`` from the command line: the whole path to `allocate budget`, and bad inputs."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app

runner = CliRunner()
NET = '{"width": 8, "hidden": [16, 8], "fanouts": [4, 4], "emb_dim": 4}'


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("incentive") / "world"
    result = _invoke("incentive", "synth", "--out", folder, "--customers", 1500, "--merchants", 150, "--seed", 4)
    assert result.exit_code == 0, result.output
    return folder


def _tables(folder, customers=None):
    return ["--customers", customers or folder / "customers.parquet", "--merchants", folder / "merchants.parquet",
            "--edges", folder / "edges.parquet"]


@pytest.fixture(scope="module")
def models(world):
    paths = {}
    for name in ("gnn-hazard", "sbbm"):
        paths[name] = world.parent / name
        result = _invoke("incentive", "train", *_tables(world), "--model", name, "--out", paths[name], "--epochs", 2,
                         "--params", NET)
        assert result.exit_code == 0, result.output
    return paths


def test_train_predict_allocate_evaluate_simulate(world, models, tmp_path):
    scores = tmp_path / "scores"
    result = _invoke("incentive", "predict", "--model", models["gnn-hazard"], *_tables(world), "--out", scores)
    assert result.exit_code == 0, result.output
    customers = pd.read_parquet(scores / "customers.parquet")
    assert list(customers.columns) == ["user_id", *[f"score_{v}" for v in (20, 40, 60, 80, 100, 120, 150, 200)]]
    plan = tmp_path / "plan"
    result = _invoke("allocate", "budget", "--scores", scores / "customers.parquet", "--merchants",
                     scores / "merchants.parquet", "--ratio", 90, "--out", plan)
    assert result.exit_code == 0, result.output

    result = _invoke("incentive", "evaluate", "--model", models["gnn-hazard"], *_tables(world), "--out",
                     tmp_path / "eval", "--truth", world / "truth_customers.parquet")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert report["metrics"]["customers"] == 150 and 0.5 < report["metrics"]["auc_c"] <= 1
    assert (tmp_path / "eval" / "response_curves.png").exists()
    by_level = pd.DataFrame(report["uplift_by_level"])
    assert by_level.level.tolist() == [40, 60, 80, 100, 120, 150, 200]
    assert by_level[["auuc", "qini_coefficient", "true_auuc"]].notna().all().all()
    assert (by_level.treated > 0).all() and (by_level.control == by_level.control[0]).all()
    assert report["metrics"]["auuc"] == pytest.approx(by_level.auuc.mean())
    assert (tmp_path / "eval" / "uplift_curves.png").exists()

    result = _invoke("incentive", "simulate", "--world", world, "--model", models["gnn-hazard"], "--model",
                     models["sbbm"], "--ratio", 90, "--out", tmp_path / "sim")
    assert result.exit_code == 0, result.output
    rows = pd.DataFrame(json.loads((tmp_path / "sim" / "report.json").read_text())["rows"])
    assert {"oracle", "random"} <= set(rows.model) and (rows[rows.budget == "paced"].true_ratio <= 90 + 1e-6).all()


@pytest.mark.parametrize("change, message", [
    (lambda f: f[f.level == f.level.iloc[0]], "labelled rows was offered the level"),
    (lambda f: f.assign(redeemed=float("nan")), "has no value in 1500 rows (1500 missing)"),
    (lambda f: f.assign(redeemed="yes"), "must be 0/1"),
    (lambda f: f.assign(level=float("inf")), "infinite"),
    (lambda f: f.iloc[:0], "the table has no rows"),
    (lambda f: f.rename(columns={"c_x1": "c_x0"}), "appear more than once"),
])
def test_bad_customer_tables_exit_2_with_one_line(world, tmp_path, change, message):
    bad = tmp_path / "customers.csv"
    change(pd.read_parquet(world / "customers.parquet")).to_csv(bad, index=False)
    result = _invoke("incentive", "train", *_tables(world, bad), "--out", tmp_path / "m", "--epochs", 1)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_bad_options_exit_2(world, models, tmp_path):
    for args, message in ((("incentive", "train", *_tables(world), "--out", tmp_path / "m", "--levels", "20,x"), "--levels"),
                          (("incentive", "train", *_tables(world), "--out", tmp_path / "m", "--model", "gcn"), "unknown model"),
                          (("incentive", "train", *_tables(world), "--out", tmp_path / "m", "--validation", 1.5),
                           "--validation: a fraction must be in [0, 1) (0: no validation), got 1.5"),
                          (("incentive", "bench", "--seeds", "a"), "--seeds"),
                          (("incentive", "predict", "--model", tmp_path / "none", *_tables(world), "--out", tmp_path / "s"),
                           "not a promokit model directory")):
        result = _invoke(*args)
        assert result.exit_code == 2 and message in result.output, result.output


def test_demo_writes_the_report(tmp_path):
    out = tmp_path / "demo"
    result = _invoke("incentive", "demo", "--out", out, "--customers", 800, "--merchants", 80, "--models", "gnn-hazard,sbbm")
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert {r["model"] for r in report["results"]} == {"lr", "gnn-hazard", "sbbm", "oracle"}
    assert (out / "response_curves.png").exists() and "Allocation at the same budget" in (out / "report.md").read_text()
    assert "RelaImpr auc_c vs lr" in (out / "report.md").read_text() and "RelaImpr" in result.output
    assert [r["epochs"] for r in report["results"] if r["model"] == "lr"] == [0]  # solved, not trained by epochs


def test_customers_with_an_empty_redeemed_cell_train_as_unlabelled_nodes(world, tmp_path):
    customers = pd.read_parquet(world / "customers.parquet")
    customers.loc[customers.index % 4 == 0, "redeemed"] = None
    path = tmp_path / "customers.csv"
    customers.to_csv(path, index=False)  # an empty cell
    result = _invoke("incentive", "train", *_tables(world, path), "--model", "lr", "--out", tmp_path / "m")
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "375 customers without a label (in the graph, not in the loss)" in output
    # a tenth of the 1,125 labelled customers and of the merchants
    assert "held out for evaluate: 113 of 1,125 labelled customers and 15 of 150 merchants (drawn at random" in output


def test_train_prints_the_feature_types_and_numeric_overrides_an_inferred_categorical(world, tmp_path):
    customers = pd.read_parquet(world / "customers.parquet")
    path = tmp_path / "customers.parquet"
    customers.assign(c_age=customers.index % 50 + 18).to_parquet(path)  # 50 integers: inferred categorical
    train = ("incentive", "train", *_tables(world, path), "--model", "dnn", "--epochs", 1)
    result = _invoke(*train, "--out", tmp_path / "inferred")
    assert result.exit_code == 0, result.output
    assert ("customers features: categorical (2) c_segment, c_age; numeric (6) c_x0, c_x1, c_x2, c_x3, c_x4, c_x5"
            in result.output)
    assert "merchants features: categorical (1) m_category; numeric (4) m_x0, m_x1, m_x2, m_x3" in result.output
    result = _invoke(*train, "--out", tmp_path / "given", "--numeric", "c_age")
    assert result.exit_code == 0, result.output
    assert "customers features: categorical (1) c_segment; numeric (7) c_x0" in result.output
    spec = json.loads((tmp_path / "given" / "config.json").read_text())["customer_spec"]
    assert spec["numeric"][-1] == "c_age" and spec["types"] == {"c_age": "numeric"}
    for args, message in ((["--categorical", "c_ag"], "column 'c_ag' (given the type categorical) is in none of the "
                                                      "tables customers, merchants; did you mean 'c_age'?"),
                          (["--numeric", "redeemed"], "column 'redeemed' is given the type numeric, but it is a label")):
        result = _invoke(*train, "--out", tmp_path / "bad", *args)
        assert result.exit_code == 2 and message in result.output, result.output


def test_label_maps_the_redeemed_column_and_the_error_names_the_option(world, tmp_path):
    path = tmp_path / "customers.parquet"
    pd.read_parquet(world / "customers.parquet").rename(columns={"redeemed": "converted"}).to_parquet(path)
    train = ["incentive", "train", *_tables(world, path), "--model", "lr", "--out", tmp_path / "m"]
    refused = _invoke(*train)
    assert refused.exit_code == 2 and ("customers: column 'redeemed' (label 'redeemed') is missing from the table of "
                                       "1500 rows. Map the column that holds it: --label redeemed=<column>."
                                       in " ".join(refused.output.split()))
    assert _invoke(*train, "--label", "redeemed=converted").exit_code == 0
    evaluate = ["incentive", "evaluate", "--model", tmp_path / "m", *_tables(world, path), "--out", tmp_path / "e"]
    evaluated = _invoke(*evaluate, "--label", "redeemed=converted")
    assert evaluated.exit_code == 0, evaluated.output
    # the model keeps the mapping train was given: the same tables need no --label again
    again = _invoke(*evaluate)
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "e" / "report.json").read_text())["metrics"]["customers"] == 150


def test_truth_of_other_customers_is_refused_under_its_option(world, models, tmp_path):
    truth = tmp_path / "truth.parquet"
    pd.read_parquet(world / "truth_customers.parquet").iloc[::-1].to_parquet(truth)
    result = _invoke("incentive", "evaluate", "--model", models["sbbm"], *_tables(world), "--out", tmp_path / "e",
                     "--truth", truth)
    assert result.exit_code == 2, result.output
    assert (f"--truth {truth}: its customer_id column does not match the customers table row by row"
            in " ".join(result.output.split()))


def test_train_defaults_are_the_estimators():
    """The options that become IncentiveModel's parameters or fit's arguments default to the library's values."""
    import inspect

    import typer.main

    from promokit.cli.incentive import LABEL_ROLES, app as incentive
    from promokit.incentive.contract import LABELS
    from promokit.incentive.defaults import DEFAULT_TRAIN
    from promokit.incentive.estimator import IncentiveModel, validation_fraction

    options = {param.name: param for param in typer.main.get_command(incentive).commands["train"].params}
    model = inspect.signature(IncentiveModel.__init__).parameters
    fit = inspect.signature(IncentiveModel.fit).parameters
    assert options["model"].default == model["model"].default
    assert options["test_fraction"].default == model["test_fraction"].default
    assert validation_fraction(options["validation"].default) == validation_fraction(fit["validation"].default)
    assert options["resume"].default == fit["resume"].default
    assert sorted(LABEL_ROLES) == sorted(LABELS)  # --label's roles are the contract's
    # the training settings: not given, the estimator's (train=None), which --help shows
    assert model["train"].default is None and IncentiveModel().train_config == DEFAULT_TRAIN
    assert options["seed"].default == DEFAULT_TRAIN.seed
    flags = ("epochs", "batch_size", "lr", "lr_decay", "patience", "monitor")
    assert all(options[name].default is None for name in flags)
    assert {name: options[name].show_default for name in flags} == {
        **{name: f"{getattr(DEFAULT_TRAIN, name):g}" for name in flags[:-1]}, "monitor": DEFAULT_TRAIN.monitor}

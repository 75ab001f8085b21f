"""``promokit value …`` from the command line: synth → train → predict → allocate quota → evaluate, and bad
inputs as one-line errors."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app

runner = CliRunner()
NET = ('{"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "fanouts": [4, 4], '
       '"max_len": 10}')


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("value") / "world"
    result = _invoke("value", "synth", "--out", folder, "--users", 600, "--seed", 2)
    assert result.exit_code == 0, result.output
    return folder


@pytest.fixture(scope="module")
def model(world):
    path = world.parent / "esdpm"
    # the selected model, not refit on every delivery: evaluate's whole report (deciles, funds) and predict's note on
    # the behaviours after the training cut need a model that has not learnt the held-out, latest deliveries
    # (the refit: tests/training/test_refit.py)
    result = _invoke("value", "train", "--data", world, "--out", path, "--epochs", 1, "--params", NET, "--no-refit")
    assert result.exit_code == 0, result.output
    assert "held out for evaluate" in result.output
    return path


@pytest.mark.extra("allocation")
def test_train_predict_allocate_evaluate(world, model, tmp_path):
    scores = tmp_path / "scores"
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", scores)
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(scores / "scores.parquet")
    funds = pd.read_parquet(world / "funds.parquet").fund.tolist()
    assert list(table.columns) == ["user_id", *[f"score_{f}" for f in funds], "tolerance"] and len(table) == 600
    assert len(pd.read_parquet(scores / "deliveries.parquet")) == len(pd.read_parquet(world / "deliveries.parquet"))
    plan = tmp_path / "plan"
    result = _invoke("allocate", "quota", "--scores", scores / "scores.parquet", "--quotas", world / "quotas.csv",
                     "--out", plan)
    assert result.exit_code == 0, result.output

    result = _invoke("value", "evaluate", "--model", model, "--data", world, "--out", tmp_path / "eval")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert {"auc", "logloss", "mse", "mae", "gini", "thc", "tha", "best_differs", "uplift_spread",
            "etv_bias"} <= set(report["metrics"])
    assert len(report["deciles"]) == 10 and (tmp_path / "eval" / "deciles.png").exists()
    # the floor, fitted on the deliveries the model trained on, beside it; the calibration per fund
    floor, metrics = report["floor"], report["metrics"]
    assert set(floor) == set(metrics) and floor["deliveries"] == metrics["deliveries"]
    funds = pd.DataFrame(report["funds"])
    assert funds.deliveries.sum() == report["metrics"]["deliveries"]
    bought = funds.mean_observed > 0
    assert np.allclose(funds.ratio[bought], funds.mean_predicted[bought] / funds.mean_observed[bought])
    assert funds.ratio[~bought].isna().all()
    assert "relaimpr_vs_floor" in result.output and "calibration per fund" in result.output


def _copy(world, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(world, folder)
    return folder


@pytest.mark.parametrize("table, change, message", [
    ("deliveries", lambda f: f.iloc[:1], "'convert' is 0 on all 1 rows"),
    ("deliveries", lambda f: f.assign(amount="lots"), "finite numbers ≥ 0"),
    ("deliveries", lambda f: f.iloc[:0], "the table has no rows"),
    ("deliveries", lambda f: f.assign(click=2), "must be 0/1"),
    ("deliveries", lambda f: f.assign(click=0), "(--repair-labels sets the conversion or the amount to 0)"),
    ("users", lambda f: f.iloc[:10], "not in the users table"),
    ("funds", lambda f: f.assign(risk="high"), "must hold whole numbers"),
    ("behaviors", lambda f: f.drop(columns="action"), "column 'action'"),
])
def test_bad_tables_exit_2_with_one_line(world, tmp_path, table, change, message):
    folder = _copy(world, tmp_path)
    (folder / f"{table}.parquet").unlink()
    change(pd.read_parquet(world / f"{table}.parquet")).to_csv(folder / f"{table}.csv", index=False)
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--epochs", 1, "--params", NET)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_folder_errors(world, tmp_path):
    result = _invoke("value", "train", "--data", tmp_path / "nowhere", "--out", tmp_path / "m")
    assert result.exit_code == 2 and "not a folder" in result.output
    folder = _copy(world, tmp_path)
    (folder / "funds.parquet").unlink()
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m")
    assert result.exit_code == 2 and "has no funds.parquet (or .csv, or funds/ of parts)" in result.output
    pd.read_parquet(world / "funds.parquet").to_csv(folder / "funds.csv", index=False)
    pd.read_parquet(world / "funds.parquet").to_parquet(folder / "funds.parquet")
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m")
    assert result.exit_code == 2 and "keep one" in result.output


def test_model_and_option_errors(world, model, tmp_path):
    result = _invoke("value", "train", "--data", world, "--out", tmp_path / "m", "--model", "esdmp")
    assert result.exit_code == 2 and "unknown model 'esdmp'" in result.output
    result = _invoke("value", "predict", "--model", world, "--data", world, "--out", tmp_path / "p")
    assert result.exit_code == 2 and "not a promokit model directory" in result.output
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p", "--contexts", 0)
    assert result.exit_code == 2 and "--contexts must be at least 1" in result.output
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p", "--at", "soon")
    assert result.exit_code == 2 and "--at must be a date" in result.output


def test_two_part_is_the_deprecated_name_of_the_hurdle(world, tmp_path):
    from promokit.cli.value import _models

    result = _invoke("value", "train", "--data", world, "--out", tmp_path / "m", "--model", "two-part")
    assert result.exit_code == 0, result.output
    assert [line for line in result.output.splitlines() if "deprecated" in line] == [
        "warning: --model two-part is deprecated: the same model is now hurdle"]
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model"] == "hurdle"
    with pytest.warns(FutureWarning, match="^--models two-part is deprecated: the same model is now hurdle$"):
        assert _models("two-part,esdpm") == ["hurdle", "esdpm"]


@pytest.mark.extra("allocation")
def test_simulate_scores_plans_by_the_true_model(world, model, tmp_path):
    result = _invoke("value", "simulate", "--world", world, "--model", model, "--out", tmp_path / "sim",
                     "--allocators", "ha,prices")
    assert result.exit_code == 0, result.output
    rows = pd.DataFrame(json.loads((tmp_path / "sim" / "report.json").read_text())["rows"])
    assert set(rows.allocator) == {"ha", "prices"} and "oracle" in set(rows.model)
    oracle = rows[rows.model == "oracle"].set_index("allocator").expected_tapmd
    mine = rows[rows.model != "oracle"].set_index("allocator").expected_tapmd
    assert (oracle >= mine * 0.999).all()  # the true ETV's plan is the best plan under the true ETV (prices is exact)
    folder = _copy(world, tmp_path)  # a truth that does not cover the tables' users
    truth = pd.read_parquet(world / "truth_etv.parquet")
    truth[truth.user_id != truth.user_id.iloc[0]].to_parquet(folder / "truth_etv.parquet")
    result = _invoke("value", "simulate", "--world", folder, "--model", model, "--out", tmp_path / "sim2")
    assert result.exit_code == 2 and "simulate on the world the tables come from" in result.output


@pytest.mark.extra("allocation")
def test_bench_writes_the_tables_and_the_decile_figure(tmp_path):
    result = _invoke("value", "bench", "--models", "esdpm,esmm", "--seeds", "0", "--users", 300, "--epochs", 1,
                     "--params", NET, "--out", tmp_path / "bench")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "bench" / "report.json").read_text())
    metrics = pd.DataFrame(report["results"])
    assert list(metrics.model) == ["hurdle", "esdpm", "esmm", "oracle"]  # the floor first, always
    oracle = metrics.set_index("model").loc["oracle"]
    assert oracle.etv_mae_true == 0 and oracle.etv_bias_true == 0 and oracle.fund_bias_true == 0
    assert metrics.best_differs.between(0, 1).all()
    assert np.isnan(metrics.set_index("model").loc["esmm", "etv_bias_true"])  # its ETV is a pCTCVR
    assert "RelaImpr vs hurdle" in (tmp_path / "bench" / "report.md").read_text()
    plans = pd.DataFrame(report["simulation"])
    assert set(plans.allocator) == {"manual", "ha", "prices"}
    assert set(plans.model) == {"hurdle", "esdpm", "esmm", "oracle"}
    assert (tmp_path / "bench" / "deciles.png").exists()


def test_random_split_for_deliveries_sharing_one_time(world, tmp_path):
    folder = _copy(world, tmp_path)
    deliveries = pd.read_parquet(world / "deliveries.parquet")
    deliveries.assign(time=pd.Timestamp("2026-03-15")).to_parquet(folder / "deliveries.parquet")
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--epochs", 1, "--params", NET)
    assert result.exit_code == 2 and "Traceback" not in result.output
    one_line = " ".join(result.output.split())
    assert f"all {len(deliveries):,} rows are at or after 2026-03-15," in one_line and "--split random" in one_line
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--epochs", 1, "--params", NET,
                     "--split", "random")
    assert result.exit_code == 0, result.output
    held = round(0.1 * len(deliveries))
    assert (f"held out for evaluate: {held:,} of {len(deliveries):,} deliveries (drawn at random, seed 0)"
            in " ".join(result.output.split()))
    result = _invoke("value", "evaluate", "--model", tmp_path / "m", "--data", folder, "--out", tmp_path / "e")
    assert result.exit_code == 0, result.output
    held_out = json.loads((tmp_path / "e" / "report.json").read_text())["metrics"]["deliveries"]
    assert held_out == held
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m0", "--epochs", 1, "--params", NET,
                     "--split", "random", "--test-fraction", 0)
    assert result.exit_code == 0 and "held out for evaluate: nothing (--test-fraction 0)" in result.output
    result = _invoke("value", "evaluate", "--model", tmp_path / "m0", "--data", folder, "--out", tmp_path / "e")
    assert result.exit_code == 2 and "the model held nothing out" in result.output and "--all" in result.output
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m2", "--split", "users")
    assert result.exit_code == 2 and "split must be one of ['time', 'random'], got 'users'" in result.output


def test_train_prints_the_feature_types_and_numeric_overrides_an_inferred_categorical(world, tmp_path):
    """age (integers, at most 64 values among 600 users) and hour (24) are inferred categorical; --numeric makes them
    numeric in the printed summary and in config.json."""
    train = ("value", "train", "--data", world, "--model", "mtl-mse", "--epochs", 1, "--params", NET)
    result = _invoke(*train, "--out", tmp_path / "inferred")
    assert result.exit_code == 0, result.output
    assert "deliveries features: categorical (2) channel, hour; numeric (0)" in result.output
    assert "users features: categorical (6) tolerance, age, income_band" in result.output
    result = _invoke(*train, "--out", tmp_path / "given", "--numeric", "age,hour")
    assert result.exit_code == 0, result.output
    assert "deliveries features: categorical (1) channel; numeric (1) hour" in result.output
    assert "given: hour numeric, age numeric" in result.output
    specs = json.loads((tmp_path / "given" / "config.json").read_text())["specs"]
    assert "age" in specs["users"]["numeric"] and specs["users"]["types"] == {"age": "numeric"}
    result = _invoke(*train, "--out", tmp_path / "bad", "--numeric", "fund")
    assert result.exit_code == 2 and "the fund key 'fund' is always a categorical feature" in result.output


def _scores(result, folder):
    assert result.exit_code == 0, result.output
    return pd.read_parquet(folder / "scores.parquet")


@pytest.mark.extra("allocation")
def test_predict_a_campaigns_users_list_for_allocate_quota(world, model, tmp_path):
    users = pd.read_parquet(world / "users.parquet")
    listed = users.sample(40, random_state=0)[["user_id", "tolerance"]].assign(segment="spring")
    listed.to_csv(tmp_path / "campaign.csv", index=False)
    every = _scores(_invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "all"),
                    tmp_path / "all")
    scores = _scores(_invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "some",
                             "--users-list", tmp_path / "campaign.csv"), tmp_path / "some")
    assert scores.user_id.tolist() == listed.user_id.tolist()  # the list's users, in its order, scored as in all
    pd.testing.assert_frame_equal(scores, every.set_index("user_id").loc[listed.user_id].reset_index())
    quotas = pd.read_csv(world / "quotas.csv")  # the campaign's quotas: 40 users, the risk rule kept
    quotas.assign(quota=[int(q) for q in np.diff(np.round(np.cumsum([0, *quotas.quota]) * 40 / quotas.quota.sum()))]
                  ).to_csv(tmp_path / "quotas.csv", index=False)
    result = _invoke("allocate", "quota", "--scores", tmp_path / "some" / "scores.parquet", "--quotas",
                     tmp_path / "quotas.csv", "--method", "exact", "--out", tmp_path / "plan")
    assert result.exit_code == 0, result.output
    assert sorted(pd.read_parquet(tmp_path / "plan" / "plan.parquet").user_id) == sorted(listed.user_id)


@pytest.mark.parametrize("rows, message", [
    (lambda u: u[["user_id"]].head(3).assign(user_id=["u-none", *u.user_id[1:3]]),
     "1 of 3 users that are not in the users table, e.g. row 0 {user_id='u-none'}"),
    (lambda u: pd.concat([u[["user_id"]].head(2)] * 2), "repeats 4 of 4 rows"),
    (lambda u: u[["user_id"]].head(2).rename(columns={"user_id": "customer"}), "'user_id'"),
    (lambda u: u[["user_id"]].head(2).assign(user_id=[None, "u1"]), "1 missing values in 2 rows"),
])
def test_users_list_errors(world, model, tmp_path, rows, message):
    rows(pd.read_parquet(world / "users.parquet")).to_csv(tmp_path / "list.csv", index=False)
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p",
                     "--users-list", tmp_path / "list.csv")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert message in " ".join(result.output.split())


def test_predict_from_users_and_funds_alone(world, model, tmp_path):
    alone = _copy(world, tmp_path)
    (alone / "deliveries.parquet").unlink()
    result = _invoke("value", "predict", "--model", model, "--data", alone, "--out", tmp_path / "p")
    scores = _scores(result, tmp_path / "p")
    assert "no deliveries table" in result.output and not (tmp_path / "p" / "deliveries.parquet").exists()
    assert len(scores) == 600 and np.isfinite(scores.filter(like="score_").to_numpy()).all()
    behaviours = pd.read_parquet(world / "behaviors.parquet")  # by default, as of just after the latest behaviour
    assert f"scored just after the latest event, {behaviours.time.max()}" in " ".join(result.output.split())
    config = json.loads((model / "config.json").read_text())
    assert len(config["contexts"]["channel"]) == 32  # the training contexts the model kept to score without them
    older = tmp_path / "older"  # a model directory written before models kept contexts
    shutil.copytree(model, older)
    config.pop("contexts")
    (older / "config.json").write_text(json.dumps(config))
    result = _invoke("value", "predict", "--model", older, "--data", alone, "--out", tmp_path / "p2")
    assert result.exit_code == 2 and "keeps no contexts" in result.output
    assert "give the deliveries" in " ".join(result.output.split())


def test_predict_says_which_behaviours_the_scoring_time_reads(world, model, tmp_path):
    from promokit.value.scoring import time_text

    behaviours = pd.read_parquet(world / "behaviors.parquet").time.astype("int64")
    latest = pd.read_parquet(world / "deliveries.parquet").time.astype("int64").max()
    until = json.loads((model / "config.json").read_text())["trained_until"]
    unseen = int(((behaviours > until) & (behaviours <= latest)).sum())
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p")
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and unseen > 0
    assert f"the scores read {unseen:,} behaviours later than the deliveries the model was trained on" in said
    assert f"--at '{time_text(until)}'" in said
    result = _invoke("value", "predict", "--model", model, "--data", world, "--out", tmp_path / "p",
                     "--at", time_text(until))
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "warning" not in said
    assert f"{int((behaviours >= until).sum()):,} behaviours at or after {time_text(until)} are not read" in said


def test_a_model_trained_without_behaviours_reads_none_and_says_nothing_of_them(world, tmp_path):
    folder = _copy(world, tmp_path)
    (folder / "behaviors.parquet").unlink()
    result = _invoke("value", "train", "--data", folder, "--out", tmp_path / "m", "--model", "esdpm-ncg",
                     "--epochs", 1, "--params", NET)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "m" / "encoder.json").read_text())["max_len"] == 0
    result = _invoke("value", "predict", "--model", tmp_path / "m", "--data", world, "--out", tmp_path / "p")
    assert result.exit_code == 0 and "behaviours" not in result.output


def test_label_maps_a_delivery_label_to_the_users_column_and_the_error_names_the_option(world, tmp_path):
    folder = _copy(world, tmp_path)
    deliveries = pd.read_parquet(world / "deliveries.parquet")
    deliveries.rename(columns={"convert": "converted"}).to_parquet(folder / "deliveries.parquet")
    train = ["value", "train", "--data", folder, "--out", tmp_path / "m", "--model", "hurdle"]
    refused = _invoke(*train)
    assert refused.exit_code == 2
    assert ("deliveries: column 'convert' (label 'convert') is missing from the table of "
            f"{len(deliveries)} rows; did you mean 'converted'? If it holds the label, map it: --label "
            "convert=converted." in " ".join(refused.output.split()))
    assert _invoke(*train, "--label", "convert=converted").exit_code == 0
    assert json.loads((tmp_path / "m" / "config.json").read_text())["labels"] == {"convert": "converted"}
    evaluated = _invoke("value", "evaluate", "--model", tmp_path / "m", "--data", folder, "--out", tmp_path / "e",
                        "--label", "convert=converted")
    assert evaluated.exit_code == 0, evaluated.output
    remembered = _invoke("value", "evaluate", "--model", tmp_path / "m", "--data", folder, "--out", tmp_path / "e2")
    assert remembered.exit_code == 0, remembered.output  # the model keeps the mapping it was trained with
    assert (json.loads((tmp_path / "e2" / "report.json").read_text())["metrics"] ==
            json.loads((tmp_path / "e" / "report.json").read_text())["metrics"])
    predicted = _invoke("value", "predict", "--model", tmp_path / "m", "--data", folder, "--out", tmp_path / "p")
    assert predicted.exit_code == 0, predicted.output
    wrong = _invoke(*train, "--label", "convert=purchased")
    assert wrong.exit_code == 2 and "--label convert=purchased: column 'purchased' is missing" in wrong.output


def test_the_train_and_predict_defaults_are_the_libraries():
    """Each option of value train that becomes a ValueModel parameter or a fit argument defaults to the library's
    default (None where the library resolves it, its --help showing the value the estimator then takes)."""
    import inspect

    from typer.main import get_command

    from promokit.cli.value import app as value_app
    from promokit.value.estimator import ValueModel

    commands = get_command(value_app).commands
    options = {p.name: p for p in commands["train"].params}
    init, fit = (inspect.signature(f).parameters for f in (ValueModel.__init__, ValueModel.fit))
    for option, parameter in (("model", "model"), ("params", "params"), ("split", "split"),
                              ("test_fraction", "test_fraction"), ("label", "labels")):
        assert options[option].default == init[parameter].default, option
    assert options["validation"].default == fit["validation"].default
    assert options["resume"].default == fit["resume"].default
    model = ValueModel()  # train=None: the estimator's training defaults
    assert f"(default {model.holdout_for()['valid_fraction']:g};" in options["validation"].help
    assert options["seed"].default == model.train_config.seed
    for flag in ("epochs", "batch_size", "lr", "patience"):
        assert options[flag].default is None and float(options[flag].show_default) == getattr(model.train_config, flag)
    assert options["monitor"].default is None and init["train"].default is None
    contexts = next(p for p in commands["predict"].params if p.name == "contexts")
    assert contexts.default == inspect.signature(ValueModel.score_table).parameters["contexts"].default

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from test_voucher_data import fake_amexpert
from promokit.experiments.voucher.world import PROFILE_CATEGORICAL, make_world

runner = CliRunner()
NET = '{"emb_dim": 4, "hidden": [16], "dropout": 0.0, "attention_units": 8}'


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """The synthetic world's three tables as the user would have them: CSV files."""
    folder = tmp_path_factory.mktemp("voucher_tables")
    tables = make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2).tables
    tables.sessions.to_csv(folder / "sessions.csv", index=False)
    tables.events.drop(columns=["session", "pre"]).to_csv(folder / "events.csv", index=False)
    tables.items.to_parquet(folder / "items.parquet", index=False)
    return folder


def _table_args(folder):
    return ["--sessions", folder / "sessions.csv", "--events", folder / "events.csv",
            "--items", folder / "items.parquet", "--categorical", ",".join(PROFILE_CATEGORICAL)]


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_train_predict_evaluate_round_trip(tmp_path, paths):
    model_dir = tmp_path / "din"
    result = _invoke("voucher", "train", *_table_args(paths), "--out", model_dir, "--model", "din",
                     "--epochs", 2, "--params", NET)
    assert result.exit_code == 0, result.output
    assert "best validation auc" in result.output
    assert (model_dir / "weights.safetensors").exists() and (model_dir / "encoder.json").exists()

    assert "held out for evaluate: " in result.output and "sessions (collected from " in result.output

    out = tmp_path / "pred"
    # predict in a fresh interpreter: the model directory and the tables are all it needs; --out is a folder
    done = subprocess.run([sys.executable, "-m", "promokit.cli", "voucher", "predict", "--model", str(model_dir),
                           *map(str, _table_args(paths)), "--out", str(out), "--from", "2024-05-01"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    predictions = pd.read_parquet(out / "predictions.parquet")
    assert json.loads((out / "summary.json").read_text())["rows"] == len(predictions)
    sessions = pd.read_csv(paths / "sessions.csv", parse_dates=["collect_time"])
    assert list(predictions.columns) == ["session_id", "user_id", "voucher_id", "p_redeem"]
    assert len(predictions) == int((sessions.collect_time >= "2024-05-01").sum()) > 0
    assert predictions.p_redeem.between(0, 1).all()

    result = _invoke("voucher", "evaluate", "--model", model_dir, *_table_args(paths), "--out", tmp_path / "eval",
                     "--gauc-by", "voucher_id")
    assert result.exit_code == 0, result.output
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "auc" in report and "gauc" in report
    held_out = json.loads((model_dir / "config.json").read_text())["holdout"]["held_out"]
    assert json.loads((tmp_path / "eval" / "report.json").read_text())["metrics"]["n"] == held_out > 0
    assert f"| n | {held_out} |" in report and re.search(r"\| gauc_groups \| \d+ \|", report)  # counts as counts


def test_label_maps_the_redeemed_column_and_the_error_names_the_option(tmp_path, paths):
    renamed = tmp_path / "sessions.csv"
    pd.read_csv(paths / "sessions.csv").rename(columns={"redeemed": "is_redeemed"}).to_csv(renamed, index=False)
    args = ["--sessions", renamed, *_table_args(paths)[2:]]
    train = ["voucher", "train", *args, "--model", "lr", "--out", tmp_path / "m"]
    refused = _invoke(*train)
    assert refused.exit_code == 2 and ("sessions: column 'redeemed' (label 'redeemed') is missing from the table of "
                                       in refused.output)
    assert "did you mean 'is_redeemed'? If it holds the label, map it: --label redeemed=is_redeemed." in refused.output
    assert _invoke(*train, "--label", "redeemed=is_redeemed").exit_code == 0
    evaluated = _invoke("voucher", "evaluate", "--model", tmp_path / "m", *args, "--label", "redeemed=is_redeemed",
                        "--out", tmp_path / "ev")
    assert evaluated.exit_code == 0, evaluated.output


def test_the_model_remembers_its_label_column_for_evaluate_and_predict(tmp_path, paths):
    renamed = tmp_path / "sessions.csv"
    pd.read_csv(paths / "sessions.csv").rename(columns={"redeemed": "is_redeemed"}).to_csv(renamed, index=False)
    args = ["--sessions", renamed, *_table_args(paths)[2:]]
    trained = _invoke("voucher", "train", *args, "--model", "din", "--epochs", 1, "--params", NET,
                      "--label", "redeemed=is_redeemed", "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    assert json.loads((tmp_path / "m" / "config.json").read_text())["labels"] == {"redeemed": "is_redeemed"}
    metrics = {}
    for name, options in (("given", ["--label", "redeemed=is_redeemed"]), ("remembered", [])):
        evaluated = _invoke("voucher", "evaluate", "--model", tmp_path / "m", *args, *options, "--out", tmp_path / name)
        assert evaluated.exit_code == 0, evaluated.output
        metrics[name] = json.loads((tmp_path / name / "report.json").read_text())["metrics"]
    assert metrics["given"] == metrics["remembered"] and metrics["given"]["n"] > 0
    # predict reads the users' redeemed histories from the remembered column: the same as on the original tables
    predicted = {}
    for name, sessions in (("renamed", renamed), ("original", paths / "sessions.csv")):
        result = _invoke("voucher", "predict", "--model", tmp_path / "m", "--sessions", sessions,
                         *_table_args(paths)[2:], "--out", tmp_path / f"p_{name}")
        assert result.exit_code == 0, result.output
        predicted[name] = pd.read_parquet(tmp_path / f"p_{name}" / "predictions.parquet")
    pd.testing.assert_frame_equal(predicted["renamed"], predicted["original"])


def test_train_defaults_are_the_estimators():
    import inspect

    import typer

    from promokit.voucher.defaults import DEFAULT_TRAIN
    from promokit.voucher.estimator import VoucherModel

    command = typer.main.get_command(app).commands["voucher"].commands["train"]
    options = {param.name: param for param in command.params}
    library = {**inspect.signature(VoucherModel.__init__).parameters, **inspect.signature(VoucherModel.fit).parameters}
    shared = [name for name in options if name in library and name not in ("model", "resume")]
    assert {"test_fraction", "test_from"} <= set(shared)
    for name in [*shared, "model", "resume"]:
        assert options[name].default == library[name].default, name
    assert options["seed"].default == DEFAULT_TRAIN.seed
    for name in ("epochs", "batch_size", "lr", "patience", "embedding_decay", "weight_decay"):
        assert options[name].default is None and options[name].show_default == f"{getattr(DEFAULT_TRAIN, name):g}"


def test_a_missing_column_is_one_line_and_exit_2(tmp_path, paths):
    broken = tmp_path / "sessions.csv"
    pd.read_csv(paths / "sessions.csv").drop(columns=["voucher_id"]).to_csv(broken, index=False)
    args = _table_args(paths)
    args[1] = broken
    result = _invoke("voucher", "train", *args, "--out", tmp_path / "m")
    assert result.exit_code == 2
    assert "voucher_id" in result.output and "Traceback" not in result.output


def test_monitor_loss_picks_the_epoch_on_validation_logloss(tmp_path, paths):
    result = _invoke("voucher", "train", *_table_args(paths), "--out", tmp_path / "m", "--model", "din",
                     "--epochs", 2, "--params", NET, "--monitor", "loss")
    assert result.exit_code == 0, result.output
    history = json.loads((tmp_path / "m" / "history.json").read_text())
    assert history["monitor"] == "loss"
    assert history["best_score"] == min(e["valid_loss"] for e in history["epochs"])
    refused = _invoke("voucher", "train", *_table_args(paths), "--out", tmp_path / "m", "--monitor", "f1")
    assert refused.exit_code == 2 and "monitor must be one of ['auc', 'loss'], got 'f1'" in refused.output


def test_an_interrupted_train_keeps_its_checkpoint_and_resume_finishes_it(tmp_path, paths, monkeypatch):
    from promokit.training import trainer

    epoch = trainer._train_epoch

    def interrupted_in_the_second_epoch(net, forward, optimizers, batches, config, comm, number, progress):
        if number == 1:
            raise KeyboardInterrupt
        return epoch(net, forward, optimizers, batches, config, comm, number, progress)

    args = ("voucher", "train", *_table_args(paths), "--out", tmp_path / "m", "--model", "din", "--epochs", 3,
            "--patience", 5, "--params", NET)
    with monkeypatch.context() as patch:
        patch.setattr(trainer, "_train_epoch", interrupted_in_the_second_epoch)
        result = _invoke(*args)
    assert result.exit_code == 0 and "continue with --resume" in result.output
    assert (tmp_path / ".m.checkpoint" / "checkpoint.pt").exists()

    result = _invoke(*args, "--resume")
    assert result.exit_code == 0, result.output
    history = json.loads((tmp_path / "m" / "history.json").read_text())
    assert [e["epoch"] for e in history["epochs"]] == [0, 1, 2] and history["stopped"] == "completed"
    assert not (tmp_path / ".m.checkpoint").exists()


def _suggested_train_args(output: str) -> list[str]:
    return output.split("promokit voucher train ", 1)[1].split(" --model")[0].split()


def test_synth_writes_tables_that_train_reads_back(tmp_path):
    result = _invoke("voucher", "synth", "--out", tmp_path / "world", "--users", 200, "--sessions", 1500,
                     "--vouchers", 20, "--items", 200, "--truth")
    assert result.exit_code == 0, result.output
    truth = pd.read_parquet(tmp_path / "world" / "truth.parquet")
    assert list(truth.columns) == ["session_id", "true_p_redeem"] and truth["true_p_redeem"].between(0, 1).all()
    trained = _invoke("voucher", "train", *_suggested_train_args(result.output), "--model", "lr", "--epochs", 1,
                      "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output


def test_amexpert_writes_contract_tables_that_train_and_evaluate_read_back(tmp_path):
    fake_amexpert(tmp_path)
    result = _invoke("voucher", "amexpert", "--src", tmp_path, "--out", tmp_path / "tables")
    assert result.exit_code == 0, result.output
    args = _suggested_train_args(result.output)
    assert "--no-terms" in args and "--item-features" in args and "--voucher-items" in args
    assert json.loads((tmp_path / "tables" / "amexpert.json").read_text())["rows"] == 6
    trained = _invoke("voucher", "train", *args, "--model", "lr", "--epochs", 1, "--monitor", "loss",
                      "--validation", "2013-02-01", "--test-from", "2013-03-01", "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    assert "2 training sessions, 2 validation sessions" in trained.output
    assert "held out for evaluate: 2 of 6 sessions (collected from 2013-03-01 00:00:00)" in trained.output
    for held_out in ([], ["--from", "2013-03-01"]):  # evaluate scores what train held out by default
        evaluated = _invoke("voucher", "evaluate", "--model", tmp_path / "m", *args, "--gauc-by", "campaign_id",
                            *held_out, "--out", tmp_path / "eval")
        assert evaluated.exit_code == 0, evaluated.output
        report = json.dumps(json.loads((tmp_path / "eval" / "report.json").read_text()))
        assert '"n": 2' in report and "gauc" in report


@pytest.mark.parametrize("options, message", [
    (["--validation", "2099-01-01"], "--validation 2099-01-01 leaves "),
    (["--test-from", "soon"], "--test-from 'soon' is not a time"),
    (["--model", "dmbgn", "--item-embeddings", "nowhere.csv"], "--item-embeddings nowhere.csv: no such file"),
])
def test_bad_train_options_are_one_line_errors_naming_the_option(tmp_path, paths, options, message):
    result = _invoke("voucher", "train", *_table_args(paths), "--model", "lr", *options, "--out", tmp_path / "m")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_unknown_model_is_a_user_error(tmp_path, paths):
    result = _invoke("voucher", "train", *_table_args(paths), "--out", tmp_path / "m", "--model", "xgboost")
    assert result.exit_code == 2 and "unknown model" in result.output


def test_demo_on_a_tiny_world_writes_table_3_with_the_oracle(tmp_path):
    out = tmp_path / "demo"
    result = _invoke("voucher", "demo", "--out", out, "--users", 200, "--sessions", 1500, "--vouchers", 20,
                     "--items", 200, "--models", "lr,dnn,din,dmbgn-avgpooling")
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    for text in ("oracle", "RelaImpr (DNN)", "RelaImpr (DIN)", "Logloss mean", "dmbgn-avgpooling"):
        assert text in report
    assert (out / "report.json").exists() and (out / "auc_vs_oracle.png").exists()


@pytest.mark.extra("tune")
def test_tune_writes_params_that_train_reads(tmp_path, paths):
    out = tmp_path / "tune"
    result = _invoke("voucher", "tune", *_table_args(paths), "--model", "dnn", "--trials", 2, "--epochs", 2,
                     "--test-from", "2024-06-01", "--out", out)
    assert result.exit_code == 0, result.output
    params = json.loads((out / "params.json").read_text())
    assert {"lr", "emb_dim", "hidden", "dropout", "embedding_decay", "min_count"} <= set(params)
    assert [t["state"] for t in json.loads((out / "report.json").read_text())["trials"]] == ["complete"] * 2
    trained = _invoke("voucher", "train", *_table_args(paths), "--model", "dnn", "--epochs", 1,
                      "--params", out / "params.json", "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["train"]["lr"] == params["lr"] and config["spec"]["min_count"] == params["min_count"]
    assert config["params"]["hidden"] == params["hidden"]


def test_lr_is_solved_with_its_l2_chosen_on_validation(tmp_path, paths):
    result = _invoke("voucher", "train", *_table_args(paths), "--model", "lr", "--min-count", 2, "--out", tmp_path / "m")
    assert result.exit_code == 0, result.output
    assert "chosen: l2" in result.output
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["params"]["l2"] > 0 and config["spec"]["min_count"] == 2


# ------------------------------------------------------------------------------------------------ model columns
#: Non-default table options; predict / evaluate must not need them again.
TRAINED_WITH = ["--categorical", "user_age,voucher_category", "--numeric", "user_spend", "--no-terms",
                "--item-features", "price_level,category"]
DMBGN_NET = '{"emb_dim": 4, "uvg_dim": 8, "hidden": [16], "dropout": 0.0, "attention_units": 8}'


@pytest.fixture(scope="module")
def profiled(paths, tmp_path_factory):
    """The synthetic tables with a numeric profile column, user_spend."""
    folder = tmp_path_factory.mktemp("voucher_profiled")
    sessions = pd.read_csv(paths / "sessions.csv")
    sessions["user_spend"] = np.random.default_rng(0).gamma(2.0, 30.0, len(sessions)).round(2)
    sessions.to_csv(folder / "sessions.csv", index=False)
    shutil.copy(paths / "events.csv", folder / "events.csv")
    shutil.copy(paths / "items.parquet", folder / "items.parquet")
    return folder


def _profiled_args(folder, sessions=None, events=True):
    return ["--sessions", sessions or folder / "sessions.csv", *(["--events", folder / "events.csv"] if events else []),
            "--items", folder / "items.parquet"]


@pytest.fixture(scope="module")
def trained(profiled, tmp_path_factory):
    """LR and DMBGN model directories trained with the options TRAINED_WITH."""
    folder = tmp_path_factory.mktemp("voucher_trained")
    for name, extra in (("lr", []), ("dmbgn", ["--epochs", 1, "--params", DMBGN_NET])):
        result = _invoke("voucher", "train", *_profiled_args(profiled), *TRAINED_WITH, "--model", name, *extra,
                         "--out", folder / name)
        assert result.exit_code == 0, result.output
    return folder


def _predict_and_evaluate(model_dir, profiled, out, *options):
    predicted = _invoke("voucher", "predict", "--model", model_dir, *_profiled_args(profiled), *options,
                        "--from", "2024-05-01", "--out", out / "p.parquet")
    assert predicted.exit_code == 0, predicted.output
    evaluated = _invoke("voucher", "evaluate", "--model", model_dir, *_profiled_args(profiled), *options,
                        "--from", "2024-05-01", "--out", out / "eval")
    assert evaluated.exit_code == 0, evaluated.output
    return pd.read_parquet(out / "p.parquet"), json.loads((out / "eval" / "report.json").read_text())["metrics"]


@pytest.mark.parametrize("name", ["lr", "dmbgn"])
def test_predict_and_evaluate_read_the_training_columns_from_the_model_directory(trained, profiled, tmp_path, name):
    config = json.loads((trained / name / "config.json").read_text())
    assert config["tables"] == {"categorical": ["user_age", "voucher_category"], "numeric": ["user_spend"],
                                "terms": False, "item_features": ["price_level", "category"]}
    without, metrics = _predict_and_evaluate(trained / name, profiled, tmp_path / "without")
    repeated, repeated_metrics = _predict_and_evaluate(trained / name, profiled, tmp_path / "with", *TRAINED_WITH)
    assert len(without) > 0 and without["p_redeem"].nunique() > 1
    pd.testing.assert_frame_equal(without, repeated)
    assert metrics == repeated_metrics and metrics["n"] == len(without)
    reordered = ["--categorical", "voucher_category,user_age", "--item-features", "category,price_level"]
    same, _ = _predict_and_evaluate(trained / name, profiled, tmp_path / "reordered", *reordered)
    pd.testing.assert_frame_equal(without, same)


@pytest.mark.parametrize("options, message", [
    (["--categorical", "user_age"], "--categorical 'user_age' contradicts the model, trained with --categorical "
                                    "'user_age,voucher_category'; the model directory remembers its columns: leave "
                                    "--categorical out"),
    (["--numeric", "user_spend,user_age"], "--numeric 'user_spend,user_age' contradicts the model"),
    (["--terms"], "--terms contradicts the model, trained with --no-terms"),
    (["--item-features", "category,brand,price_level"], "--item-features 'category,brand,price_level' contradicts "
                                                        "the model, trained with --item-features 'price_level,category'"),
])
@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_options_that_contradict_the_training_are_one_line_errors(trained, profiled, tmp_path, command, options,
                                                                  message):
    result = _invoke("voucher", command, "--model", trained / "dmbgn", *_profiled_args(profiled), *options,
                     "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert result.output.count("error:") == 1


@pytest.mark.parametrize("name", ["lr", "dmbgn"])
def test_a_model_directory_from_before_the_saved_columns_still_predicts(trained, profiled, tmp_path, name):
    """Older config.json files have no "tables": the columns come from the saved features (and DMBGN's item features
    from its graph vocabulary), so predict gives the same numbers without the options."""
    old = tmp_path / "old"
    shutil.copytree(trained / name, old)
    config = json.loads((old / "config.json").read_text())
    del config["tables"]
    (old / "config.json").write_text(json.dumps(config))
    expected, metrics = _predict_and_evaluate(trained / name, profiled, tmp_path / "new")
    got, old_metrics = _predict_and_evaluate(old, profiled, tmp_path / "old_out")
    pd.testing.assert_frame_equal(expected, got)
    assert metrics == old_metrics


# ------------------------------------------------------------------------------------------------ bad tables
def _write_spoiled(profiled, tmp_path, spoil) -> Path:
    """The profiled sessions as CSV after ``spoil(frame, path)`` wrote them (or their text) to ``path``."""
    path = tmp_path / "spoiled.csv"
    spoil(pd.read_csv(profiled / "sessions.csv"), path)
    return path


def _cell(column, row, value):
    def spoil(frame, path):
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = value
        frame.to_csv(path, index=False)
    return spoil


def _assign(**columns):
    return lambda frame, path: frame.assign(**columns).to_csv(path, index=False)


def _redeemed_before_validation(value):
    def spoil(frame, path):
        collect = pd.to_datetime(frame["collect_time"])
        frame.loc[collect < collect.quantile(0.9), "redeemed"] = value
        frame.to_csv(path, index=False)
    return spoil


def _header(names):
    return lambda frame, path: path.write_text(",".join(names(list(frame.columns))) + "\n" +
                                               frame.to_csv(index=False, header=False))


LR = ["--model", "lr"]
BAD_SESSIONS = [
    # (a) one row
    ("train", LR, lambda f, p: f.head(1).to_csv(p, index=False), [],
     "--test-fraction: a fraction 0.1 of 1 sessions leaves none held out; pass --test-fraction 0 or more sessions"),
    # (b) an infinite value in a feature column, in a voucher term
    ("train", LR, _cell("user_spend", 7, np.inf), [], "numeric column 'user_spend' has 1 infinite values in {n} rows, "
                                                      "e.g. row 7 {{user_spend=inf}}"),
    ("predict", [], _cell("user_spend", 7, -np.inf), [], "numeric column 'user_spend' has 1 infinite values in {n} rows"),
    ("train", LR, _cell("min_spend", 3, np.inf), [], "column 'min_spend' has 1 missing, non-numeric or infinite values "
                                                     "in {n} rows, e.g. row 3 {{min_spend=inf}}"),
    # (c) a numeric column with a few text values
    ("train", LR, _cell("user_spend", 5, "unknown"), [], "numeric column 'user_spend' has 1 non-numeric values in {n} "
                                                         "rows, e.g. row 5 {{user_spend='unknown'}}"),
    ("evaluate", [], _cell("user_spend", 5, "abc"), [], "numeric column 'user_spend' has 1 non-numeric values in {n} rows"),
    # (d) a repeated column name
    ("train", LR, _header(lambda names: [*names[:-1], "discount"]), [],
     "column names ['discount'] appear more than once in the header of its {n} rows"),
    ("predict", [], _header(lambda names: [*names[:-1], "user_id"]), [], "column names ['user_id'] appear more than once"),
    # (e) one class
    ("train", LR, _assign(redeemed=0), [], "training needs redeemed and unredeemed sessions; 0 of the"),
    ("train", ["--model", "gbdt"], _assign(redeemed=1), [], "training sessions are redeemed (column 'redeemed' is 1 on "
                                                           "all of them): a classifier cannot learn from one class"),
    ("train", ["--model", "dnn", "--monitor", "loss"], _assign(redeemed=0), [], "training needs redeemed and unredeemed"),
    ("train", LR, _redeemed_before_validation(0), [], "training needs redeemed and unredeemed sessions; 0 of the"),
    # (f) empty
    ("train", LR, lambda f, p: f.head(0).to_csv(p, index=False), [], "spoiled.csv: the table has no rows"),
    ("predict", [], lambda f, p: p.write_text(""), [], "spoiled.csv: the file is empty"),
    # (g) text where a number or a time is needed
    ("train", LR, _assign(user_spend="lots"), [], "numeric column 'user_spend' has {n} non-numeric values in {n} rows"),
    ("predict", [], lambda f, p: f.assign(redeemed=f["redeemed"].map({0: "no", 1: "yes"})).to_csv(p, index=False), [],
     "label column 'redeemed' must be 0/1 but has {n} other values in {n} rows"),
    ("predict", [], _assign(), ["--from", "soon"], "--from 'soon' is not a time"),
    ("evaluate", [], _assign(), ["--from", "2099-01-01"], "--from 2099-01-01 selects none of the {n} sessions"),
    ("train", LR, _assign(), ["--validation", "later"], "--validation 'later' is not a time"),
]


@pytest.mark.parametrize("command, extra, spoil, options, message", BAD_SESSIONS)
def test_bad_sessions_tables_are_one_line_errors(trained, profiled, tmp_path, command, extra, spoil, options, message):
    n = len(pd.read_csv(profiled / "sessions.csv"))
    sessions = _write_spoiled(profiled, tmp_path, spoil)
    model = ["--model", trained / "lr"] if command != "train" else ["--numeric", "user_spend", *extra, "--epochs", 1]
    result = _invoke("voucher", command, *model, *_profiled_args(profiled, sessions, events=False), *options,
                     "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert message.format(n=n) in result.output and "Traceback" not in result.output
    assert [line.startswith("error:") for line in result.output.strip().splitlines()] == [True]


def test_one_session_is_predicted_and_its_evaluation_warns_that_auc_is_undefined(trained, profiled, tmp_path):
    sessions = _write_spoiled(profiled, tmp_path, lambda frame, path: frame.tail(1).to_csv(path, index=False))
    args = ["--model", trained / "lr", *_profiled_args(profiled, sessions, events=False)]
    predicted = _invoke("voucher", "predict", *args, "--out", tmp_path / "p")
    assert predicted.exit_code == 0, predicted.output
    assert len(pd.read_parquet(tmp_path / "p" / "predictions.parquet")) == 1
    evaluated = _invoke("voucher", "evaluate", *args, "--out", tmp_path / "eval")
    assert evaluated.exit_code == 0 and "AUC is undefined: y_true has" in evaluated.output


def test_evaluating_sessions_of_one_class_warns_that_auc_is_undefined(trained, profiled, tmp_path):
    sessions = _write_spoiled(profiled, tmp_path, _assign(redeemed=0))
    result = _invoke("voucher", "evaluate", "--model", trained / "lr", *_profiled_args(profiled, sessions, events=False),
                     "--out", tmp_path / "eval")
    assert result.exit_code == 0 and "AUC is undefined: y_true has 0 positives" in result.output
    metrics = json.loads((tmp_path / "eval" / "report.json").read_text())["metrics"]
    assert metrics["positives"] == 0 and metrics["auc"] is None  # NaN in the report

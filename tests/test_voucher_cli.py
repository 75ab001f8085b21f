import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from test_voucher_data import fake_amexpert
from promokit.voucher.synthetic import PROFILE_CATEGORICAL, make_voucher_world

runner = CliRunner()
NET = '{"emb_dim": 4, "hidden": [16], "dropout": 0.0, "attention_units": 8}'


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """The synthetic world's three tables as the user would have them: CSV files."""
    folder = tmp_path_factory.mktemp("voucher_tables")
    tables = make_voucher_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2).tables
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

    out = tmp_path / "pred.parquet"
    # predict in a fresh interpreter: the model directory and the tables are all it needs
    done = subprocess.run([sys.executable, "-m", "promokit.cli", "voucher", "predict", "--model", str(model_dir),
                           *map(str, _table_args(paths)), "--out", str(out), "--from", "2024-05-01"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    predictions = pd.read_parquet(out)
    sessions = pd.read_csv(paths / "sessions.csv", parse_dates=["collect_time"])
    assert list(predictions.columns) == ["session_id", "p_redeem"]
    assert len(predictions) == int((sessions.collect_time >= "2024-05-01").sum()) > 0
    assert predictions.p_redeem.between(0, 1).all()

    result = _invoke("voucher", "evaluate", "--model", model_dir, *_table_args(paths), "--out", tmp_path / "eval",
                     "--gauc-by", "voucher_id")
    assert result.exit_code == 0, result.output
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "auc" in report and "gauc" in report


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
    from promokit.training import Trainer

    epoch = Trainer._train_epoch

    def interrupted_in_the_second_epoch(self, model, optimizers, train, number, progress):
        if number == 1:
            raise KeyboardInterrupt
        return epoch(self, model, optimizers, train, number, progress)

    args = ("voucher", "train", *_table_args(paths), "--out", tmp_path / "m", "--model", "din", "--epochs", 3,
            "--patience", 5, "--params", NET)
    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_train_epoch", interrupted_in_the_second_epoch)
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
                      "--valid-from", "2013-02-01", "--test-from", "2013-03-01", "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    assert "2 training sessions" in trained.output and "2 validation sessions, 2 held out" in trained.output
    evaluated = _invoke("voucher", "evaluate", "--model", tmp_path / "m", *args, "--gauc-by", "campaign_id",
                        "--from", "2013-03-01", "--out", tmp_path / "eval")
    assert evaluated.exit_code == 0, evaluated.output
    report = json.dumps(json.loads((tmp_path / "eval" / "report.json").read_text()))
    assert '"n": 2' in report and "gauc" in report


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

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app

runner = CliRunner()
NET = '{"emb_dim": 4, "hidden": [16], "dropout": 0.0}'


@pytest.fixture
def table_path(tmp_path, impressions):
    path = tmp_path / "impressions.csv"
    impressions.to_csv(path, index=False)
    return path


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_train_predict_evaluate_round_trip_in_a_new_process(tmp_path, table_path):
    model_dir = tmp_path / "esm2"
    result = _invoke("conversion", "train", "--data", table_path, "--out", model_dir, "--epochs", 2,
                     "--lr", 0.01, "--params", NET)
    assert result.exit_code == 0, result.output
    assert (model_dir / "weights.safetensors").exists()

    assert "held out for evaluate: 3" in result.output and "of 4,000 rows (each row drawn" in result.output
    assert "refit on all 4,000 rows with" in " ".join(result.output.split())

    out = tmp_path / "pred"
    # predict in a fresh interpreter: the model directory is all it needs; --out is a folder
    done = subprocess.run([sys.executable, "-m", "promokit.cli", "conversion", "predict", "--model", str(model_dir),
                           "--data", str(table_path), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    predictions = pd.read_parquet(out / "predictions.parquet")
    assert list(predictions.columns) == ["user_id", "item_id", "p_ctr", "p_cvr", "p_ctavr", "p_ctcvr"]
    assert len(predictions) == 4000
    assert json.loads((out / "summary.json").read_text())["rows"] == 4000
    old = _invoke("conversion", "predict", "--model", model_dir, "--data", table_path, "--out", tmp_path / "p.parquet")
    assert old.exit_code == 0 and "warning: --out" in old.output and "a file is deprecated" in old.output
    assert len(pd.read_parquet(tmp_path / "p.parquet")) == 4000 and (tmp_path / "p.json").exists()

    result = _invoke("conversion", "evaluate", "--model", model_dir, "--data", table_path, "--out", tmp_path / "ev")
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())  # the table's title, wrapped
    assert "held-out rows, scored before the refit" in output  # the selected model's, kept by train
    metrics = json.loads((tmp_path / "ev" / "report.json").read_text())["metrics"]
    assert 0.5 < metrics["ctr_auc"] < 1 and "ctcvr_gauc" in metrics
    every = _invoke("conversion", "evaluate", "--model", model_dir, "--data", table_path, "--out", tmp_path / "ev", "--all")
    assert every.exit_code == 0 and "rows held out" not in every.output
    other = tmp_path / "other.parquet"
    pd.read_csv(table_path).head(1000).to_parquet(other)
    refused = _invoke("conversion", "evaluate", "--model", model_dir, "--data", other, "--out", tmp_path / "ev")
    assert refused.exit_code == 2 and "and these data have 1,000 rows" in refused.output
    assert "evaluate every row of new data with --all" in refused.output


def test_train_with_a_spec_file_mapping_label_names(tmp_path, impressions):
    impressions.rename(columns={"click": "is_click"}).to_parquet(tmp_path / "t.parquet")
    (tmp_path / "spec.yaml").write_text("categorical: [user_id, item_id, segment]\nnumeric: [price]\n"
                                        "labels: {click: is_click}\n")
    result = _invoke("conversion", "train", "--data", tmp_path / "t.parquet", "--spec", tmp_path / "spec.yaml",
                     "--model", "esmm", "--out", tmp_path / "m", "--epochs", 1, "--params", NET)
    assert result.exit_code == 0, result.output


def test_label_maps_a_label_to_the_users_column_and_the_error_names_the_option(tmp_path, impressions):
    impressions.rename(columns={"click": "is_click"}).to_parquet(tmp_path / "t.parquet")
    args = ["conversion", "train", "--data", tmp_path / "t.parquet", "--model", "esmm", "--out", tmp_path / "m",
            "--epochs", 1, "--params", NET]
    refused = _invoke(*args)
    assert refused.exit_code == 2
    assert ("column 'click' (label 'click') is missing from the table of 4000 rows; did you mean 'is_click'? If it "
            "holds the label, map it: --label click=is_click." in refused.output)
    assert _invoke(*args, "--label", "click=is_click").exit_code == 0
    evaluated = _invoke("conversion", "evaluate", "--model", tmp_path / "m", "--data", tmp_path / "t.parquet",
                        "--out", tmp_path / "ev")  # the model keeps the mapping in its spec
    assert evaluated.exit_code == 0, evaluated.output
    unknown = _invoke(*args, "--label", "clicked=is_click")
    assert unknown.exit_code == 2 and "--label 'clicked=is_click': unknown label role 'clicked'" in unknown.output


@pytest.mark.parametrize("args, message", [
    (["--data", "missing.csv"], "no such file"),
    (["--params", "{not json"], "--params is not valid JSON"),
    (["--model", "esm3"], "unknown model 'esm3'"),
])
def test_train_errors_are_one_line_and_exit_2(tmp_path, table_path, args, message):
    base = {"--data": str(table_path), "--out": str(tmp_path / "m")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = str(tmp_path / value) if flag == "--data" else value
    result = _invoke("conversion", "train", *[x for kv in base.items() for x in kv])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def _spoil(table: pd.DataFrame, how: str) -> str:
    """The CSV text of ``table`` spoiled as a new user's table might be."""
    if how == "one row":
        table = table.head(1)
    elif how == "empty":
        table = table.head(0)
    elif how == "infinite":
        table = table.assign(price=table["price"].where(table.index != 7, np.inf))
    elif how == "text in numbers":
        table = table.assign(price=table["price"].astype(object).where(table.index != 7, "abc"))
    elif how == "no purchase":
        table = table.assign(purchase=0)
    elif how == "only clicks":
        table = table.assign(click=1)
    text = table.to_csv(index=False)
    if how == "duplicate columns":
        header, rest = text.split("\n", 1)
        text = header.replace("segment", "price") + "\n" + rest
    return text


@pytest.mark.parametrize("how, message", [
    ("one row", "holding out 10% of 1 rows (random) leaves 1 rows to keep and 0 to hold out"),
    ("empty", "the table has no rows"),
    ("infinite", "numeric column 'price' has 1 infinite values in 4000 rows, e.g. row 7"),
    ("text in numbers", "column 'price' holds numbers in 99.98% of its 4000 rows but 1 values are not numbers, e.g. row 7"),
    ("duplicate columns", "column names ['price'] appear more than once in the header of its 4000 rows"),
    ("no purchase", "label 'purchase' (purchase) is 0 on all"),
    ("only clicks", "label 'click' (click) is 1 on all"),
])
def test_a_bad_table_is_a_one_line_error(tmp_path, impressions, how, message):
    path = tmp_path / "bad.csv"
    path.write_text(_spoil(impressions, how))
    result = _invoke("conversion", "train", "--data", path, "--out", tmp_path / "m", "--model", "esmm",
                     "--epochs", 1, "--params", NET)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "m").exists()


def test_predict_refuses_an_infinite_feature_and_evaluate_warns_on_one_class(tmp_path, table_path, impressions):
    model_dir = tmp_path / "m"
    assert _invoke("conversion", "train", "--data", table_path, "--out", model_dir, "--model", "esmm", "--epochs", 2,
                   "--lr", 0.01, "--params", NET, "--no-refit").exit_code == 0  # evaluate scores the rows it is given
    bad = tmp_path / "bad.csv"
    bad.write_text(_spoil(impressions, "infinite"))
    result = _invoke("conversion", "predict", "--model", model_dir, "--data", bad, "--out", tmp_path / "p")
    assert result.exit_code == 2 and "'price' has 1 infinite values in 4000 rows" in result.output
    one_class = tmp_path / "no_purchase.csv"
    one_class.write_text(_spoil(impressions, "no purchase"))
    result = _invoke("conversion", "evaluate", "--model", model_dir, "--data", one_class, "--out", tmp_path / "ev")
    assert result.exit_code == 0, result.output
    assert "warning: AUC is undefined: y_true has 0 positives" in result.output and "Traceback" not in result.output
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["metrics"]["ctr_auc"] > 0.5


def test_an_error_message_prints_its_brackets_as_written(tmp_path, table_path):
    result = _invoke("conversion", "train", "--data", table_path, "--out", tmp_path / "m", "--model", "gmcm")
    assert result.exit_code == 2
    assert "(micro_behaviors: [cart, favorite, …])" in result.output  # not eaten as rich markup


def test_help_is_fast_and_does_not_import_torch():
    code = "import sys; from promokit.cli import app; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


SMALL_WORLD = ["--impressions", 6000, "--users", 120, "--items", 60]


def test_demo_writes_report_with_oracle_and_gaps(tmp_path):
    out = tmp_path / "demo"
    result = _invoke("conversion", "demo", "--out", out, *SMALL_WORLD, "--models", "gbdt,esm2")
    assert result.exit_code == 0, result.output
    assert {"report.md", "report.json", "results.csv", "auc_vs_oracle.png"} <= {p.name for p in out.iterdir()}
    rows = {row["model"]: row for row in json.loads((out / "report.json").read_text())["results"]}
    assert set(rows) == {"lr", "gbdt", "esm2", "oracle"}
    assert list(pd.read_csv(out / "results.csv")["model"]) == ["lr", "gbdt", "esm2"]  # written as each finished
    # the generator's own probabilities rank clicks better than any model fitted on 4,800 rows (the 600 test rows
    # hold too few purchases for their CTCVR AUC to order the oracle and a model that starts at the floor)
    assert all(rows["oracle"]["ctr_auc"] > rows[m]["ctr_auc"] for m in ("lr", "gbdt", "esm2"))
    assert "Gap to the oracle" in (out / "report.md").read_text()


def test_an_interrupted_demo_keeps_the_rows_it_finished(tmp_path, monkeypatch):
    from promokit.conversion.estimator import ConversionModel

    fit = ConversionModel.fit

    def interrupted_at_gbdt(self, *args, **kwargs):  # Ctrl-C while the second model trains
        if self.model == "gbdt":
            raise KeyboardInterrupt
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(ConversionModel, "fit", interrupted_at_gbdt)
    out = tmp_path / "demo"
    result = _invoke("conversion", "demo", "--out", out, *SMALL_WORLD, "--models", "gbdt,esm2")
    assert result.exit_code != 0
    assert f"interrupted: 1 row finished, kept in {out / 'results.csv'}" in " ".join(result.output.split())
    assert list(pd.read_csv(out / "results.csv")["model"]) == ["lr"]
    assert [row["model"] for row in json.loads((out / "report.json").read_text())["results"]] == ["lr"]
    assert "(unfinished: 1 row so far)" in (out / "report.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md", "results.csv"]  # no temporary file


def test_bench_on_the_synthetic_world_adds_the_oracle_and_rela_impr(tmp_path):
    out = tmp_path / "bench"
    result = _invoke("conversion", "bench", *SMALL_WORLD, "--models", "esmm,esm2", "--seeds", "0,1", "--epochs", 1,
                     "--params", NET, "--base", "esmm", "--out", out)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    # the linear floor is always shown, first, even when not named
    assert [(r["model"], r["seed"]) for r in report["results"]] == [
        ("lr", 0), ("esmm", 0), ("esm2", 0), ("lr", 1), ("esmm", 1), ("esm2", 1)]
    assert 0.5 < report["oracle"]["ctcvr_auc"] <= 1
    assert "RelaImpr cvr_auc vs esmm" in (out / "report.md").read_text()


def test_bench_on_a_table_with_a_time_split(tmp_path, impressions):
    impressions["day"] = impressions.index // 400
    impressions.to_parquet(tmp_path / "t.parquet")
    result = _invoke("conversion", "bench", "--data", tmp_path / "t.parquet", "--split", "time:day",
                     "--models", "dnn,esmm", "--seeds", "0", "--epochs", 1, "--params", NET)
    assert result.exit_code == 0, result.output
    assert "mean ± std over seeds" in result.output
    bad = _invoke("conversion", "bench", "--data", tmp_path / "t.parquet", "--split", "time:when", "--models", "esmm")
    assert bad.exit_code == 2 and "column 'when' is not in the table" in bad.output


@pytest.mark.extra("tune")
def test_tune_writes_params_that_train_reads_and_a_rerun_continues_the_study(tmp_path, impressions):
    impressions.assign(day=impressions.index // 400).to_parquet(tmp_path / "t.parquet")
    (tmp_path / "spec.yaml").write_text("categorical: [user_id, item_id, segment]\nnumeric: [price]\ntime_key: day\n")
    data = ["--data", tmp_path / "t.parquet", "--spec", tmp_path / "spec.yaml"]
    result = _invoke("conversion", "tune", *data, "--model", "esmm", "--trials", 2, "--epochs", 2,
                     "--out", tmp_path / "tune")
    assert result.exit_code == 0, result.output
    params = json.loads((tmp_path / "tune" / "params.json").read_text())
    assert {"lr", "emb_dim", "hidden", "dropout", "embedding_decay", "min_count"} <= set(params)
    assert params["monitor"] == "ctcvr_auc"
    report = json.loads((tmp_path / "tune" / "report.json").read_text())
    assert [t["trial"] for t in report["trials"]] == [0, 1]

    again = _invoke("conversion", "tune", *data, "--model", "esmm", "--trials", 3, "--epochs", 2,
                    "--out", tmp_path / "tune")
    assert again.exit_code == 0, again.output
    assert [t["trial"] for t in json.loads((tmp_path / "tune" / "report.json").read_text())["trials"]] == [0, 1, 2]

    trained = _invoke("conversion", "train", *data, "--model", "esmm", "--epochs", 1,
                      "--params", tmp_path / "tune" / "params.json", "--out", tmp_path / "m")
    assert trained.exit_code == 0, trained.output
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["train"]["lr"] == params["lr"] and config["train"]["monitor"] == "ctcvr_auc"
    assert config["train"]["embedding_decay"] == params["embedding_decay"]
    assert config["spec"]["min_count"] == params["min_count"]
    assert config["params"]["emb_dim"] == params["emb_dim"] and config["params"]["hidden"] == params["hidden"]


@pytest.mark.extra("tune")
def test_tune_is_reproducible_from_the_seed(tmp_path, impressions):
    impressions.to_parquet(tmp_path / "t.parquet")
    found = []
    for run in ("a", "b"):
        result = _invoke("conversion", "tune", "--data", tmp_path / "t.parquet", "--model", "lr", "--trials", 2,
                         "--seed", 3, "--out", tmp_path / run)
        assert result.exit_code == 0, result.output
        found.append(json.loads((tmp_path / run / "report.json").read_text())["trials"])
    assert [(t["min_count"], t["value"]) for t in found[0]] == [(t["min_count"], t["value"]) for t in found[1]]


def test_flags_win_over_a_params_file(tmp_path, table_path):
    (tmp_path / "p.json").write_text(json.dumps({"lr": 0.05, "embedding_decay": 3.0, "min_count": 2, **json.loads(NET)}))
    result = _invoke("conversion", "train", "--data", table_path, "--model", "esmm", "--epochs", 1,
                     "--params", tmp_path / "p.json", "--lr", 0.02, "--min-count", 4, "--out", tmp_path / "m")
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (config["train"]["lr"], config["train"]["embedding_decay"], config["spec"]["min_count"]) == (0.02, 3.0, 4)
    missing = _invoke("conversion", "train", "--data", table_path, "--params", tmp_path / "nope.json",
                      "--out", tmp_path / "m2")
    assert missing.exit_code == 2 and "neither a JSON object nor a JSON file" in missing.output


def test_bench_tuned_reads_each_models_params_file(tmp_path, impressions):
    impressions.assign(day=impressions.index // 400).to_parquet(tmp_path / "t.parquet")
    (tmp_path / "tuned" / "esmm").mkdir(parents=True)
    (tmp_path / "tuned" / "esmm" / "params.json").write_text(json.dumps({**json.loads(NET), "lr": 0.02}))
    args = ["conversion", "bench", "--data", tmp_path / "t.parquet", "--split", "time:day", "--seeds", "0",
            "--epochs", 1, "--out", tmp_path / "b"]
    untuned_floor = _invoke(*args, "--models", "lr,esmm", "--tuned", tmp_path / "tuned")
    assert untuned_floor.exit_code == 2 and "['lr'] have no params.json while ['esmm'] do" in untuned_floor.output
    (tmp_path / "tuned" / "lr").mkdir()
    (tmp_path / "tuned" / "lr" / "params.json").write_text(json.dumps({"min_count": 2}))
    for name, states in (("lr", ["complete", "complete", "pruned"]), ("esmm", ["complete", "pruned", "fail"])):
        (tmp_path / "tuned" / name / "report.json").write_text(json.dumps({"trials": [{"state": s} for s in states]}))
    unequal = _invoke(*args, "--models", "lr,esmm", "--tuned", tmp_path / "tuned")
    assert unequal.exit_code == 2 and "finished trials: lr 3, esmm 2" in unequal.output
    (tmp_path / "tuned" / "esmm" / "report.json").write_text(json.dumps({"trials": [{"state": "complete"}] * 3}))
    result = _invoke(*args, "--models", "lr,esmm", "--tuned", tmp_path / "tuned")
    assert result.exit_code == 0, result.output
    assert "RelaImpr cvr_auc vs lr" in (tmp_path / "b" / "report.md").read_text()
    (tmp_path / "empty").mkdir()
    missing = _invoke(*args, "--models", "lr", "--tuned", tmp_path / "empty")
    assert missing.exit_code == 2 and "none of ['lr'] has a params.json" in missing.output


def test_train_reports_each_features_type_and_categorical_overrides_an_inferred_numeric(tmp_path, impressions):
    """An integer column of 300 values is inferred numeric; --categorical makes it categorical, in the encoder and in
    config.json, and the summary says so."""
    path = tmp_path / "t.csv"
    impressions.assign(item_brand=impressions["item_id"] * 10 + impressions.index % 10).to_csv(path, index=False)
    base = ("conversion", "train", "--data", path, "--model", "esmm", "--epochs", 1, "--params", NET)
    inferred = _invoke(*base, "--out", tmp_path / "inferred")
    assert inferred.exit_code == 0, inferred.output
    assert ("impression features: categorical (3) user_id, item_id, segment; numeric (2) price, item_brand"
            in inferred.output)
    assert "integer column categorical when its name ends in id or it has at most 64 distinct values" in inferred.output
    given = _invoke(*base, "--out", tmp_path / "given", "--categorical", "item_brand", "--numeric", "segment")
    assert given.exit_code == 2 and "numeric column 'segment' has 4000 non-numeric values" in given.output
    given = _invoke(*base, "--out", tmp_path / "given", "--categorical", "item_brand")
    assert given.exit_code == 0, given.output
    assert "categorical (4) user_id, item_id, segment, item_brand; numeric (1) price" in given.output
    assert "given: item_brand categorical" in given.output
    spec = json.loads((tmp_path / "given" / "config.json").read_text())["spec"]
    assert (spec["categorical"], spec["numeric"], spec["types"]) == (
        ["user_id", "item_id", "segment", "item_brand"], ["price"], {"item_brand": "categorical"})
    encoders = json.loads((tmp_path / "given" / "encoder.json").read_text())
    assert "item_brand" in encoders["categorical"] and "item_brand" not in encoders["numeric"]


@pytest.mark.parametrize("args, message", [
    (["--categorical", "item_brnd"], "column 'item_brnd' (given the type categorical) is missing from the table of "
                                     "4000 rows; did you mean 'item_brand'?"),
    (["--numeric", "click"], "column 'click' is given the type numeric, but it is a label, key or time column"),
    (["--categorical", "price", "--numeric", "price"], "columns ['price'] are named more than once"),
    (["--categorical", " , "], "--categorical names no column"),
])
def test_bad_feature_types_are_one_line_errors(tmp_path, impressions, args, message):
    path = tmp_path / "t.csv"
    impressions.assign(item_brand=1).to_csv(path, index=False)
    result = _invoke("conversion", "train", "--data", path, "--out", tmp_path / "m", "--model", "esmm", "--epochs", 1,
                     "--params", NET, *args)
    assert result.exit_code == 2 and message in result.output, result.output

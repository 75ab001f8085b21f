"""``voucher train`` over sessions and events in parts (promokit.voucher.train_parts): the encoder, graph vocabulary
and hold-out fitted from per-part counts equal a one-file fit's, one part trains exactly as one file, several parts
reach its AUC (in this process and on two Ray Train workers), and what cannot train over parts is refused."""

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError, TableEncoder
from promokit.experiments.voucher.world import make_world
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig
from promokit.voucher.contract import read_tables
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.graph import UVGStore
from promokit.voucher.parts import pair_parts
from promokit.voucher.history import hold_out_latest
from promokit.voucher.train_parts import Source, _latest, _plan, train_parts

torch.set_num_threads(1)
runner = CliRunner()
NET = {"emb_dim": 4, "hidden": [16], "dropout": 0.0, "wide": "none"}
GRAPH = {**NET, "uvg_dim": 8, "attention_units": 8, "gnn_layers": 1, "pretrain": 0}
QUICK = TrainConfig(epochs=3, batch_size=256, lr=0.003, patience=5, progress=False, embedding_decay=0.0)
#: enough training for the small world's held-out AUC to be about 0.7 (3 epochs at lr 0.003 stay below chance)
LEARN = TrainConfig(epochs=6, batch_size=256, lr=0.01, patience=6, progress=False, monitor="auc")
#: the part of each user (user_id % 3) → its part file; part 1 is empty
PART_OF = {0: 0, 1: 2, 2: 3}


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A synthetic world as single files and as 4 parts by user (one empty), and as one part."""
    root = tmp_path_factory.mktemp("voucher-train-parts")
    tables = make_world(n_users=300, n_vouchers=30, n_items=200, n_sessions=2500, seed=1).tables
    sessions, events = tables.sessions, tables.events.drop(columns=["session", "pre"])
    sessions.to_parquet(root / "sessions.parquet", index=False)
    events.to_parquet(root / "events.parquet", index=False)
    tables.items.to_parquet(root / "items.parquet", index=False)
    part = sessions["user_id"].map(lambda user: PART_OF[user % 3]).to_numpy()
    event_part = events["session_id"].map(dict(zip(sessions["session_id"], part))).to_numpy()
    for name, frame, where in (("sessions", sessions, part), ("events", events, event_part)):
        for folder, parts in (("parts", range(4)), ("one", [None])):
            (root / folder / name).mkdir(parents=True)
            for k in parts:
                kept = frame if k is None else frame[where == k]
                kept.to_parquet(root / folder / name / f"part-{k or 0:05d}.parquet", index=False)
    return root


def _files(data):
    return {name: data / f"{name}.parquet" for name in ("sessions", "events", "items")}


def _over_parts(data, model, folder="parts", executor=None, **kwargs):
    return train_parts(model, data / folder / "sessions", data / folder / "events", data / "items.parquet", None,
                       executor or LocalExecutor(), data / "keys", options={}, **kwargs)


@pytest.mark.parametrize("split", [{}, {"test_from": "2024-05-20", "validation": "2024-05-10"}])
def test_encoder_vocabulary_and_held_out_sessions_from_part_counts_equal_one_file(data, split):
    validation = split.get("validation")
    model = VoucherModel("dmbgn", GRAPH, QUICK, test_from=split.get("test_from"))
    source = Source(tuple(pair_parts(data / "parts" / "sessions", data / "parts" / "events")),
                    data / "items.parquet", None, {})
    model._start_fit()  # as train_parts does before planning
    job, vocabulary = _plan(model, source, LocalExecutor(), data / "keys", validation)

    tables = read_tables(_files(data), require_labels=True)
    one = VoucherModel("dmbgn", GRAPH, QUICK, test_from=split.get("test_from"))
    train, valid, test = one.split_rows(tables, validation=validation)
    assert model.holdout_ == one._holdout(tables, test) and model.holdout_["held_out"] == len(test) > 0
    roles = job.train_rows.split.roles(tables.sessions)  # the parts' rule on the one file: the same sessions
    for role, rows in enumerate((train, valid, test)):
        assert np.flatnonzero(roles == role).tolist() == rows.tolist()
    assert (model.report_.n_train, model.report_.n_valid, model.report_.n_test) == (len(train), len(valid), len(test))
    assert sum(stop - start for _, start, stop in job.train[0]) == len(train)  # one worker: every training row

    expected = TableEncoder.fit(tables.sessions.iloc[train], one._feature_spec(tables)).to_dict()
    got = model.encoder_.to_dict()
    assert got["categorical"] == expected["categorical"]
    for column, encoder in expected["numeric"].items():
        assert got["numeric"][column] == pytest.approx(encoder, rel=1e-12), column
    store = UVGStore.build(tables, fit_rows=train).vocabulary()
    assert vocabulary["encoders"] == store["encoders"] and vocabulary["zones"] == store["zones"]
    for key in ("mean", "std"):
        assert vocabulary["schema_stats"][key] == pytest.approx(store["schema_stats"][key], rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_the_latest_fraction_cut_from_time_counts_is_the_one_file_quantile(seed):
    """_latest's cut from the sessions per time holds out what hold_out_latest holds out of the sessions themselves
    (times with ties, fractions that land between two times and on one)."""
    rng = np.random.default_rng(seed)
    times = pd.Series(pd.Timestamp("2024-05-01") + pd.to_timedelta(rng.integers(0, 40, 200 + 37 * seed), unit="h"))
    counts = times.value_counts().sort_index()
    for fraction in (0.1, 0.05, 0.25, 1 / 3):
        cut = _latest(counts, fraction, "validation")
        kept, held = hold_out_latest(pd.DataFrame({"collect_time": times}), np.arange(len(times)), fraction)
        assert np.flatnonzero((times >= cut).to_numpy()).tolist() == held.tolist(), fraction


def test_sessions_sharing_one_time_are_refused_rather_than_drawn():
    counts = pd.Series([500], index=pd.DatetimeIndex(["2024-05-01"]))
    with pytest.raises(DataError, match="test_fraction: .* share their times"):
        _latest(counts, 0.1, "test_fraction")


@pytest.mark.parametrize("name, params", [("dnn", NET), ("dmbgn", GRAPH)])
def test_one_part_trains_exactly_as_one_file(data, name, params):
    tables = read_tables(_files(data), require_labels=True)
    one = VoucherModel(name, params, QUICK, refit=False).fit(tables)  # train_parts is the selection alone
    parts = _over_parts(data, VoucherModel(name, params, QUICK), "one")
    for (key, a), b in zip(one.net_.state_dict().items(), parts.net_.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=key)
    assert parts.predict(tables)["p_redeem"].to_numpy() == pytest.approx(one.predict(tables)["p_redeem"].to_numpy(),
                                                                         abs=1e-6)


def test_dmbgn_over_parts_with_pretraining_reaches_the_auc_of_one_file(data, tmp_path):
    """Parts shuffle within a part and mix consecutive parts in a batch (PartStores), so the run is another draw of
    the same training: the held-out AUC agrees; the saved model scores the one file as it did when trained."""
    params = {**GRAPH, "pretrain": 1}
    tables = read_tables(_files(data), require_labels=True)
    one = VoucherModel("dmbgn", params, LEARN, refit=False).fit(tables)  # train_parts is the selection alone
    parts = _over_parts(data, VoucherModel("dmbgn", params, LEARN))
    test = one.held_out(tables)
    auc = {"one": one.evaluate(tables, rows=test)["auc"], "parts": parts.evaluate(tables, rows=test)["auc"]}
    assert auc["one"] > 0.65 and abs(auc["parts"] - auc["one"]) < 0.05, auc
    parts.save(tmp_path / "model")
    again = VoucherModel.load(tmp_path / "model").predict(tables, rows=test)["p_redeem"].to_numpy()
    assert again == pytest.approx(parts.predict(tables, rows=test)["p_redeem"].to_numpy(), abs=1e-6)


def test_a_user_in_two_parts_is_an_error_naming_both_files(data, tmp_path):
    folder = tmp_path / "parts"
    shutil.copytree(data / "parts", folder)
    first = folder / "sessions" / "part-00000.parquet"
    moved = pd.read_parquet(first).head(1)
    last = folder / "sessions" / "part-00003.parquet"
    pd.concat([pd.read_parquet(last), moved]).to_parquet(last, index=False)
    with pytest.raises(DataError) as error:
        train_parts(VoucherModel("dnn", NET, QUICK), folder / "sessions", folder / "events", data / "items.parquet",
                    None, LocalExecutor(), tmp_path / "keys", options={})
    message = str(error.value)
    assert "user_id" in message and str(first) in message and str(last) in message


@pytest.mark.parametrize("validation, words", [
    ([1, 2, 3], "sessions in parts have no row positions"),
    (pd.DataFrame({"session_id": [1]}), "the validation sessions belong in the parts"),
    (1.5, "a fraction must be in [0, 1)"),
    ("not a time", "is not a time"),
])
def test_sessions_in_parts_read_validation_as_every_domain_does(data, tmp_path, validation, words):
    """Over parts: a fraction or a time (promokit.data.split.parse_validation); any other form is one line naming
    `validation`, before a part is read."""
    with pytest.raises(DataError, match=re.escape(words)) as error:
        _over_parts(data, VoucherModel("dnn", NET, QUICK), validation=validation)
    assert str(error.value).startswith("`validation`") and "\n" not in str(error.value)


@pytest.mark.parametrize("model, params, words", [
    ("gbdt", {}, "boosts its trees on the whole training table"),
    ("lr", {}, "is solved to its optimum on the whole training table"),
    ("dmbgn", {"item_embeddings": "metapath2vec"}, "random walks over the whole training graph"),
])
def test_what_cannot_train_over_parts_is_a_one_line_error(data, tmp_path, model, params, words):
    result = _invoke("voucher", "train", "--sessions", data / "parts" / "sessions", "--events",
                     data / "parts" / "events", "--items", data / "items.parquet", "--model", model, "--params",
                     json.dumps(params), "--out", tmp_path / "m")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    line = " ".join(result.output.split())
    assert line.startswith("error: ") and words in line and not (tmp_path / "m").exists(), line


def test_two_ddp_workers_on_ray_train_like_one_process(ray_cluster, data, tmp_path):
    """The CLI over the parts on the 2-node cluster with 2 workers, against the same loop in this process; both
    models evaluate on the one file's held-out sessions. (Without pre-training, which is a second Ray Train run of
    its own: benchmarks/voucher_parts.py runs it on Ray.)"""
    args = ["voucher", "train", "--sessions", data / "parts" / "sessions", "--events", data / "parts" / "events",
            "--items", data / "items.parquet", "--model", "dmbgn", "--epochs", 6, "--batch-size", 256, "--lr", 0.01,
            "--monitor", "auc", "--params", json.dumps(GRAPH), "--no-refit"]
    local = _invoke(*args, "--out", tmp_path / "local")
    assert local.exit_code == 0, local.output
    ray = _invoke(*args, "--out", tmp_path / "ray", "--executor", "ray", "--address", ray_cluster.address,
                  "--workers", 2)
    assert ray.exit_code == 0, ray.output
    auc = {}
    for name in ("local", "ray"):
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["holdout"]["held_out"] > 0
        result = _invoke("voucher", "evaluate", "--model", tmp_path / name, "--sessions", data / "sessions.parquet",
                         "--events", data / "events.parquet", "--items", data / "items.parquet", "--out",
                         tmp_path / f"eval-{name}")
        assert result.exit_code == 0, result.output
        report = json.loads((tmp_path / f"eval-{name}" / "report.json").read_text())
        assert report["metrics"]["n"] == config["holdout"]["held_out"]
        auc[name] = report["metrics"]["auc"]
    assert auc["local"] > 0.65 and abs(auc["ray"] - auc["local"]) < 0.05, auc


def test_sessions_in_parts_are_refit_over_the_parts_and_evaluate_says_what_that_means(data, tmp_path):
    from promokit.voucher.workflows import train

    parts = {"sessions": data / "parts" / "sessions", "events": data / "parts" / "events",
             "items": data / "items.parquet"}
    model = train(VoucherModel("dnn", NET, QUICK), parts, tmp_path / "m", executor=LocalExecutor())
    refit = model.holdout_["refit"]
    report = model.report_  # the selection's, kept
    assert refit["rows"] == report.n_train + report.n_valid + report.n_test > report.n_train
    assert refit["evaluation"] is None and refit["epochs"] >= 1
    args = ["--sessions", data / "sessions.parquet", "--events", data / "events.parquet", "--items",
            data / "items.parquet"]
    evaluated = _invoke("voucher", "evaluate", "--model", tmp_path / "m", *args, "--out", tmp_path / "ev")
    assert evaluated.exit_code == 0, evaluated.output
    assert "refit on every row, the held-out ones too, over parts" in " ".join(evaluated.output.split())


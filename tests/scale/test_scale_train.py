"""Training over parts (promokit.conversion.parts, promokit.training.shards and shard_loop, promokit.scale.train): the
vocabulary counted over parts, training part by part and data-parallel on Ray Train."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from conftest import make_impressions, write_parts
from promokit.cli import app
from promokit.conversion.contract import OPTIONAL_LABELS, REQUIRED_LABELS
from promokit.conversion.estimator import ConversionModel
from promokit.conversion.parts import fit_parts, plan
from promokit.data import DataError, FeatureSpec, TableEncoder
from promokit.experiments.conversion.world import make_world
from promokit.scale.executor import LocalExecutor, make_executor
from promokit.training import LazyWeightDecay, TrainConfig, stream_batches
from promokit.training.shards import shards

runner = CliRunner()
SMALL = {"emb_dim": 4, "hidden": (16,), "dropout": 0.0}


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


# ------------------------------------------------------------------------------------------------ the vocabulary


def test_the_vocabulary_counted_over_parts_on_ray_equals_the_local_fit(ray_cluster, tmp_path):
    """Uneven parts, one empty and one of a single row; ids whose count reaches min_count only summed over two
    parts; a missing category; an integer column with few values per part but many over the table."""
    table = make_impressions()
    rows = np.arange(len(table))
    table["coupon"] = pd.Series((rows // 3).astype(str), dtype=object).where(rows % 97 != 0, None)
    table["bucket"] = rows // 40  # 38 values in the first part, 100 in the table: numeric, as on the whole table
    table.loc[7, "price"] = np.nan
    parts = write_parts(table, tmp_path / "parts", [1501, 0, 700, 1, 1798])  # coupons 500 and 733 straddle parts
    spec = FeatureSpec(min_count=3)
    estimator = ConversionModel("esmm", SMALL, TrainConfig(progress=False), spec, test_fraction=0)
    job = plan(estimator, parts, make_executor("ray", workers=2), 2, valid_fraction=0)
    local_spec = spec.resolve(table, REQUIRED_LABELS, OPTIONAL_LABELS)
    local = TableEncoder.fit(table, local_spec)
    assert job.estimator.feature_spec_ == local_spec and "bucket" in local_spec.numeric
    assert job.estimator.encoder_.to_dict()["categorical"] == local.to_dict()["categorical"]
    assert "500" in local.categorical["coupon"].vocabulary and "0" not in local.categorical["coupon"].vocabulary
    for name, enc in local.numeric.items():
        got = job.estimator.encoder_.numeric[name]
        assert (got.mean, got.std, got.flag_missing) == pytest.approx((enc.mean, enc.std, enc.flag_missing), rel=1e-12)
    assert job.estimator.report_.n_train == len(table)


def test_shards_are_equal_contiguous_ranges_padded_by_wrapping():
    assert shards([5, 0, 3], 3, pad=True) == [[(0, 0, 3)], [(0, 3, 5), (2, 0, 1)], [(2, 1, 3), (0, 0, 1)]]
    assert shards([5, 0, 3], 3, pad=False) == [[(0, 0, 3)], [(0, 3, 5), (2, 0, 1)], [(2, 1, 3)]]
    assert shards([1], 2, pad=True) == [[(0, 0, 1)], [(0, 0, 1)]]


def test_batches_streamed_from_chunks_cross_chunk_boundaries():
    chunks = [{"x": torch.arange(a, b)} for a, b in ((0, 7), (7, 7), (7, 12), (12, 21))]
    batches = list(stream_batches(iter(chunks), 4, torch.Generator().manual_seed(0)))
    assert [len(b["x"]) for b in batches] == [4, 4, 4, 4, 5]  # 21 rows: the one-row tail joins the last batch
    assert sorted(torch.cat([b["x"] for b in batches]).tolist()) == list(range(21))


# ------------------------------------------------------------------------------------------------------ training


def test_lazy_decay_keeps_data_parallel_replicas_identical():
    """Two replicas read different rows, step on the averaged sparse gradient (what DDP hands each of them): the
    rows one replica never read are decayed before their update there too, so the replicas stay equal."""
    replicas = []
    for _ in range(2):
        torch.manual_seed(0)
        table = nn.Embedding(10, 3, sparse=True)
        replicas.append((table, LazyWeightDecay(torch.optim.SparseAdam([table.weight], lr=0.1), [table], 0.5)))
    reads = [torch.tensor([0, 1, 2]), torch.tensor([2, 5, 7])]
    for step in range(5):
        grads = []
        for (table, opt), rows in zip(replicas, reads):
            opt.zero_grad()
            table((rows + step) % 10).pow(2).sum().backward()
            grads.append(table.weight.grad)
        average = (grads[0] + grads[1]) / 2
        for table, opt in replicas:
            table.weight.grad = average.clone()
            opt.step()
    for _, opt in replicas:
        opt.flush()
    torch.testing.assert_close(replicas[0][0].weight, replicas[1][0].weight, rtol=0, atol=0)


def test_training_part_by_part_resumes_exactly(tmp_path):
    table = make_impressions()
    parts = write_parts(table, tmp_path / "parts", [1200, 0, 1300, 1500])
    config = TrainConfig(epochs=4, batch_size=256, lr=0.01, progress=False, patience=10, embedding_decay=1.0)

    def fit(epochs, **kwargs):
        estimator = ConversionModel("esmm", SMALL, TrainConfig(**{**config.to_dict(), "epochs": epochs}))
        return fit_parts(estimator, parts, LocalExecutor(), **kwargs)

    straight = fit(4)
    fit(2, checkpoint_dir=tmp_path / "ck")
    resumed = fit(4, checkpoint_dir=tmp_path / "ck", resume=True)
    assert [e["epoch"] for e in resumed.history_.epochs] == [0, 1, 2, 3]
    for (name, a), b in zip(straight.net_.state_dict().items(), resumed.net_.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


#: Per epoch (train_loss, valid_ctcvr, valid_ctcvr_auc, valid_ctr, valid_ctr_auc, valid_cvr_auc, valid_loss) of the
#: run below, recorded with the loop over shards before it became a case of the trainer's loop: training part by part
#: in this process must keep every figure, to the last bits of a float32 sum (which differ between CPUs: an AMD EPYC
#: gives 0.20687416 for 0.20687415 at the third epoch).
PINNED = [
    (0.8811519228178879, 0.21949388086795807, 0.5859446303620323, 0.6098949909210205,
     0.684418004587156, 0.5690058479532164, 0.8293888568878174),
    (0.7943168602553494, 0.20571251213550568, 0.5787952540310314, 0.5845780968666077,
     0.708930619266055, 0.543859649122807, 0.7902905941009521),
    (0.7661334258582204, 0.20687414705753326, 0.5851840584119258, 0.5644374489784241,
     0.7065653669724771, 0.571345029239766, 0.7713115811347961),
]


def test_training_part_by_part_keeps_its_pinned_figures(tmp_path):
    parts = write_parts(make_impressions(), tmp_path / "parts", [1200, 0, 1300, 1500])
    config = TrainConfig(epochs=3, batch_size=256, lr=0.01, progress=False, patience=10, embedding_decay=1.0)
    with pytest.warns(UserWarning, match="offset wide term"):
        history = fit_parts(ConversionModel("esmm", SMALL, config), parts, LocalExecutor()).history_
    keys = ("train_loss", "valid_ctcvr", "valid_ctcvr_auc", "valid_ctr", "valid_ctr_auc", "valid_cvr_auc", "valid_loss")
    figures = [tuple(e[k] for k in keys) for e in history.epochs]
    assert [figure == pytest.approx(pinned, rel=1e-6, abs=0) for figure, pinned in zip(figures, PINNED)] == [True] * 3
    assert history.best_epoch == 2 and history.embedding_decay == 1.0  # recorded as by the Trainer


def test_training_over_parts_names_the_python_arguments(tmp_path):
    """The library's messages name its arguments (`wide`), never a command's flags (the commands reword them)."""
    parts = write_parts(make_impressions(), tmp_path / "parts", [2000, 2000])
    with pytest.raises(DataError, match=r"^model 'lr' is not trained by epochs .*: fit it on the table read whole "
                                        r"\(ConversionModel.fit\)") as caught:
        fit_parts(ConversionModel("lr"), parts, LocalExecutor())
    assert "--" not in str(caught.value)
    result = _invoke("conversion", "train", "--data", parts, "--model", "lr", "--out", tmp_path / "m", "--executor",
                     "ray")  # the command says it with its flags, before starting Ray
    assert result.exit_code == 2 and ("error: model 'lr' is not trained by epochs of mini-batches, so it cannot train "
                                      "over a table's parts with --executor ray: train it with --executor local"
                                      ) in " ".join(result.output.split()), result.output
    estimator = ConversionModel("esmm", {**SMALL, "wide": "offset"}, TrainConfig(epochs=1, progress=False))
    with pytest.warns(UserWarning, match=r"training without it \(`wide` none\); `wide` joint trains one"):
        fit_parts(estimator, parts, LocalExecutor(), valid_fraction=0)
    assert estimator.model_params_["wide"] == "none"


def test_two_ddp_workers_on_ray_train_like_one(ray_cluster, tmp_path):
    """ESMM on 20k synthetic impressions in uneven parts: 2 DDP workers on the 2-node cluster against the same
    loop in this process (1 worker, same seed); the model directory loads and predicts."""
    table = make_world(n_impressions=20_000, seed=1).table
    parts = write_parts(table, tmp_path / "parts", [6000, 0, 3000, 7000, 4000])
    args = ["conversion", "train", "--data", parts, "--model", "esmm", "--epochs", 3, "--batch-size", 500,
            "--lr", 0.01, "--monitor", "ctr_auc", "--params", json.dumps(SMALL), "--no-refit"]
    one = _invoke(*args, "--out", tmp_path / "one")
    assert one.exit_code == 0, one.output
    two = _invoke(*args, "--out", tmp_path / "two", "--executor", "ray", "--workers", 2)
    assert two.exit_code == 0, two.output
    assert "model written to" in two.output and not (tmp_path / ".two.checkpoint").exists()
    histories = {n: json.loads((tmp_path / n / "history.json").read_text()) for n in ("one", "two")}
    assert len(histories["two"]["epochs"]) == 3
    auc = {n: h["best_score"] for n, h in histories.items()}
    assert auc["one"] > 0.6 and abs(auc["two"] - auc["one"]) < 0.01, auc
    test = make_world(n_impressions=2000, seed=2).table
    predictions = {n: ConversionModel.load(tmp_path / n).predict(test) for n in ("one", "two")}
    assert list(predictions["two"].columns) == ["user_id", "item_id", "p_ctr", "p_cvr", "p_ctcvr"]
    assert len(predictions["two"]) == 2000
    assert np.corrcoef(predictions["one"]["p_ctr"], predictions["two"]["p_ctr"])[0, 1] > 0.9


def test_a_bad_part_is_named_in_the_error(ray_cluster, tmp_path):
    table = make_impressions()
    parts = write_parts(table, tmp_path / "parts", [2000, 1000, 1000])
    (parts / "part-00001.parquet").write_bytes(b"not parquet")
    result = _invoke("conversion", "train", "--data", parts, "--out", tmp_path / "m", "--executor", "ray")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{parts / 'part-00001.parquet'}: cannot be read as parquet" in result.output
    spoiled = table.iloc[3000:].copy()
    spoiled.iloc[5, spoiled.columns.get_loc("price")] = np.inf
    spoiled.to_parquet(parts / "part-00002.parquet", index=False)
    table.iloc[2000:3000].to_parquet(parts / "part-00001.parquet", index=False)
    result = _invoke("conversion", "train", "--data", parts, "--out", tmp_path / "m")
    assert result.exit_code == 2 and f"{parts / 'part-00002.parquet'}: " in result.output
    assert "'price' has 1 infinite" in result.output


def test_ctrl_c_stops_a_ray_train_run_and_keeps_the_best_model(ray_cluster, tmp_path):
    """SIGINT to `conversion train --executor ray` after its first checkpoint: Ray Train aborts the run, the best
    model so far is written with a hint to --resume, and the cluster's CPUs are free again."""
    import ray

    parts = write_parts(make_world(n_impressions=20_000, seed=1).table, tmp_path / "parts", [5000] * 4)
    command = [sys.executable, "-m", "promokit.cli", "conversion", "train", "--data", str(parts),
               "--out", str(tmp_path / "m"), "--model", "esmm", "--epochs", "1000", "--patience", "1000",
               "--batch-size", "500", "--params", json.dumps(SMALL), "--executor", "ray",
               "--address", ray_cluster.address, "--workers", "1"]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    deadline = time.time() + 120
    while not any((tmp_path / ".m.checkpoint").glob("checkpoint_*/checkpoint.pt")) and time.time() < deadline:
        assert driver.poll() is None, driver.stdout.read()
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)
    output = driver.communicate(timeout=60)[0]
    assert driver.returncode == 0, output
    assert "interrupted after" in output and "continue with --resume" in output and "Traceback" not in output
    test = make_world(n_impressions=100, seed=2).table
    assert ConversionModel.load(tmp_path / "m").predict(test, keep=[]).shape == (100, 3)
    deadline = time.time() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2

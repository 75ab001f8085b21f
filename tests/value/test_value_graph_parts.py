"""ESDPM (which reads the consumption graph) trained over a value dataset in parts from records: the graph's encoders
from the shards' counts equal a one-process fit, each record is the in-memory keyed sampler's neighbourhood and gives
the same e_c, training part by part learns as one folder does (and predicts over parts), two DDP workers on Ray
Train reach the AUC of one, and a bad payment is a one-line error naming its file and row."""

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from conftest import write_value_parts
from promokit.cli import app
from promokit.data.errors import DataError
from promokit.experiments.value.world import make_world
from promokit.metrics import auc
from promokit.nn.graph_records import read_records
from promokit.nn.keyed_sampling import node_keys, sample_keyed
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig
from promokit.value.contract import MERCHANT, USER, read_folder, table_paths
from promokit.value.estimator import ValueModel
from promokit.value.graph_records import write_records
from promokit.value.graph_training import PartRecords, graph_batch
from promokit.value.inputs import InputEncoders
from promokit.value.part_tables import dataset_parts
from promokit.value.parts import _plan, train_parts

torch.set_num_threads(1)
runner = CliRunner()
SMALL = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "max_len": 12,
         "fanouts": [4, 3]}
QUICK = TrainConfig(epochs=3, batch_size=256, lr=3e-3, patience=10, progress=False)
PART_USERS = [300, 0, 500, 400]


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A 1,200-user world as ``parts/`` (one empty part) and as ``whole/`` (the parts concatenated)."""
    return write_value_parts(make_world(1200, seed=3), tmp_path_factory.mktemp("value-graph-parts"), PART_USERS)


@pytest.fixture(scope="module")
def written(data, tmp_path_factory):
    """The plan's estimator, with the records of two draws written (its graph's encoders counted on the way)."""
    out = tmp_path_factory.mktemp("records")
    estimator = ValueModel("esdpm", SMALL, QUICK)
    paths = table_paths(data / "parts")
    estimator._start_fit()  # as train_parts does before planning
    job, _ = _plan(estimator, paths, LocalExecutor(), out / "keys", False)
    report = write_records(dataset_parts(paths), job.train_rows.specs, estimator.encoders_, out / "records",
                           SMALL["fanouts"], 7, (0, 1), LocalExecutor())
    return estimator, out / "records", report


def test_graph_encoders_from_shard_counts_equal_a_one_process_fit(data, written):
    estimator, _, report = written
    tables = read_folder(data / "whole")
    expected = InputEncoders.fit(tables, estimator.max_len, rows=estimator.split_rows(tables)[0]).to_dict()
    got = estimator.encoders_.to_dict()
    assert got["merchants"] == expected["merchants"]
    for name in ("user_structure", "merchant_structure"):
        for column, encoder in expected[name]["numeric"].items():
            assert got[name]["numeric"][column] == pytest.approx(encoder, rel=1e-9), (name, column)
    assert (report["users"], report["payments"]) == (len(tables.users), len(tables.consumption))
    assert report["records"] == 2 * tables.deliveries[USER].nunique()


def test_records_are_the_keyed_neighbourhoods_and_give_their_e_c(data, written):
    """Per part and draw, the records' users (rows of the one-folder graph, hop by hop) and edges are
    sample_keyed's on the whole graph; the GNN gives their seeds the same states from the records' joined inputs
    as from the whole tables' inputs."""
    estimator, records, _ = written
    tables = read_folder(data / "whole")
    inputs = estimator.encoders_.nodes(tables)
    merchants = np.unique(tables.consumption[MERCHANT].to_numpy(dtype=str))
    keys = node_keys(tables.users[USER]), node_keys(pd.Series(merchants))
    net = estimator.build_net().attach(inputs).eval()
    encoder = net.encoders[0]
    first = 0
    for k, users in enumerate(PART_USERS):
        if not users:
            assert pq.read_table(records / f"part-{k:05d}.parquet").num_rows == 0
            continue
        for draw in (0, 1):
            part = PartRecords(records / f"part-{k:05d}.parquet", draw)
            rows = np.sort(part.table.column("user_row").to_numpy())
            got = read_records(part.take(rows)).collated.sub
            want = sample_keyed(inputs.graph, *keys, first + rows, SMALL["fanouts"], 7, draw)
            assert torch.equal(got.customers, want.customers)
            assert got.merchants_per_hop == want.merchants_per_hop and got.customers_per_hop == want.customers_per_hop
            assert torch.equal(got.merchant_to_customer[1], want.merchant_to_customer[1])
            batch = graph_batch({"_chunk": torch.zeros(len(rows), dtype=torch.long),
                                 "user_row": torch.from_numpy(rows)}, {0: part})
            with torch.no_grad():
                from_records = encoder._consumption(None, batch["graph"])
                in_memory = encoder.gnn(*encoder._node_features(want.customers, want.merchants), want).customers
            torch.testing.assert_close(from_records, in_memory, atol=1e-5, rtol=1e-4)
        first += users


def test_esdpm_over_parts_learns_like_one_folder_and_predicts_over_parts(data, tmp_path):
    """Local executor, one worker: the same held-out deliveries as one folder, a test AUC within 0.05 of the
    one-folder model's; ``value predict`` scores the dataset in parts with it."""
    tables = read_folder(data / "whole")
    parts = ValueModel("esdpm", SMALL, QUICK)
    counts = train_parts(parts, table_paths(data / "parts"), LocalExecutor(), tmp_path / "keys")
    assert not (tmp_path / "graph-records").exists()
    one = ValueModel("esdpm", SMALL, QUICK).fit(tables)
    test = one.split_rows(tables)[2]
    assert counts["test"] == len(test) and np.array_equal(parts.held_out(tables), test)
    scores = {name: auc(tables.convert[test], model.predict(tables, rows=test).p_ctcvr.to_numpy())
              for name, model in (("parts", parts), ("one", one))}
    assert scores["parts"] > 0.6 and abs(scores["parts"] - scores["one"]) < 0.05, scores

    parts.save(tmp_path / "model")
    result = _invoke("value", "predict", "--model", tmp_path / "model", "--data", data / "parts", "--out",
                     tmp_path / "scored")
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "scored" / "scores").glob("part-*.parquet"))) == len(PART_USERS)


def test_two_ddp_workers_on_ray_train_like_one(ray_cluster, data, tmp_path):
    """``value train --model esdpm`` over parts, in this process and on 2 Ray Train workers (DDP); both evaluate on
    the one-folder tables within 0.05 AUC."""
    args = ["value", "train", "--data", data / "parts", "--model", "esdpm", "--epochs", 2, "--batch-size", 256,
            "--lr", 3e-3, "--monitor", "auc", "--params", json.dumps(SMALL), "--no-refit"]
    scores = {}
    for name, extra in (("one", []), ("two", ["--executor", "ray", "--address", ray_cluster.address,
                                              "--workers", 2])):
        result = _invoke(*args, "--out", tmp_path / name, *extra)
        assert result.exit_code == 0, result.output
        result = _invoke("value", "evaluate", "--model", tmp_path / name, "--data", data / "whole", "--out",
                         tmp_path / f"eval-{name}")
        assert result.exit_code == 0, result.output
        scores[name] = json.loads((tmp_path / f"eval-{name}" / "report.json").read_text())["metrics"]["auc"]
    assert scores["one"] > 0.6 and abs(scores["two"] - scores["one"]) < 0.05, scores


def test_a_payment_of_a_user_not_in_the_part_names_its_file_and_row(data, tmp_path):
    import shutil

    shutil.copytree(data / "parts", tmp_path / "parts")
    path = tmp_path / "parts" / "consumption" / "part-00002.parquet"
    payments = pd.read_parquet(path)
    stranger = pd.read_parquet(tmp_path / "parts" / "users" / "part-00000.parquet")[USER].iloc[0]
    payments.loc[3, USER] = stranger
    payments.to_parquet(path, index=False)
    with pytest.raises(DataError) as error:
        train_parts(ValueModel("esdpm", SMALL, QUICK), table_paths(tmp_path / "parts"), LocalExecutor(),
                    tmp_path / "keys")
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "3" in message and str(stranger) in message, message
    shutil.rmtree(tmp_path / "parts" / "consumption")
    with pytest.raises(DataError, match="reads the consumption graph: give the consumption/ parts"):
        train_parts(ValueModel("esdpm", SMALL, QUICK), table_paths(tmp_path / "parts"), LocalExecutor(),
                    tmp_path / "keys")

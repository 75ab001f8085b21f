"""Training from records on the processes of a torch.distributed launch (ProcessGroupExecutor, as torchrun starts
them), on gloo here: a group of one trains exactly as one process; two processes take the steps of one process,
reach its validation figures and end with the same weights; without a group or torchrun's variables the executor
says what is missing in one line."""

import json
import os
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_incentive_record_training import held_out_auc, write_split_records

from promokit.data.errors import DataError
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.incentive.record_training import fit_from_records
from promokit.scale import ProcessGroupExecutor
from promokit.training import TrainConfig

torch.set_num_threads(1)
PARAMS = {"width": 16, "hidden": [16, 16], "emb_dim": 4, "fanouts": [5, 5]}
TRAIN = TrainConfig(epochs=3, batch_size=64, lr=3e-3, patience=10, monitor="customer_loglik", progress=False, seed=3,
                    device="cpu")


def _model() -> IncentiveModel:
    return IncentiveModel("gnn-hazard", PARAMS, TRAIN, test_fraction=0.2)


def _world():
    synthetic = make_world(1500, 100, seed=4)
    return synthetic, check_tables(synthetic.customers, synthetic.merchants, synthetic.edges)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    synthetic, world = _world()
    model = _model()
    model.prepare(world)
    split, train, valid = write_split_records(model, synthetic, tmp_path_factory.mktemp("records"))
    return world, split, train, valid


def _fit(world, train, valid, executor, **kwargs) -> IncentiveModel:
    model = _model()
    model.prepare(world)
    return fit_from_records(model, train, valid, executor=executor, **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, train, valid, out) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _, world = _world()
    model = _fit(world, train, valid, ProcessGroupExecutor(), checkpoint_dir=out / "checkpoint")
    torch.save(model.net_.state_dict(), out / f"rank{rank}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps([e["train_loss"] for e in model.history_.epochs]))
    dist.destroy_process_group()


def test_a_group_of_one_trains_exactly_as_one_process(records, tmp_path):
    world, _, train, valid = records
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    try:
        grouped = _fit(world, train, valid, ProcessGroupExecutor(), checkpoint_dir=tmp_path)
        assert ProcessGroupExecutor().workers == 1
    finally:
        dist.destroy_process_group()
    alone = _fit(world, train, valid, None)
    assert grouped.history_.epochs[-1]["train_loss"] == alone.history_.epochs[-1]["train_loss"]
    for name, weight in alone.net_.state_dict().items():
        torch.testing.assert_close(grouped.net_.state_dict()[name], weight, rtol=0, atol=0)
    assert (tmp_path / "checkpoint.pt").exists()


def test_two_processes_train_like_one(records, tmp_path):
    world, split, train, valid = records
    mp.spawn(_worker, args=(2, _free_port(), train, valid, tmp_path), nprocs=2, join=True)
    states = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for name in states[0]:
        torch.testing.assert_close(states[1][name], states[0][name])  # DDP keeps the replicas equal
    two = _model()
    two.prepare(world)
    two.net_.load_state_dict(states[0])
    one = _fit(world, train, valid, None)
    rows = split.test_customers
    auc = {"one": held_out_auc(one, world, rows), "two": held_out_auc(two, world, rows)}
    assert auc["one"] > 0.7 and abs(auc["two"] - auc["one"]) < 0.03, auc
    losses = np.array([[e["train_loss"] for e in one.history_.epochs],
                       json.loads((tmp_path / "rank0.json").read_text())])
    assert np.abs(losses[0] - losses[1]).max() < 0.05 * losses[0].max(), losses


def test_without_a_group_or_torchrun_the_executor_names_what_is_missing(records, monkeypatch):
    world, _, train, valid = records
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DataError, match="^executor: no torch.distributed process group and RANK, WORLD_SIZE, "
                                        "MASTER_ADDR, MASTER_PORT unset; launch with torchrun") as err:
        _fit(world, train, valid, ProcessGroupExecutor())
    assert "\n" not in str(err.value)
    with pytest.raises(DataError, match="^executor: a process-group executor only trains"):
        ProcessGroupExecutor().map(len, [])


TORCHRUN_SCRIPT = """
import sys
import torch
import torch.distributed as dist
from promokit.incentive import IncentiveModel, fit_from_records, prepare_from_records
from promokit.scale import ProcessGroupExecutor
from promokit.training import TrainConfig

torch.set_num_threads(1)
records, out = sys.argv[1], sys.argv[2]
model = IncentiveModel("gnn-hazard", {params!r}, TrainConfig(**{train!r}), test_fraction=0.2, refit=False)
prepare_from_records(model, records)
fit_from_records(model, records + "/train", records + "/valid", executor=ProcessGroupExecutor())
if dist.get_rank() == 0:
    model.save(out)
"""


@pytest.mark.slow
def test_torchrun_trains_from_the_records_artifact_alone(tmp_path):
    """The documented recipe: records and their artifact written once, the graph's tables then gone, and two
    torchrun processes train from the records alone, as one process does."""
    import shutil
    import subprocess
    import sys

    from promokit.incentive import prepare_from_records, write_training_records
    from promokit.scale import LocalExecutor

    synthetic, world = _world()
    graph = tmp_path / "graph"
    owner = np.arange(len(synthetic.customers)) % 2
    part_of = dict(zip(synthetic.customers.customer_id, owner))
    for name, table in (("customers", synthetic.customers), ("edges", synthetic.edges)):
        (graph / name).mkdir(parents=True)
        for k in (0, 1):
            table[table.customer_id.map(part_of) == k].to_parquet(graph / name / f"part-{k:05d}.parquet", index=False)
    (graph / "merchants").mkdir()
    synthetic.merchants.to_parquet(graph / "merchants" / "part-00000.parquet", index=False)
    model = IncentiveModel("gnn-hazard", PARAMS, TRAIN, test_fraction=0.2, refit=False)
    write_training_records(model, graph / "customers", graph / "merchants", graph / "edges", tmp_path / "records",
                           LocalExecutor())
    shutil.rmtree(graph)  # no process can read the graph's tables now
    train = {**{k: getattr(TRAIN, k) for k in ("epochs", "batch_size", "lr", "patience", "monitor", "seed", "device")},
             "progress": True}
    (tmp_path / "train.py").write_text(TORCHRUN_SCRIPT.format(params=PARAMS, train=train))
    run = subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--nproc_per_node", "2",
                          "--master_port", str(_free_port()), str(tmp_path / "train.py"), str(tmp_path / "records"),
                          str(tmp_path / "two")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [run.stdout.count(f"epoch {e}/3: ") for e in (1, 2, 3)] == [1, 1, 1], run.stdout  # rank 0's lines
    one = prepare_from_records(IncentiveModel("gnn-hazard", PARAMS, TRAIN, test_fraction=0.2, refit=False),
                               tmp_path / "records")
    fit_from_records(one, tmp_path / "records" / "train", tmp_path / "records" / "valid")
    two = IncentiveModel.load(tmp_path / "two")
    recorded = np.concatenate([pd.read_parquet(part, columns=["customer_id"]).customer_id.to_numpy()
                               for part in (tmp_path / "records").glob("*/part-*.parquet")])
    labelled = world.labelled_customers
    rows = labelled[~np.isin(world.customers.customer_id.to_numpy()[labelled], recorded)]  # the test customers
    auc = {"one": held_out_auc(one, world, rows), "two": held_out_auc(two, world, rows)}
    assert auc["one"] > 0.7 and abs(auc["two"] - auc["one"]) < 0.03, auc

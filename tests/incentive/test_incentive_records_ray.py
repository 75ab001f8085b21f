"""The incentive GNN trained from records data-parallel on Ray Train: two DDP workers take the steps of one process
and reach its validation figures; a worker killed mid-epoch is restarted and the run continues from the last epoch's
checkpoint, ending where an uninterrupted run ends."""

import os
import signal
import threading
import time

import numpy as np
import pytest
import torch
from test_incentive_record_training import held_out_auc, write_split_records

from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.incentive.record_training import fit_from_records
from promokit.training import TrainConfig

pytest.importorskip("ray")
torch.set_num_threads(1)

PARAMS = {"width": 16, "hidden": [16, 16], "emb_dim": 4, "fanouts": [5, 5]}
TRAIN = TrainConfig(epochs=3, batch_size=64, lr=3e-3, patience=10, monitor="customer_loglik", progress=False, seed=3)


def _model() -> IncentiveModel:
    return IncentiveModel("gnn-hazard", PARAMS, TRAIN, test_fraction=0.2)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    synthetic = make_world(1500, 100, seed=4)
    world = check_tables(synthetic.customers, synthetic.merchants, synthetic.edges)
    model = _model()
    model.prepare(world)
    split, train, valid = write_split_records(model, synthetic, tmp_path_factory.mktemp("records"))
    return world, split, train, valid


def _fit(records, executor, **kwargs) -> IncentiveModel:
    world, _, train, valid = records
    model = _model()
    model.prepare(world)
    return fit_from_records(model, train, valid, executor=executor, **kwargs)


@pytest.fixture(scope="module")
def two_workers(ray_cluster, records) -> IncentiveModel:
    from promokit.scale import RayExecutor

    return _fit(records, RayExecutor(workers=2))


def test_two_ddp_workers_train_like_one_process(records, two_workers):
    world, split, _, _ = records
    one, two = _fit(records, None), two_workers
    assert len(two.history_.epochs) == len(one.history_.epochs) == TRAIN.epochs
    assert two.history_.epochs[0]["samples_per_second"] > 0
    rows = split.test_customers
    auc = {"one": held_out_auc(one, world, rows), "two": held_out_auc(two, world, rows)}
    assert auc["one"] > 0.7 and abs(auc["two"] - auc["one"]) < 0.03, auc
    # the same number of steps on batches of the same global size: the losses stay close epoch by epoch
    losses = np.array([[e["train_loss"] for e in m.history_.epochs] for m in (one, two)])
    assert np.abs(losses[0] - losses[1]).max() < 0.05 * losses[0].max(), losses


def _train_workers() -> list:
    """The Ray Train workers of this session's cluster (its raylets are this process's children)."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if "RayTrainWorker" in " ".join(p.cmdline())]


def test_a_worker_killed_mid_epoch_is_restarted_from_the_checkpoint(records, two_workers, tmp_path):
    from promokit.scale import RayExecutor
    from promokit.training.trainer import CHECKPOINT

    straight = two_workers
    folder = tmp_path / "checkpoint"
    killed, first_epoch = [], []

    def kill_after_the_first_checkpoint():
        deadline = time.time() + 120
        while time.time() < deadline:
            saved = list(folder.glob(f"checkpoint_*/{CHECKPOINT}"))
            if saved:
                time.sleep(0.3)  # into the second epoch
                first_epoch.append(torch.load(saved[0], weights_only=True)["history"]["epochs"][0])
                victim = _train_workers()[0]
                killed.append(victim.pid)
                os.kill(victim.pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_the_first_checkpoint)
    killer.start()
    model = _fit(records, RayExecutor(workers=2), checkpoint_dir=folder)
    killer.join()
    assert killed, "no checkpoint appeared"
    epochs = model.history_.epochs
    assert [e["epoch"] for e in epochs] == list(range(TRAIN.epochs))
    assert epochs[0] == first_epoch[0]  # carried from the checkpoint, not trained again (its seconds would differ)
    for (name, a), b in zip(straight.net_.state_dict().items(), model.net_.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)

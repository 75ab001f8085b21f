"""Training a planned job (:class:`~promokit.training.shard_loop.TrainJob`) data-parallel on Ray Train: DDP over gloo,
one CPU per worker (over NCCL, one GPU per worker, when the job's ``device`` resolves to CUDA), each worker running the trainer's loop on its shard
(:func:`promokit.training.shard_loop.run_shard`). The Ray executor's ``train``
(:meth:`promokit.scale.executor.RayExecutor.train`) calls :func:`train_on_ray`.

Sparse embedding gradients: DDP recognises ``nn.Embedding(sparse=True)`` (``expect_sparse_gradient``), gives each
such table a bucket of its own and allreduces its sparse gradient; gloo implements the sparse allreduce (by
gathering every worker's indices and values). Measured on torch 2.13 CPU (docs/training.md): the averaged sparse
gradient equals the gradient of the workers' batches taken together exactly, so the tables stay sparse and
SparseAdam trains them as in one process; the lazy row decay catches up the rows of the averaged gradient before
each step (rows another worker read), which keeps the replicas identical. ``--params '{"sparse": false}'`` gives a
model dense embedding gradients instead (DDP then allreduces the whole table every step: faster for tables of a
few thousand rows, ten times slower per step at a million rows).

Checkpoints: each epoch, rank 0 reports the state the local loop saves as a Ray Train checkpoint under the run's
storage (``.OUT.checkpoint`` beside the model directory, which must be reachable from every node on a multi-node
cluster); a worker group that fails is restarted from it (``retries`` times: the executor's), ``--resume`` continues from it (or
from a run begun in this process), and the driver builds the model from the last one.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import torch

from promokit.data.errors import DataError
from promokit.training.device import CPU, ddp_backend, resolve_device
from promokit.training.process_group import ProcessGroupComm
from promokit.training.shard_loop import TrainJob, fresh_checkpoint_dir, run_shard
from promokit.training.trainer import CHECKPOINT, History, latest_state

#: Ray Train's controller polls its workers every this many seconds (its default, 2 s, delays every epoch's report
#: and the end of a run by up to 2 s); a value the user set in the environment wins.
POLL_VARIABLE, POLL_SECONDS = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", 0.25


def train_on_ray(job: TrainJob, workers: int, checkpoint_dir: str | os.PathLike | None = None,
                 resume: bool = False, retries: int = 3) -> tuple[torch.nn.Module, History]:
    """Run :func:`~promokit.training.shard_loop.run_shard` on ``workers`` Ray Train workers with the checkpoint in
    ``checkpoint_dir`` (``resume``: continue from it; a failed worker group restarts from it up to ``retries``
    times); the kept network (evaluation mode) and the history of the last checkpoint."""
    checkpoint_dir = fresh_checkpoint_dir(checkpoint_dir, resume)
    storage = (checkpoint_dir or Path(tempfile.mkdtemp(prefix="promokit-train-")) / "run").resolve()
    try:
        return _train_on_ray(job, workers, storage, resume, retries)
    finally:
        if checkpoint_dir is None:
            shutil.rmtree(storage.parent, ignore_errors=True)


def _train_on_ray(job: TrainJob, workers: int, storage: Path, resume: bool, retries: int):
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    begun_here = latest_state(storage) if resume and (storage / CHECKPOINT).exists() else None  # continues on Ray
    device = resolve_device(job.estimator.train_config.device)
    gpu = device.type == "cuda"
    gpus = int(ray.cluster_resources().get("GPU", 0)) if gpu and ray.is_initialized() else workers
    if workers > gpus:  # NCCL runs one worker per GPU
        fewer = f"at most {gpus} workers, or " if gpus else ""
        raise DataError(f"workers: {workers} workers on device {str(device)!r} need a GPU each and the Ray cluster has "
                        f"{gpus}; use {fewer}device 'cpu'")
    trainer = TorchTrainer(
        _ray_worker, train_loop_config={"job": ray.put(job), "initial": ray.put(begun_here), "gpu": gpu},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpu,
                                     resources_per_worker={"CPU": 1, **({"GPU": 1} if gpu else {})}),
        torch_config=TorchConfig(backend=ddp_backend(device)),
        run_config=RunConfig(name=storage.name, storage_path=str(storage.parent),
                             checkpoint_config=CheckpointConfig(num_to_keep=1),
                             failure_config=FailureConfig(max_failures=retries)))
    interrupted, handler = False, signal.getsignal(signal.SIGINT)
    poll = POLL_VARIABLE not in os.environ
    if poll:
        os.environ[POLL_VARIABLE] = str(POLL_SECONDS)
    try:
        trainer.fit()
    except ray.train.TrainingFailedError as exc:
        raise _data_error(exc) or exc
    except (KeyboardInterrupt, SystemExit, ray.exceptions.RayActorError):  # Ray Train's Ctrl-C handler aborts the run
        interrupted = True
    finally:
        signal.signal(signal.SIGINT, handler)  # fit() installs its own
        if poll:
            os.environ.pop(POLL_VARIABLE, None)
    state = latest_state(storage)
    if state is None:
        raise DataError("training was interrupted before its first epoch ended; nothing to save") if interrupted \
            else DataError("Ray Train finished without a checkpoint")
    net = job.estimator.build_net()
    net.load_state_dict(state["best_state"] if state["best_state"] is not None else state["model"])
    net.eval()
    history = History(**state["history"])
    if interrupted:
        history.stopped = "interrupted"
    return net, history


class _RayWorker(ProcessGroupComm):
    """The communicator of one worker of a Ray Train run: DDP over the process group Ray Train set up (gloo; NCCL
    with ``gpu``, each worker on the GPU Ray Train gave it), checkpoints reported to Ray Train by rank 0; a run with
    no Ray Train checkpoint yet starts from ``initial`` (a run begun in this process), if any."""

    def __init__(self, initial: dict | None = None, gpu: bool = False):
        import ray.train.torch

        super().__init__(ray.train.torch.get_device() if gpu else CPU)
        self.initial = initial

    def load(self) -> dict | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()  # after a restart, or a run continued from its storage
        if checkpoint is None:
            return self.initial
        with checkpoint.as_directory() as folder:
            return torch.load(Path(folder) / CHECKPOINT, weights_only=True, map_location="cpu")

    def save(self, state, record: dict) -> None:
        import ray.train

        metrics = {k: v for k, v in record.items() if isinstance(v, (int, float))}
        if self.rank != 0:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="promokit-checkpoint-") as folder:
            torch.save(state(), Path(folder) / CHECKPOINT)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def _ray_worker(config: dict) -> None:
    import ray

    run_shard(ray.get(config["job"]), _RayWorker(ray.get(config["initial"]), config["gpu"]))


def _data_error(exc: Exception) -> DataError | None:
    """The one-line DataError a worker raised, out of Ray Train's error."""
    failures = getattr(exc, "worker_failures", None) or {}
    for failure in failures.values():
        seen = failure
        while seen is not None:
            if isinstance(seen, DataError):
                return DataError(str(seen))
            seen = getattr(seen, "cause", None) or seen.__cause__
    return None

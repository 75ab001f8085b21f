"""The training loop over a job's shards (:class:`~promokit.training.shards.TrainJob`): one loop for every
estimator whose network trains by epochs of mini-batches, in this process (:func:`train_in_process`, one worker) or
as one of N data-parallel workers (``promokit.scale.train`` runs it on Ray Train with its own communicator).

A worker's communicator (``comm``) gives its ``rank`` and ``world``, wraps the network (DDP, or nothing), sums,
gathers and broadcasts, and loads and saves checkpoints. Validation: each worker predicts its share of the
validation rows; rank 0 gathers the outputs and labels, computes the loss and AUCs of the whole validation set and
broadcasts the record, so every worker stops at the same epoch. Checkpoints: each epoch the worker saves the state
the local :class:`~promokit.training.Trainer` saves (model, optimisers, history, kept weights); in this process
that is ``checkpoint.pt`` in the checkpoint folder, from which ``resume`` continues.
"""

from __future__ import annotations

import os
import shutil
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from promokit.data.errors import DataError
from promokit.data.io import atomic_path
from promokit.training.batches import stream_batches
from promokit.training.optim import LazyWeightDecay, make_optimizers
from promokit.training.seed import seed_everything
from promokit.training.shards import TrainJob
from promokit.training.trainer import (
    CHECKPOINT,
    EpochLoop,
    History,
    Trainer,
    embedding_decay_for,
    epoch_record,
    flush_optimizers,
    progress_display,
    seed_epoch,
    set_epoch_lr,
    step_progress,
    train_steps,
    validation_record,
)


def train_in_process(job: TrainJob, checkpoint_dir: str | os.PathLike | None = None,
                     resume: bool = False) -> tuple[torch.nn.Module, History]:
    """Train a planned job's network in this process, one worker streaming every shard, with its checkpoint in
    ``checkpoint_dir`` (``resume``: continue from it); return the kept network (evaluation mode) and the history."""
    checkpoint_dir = fresh_checkpoint_dir(checkpoint_dir, resume)
    if resume and checkpoint_dir is not None:
        job.initial = latest_state(checkpoint_dir)
    return run_shard(job, LocalComm(checkpoint_dir))


def fresh_checkpoint_dir(checkpoint_dir: str | os.PathLike | None, resume: bool) -> Path | None:
    """``checkpoint_dir`` as a path, emptied unless the run resumes: a fresh run leaves no stale checkpoint to
    continue later."""
    checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if checkpoint_dir is not None and not resume:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return checkpoint_dir


def latest_state(folder: Path) -> dict | None:
    """The checkpoint of the latest epoch under ``folder``: this process's ``checkpoint.pt`` or a Ray Train
    checkpoint's."""
    found = [p for p in [folder / CHECKPOINT, *folder.glob(f"checkpoint_*/{CHECKPOINT}")] if p.exists()]
    states = [torch.load(p, weights_only=True) for p in found]
    return max(states, key=lambda s: s["epoch"], default=None)


class LocalComm:
    """The communicator of the loop in this process: one worker, checkpoints in ``checkpoint_dir/checkpoint.pt``."""

    rank, world, interactive = 0, 1, True

    def __init__(self, checkpoint_dir: Path | None):
        self.checkpoint_dir = checkpoint_dir

    def wrap(self, net):
        return net

    def sum(self, values: list[float]) -> list[float]:
        return values

    def gather(self, obj) -> list:
        return [obj]

    def broadcast(self, obj):
        return obj

    def load(self) -> dict | None:
        return None

    def save(self, state, record: dict) -> None:
        if self.checkpoint_dir is not None:
            with atomic_path(self.checkpoint_dir / CHECKPOINT) as tmp:
                torch.save(state(), tmp)


def run_shard(job: TrainJob, comm) -> tuple[torch.nn.Module, History]:
    """One worker's training: the network built and seeded as every other worker's, its shard streamed part by
    part each epoch, validation gathered on rank 0, early stopping and checkpoints as the local Trainer's."""
    estimator = job.estimator
    cfg = estimator.train_config
    seed_everything(cfg.seed)
    net = estimator.build_net()
    forward = comm.wrap(net)  # DDP broadcasts rank 0's initial weights
    optimizers = make_optimizers(net, cfg.lr, cfg.weight_decay,
                                 embedding_decay_for(cfg, job.steps * cfg.batch_size))  # the epoch's global rows
    loop = EpochLoop(cfg, validated=job.validated)
    state = comm.load() or job.initial
    if state is not None:
        loop.restore(state, net, optimizers)
    try:
        with progress_display(cfg.progress and comm.interactive) as progress:
            try:
                for epoch in loop.epochs():
                    record = _train_epoch(job, comm, net, forward, optimizers, epoch, progress)
                    if job.validated:
                        record.update(_validate(job, comm, net))
                    stop = loop.end_epoch(record, net)
                    if progress is not None:
                        progress.end_epoch(record, cfg.epochs)
                    comm.save(partial(loop.checkpoint, net, optimizers, epoch), record)
                    if stop:
                        break
            except KeyboardInterrupt:  # in this process only: Ray Train handles Ctrl-C on the driver
                loop.history.stopped = "interrupted"
                flush_optimizers(optimizers)
        return net, loop.finish(net)
    finally:
        for opt in optimizers:
            if isinstance(opt, LazyWeightDecay):
                opt.remove_hooks()


def _train_epoch(job: TrainJob, comm, net, forward, optimizers, epoch: int, progress) -> dict:
    cfg = job.estimator.train_config
    net.train()
    set_epoch_lr(optimizers, cfg, epoch)
    generator = seed_epoch(cfg, epoch, comm.rank)
    segments = job.train[comm.rank]
    order = torch.randperm(len(segments), generator=generator).tolist()
    chunks = (job.train_rows.load(job.estimator, segments[k]) for k in order)
    task = progress.add_task(f"epoch {epoch + 1}/{cfg.epochs}", total=job.steps, loss="") if progress else None
    started = time.perf_counter()
    total, seen = train_steps(forward, net.loss, optimizers, stream_batches(chunks, job.batch_size, generator),
                              on_step=step_progress(progress, task, job.steps))
    flush_optimizers(optimizers)
    seconds = time.perf_counter() - started
    if task is not None:
        progress.remove_task(task)
    loss_sum, rows = comm.sum([total.item(), float(seen)])
    return epoch_record(epoch, loss_sum, int(rows), seconds)


@torch.no_grad()
def _validate(job: TrainJob, comm, net) -> dict:
    """The validation record of the whole validation set: every worker predicts its share, rank 0 computes."""
    estimator = job.estimator
    predictor = Trainer(estimator.train_config)
    pieces = []
    for segment in job.valid[comm.rank]:
        tensors = job.valid_rows.load(estimator, segment)
        outputs = predictor.predict(net, tensors)
        pieces.append(({k: v.numpy() for k, v in outputs.items()},
                       {k: v.numpy() for k, v in tensors.items() if k in net.labels}))
    gathered = comm.gather(pieces)
    record = None
    if comm.rank == 0:
        everything = [piece for worker in gathered for piece in worker]
        outputs = {k: torch.from_numpy(np.concatenate([p[0][k] for p in everything])) for k in everything[0][0]}
        labels = {k: torch.from_numpy(np.concatenate([p[1][k] for p in everything])) for k in everything[0][1]}
        try:
            record = validation_record(net, outputs, labels, estimator.validation_metrics(labels))
        except DataError as exc:
            record = {"error": str(exc)}
    record = comm.broadcast(record)
    if "error" in record:
        raise DataError(record["error"])
    return record

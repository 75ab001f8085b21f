"""Training over a job's shards (:class:`~promokit.training.shards.TrainJob`): the trainer's loop
(:func:`~promokit.training.trainer.train_epochs`) with its batches streamed from a worker's shard of a table's parts,
in this process (:func:`train_in_process`, one worker) or as one of N data-parallel workers (``promokit.scale.train``
runs :func:`run_shard` on Ray Train with its own communicator).

Validation: each worker predicts its share of the validation rows; rank 0 gathers the outputs and labels, computes
the loss and metrics of the whole validation set and broadcasts the record, so every worker stops at the same epoch.
Checkpoints: each epoch the worker saves the state the local :class:`~promokit.training.Trainer` saves (model,
optimisers, history, kept weights); in this process that is ``checkpoint.pt`` in the checkpoint folder, from which
``resume`` continues.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from promokit.data.errors import DataError
from promokit.data.uris import local_dir
from promokit.training.batches import stream_batches
from promokit.training.device import on_cpu
from promokit.training.seed import seed_everything
from promokit.training.trainer import History, LocalComm, predict, train_epochs, validation_record

if TYPE_CHECKING:
    from promokit.training.shards import TrainJob


def train_in_process(job: TrainJob, checkpoint_dir: str | os.PathLike | None = None,
                     resume: bool = False) -> tuple[torch.nn.Module, History]:
    """Train a planned job's network in this process, one worker streaming every shard, with its checkpoint in
    ``checkpoint_dir`` (``resume``: continue from it); return the kept network (evaluation mode) and the history."""
    return run_shard(job, LocalComm(fresh_checkpoint_dir(checkpoint_dir, resume), resume))


def fresh_checkpoint_dir(checkpoint_dir: str | os.PathLike | None, resume: bool) -> Path | None:
    """``checkpoint_dir`` as a local path (:func:`checkpoint_folder`), emptied unless the run resumes: a fresh run
    leaves no stale checkpoint to continue later."""
    checkpoint_dir = checkpoint_folder(checkpoint_dir)
    if checkpoint_dir is not None and not resume:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return checkpoint_dir


def checkpoint_folder(checkpoint_dir: str | os.PathLike | None) -> Path | None:
    """``checkpoint_dir`` as a local path (None: no checkpoint); a URI is a one-line error naming the argument:
    checkpoints are written to a local folder."""
    return None if checkpoint_dir is None else local_dir(checkpoint_dir, "checkpoint_dir")


def run_shard(job, comm) -> tuple[torch.nn.Module, History]:
    """One worker's training (``comm``: its communicator): the network built and seeded as every other worker's,
    then the trainer's loop over the worker's batches, ``job.batches(rank, world)`` (a :class:`TrainJob`'s:
    :class:`ShardBatches`). A job is anything with an ``estimator`` (``train_config``, ``build_net()``) and that
    ``batches``, which :func:`~promokit.training.trainer.train_epochs` reads (e.g.
    ``promokit.incentive.record_training.RecordJob``)."""
    config = job.estimator.train_config
    seed_everything(config.seed)
    net = job.estimator.build_net()
    return net, train_epochs(net, job.batches(comm.rank, comm.world), config, comm)


class ShardBatches:
    """The batches of worker ``rank``: each epoch its shard's segments in a new order, each read, encoded and
    shuffled in turn and cut in ``job.batch_size`` rows across part boundaries (:func:`stream_batches`). No wide term
    is solved first (training over parts has none, ``promokit.training.shards.wide_over_parts``)."""

    def __init__(self, job: TrainJob, rank: int):
        self.job, self.rank = job, rank
        self.rows = job.steps * job.estimator.train_config.batch_size  # an epoch's rows over every worker
        self.steps = job.steps
        self.validated = job.validated

    def wide(self, net) -> list[dict]:
        return []

    def train(self, generator: torch.Generator, epoch: int):
        segments = self.job.train[self.rank]
        order = torch.randperm(len(segments), generator=generator, device=generator.device).tolist()
        chunks = (self.job.train_rows.load(self.job.estimator, segments[k]) for k in order)
        return stream_batches(chunks, self.job.batch_size, generator)

    @torch.no_grad()
    def validate(self, net, comm) -> dict:
        """The validation record of the whole validation set: every worker predicts its share, rank 0 computes."""
        estimator = self.job.estimator
        pieces = []
        for segment in self.job.valid[self.rank]:
            with on_cpu():
                tensors = self.job.valid_rows.load(estimator, segment)
            outputs = predict(net, tensors, estimator.train_config.eval_batch_size)
            pieces.append((outputs, {k: v for k, v in tensors.items() if k in net.labels}))
        return gathered_record(net, comm, pieces, estimator.validation_metrics)


def gathered_record(net, comm, pieces: list[tuple[dict, dict]], metrics) -> dict:
    """The validation record of every worker's ``pieces`` (outputs and labels, dicts of CPU tensors, of its share of
    the validation rows) together: rank 0 gathers them, computes the loss and ``metrics(labels)`` and broadcasts the
    record, so that every worker stops at the same epoch."""
    pieces = [({k: v.numpy() for k, v in outputs.items()}, {k: v.numpy() for k, v in labels.items()})
              for outputs, labels in pieces]
    gathered = comm.gather(pieces)
    record = None
    if comm.rank == 0:
        everything = [piece for worker in gathered for piece in worker]
        outputs = {k: torch.from_numpy(np.concatenate([p[0][k] for p in everything])) for k in everything[0][0]}
        labels = {k: torch.from_numpy(np.concatenate([p[1][k] for p in everything])) for k in everything[0][1]}
        try:
            record = validation_record(net, outputs, labels, metrics(labels))
        except DataError as exc:
            record = {"error": str(exc)}
    record = comm.broadcast(record)
    if "error" in record:
        raise DataError(record["error"])
    return record

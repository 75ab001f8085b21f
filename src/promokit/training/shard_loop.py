"""Training over a planned job's shards (:class:`TrainJob`, its shards cut by :func:`promokit.training.shards.shards`):
the trainer's loop (:func:`~promokit.training.trainer.train_epochs`) with its batches streamed from a worker's shard
of a table's parts (:class:`ShardBatches`), in this process (:func:`train_in_process`, one worker) or as one of N
data-parallel workers (``promokit.scale.train`` runs :func:`run_shard` on Ray Train with its own communicator). Jobs
over records (``promokit.incentive.record_training``, ``promokit.value.graph_training``) run the same loop with
batches of their own, which visit a worker's segments in :func:`epoch_order` and validate with
:func:`validate_share`.

Validation: each worker predicts its share of the validation rows; rank 0 gathers the outputs and labels, computes
the loss and metrics of the whole validation set and broadcasts the record, so every worker stops at the same epoch.
Checkpoints: each epoch the worker saves the state the local :class:`~promokit.training.Trainer` saves (model,
optimisers, history, kept weights); in this process that is ``checkpoint.pt`` in the checkpoint folder, from which
``resume`` continues.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from promokit.data.errors import DataError
from promokit.data.uris import local_dir
from promokit.training.batches import iterate_batches, stream_batches
from promokit.training.device import made_on_cpu, net_device, to_cpu, to_device
from promokit.training.seed import seed_everything
from promokit.training.shards import Segment, shards
from promokit.training.trainer import History, LocalComm, train_epochs, validation_record


@dataclass
class TrainJob:
    """What every worker receives: the estimator with its encoders (no network yet), where its rows are, and how to
    step. ``train_rows`` / ``valid_rows`` read a segment of the parts' training / validation rows as the network's
    tensors (``load(estimator, segment)``: ``promokit.conversion.parts.Rows`` for a table,
    ``promokit.value.parts.DeliveryRows`` for a value dataset); ``train[r]`` / ``valid[r]`` are worker r's segments."""

    estimator: object
    train_rows: object
    valid_rows: object | None
    train: list[list[Segment]]
    valid: list[list[Segment]]
    batch_size: int
    steps: int

    @classmethod
    def cut(cls, estimator, train_rows, valid_rows, train_sizes: list[int], valid_sizes: list[int],
            workers: int) -> TrainJob:
        """The job of ``workers`` workers over parts holding ``train_sizes`` training rows and ``valid_sizes``
        validation rows (``valid_rows`` None: no validation): the training rows in equal padded shards, the
        validation rows in shards without padding, the global batch shared by the workers."""
        batch_size = math.ceil(estimator.train_config.batch_size / workers)
        valid = shards(valid_sizes, workers, pad=False) if valid_rows is not None else [[] for _ in range(workers)]
        return cls(estimator, train_rows, valid_rows, shards(train_sizes, workers, pad=True), valid, batch_size,
                   math.ceil(math.ceil(sum(train_sizes) / workers) / batch_size))

    @property
    def validated(self) -> bool:
        return self.valid_rows is not None

    def batches(self, rank: int, world: int) -> ShardBatches:
        """Worker ``rank``'s batches."""
        return ShardBatches(self, rank)


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


def epoch_order(segments: list, generator: torch.Generator) -> list:
    """``segments`` in an epoch's order, a permutation drawn from ``generator``: each epoch visits a worker's
    segments (parts, row groups) in a new order."""
    order = torch.randperm(len(segments), generator=generator, device=generator.device).tolist()
    return [segments[k] for k in order]


class ShardBatches:
    """The batches of worker ``rank``: each epoch its shard's segments in a new order (:func:`epoch_order`), each
    read, encoded and shuffled in turn and cut in ``job.batch_size`` rows across part boundaries
    (:func:`stream_batches`). No wide term is solved first (training over parts has none,
    ``promokit.training.shards.wide_over_parts``)."""

    def __init__(self, job: TrainJob, rank: int):
        self.job, self.rank = job, rank
        self.rows = job.steps * job.estimator.train_config.batch_size  # an epoch's rows over every worker
        self.steps = job.steps
        self.validated = job.validated

    def wide(self, net) -> list[dict]:
        return []

    def train(self, generator: torch.Generator, epoch: int):
        segments = epoch_order(self.job.train[self.rank], generator)
        chunks = (self.job.train_rows.load(self.job.estimator, segment) for segment in segments)
        return stream_batches(chunks, self.job.batch_size, generator)

    def validate(self, net, comm) -> dict:
        """The validation record of the whole validation set: every worker predicts its share, rank 0 computes."""
        estimator = self.job.estimator
        size = estimator.train_config.eval_batch_size
        batches = (batch for segment in self.job.valid[self.rank]
                   for batch in iterate_batches(self.job.valid_rows.load(estimator, segment), size))
        return validate_share(net, comm, batches, net.labels, estimator.validation_metrics)


@torch.no_grad()
def validate_share(net, comm, batches: Iterable[dict], labels, metrics) -> dict:
    """The validation record of the whole validation set from this worker's share of it: its ``batches`` (made on
    the CPU, :func:`~promokit.training.device.made_on_cpu`) through ``net`` in evaluation mode on its device, with
    each batch's ``labels`` columns (those it holds), gathered with every other worker's (:func:`gathered_record`)."""
    net.eval()
    device = net_device(net)
    outputs: dict[str, list] = {}
    kept: dict[str, list] = {}
    for batch in made_on_cpu(batches):
        for name, value in to_cpu(net(to_device(batch, device))).items():
            outputs.setdefault(name, []).append(value)
        for name in labels:
            if name in batch:
                kept.setdefault(name, []).append(batch[name])
    pieces = [({k: torch.cat(v) for k, v in outputs.items()}, {k: torch.cat(v) for k, v in kept.items()})] \
        if outputs else []
    return gathered_record(net, comm, pieces, metrics)


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

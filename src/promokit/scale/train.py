"""Training over a partitioned table: data-parallel on Ray Train (DDP over gloo, one CPU per worker) or part by
part in this process.

One loop for every estimator whose network trains by epochs of mini-batches. A :class:`TrainJob` holds the
estimator with its fitted encoders (it gives ``train_config``, ``build_net()`` and the validation metrics
``validation_metrics(labels)``), two row readers (``load(estimator, segment)`` → the network's tensors of a segment
of the parts' training or validation rows) and the shards (:meth:`TrainJob.cut`); :func:`run_job` trains it in this
process or on Ray Train, with the checkpoints below. :func:`plan` builds the job of a table's parts (conversion,
below); ``promokit.value.parts`` builds the job of a value dataset's co-partitioned tables with the same scan, count
and shard pieces (:func:`integer_levels`, :func:`time_counts`, :func:`time_threshold`, :func:`shards`).

The table is never one frame. Before training, two maps over the parts run on the engine (``local`` or ``ray``):

1. **scan**: each part's rows, the distinct values of its integer columns (or "more than ``MAX_INTEGER_LEVELS``",
   for the spec's inference of categorical integers) and, for a time-ordered validation split, the counts of its
   times (from which the driver computes the same boundary time as :func:`promokit.data.split.latest_split`);
2. **count**: on each part's training rows, the value counts of every categorical feature and the moments of every
   numeric one (:meth:`TableEncoder.count`), and the estimator's label sums (``label_counts``, with the hashes of
   the part's training subjects). The driver adds them up (:meth:`TableEncoder.from_counts`) into the encoder a
   local fit builds on the concatenated table: the same vocabulary, ``min_count`` applied to the summed counts,
   the same means and deviations to rounding; the subjects' hashes, united, are the model's ``training_ids.npy``.

The spec is resolved on the first part with rows (its columns and dtypes), with integer columns classified by
their distinct values over all parts. Validation rows are a seeded random share of each part (part *k*'s
generator is seeded by ``(seed, k)``; about ``valid_fraction`` of the rows, not exactly), the latest rows by the
time column (the boundary time over all parts), or a separate ``--valid`` table.

How shards reach the workers: only their descriptions travel. The training rows, in part order, are cut into
``workers`` contiguous ranges of equal length (the last padded by wrapping around to the first rows, as torch's
``DistributedSampler`` pads), each a list of segments ``(part, first row, end row)``; a worker reads each of its
parts itself, one at a time (its memory: one part and one batch), keeps its rows, encodes them with the fitted
encoder, shuffles them and cuts batches across part boundaries (:func:`promokit.training.stream_batches`). Each
epoch visits a worker's segments in a new order. Equal shards give every worker the same number of steps, which
DDP's collective backward needs. The configured ``batch_size`` is the global batch: each of N workers takes
``ceil(batch_size / N)`` rows per step and DDP averages the gradients, so N workers take the steps one process
would (the same number per epoch, on batches of the same size).

Sparse embedding gradients: DDP recognises ``nn.Embedding(sparse=True)`` (``expect_sparse_gradient``), gives each
such table a bucket of its own and allreduces its sparse gradient; gloo implements the sparse allreduce (by
gathering every worker's indices and values). Measured on torch 2.13 CPU (docs/training.md): the averaged sparse
gradient equals the gradient of the workers' batches taken together exactly, so the tables stay sparse and
SparseAdam trains them as in one process; the lazy row decay catches up the rows of the averaged gradient before
each step (rows another worker read), which keeps the replicas identical. ``--params '{"sparse": false}'`` gives a
model dense embedding gradients instead (DDP then allreduces the whole table every step: faster for tables of a
few thousand rows, ten times slower per step at a million rows).

Validation: each worker predicts its share of the validation rows; rank 0 gathers the outputs and labels, computes
the loss and AUCs of the whole validation set and broadcasts the record, so every worker stops at the same epoch.
Checkpoints: each epoch, rank 0 reports the same state the local :class:`~promokit.training.Trainer` saves (model,
optimisers, history, kept weights) as a Ray Train checkpoint under the run's storage (``.OUT.checkpoint`` beside the
model directory, which must be reachable from every node on a multi-node cluster); a worker group that fails is
restarted from it (``RETRIES`` times), ``--resume`` continues from it, and the driver builds the model from the last
one. In this process (``--engine local``) the same loop runs with one worker and saves ``checkpoint.pt`` there.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import tempfile
import time
import warnings
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.data.encoders import TableEncoder
from promokit.data.errors import DataError
from promokit.data.spec import MAX_INTEGER_LEVELS, FeatureSpec, missing_column_message
from promokit.data.split import NothingEarlier
from promokit.scale.engine import RETRIES, make_engine
from promokit.scale.parts import list_parts, naming, read_part
from promokit.training import (
    EpochLoop,
    History,
    Trainer,
    embedding_decay_for,
    epoch_record,
    flush_optimizers,
    make_optimizers,
    progress_display,
    seed_epoch,
    set_epoch_lr,
    step_progress,
    stream_batches,
    train_steps,
    validation_record,
)
from promokit.training.optim import LazyWeightDecay
from promokit.training.seed import seed_everything
from promokit.training.trainer import CHECKPOINT

#: (part index, first row, end row) among the part's training (or validation) rows.
Segment = tuple[int, int, int]
#: Ray Train's controller polls its workers every this many seconds (its default, 2 s, delays every epoch's report
#: and the end of a run by up to 2 s); a value the user set in the environment wins.
POLL_VARIABLE, POLL_SECONDS = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", 0.25


# ------------------------------------------------------------------------------------------------ which rows validate


@dataclass(frozen=True)
class Holdout:
    """Which rows of a part validate: ``none``, ``all`` (a separate validation table), ``random`` (each row with
    probability ``fraction``, part k's draws seeded by ``(seed, k)``) or ``time`` (``column`` at or after
    ``threshold``)."""

    how: str = "none"
    fraction: float = 0.0
    seed: int = 0
    column: str | None = None
    threshold: object = None

    def validates(self, frame: pd.DataFrame, part: int) -> np.ndarray:
        n = len(frame)
        if self.how == "none":
            return np.zeros(n, dtype=bool)
        if self.how == "all":
            return np.ones(n, dtype=bool)
        if self.how == "random":
            return np.random.default_rng([self.seed, part]).random(n) < self.fraction
        return (frame[self.column] >= self.threshold).to_numpy(dtype=bool)


@dataclass(frozen=True)
class Rows:
    """The training rows (``valid=False``) or the validation rows (``valid=True``) of a table's parts."""

    paths: tuple[str, ...]
    holdout: Holdout
    valid: bool

    def load(self, estimator, segment: Segment) -> dict[str, torch.Tensor]:
        """One segment's rows as the network's tensors."""
        index, start, stop = segment
        path = self.paths[index]
        with naming(path):
            frame = read_part(path)
            rows = np.flatnonzero(self.holdout.validates(frame, index) == self.valid)[start:stop]
            return estimator.part_tensors(frame.iloc[rows])


# ------------------------------------------------------------------------------------------------------- the two maps


@dataclass
class PartScan:
    rows: int
    levels: dict  # integer column -> its distinct values, or None when there are more than MAX_INTEGER_LEVELS
    times: tuple | None  # (distinct times, counts) of the time column, for a time-ordered validation split


def _scan_part(job: tuple) -> PartScan:
    time_column, _, path = job
    with naming(path):
        frame = read_part(path)
        times = None
        if time_column is not None:
            if time_column not in frame.columns:
                raise DataError(missing_column_message(time_column, list(frame.columns), "time key", len(frame)))
            missing = frame[time_column].isna().to_numpy()
            if missing.any():
                raise DataError(f"time column {time_column!r} has {int(missing.sum())} missing values in "
                                f"{len(frame)} rows (first at row {int(np.flatnonzero(missing)[0])})")
            times = time_counts(frame[time_column].to_numpy())
        return PartScan(len(frame), integer_levels(frame), times)


def integer_levels(frame: pd.DataFrame) -> dict:
    """A part's share of the inference of categorical integers (:func:`promokit.data.spec.infer_feature_columns`):
    the distinct values of each integer column, None for more than ``MAX_INTEGER_LEVELS`` or for a column of
    floats (the parts concatenated hold floats there, which are numeric)."""
    levels = {}
    for name in frame.columns:
        series = frame[name]
        if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
            continue
        distinct = series.dropna().unique() if pd.api.types.is_integer_dtype(series) else None
        levels[name] = distinct.tolist() if distinct is not None and len(distinct) <= MAX_INTEGER_LEVELS else None
    return levels


def classify_integers(spec: FeatureSpec, parts_levels: list[dict], columns: list) -> FeatureSpec:
    """``spec`` (resolved on one part) with its number columns categorical or numeric as on the parts' concatenation:
    an integer column with at most ``MAX_INTEGER_LEVELS`` distinct values over every part (:func:`integer_levels`)
    is categorical (ids, ``*id``, always are), else numeric, unless the spec's ``types`` gives its type; ``columns``
    gives the order of the features."""
    levels: dict[str, set | None] = {}
    for part in parts_levels:
        for name, values in part.items():
            if name in levels and levels[name] is None:
                continue
            levels[name] = None if values is None else levels.get(name, set()) | set(values)
    categorical = set(spec.categorical)
    for name in [*spec.categorical, *spec.numeric]:
        if name in levels and name not in spec.types and not str(name).lower().endswith("id"):
            known = levels[name]
            if known is not None and len(known) <= MAX_INTEGER_LEVELS:
                categorical.add(name)
            else:
                categorical.discard(name)
    order = [c for c in columns if c in {*spec.categorical, *spec.numeric}]
    return replace(spec, categorical=[c for c in order if c in categorical],
                   numeric=[c for c in order if c not in categorical])


@dataclass
class PartCount:
    train_rows: int
    valid_rows: int
    shares: dict | None  # TableEncoder.count of the training rows
    labels: dict  # the estimator's label_counts of the training rows
    valid_labels: dict  # … and of the validation rows


def _count_part(job: tuple) -> PartCount:
    estimator, holdout, encode, index, path = job
    with naming(path):
        frame = read_part(path)
        spec = estimator.feature_spec
        needed = [*spec.features, *spec.labels.values(), *spec.micro_behaviors]
        missing = [name for name in needed if name not in frame.columns]
        if missing:
            raise DataError(f"columns {missing} are missing from this part of {len(frame)} rows (the first part with "
                            f"rows has them); columns present: {list(frame.columns)[:20]}")
        validates = holdout.validates(frame, index)
        train, valid = frame[~validates], frame[validates]
        return PartCount(len(train), len(valid), TableEncoder.count(train, spec) if encode else None,
                         estimator.label_counts(train), estimator.label_counts(valid))


# --------------------------------------------------------------------------------------------------------- the plan


@dataclass
class TrainJob:
    """What every worker receives: the estimator with its encoders (no network yet), where its rows are, and how to
    step. ``train_rows`` / ``valid_rows`` read a segment of the parts' training / validation rows as the network's
    tensors (``load(estimator, segment)``: :class:`Rows` for a table, ``promokit.value.parts.DeliveryRows`` for a
    value dataset); ``train[r]`` / ``valid[r]`` are worker r's segments."""

    estimator: object
    train_rows: object
    valid_rows: object | None
    train: list[list[Segment]]
    valid: list[list[Segment]]
    batch_size: int
    steps: int
    initial: dict | None = field(default=None, repr=False)

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


def shards(sizes: list[int], workers: int, pad: bool) -> list[list[Segment]]:
    """Cut the rows of parts of ``sizes`` (in part order) into ``workers`` contiguous ranges of ``ceil(n /
    workers)`` rows; with ``pad`` the last ranges wrap around to the first rows so every range is full, else
    they end at the last row."""
    n = sum(sizes)
    if n == 0:
        return [[] for _ in range(workers)]
    size = math.ceil(n / workers)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    result = []
    for rank in range(workers):
        segments, position, end = [], rank * size, (rank + 1) * size if pad else min((rank + 1) * size, n)
        while position < end:
            first = position % n
            take = min(end - position, n - first)
            for part in range(len(sizes)):  # the parts this run of rows [first, first + take) crosses
                lo, hi = max(first, starts[part]), min(first + take, starts[part + 1])
                if lo < hi:
                    segments.append((part, int(lo - starts[part]), int(hi - starts[part])))
            position += take
        result.append(segments)
    return result


def _resolve_spec(estimator, paths: list[str], scans: list[PartScan]) -> None:
    """Resolve the estimator's spec on the first part with rows into its ``feature_spec``; integer columns whose
    role is inferred are classified by their distinct values over every part, as on the concatenated table."""
    first = next((k for k, scan in enumerate(scans) if scan.rows), None)
    if first is None:
        raise DataError(f"the table has no rows in its {len(paths)} parts")
    inferred = not (estimator.declared_spec.categorical or estimator.declared_spec.numeric)
    with naming(paths[first]):
        sample = read_part(paths[first])
        spec = estimator.resolve_spec(sample)
    if inferred:
        spec = classify_integers(spec, [scan.levels for scan in scans], list(sample.columns))
    estimator.feature_spec = spec


def time_counts(times) -> tuple[np.ndarray, np.ndarray]:
    """A part's share of a time split: its distinct times and how many rows hold each."""
    counts = pd.Series(times).value_counts(sort=False)
    return counts.index.to_numpy(), counts.to_numpy()


def summed_time_counts(shares: list[tuple[np.ndarray, np.ndarray]]) -> pd.Series:
    """The rows per time over every part (:func:`time_counts` of each), in time order."""
    counts = pd.concat([pd.Series(c, index=v) for v, c in shares])
    return counts.groupby(level=0).sum().sort_index()


def time_threshold(column: str, fraction: float, counts: pd.Series):
    """The boundary time of :func:`promokit.data.split.latest_split` from the rows per time (:func:`summed_time_counts`):
    the rows at or after it are the latest ``fraction``, widened to every row of the boundary time."""
    if not 0 < fraction < 1:
        raise DataError(f"the validation fraction must be in (0, 1), got {fraction}")
    n = int(counts.sum())
    position = n - max(1, int(round(fraction * n)))
    threshold = counts.index[int(np.searchsorted(np.cumsum(counts.to_numpy()), position, side="right"))]
    if threshold == counts.index[0]:
        raise NothingEarlier(column, n, threshold)
    return threshold


def plan(estimator, data, runner, workers: int, valid=None, valid_fraction: float = 0.1,
         valid_split: str | None = None) -> TrainJob:
    """Scan and count the parts of ``data`` (and of ``valid``) on ``runner``; fit the estimator's encoder from the
    counts; cut the shards of ``workers`` workers."""
    paths = [str(Path(p).resolve()) for p in list_parts(data)]
    items = list(enumerate(paths))
    spec = estimator.declared_spec
    cfg = estimator.train_config
    how = None
    if valid is None and valid_fraction > 0:
        how = valid_split or (f"time:{spec.time_key}" if spec.time_key else "random")
        if how != "random" and not how.startswith("time:"):
            raise DataError(f"a split is 'random' or 'time:<column>', got {how!r}")
    time_column = how.split(":", 1)[1] if how and how.startswith("time:") else None
    scans = runner.map(_scan_part, [(time_column, *item) for item in items], label="scanning parts")
    _resolve_spec(estimator, paths, scans)
    if valid is not None:
        holdout = Holdout("none")
    elif how is None:
        holdout = Holdout("none")
    elif how == "random":
        holdout = Holdout("random", valid_fraction, cfg.seed)
    else:
        counts = summed_time_counts([scan.times for scan in scans if scan.rows])
        holdout = Holdout("time", column=time_column, threshold=time_threshold(time_column, valid_fraction, counts))
    counts = runner.map(_count_part, [(estimator, holdout, True, *item) for item in items], label="counting parts")
    valid_paths = paths
    valid_counts = [c.valid_labels for c in counts]
    valid_sizes = [c.valid_rows for c in counts]
    if valid is not None:
        valid_paths = [str(Path(p).resolve()) for p in list_parts(valid)]
        counted = runner.map(_count_part, [(estimator, Holdout("all"), False, k, path)
                                           for k, path in enumerate(valid_paths)], label="checking validation parts")
        valid_counts, valid_sizes = [c.valid_labels for c in counted], [c.valid_rows for c in counted]
    train_sizes = [c.train_rows for c in counts]
    n_train, n_valid = sum(train_sizes), sum(valid_sizes)
    if how is not None and (n_train == 0 or n_valid == 0):
        raise DataError(f"holding out {valid_fraction:.0%} of {n_train + n_valid} rows ({how}) leaves {n_train} rows "
                        f"to keep and {n_valid} to hold out; both need rows: give a larger table or another fraction")
    if n_train == 0:
        raise DataError(f"{data}: the table has no training rows in its {len(paths)} parts")
    if valid is not None and n_valid == 0:
        raise DataError(f"--valid {valid}: the validation table has no rows")
    encoder = TableEncoder.from_counts([c.shares for c in counts], estimator.feature_spec)
    estimator.fit_counts(encoder, [c.labels for c in counts], valid_counts if (valid is not None or how) else [])
    validated = valid is not None or how is not None
    valid_rows = Rows(tuple(valid_paths), Holdout("all") if valid is not None else holdout, True) if validated else None
    return TrainJob.cut(estimator, Rows(tuple(paths), holdout, False), valid_rows, train_sizes, valid_sizes, workers)


# ------------------------------------------------------------------------------------------------- the worker loop


class _Solo:
    """The loop in this process: one worker, checkpoints in ``checkpoint_dir/checkpoint.pt``."""

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
            from promokit.data.io import atomic_path

            with atomic_path(self.checkpoint_dir / CHECKPOINT) as tmp:
                torch.save(state(), tmp)


class _RayWorker:
    """The loop as one worker of a Ray Train run: DDP over the process group Ray Train set up (gloo), checkpoints
    reported to Ray Train by rank 0."""

    interactive = False

    def __init__(self):
        import ray.train

        context = ray.train.get_context()
        self.rank, self.world = context.get_world_rank(), context.get_world_size()

    def wrap(self, net):
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(net) if self.world > 1 else net

    def sum(self, values: list[float]) -> list[float]:
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, obj) -> list | None:
        import torch.distributed as dist

        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj):
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def load(self) -> dict | None:
        import ray.train

        checkpoint = ray.train.get_checkpoint()  # after a restart, or a run continued from its storage
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as folder:
            return torch.load(Path(folder) / CHECKPOINT, weights_only=True)

    def save(self, state, record: dict) -> None:
        import ray.train

        metrics = {k: v for k, v in record.items() if isinstance(v, (int, float))}
        if self.rank != 0:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory(prefix="promokit-checkpoint-") as folder:
            torch.save(state(), Path(folder) / CHECKPOINT)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


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


def _ray_worker(config: dict) -> None:
    import ray

    run_shard(ray.get(config["job"]), _RayWorker())


# --------------------------------------------------------------------------------------------------------- the driver


def fit_parts(estimator, data, engine: str = "local", address: str | None = None, workers: int | None = None,
              valid=None, valid_fraction: float = 0.1, valid_split: str | None = None,
              checkpoint_dir: str | os.PathLike | None = None, resume: bool = False):
    """Fit ``estimator`` (a :class:`~promokit.conversion.ConversionModel` of a network trained by epochs) on the
    table at ``data`` — a directory or glob of parts, or one file — without ever holding it whole: on ``engine``
    ``ray`` with ``workers`` DDP workers (default: every CPU of the cluster), or part by part in this process
    (``local``). ``valid`` is a validation table (a file or parts); else ``valid_fraction`` of the rows validate,
    by ``valid_split``. The estimator comes back fitted, as :meth:`ConversionModel.fit` leaves it."""
    if not estimator.trains_by_epochs:
        raise DataError(f"model {estimator.model!r} is not trained by epochs of mini-batches, so it cannot train over "
                        "a table's parts; read the table whole (--engine local with one file), or choose a network "
                        "(esmm, esm2, dnn, gmcm …)")
    wide_over_parts(estimator.model_params)
    runner = make_engine(engine, address, workers)
    job = plan(estimator, data, runner, runner.workers, valid, valid_fraction, valid_split)
    estimator.net, estimator.report.history = run_job(job, runner, checkpoint_dir, resume)
    return estimator


def wide_over_parts(params: dict) -> None:
    """An ``offset`` wide part is a logistic regression solved on the whole training table first, which training
    over parts never holds: it falls back to ``none``, with a warning (``joint`` trains with the network)."""
    if params.get("wide") == "offset":
        warnings.warn("the offset wide part (the default) is the lr floor solved on the whole training table, which "
                      "training over parts never reads at once: training without it (--wide none); --wide joint "
                      "trains one with the network", stacklevel=2)
        params["wide"] = "none"


def run_job(job: TrainJob, runner, checkpoint_dir: str | os.PathLike | None = None,
            resume: bool = False) -> tuple[torch.nn.Module, History]:
    """Train a planned job's network — in this process when ``runner`` is the local engine, else on
    ``runner.workers`` Ray Train workers — with its checkpoint in ``checkpoint_dir`` (``resume``: continue from
    it); return the kept network (evaluation mode) and the history."""
    checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
    if checkpoint_dir is not None and not resume:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)  # a fresh run: no stale checkpoint to continue later
    if runner.name == "local":
        if resume and checkpoint_dir is not None:
            job.initial = _latest_state(checkpoint_dir)
        return run_shard(job, _Solo(checkpoint_dir))
    runner.release()  # the planning maps' actors hold the CPUs Ray Train's workers need
    return _launch(job, runner.workers, checkpoint_dir, resume)


def _launch(job: TrainJob, workers: int, checkpoint_dir: Path | None, resume: bool):
    """Run :func:`run_shard` on ``workers`` Ray Train workers; the model and history from the last checkpoint."""
    storage = (checkpoint_dir or Path(tempfile.mkdtemp(prefix="promokit-train-")) / "run").resolve()
    try:
        return _train_on_ray(job, workers, storage, resume)
    finally:
        if checkpoint_dir is None:
            shutil.rmtree(storage.parent, ignore_errors=True)


def _train_on_ray(job: TrainJob, workers: int, storage: Path, resume: bool):
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    if resume and (storage / CHECKPOINT).exists():  # a run begun in this process continues on Ray
        job.initial = _latest_state(storage)
    trainer = TorchTrainer(
        _ray_worker, train_loop_config={"job": ray.put(job)},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(name=storage.name, storage_path=str(storage.parent),
                             checkpoint_config=CheckpointConfig(num_to_keep=1),
                             failure_config=FailureConfig(max_failures=RETRIES)))
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
    state = _latest_state(storage)
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


def _latest_state(folder: Path) -> dict | None:
    """The checkpoint of the latest epoch under ``folder``: this process's ``checkpoint.pt`` or a Ray Train
    checkpoint's."""
    found = [p for p in [folder / CHECKPOINT, *folder.glob(f"checkpoint_*/{CHECKPOINT}")] if p.exists()]
    states = [torch.load(p, weights_only=True) for p in found]
    return max(states, key=lambda s: s["epoch"], default=None)


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

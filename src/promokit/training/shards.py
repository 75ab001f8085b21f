"""Training over a table in parts: what a planned job holds and the counts its plan adds up.

A domain plans a job (``promokit.conversion.parts.plan`` for a table's parts, ``promokit.value.parts`` for a value
dataset's co-partitioned tables) with two maps over the parts on the executor it is given: a scan (each part's rows,
the distinct values of its integer columns, :func:`integer_levels`, and the counts of its times,
:func:`time_counts`) and a count (the encoders' and labels' sums over each part's training rows). The driver adds
them up — :func:`classify_integers` types the integer columns as on the parts' concatenation,
:func:`time_threshold` gives the boundary time of :func:`promokit.data.split.latest_split` — and cuts the shards
(:meth:`TrainJob.cut`); the executor trains the job (:mod:`promokit.training.shard_loop` in this process,
``promokit.scale.train`` on Ray Train).

How shards reach the workers: only their descriptions travel. The training rows, in part order, are cut into
``workers`` contiguous ranges of equal length (the last padded by wrapping around to the first rows, as torch's
``DistributedSampler`` pads), each a list of segments ``(part, first row, end row)``; a worker reads each of its
parts itself, one at a time (its memory: one part and one batch), keeps its rows, encodes them with the fitted
encoder, shuffles them and cuts batches across part boundaries (:func:`promokit.training.stream_batches`). Each
epoch visits a worker's segments in a new order. Equal shards give every worker the same number of steps, which
DDP's collective backward needs. The configured ``batch_size`` is the global batch: each of N workers takes
``ceil(batch_size / N)`` rows per step and DDP averages the gradients, so N workers take the steps one process
would (the same number per epoch, on batches of the same size).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.spec import MAX_INTEGER_LEVELS, FeatureSpec
from promokit.data.split import NothingEarlier

#: (part index, first row, end row) among the part's training (or validation) rows.
Segment = tuple[int, int, int]


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

    def batches(self, rank: int, world: int):
        """Worker ``rank``'s batches (:class:`promokit.training.shard_loop.ShardBatches`)."""
        from promokit.training.shard_loop import ShardBatches

        return ShardBatches(self, rank)


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


def wide_over_parts(params: dict) -> None:
    """An ``offset`` wide term is a logistic regression solved on the whole training table first, which training
    over parts never holds: it falls back to ``none``, with a warning (``joint`` trains with the network)."""
    if params.get("wide") == "offset":
        warnings.warn("the offset wide term (the default) is the lr floor solved on the whole training table, which "
                      "training over parts never reads at once: training without it (`wide` none); `wide` joint "
                      "trains one with the network", stacklevel=2)
        params["wide"] = "none"

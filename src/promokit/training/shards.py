"""Training over a table in parts: what a domain's plan adds up and cuts before the executor trains.

A domain plans a job (``promokit.conversion.parts.plan`` for a table's parts, ``promokit.value.parts`` for a value
dataset's co-partitioned tables, ``promokit.voucher.train_parts`` for sessions and events) with two maps over the
parts on the executor it is given: a scan (each part's rows, the distinct values of its integer columns,
:func:`integer_levels`, and the counts of its times, :func:`time_counts`) and a count (the encoders' and labels'
sums over each part's training rows). The driver adds them up — :func:`first_with_rows` finds the part the spec is
resolved on, :func:`classify_integers` types the integer columns as on the parts' concatenation,
:func:`time_threshold` gives the boundary time of :func:`promokit.data.split.latest_split` — and each part gives its
rows their role (:data:`TRAIN`, :data:`VALID`, :data:`TEST`, :func:`row_roles`) by the domain's rule. The shards are
cut by :func:`shards` into the job the executor trains (:class:`promokit.training.shard_loop.TrainJob`).

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
from dataclasses import replace

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.spec import MAX_INTEGER_LEVELS, FeatureSpec
from promokit.data.split import NothingEarlier

#: (part index, first row, end row) among the part's training (or validation) rows.
Segment = tuple[int, int, int]
#: The role of a row: trained on, validated on (picks the epoch), held out for evaluation.
TRAIN, VALID, TEST = 0, 1, 2


def row_roles(n: int, validates=None, held=None) -> np.ndarray:
    """The role of each of ``n`` rows: :data:`TEST` where ``held``, else :data:`VALID` where ``validates``, else
    :data:`TRAIN` (boolean masks; None: no such rows)."""
    roles = np.full(n, TRAIN, dtype=np.int8)
    if validates is not None:
        roles[np.asarray(validates, dtype=bool)] = VALID
    if held is not None:
        roles[np.asarray(held, dtype=bool)] = TEST
    return roles


def since(times, cut) -> np.ndarray | None:
    """Which of ``times`` are at or after ``cut`` (a boolean mask), None without a cut."""
    return None if cut is None else np.asarray(times >= cut, dtype=bool)


def first_with_rows(rows: list[int], nothing: str) -> int:
    """The first part with rows (``rows``: each part's); none is a one-line :class:`DataError`, ``nothing`` followed
    by ``in its N parts``."""
    first = next((k for k, n in enumerate(rows) if n), None)
    if first is None:
        raise DataError(f"{nothing} in its {len(rows)} parts")
    return first


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

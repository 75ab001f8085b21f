"""Training a conversion network over a table in parts (``conversion train --data DIR``), never holding the table
as one frame: :func:`fit_parts` plans the job on the executor it is given and has the executor train it (a table in
parts is scored part by part by :func:`promokit.conversion.workflows.predict_parts`).

Before training, two maps over the parts run on the executor (``promokit.scale.executor``: in this process or on Ray):

1. **scan**: each part's rows, the distinct values of its integer columns (or "more than ``MAX_INTEGER_LEVELS``",
   for the spec's inference of categorical integers) and, for a time-ordered validation split, the counts of its
   times (from which the driver computes the same boundary time as :func:`promokit.data.split.latest_split`);
2. **count**: on each part's training rows, the value counts of every categorical feature and the moments of every
   numeric one (:meth:`TableEncoder.count`), and the estimator's label sums (``label_counts``, with the hashes of
   the part's training subjects). The driver adds them up (:meth:`TableEncoder.from_counts`) into the encoder a
   local fit builds on the concatenated table: the same vocabulary, ``min_count`` applied to the summed counts,
   the same means and deviations to rounding; the subjects' hashes, united, are the model's ``training_ids.npy``.

The spec is resolved on the first part with rows (its columns and dtypes), with integer columns classified by
their distinct values over all parts. The estimator's ``test_fraction`` is held out as :meth:`ConversionModel.fit`
holds it out (the latest rows by the spec's ``time_key``, the boundary time over all parts, or each row drawn with
part *k*'s generator seeded by ``(seed, k, 1)``). Validation rows are then a seeded random share of each part's
rest (part *k*'s generator is seeded by ``(seed, k)``; about ``valid_fraction`` of the rows, not exactly), the
latest rows by the time column (the boundary time over all parts), or a separate ``valid`` table. The counts, roles
and shards are :mod:`promokit.training.shards`'s, the job and the loop :mod:`promokit.training.shard_loop`'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from promokit.conversion.defaults import VALIDATION_FRACTION
from promokit.data.encoders import TableEncoder
from promokit.data.errors import DataError
from promokit.data.parts import list_parts, naming, read_part
from promokit.data.spec import missing_column_message
from promokit.training.shard_loop import TrainJob
from promokit.training.shards import (TEST, TRAIN, VALID, Segment, classify_integers, first_with_rows, integer_levels,
                                      row_roles, since, summed_time_counts, time_counts, time_threshold,
                                      wide_over_parts)


def fit_parts(estimator, data, executor, valid=None, valid_fraction: float = VALIDATION_FRACTION,
              valid_split: str | None = None, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False):
    """Fit ``estimator`` (a :class:`~promokit.conversion.ConversionModel` of a network trained by epochs) on the
    table at ``data`` — a directory or glob of parts, or one file — without ever holding it whole, on ``executor``
    (``promokit.scale.make_executor``: part by part in this process, or data-parallel on the Ray executor's workers).
    ``valid`` is a validation table (a file or parts); else ``valid_fraction`` of the rows validate, by
    ``valid_split``. The estimator comes back fitted, as :meth:`ConversionModel.fit` leaves it."""
    if not estimator.trains_by_epochs:
        raise DataError(f"model {estimator.model!r} is not trained by epochs of mini-batches, so it cannot train over "
                        "a table's parts: fit it on the table read whole (ConversionModel.fit), or choose a network "
                        "(esmm, esm2, dnn, gmcm …)")
    estimator._start_fit()
    wide_over_parts(estimator.model_params_)
    job = plan(estimator, data, executor, executor.workers, valid, valid_fraction, valid_split)
    estimator.net_, estimator.history_ = executor.train(job, checkpoint_dir, resume)
    return estimator


def held_out_draw(rows: int, holdout: dict, part: int) -> np.ndarray:
    """Which of the ``rows`` rows of part ``part`` the random rule of ``holdout`` holds out (its own stream, apart
    from the validation draws below)."""
    return np.random.default_rng([holdout["seed"], part, 1]).random(rows) < holdout["test_fraction"]


def plan(estimator, data, executor, workers: int, valid=None, valid_fraction: float = VALIDATION_FRACTION,
         valid_split: str | None = None) -> TrainJob:
    """Scan and count the parts of ``data`` (and of ``valid``) on ``executor``; fit the estimator's encoder from the
    counts; cut the shards of ``workers`` workers."""
    paths = [str(p.resolve()) for p in list_parts(data)]
    items = list(enumerate(paths))
    spec = estimator.declared_spec
    cfg = estimator.train_config
    how = None
    if valid is None and valid_fraction > 0:
        how = valid_split or (f"time:{spec.time_key}" if spec.time_key else "random")
        if how != "random" and not how.startswith("time:"):
            raise DataError(f"a split is 'random' or 'time:<column>', got {how!r}")
    time_column = how.split(":", 1)[1] if how and how.startswith("time:") else None
    test_column = spec.time_key if estimator.test_fraction else None
    columns = tuple(dict.fromkeys(c for c in (time_column, test_column) if c))
    scans = executor.map(_scan_part, [(columns, *item) for item in items], label="scanning parts")
    _resolve_spec(estimator, paths, scans)
    test = estimator.holdout_for(estimator.feature_spec_, sum(scan.rows for scan in scans))
    test_from = None
    if test_column is not None:
        test_from = time_threshold(test_column, test["test_fraction"], _time_counts(scans, test_column))
    if how is None or valid is not None:
        holdout = Holdout("none", test=test, test_from=test_from)
    elif how == "random":
        holdout = Holdout("random", valid_fraction, cfg.seed, test=test, test_from=test_from)
    else:
        counts = _time_counts(scans, time_column)
        if test_from is not None:
            if time_column != test_column:
                raise DataError(f"over parts, the validation rows by time ({how}) are cut by the time key the test "
                                f"rows are held out by, time:{test_column}")
            counts = counts[counts.index < test_from]
        holdout = Holdout("time", column=time_column, threshold=time_threshold(time_column, valid_fraction, counts),
                          test=test, test_from=test_from)
    counts = executor.map(_count_part, [(estimator, holdout, True, *item) for item in items], label="counting parts")
    valid_paths = paths
    valid_counts = [c.valid_labels for c in counts]
    valid_sizes = [c.valid_rows for c in counts]
    if valid is not None:
        valid_paths = [str(p.resolve()) for p in list_parts(valid)]
        counted = executor.map(_count_part, [(estimator, Holdout("all"), False, k, path)
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
        raise DataError(f"`validation` {valid}: the validation table has no rows")
    encoder = TableEncoder.from_counts([c.shares for c in counts], estimator.feature_spec_)
    estimator.fit_counts(encoder, [c.labels for c in counts], valid_counts if (valid is not None or how) else [])
    estimator.holdout_ = {**test, "held_out": sum(c.test_rows for c in counts), "parts": [scan.rows for scan in scans]}
    estimator.report_.n_test = estimator.holdout_["held_out"]
    validated = valid is not None or how is not None
    valid_rows = Rows(tuple(valid_paths), Holdout("all") if valid is not None else holdout, True) if validated else None
    return TrainJob.cut(estimator, Rows(tuple(paths), holdout, False), valid_rows, train_sizes, valid_sizes, workers)


# ------------------------------------------------------------------------------------------------ which rows validate


@dataclass(frozen=True)
class Holdout:
    """The role of each row of a part. Validation: ``none``, ``all`` (a separate validation table), ``random``
    (each row with probability ``fraction``, part k's draws seeded by ``(seed, k)``) or ``time`` (``column`` at or
    after ``threshold``). Held out, whatever validates: the estimator's ``test`` rule
    (:meth:`ConversionModel.holdout_for`), by time from ``test_from`` (the boundary time over all parts)."""

    how: str = "none"
    fraction: float = 0.0
    seed: int = 0
    column: str | None = None
    threshold: object = None
    test: dict | None = None
    test_from: object = None

    def roles(self, frame: pd.DataFrame, part: int) -> np.ndarray:
        n = len(frame)
        if self.how == "all":
            return np.full(n, VALID, dtype=np.int8)
        validates = (np.random.default_rng([self.seed, part]).random(n) < self.fraction if self.how == "random" else
                     since(frame[self.column], self.threshold) if self.how == "time" else None)
        held = None
        if self.test and self.test["test_fraction"]:
            held = (held_out_draw(n, self.test, part) if self.test["how"] == "random" else
                    since(frame[self.test["how"].split(":", 1)[1]], self.test_from))
        return row_roles(n, validates, held)


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
            rows = np.flatnonzero(self.holdout.roles(frame, index) == (VALID if self.valid else TRAIN))[start:stop]
            return estimator.part_tensors(frame.iloc[rows])


# ------------------------------------------------------------------------------------------------------- the two maps


@dataclass
class PartScan:
    rows: int
    levels: dict  # integer column -> its distinct values, or None when there are more than MAX_INTEGER_LEVELS
    times: dict  # time column -> (distinct times, counts), for the time-ordered test and validation splits


def _scan_part(job: tuple) -> PartScan:
    time_columns, _, path = job
    with naming(path):
        frame = read_part(path)
        times = {}
        for time_column in time_columns:
            if time_column not in frame.columns:
                raise DataError(missing_column_message(time_column, list(frame.columns), "time key", len(frame)))
            missing = frame[time_column].isna().to_numpy()
            if missing.any():
                raise DataError(f"time column {time_column!r} has {int(missing.sum())} missing values in "
                                f"{len(frame)} rows (first at row {int(np.flatnonzero(missing)[0])})")
            times[time_column] = time_counts(frame[time_column].to_numpy())
        return PartScan(len(frame), integer_levels(frame), times)


def _time_counts(scans: list[PartScan], column: str) -> pd.Series:
    return summed_time_counts([scan.times[column] for scan in scans if scan.rows])


@dataclass
class PartCount:
    train_rows: int
    valid_rows: int
    test_rows: int
    shares: dict | None  # TableEncoder.count of the training rows
    labels: dict  # the estimator's label_counts of the training rows
    valid_labels: dict  # … and of the validation rows


def _count_part(job: tuple) -> PartCount:
    estimator, holdout, encode, index, path = job
    with naming(path):
        frame = read_part(path)
        spec = estimator.feature_spec_
        needed = [*spec.features, *spec.labels.values(), *spec.micro_behaviors]
        missing = [name for name in needed if name not in frame.columns]
        if missing:
            raise DataError(f"columns {missing} are missing from this part of {len(frame)} rows (the first part with "
                            f"rows has them); columns present: {list(frame.columns)[:20]}")
        roles = holdout.roles(frame, index)
        train, valid = frame[roles == TRAIN], frame[roles == VALID]
        return PartCount(len(train), len(valid), int((roles == TEST).sum()),
                         TableEncoder.count(train, spec) if encode else None,
                         estimator.label_counts(train), estimator.label_counts(valid))


def _resolve_spec(estimator, paths: list[str], scans: list[PartScan]) -> None:
    """Resolve the estimator's spec on the first part with rows into its ``feature_spec``; integer columns whose
    role is inferred are classified by their distinct values over every part, as on the concatenated table."""
    first = first_with_rows([scan.rows for scan in scans], "the table has no rows")
    inferred = not (estimator.declared_spec.categorical or estimator.declared_spec.numeric)
    with naming(paths[first]):
        sample = read_part(paths[first])
        spec = estimator.resolve_spec(sample)
    if inferred:
        spec = classify_integers(spec, [scan.levels for scan in scans], list(sample.columns))
    estimator.feature_spec_ = spec
    estimator.warn_leaks(sample)  # judged on one part, its held-out and validation rows included

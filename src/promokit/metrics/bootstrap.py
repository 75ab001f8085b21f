"""The paired bootstrap of a metric's difference between two models scored on the same rows: how sure a
comparison can be that one model is ahead of another on this data."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Resamples of a comparison unless told otherwise.
RESAMPLES = 1000


@dataclass(frozen=True)
class PairedDifference:
    """``metric(a) − metric(b)`` on every row (``observed``), its percentile interval at ``level`` over the
    resamples (``low``, ``high``), the share of resamples where a was ahead (``share_ahead``) and how many resamples
    had the metric defined for both (``resamples``)."""

    observed: float
    low: float
    high: float
    share_ahead: float
    resamples: int
    level: float

    def __str__(self) -> str:
        return f"{signed(self.observed)} [{signed(self.low)}, {signed(self.high)}]"


def paired_bootstrap(metric: Callable[[np.ndarray, np.ndarray], float], labels, a, b, *, groups=None,
                     resamples: int = RESAMPLES, seed: int = 0, level: float = 0.95) -> PairedDifference:
    """The difference ``metric(labels, a) − metric(labels, b)`` and its paired bootstrap interval.

    ``a`` and ``b`` are the two models' scores of the same rows as ``labels``, or each a list of such arrays (one
    per training seed: the metric is then averaged over them). Each of ``resamples`` resamples draws the rows with
    replacement (with ``groups``, one key per row, it draws the groups and takes all their rows: the unit a grouped
    metric is measured on), seeded by ``seed``, and scores both models on the same draw; the interval is the
    ``level`` percentile interval of the differences. Resamples where the metric is undefined (NaN, e.g. an AUC
    on one class) are left out; identical scores give ``[0, 0]``."""
    labels = np.asarray(labels)
    a, b = _runs(a, len(labels), "a"), _runs(b, len(labels), "b")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if not isinstance(resamples, (int, np.integer)) or resamples < 1:
        raise ValueError(f"resamples must be a whole number ≥ 1, got {resamples!r}")

    def difference(rows) -> float:
        return (np.mean([metric(labels[rows], s[rows]) for s in a])
                - np.mean([metric(labels[rows], s[rows]) for s in b]))

    draw = _drawer(len(labels), groups, np.random.default_rng(seed))
    with warnings.catch_warnings():  # a resample with one class is left out, not warned of
        warnings.simplefilter("ignore")
        observed = difference(slice(None))
        diffs = np.array([difference(draw()) for _ in range(resamples)])
    diffs = diffs[np.isfinite(diffs)]
    if not len(diffs):
        return PairedDifference(float(observed), np.nan, np.nan, np.nan, 0, level)
    tail = (1 - level) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return PairedDifference(float(observed), float(low), float(high), float((diffs > 0).mean()), len(diffs), level)


def signed(value: float, digits: int = 4) -> str:
    """``+0.0040`` / ``−0.0021`` (a true minus sign); ``—`` for NaN."""
    return "—" if not np.isfinite(value) else f"{value:+.{digits}f}".replace("-", "−")


def _runs(scores, n: int, name: str) -> list[np.ndarray]:
    runs = [np.asarray(s, dtype=np.float64) for s in scores] if _is_list(scores) else [np.asarray(scores, np.float64)]
    if not runs or any(s.shape != (n,) for s in runs):
        raise ValueError(f"{name} must be the scores of the {n} labelled rows (or a list of such arrays), got shapes "
                         f"{[s.shape for s in runs]}")
    return runs


def _is_list(scores) -> bool:
    return isinstance(scores, Sequence) and not isinstance(scores, str) and len(scores) > 0 \
        and np.ndim(scores[0]) == 1


def _drawer(n: int, groups, rng: np.random.Generator) -> Callable[[], np.ndarray]:
    """A function drawing one resample's row positions: ``n`` rows with replacement, or with ``groups`` as many
    groups as there are, each with all its rows."""
    if groups is None:
        return lambda: rng.integers(0, n, n)
    keys = np.asarray(groups)
    if keys.shape != (n,):
        raise ValueError(f"groups must hold one key per row ({n}), got shape {keys.shape}")
    codes = np.unique(keys, return_inverse=True)[1].ravel()
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def draw() -> np.ndarray:
        chosen = rng.integers(0, len(sizes), len(sizes))
        lengths = sizes[chosen]
        offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return order[np.repeat(starts[chosen], lengths) + offsets]

    return draw

"""Label leaks: feature columns that alone predict a label almost perfectly.

A column measured after the outcome (play time, watch ratio, a comment's stay time …) left among the features lets a
model read the label instead of predicting it; validation then reports an AUC near 1 and nothing else looks wrong.
The guard judges each feature by itself, whatever its name, by its univariate AUC against each label, on the rows
where the label is defined (the clicked rows for a conversion), before any training:

- a numeric column by its values (the AUC of the better of the two directions, ``max(AUC, 1 - AUC)``);
- a categorical column by target encoding: each level's label rate, learnt on one half of the rows (drawn with a
  fixed seed) and scored on the other half, a level unseen in the first half getting the half's overall rate.
  Scored on the rows it was not learnt on, an id with a few rows per level (user_id, item_id) gains nothing from
  memorising its rows and stays near its true predictive power.

An AUC needs both classes in numbers: when the rows judged hold fewer than :data:`MIN_CLASS_ROWS` of a class (a rare
label, five likes in 2,000 rows), a feature is judged only by whether it separates the classes on every row
(:func:`separation_auc`), so a copy of the label, or of its negation, is named whatever the class counts, unless
chance alone would separate them as well once in a thousand draws (an id with a row per level; a single positive
among fewer than 1,000 rows). A label with a single class gets no verdict.

Features known before the outcome stay far below :data:`SUSPECT_AUC`: on KuaiRand-Pure's log the best (video_id,
author_id, user_id) reach 0.60–0.66 for the click and the like, on the synthetic conversion world 0.65, and whole
trained models reach 0.7–0.9. A column above :data:`LEAK_AUC` (0.95) orders 95 % of the (positive, negative) pairs by
itself, which a measurement of the outcome does: KuaiRand's play_time_ms has 0.978 for the click, and its ``like``
column 1.0 for ``is_like``; it is called a leak. A column between :data:`SUSPECT_AUC` and :data:`LEAK_AUC` is a
suspect, listed to be checked: KuaiRand's watch_ratio (0.92 for the click), long_view and is_positive (about 0.85).
A leak that only a combination of features makes is left to the validation AUC above :data:`VALIDATION_LEAK_AUC`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from math import comb

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.metrics.ranking import auc

#: A single feature whose univariate AUC against a label exceeds this is reported as a probable label leak.
LEAK_AUC = 0.95
#: A single feature whose univariate AUC against a label exceeds this (but not :data:`LEAK_AUC`) is a suspect.
SUSPECT_AUC = 0.85
#: A validation AUC above this after training is reported as a probable label leak.
VALIDATION_LEAK_AUC = 0.99
#: The guard judges at most this many rows per label (a seeded sample): its AUCs' error is then about 0.002.
MAX_ROWS = 200_000
#: With fewer rows than this of a class, a feature is judged only by whether it separates the classes.
MIN_CLASS_ROWS = 20
#: A numeric feature separates the classes when its AUC on every row is at least this.
SEPARATION_AUC = 0.999
#: A separation is named only when a random draw of the classes would make one as good less often than this.
SEPARATION_CHANCE = 1e-3
_SEED = 20240601


@dataclass(frozen=True)
class Leak:
    """A feature whose univariate ``auc`` against ``label`` is above the leak threshold, or, when ``suspect``, only
    above the suspect one."""

    feature: str
    label: str
    auc: float
    suspect: bool = False


def feature_auc(values: pd.Series, y: np.ndarray, categorical: bool, rng: np.random.Generator | None = None) -> float:
    """The univariate AUC of one feature column against the 0/1 labels ``y`` (same length), in the better
    direction (in [0.5, 1]): by value for a numeric column (missing values below every other), by the level's
    label rate learnt on a random half and scored on the other half for a ``categorical`` one. When the rows scored
    hold fewer than :data:`MIN_CLASS_ROWS` of a class, :func:`separation_auc` on every row; NaN when ``y`` holds a
    single class."""
    return _judged_auc(_key(values, categorical), np.asarray(y, dtype=np.float64), categorical,
                       rng or np.random.default_rng(_SEED))


def separation_auc(values: pd.Series, y: np.ndarray, categorical: bool) -> float:
    """The in-sample AUC of a feature that separates the 0/1 labels ``y``: 1 for a ``categorical`` column whose every
    level holds a single class, the AUC by value (better direction) of a numeric one when at least
    :data:`SEPARATION_AUC`; only when a random draw of the classes would separate them as well with a chance under
    :data:`SEPARATION_CHANCE` (so an id with a row per level is no separator). NaN otherwise, and when ``y`` holds a
    single class."""
    return _separation(_key(values, categorical), np.asarray(y, dtype=np.float64), categorical)


def _key(values: pd.Series, categorical: bool) -> np.ndarray:
    """What the guard reads of a column: its levels' codes (``categorical``), or the codes of its values in
    increasing order, missing values first. Taken at some rows, either judges the column on those rows as the
    column itself would, so :func:`find_leaks` computes it once per column."""
    if categorical:
        return pd.factorize(values, use_na_sentinel=False)[0]
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    codes, distinct = pd.factorize(numbers)  # the distinct values sorted, not every row: a column has few
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[np.argsort(distinct)] = np.arange(len(distinct))
    missing = codes < 0
    key = rank[codes] + int(missing.any())
    key[missing] = 0
    return key


def _judged_auc(key: np.ndarray, y: np.ndarray, categorical: bool, rng: np.random.Generator) -> float:
    """:func:`feature_auc` of the column whose :func:`_key` is ``key``: counted by level (:func:`_level_auc`), the
    numeric column's values scoring as themselves, the categorical column's levels by their rate on the half learnt."""
    if not categorical:
        if _minority(y) < MIN_CLASS_ROWS:
            return _separation(key, y, categorical)
        negatives, positives = _class_counts(key, y, _size(key)).T
        value = _level_auc(np.arange(len(positives)), positives, negatives)
        return max(value, 1.0 - value)
    learn = rng.random(len(y)) < 0.5
    counts = _class_counts(2 * key + learn, y, 2 * _size(key)).reshape(-1, 2, 2)  # level, half, class
    scored, learnt = counts[:, 0], counts[:, 1]
    if scored.sum(axis=0).min() < MIN_CLASS_ROWS:
        return _separation(key, y, categorical)
    value = _level_auc(_rates(learnt.sum(axis=1), learnt[:, 1]), scored[:, 1], scored[:, 0])
    return max(value, 1.0 - value)


def _separation(key: np.ndarray, y: np.ndarray, categorical: bool) -> float:
    """:func:`separation_auc` of the column whose :func:`_key` is ``key``."""
    minority = _minority(y)
    if minority == 0:
        return float("nan")
    if categorical:
        rows, hits = np.bincount(key), np.bincount(key, weights=y)
        if not np.all((hits == 0) | (hits == rows)):
            return float("nan")
        value, chance = 1.0, _purity_chance(rows[rows > 0], minority)
    else:
        value = _better_auc(y, key)
        if value < SEPARATION_AUC:
            return float("nan")
        chance = _order_chance(value, minority, len(y))
    return value if chance < SEPARATION_CHANCE else float("nan")


def _purity_chance(sizes: np.ndarray, k: int) -> float:
    """The chance that ``k`` rows drawn at random fill whole levels of the given ``sizes`` (rows per level): the
    number of sets of levels holding ``k`` rows in all over the number of draws."""
    ways = [1] + [0] * k  # ways[j]: the sets of levels (of the sizes seen so far) holding j rows
    for size, count in zip(*np.unique(sizes[sizes <= k], return_counts=True)):
        size, count = int(size), int(count)
        ways = [sum(ways[j - size * i] * comb(count, i) for i in range(j // size + 1)) for j in range(k + 1)]
    return ways[k] / comb(int(sizes.sum()), k)


def _order_chance(value: float, k: int, n: int) -> float:
    """A bound on the chance that ``k`` rows drawn at random out of ``n`` reach an AUC of ``value`` (in either
    direction): each then has at most the (1 - value)·k·(n - k) discordant pairs beyond it, so all lie among the
    k + that many most extreme rows."""
    discordant = int((1.0 - value) * k * (n - k) + 1e-6)
    return 2 * comb(k + discordant, k) / comb(n, k)


def _class_counts(codes: np.ndarray, y: np.ndarray, size: int) -> np.ndarray:
    """The negatives and the positives ``(size, 2)`` of each code (below ``size``) for the 0/1 labels ``y``, in one
    count."""
    return np.bincount(2 * codes + (y > 0.5), minlength=2 * size).reshape(-1, 2)


def _size(codes: np.ndarray) -> int:
    """How many codes ``codes`` (from 0) may hold."""
    return int(codes.max()) + 1 if len(codes) else 0


def _rates(rows: np.ndarray, hits: np.ndarray) -> np.ndarray:
    """Each level's label rate; a level without rows gets the overall rate (0.5 without any row)."""
    prior = hits.sum() / rows.sum() if rows.sum() else 0.5
    return np.divide(hits, rows, out=np.full(len(rows), prior), where=rows > 0)


def _level_auc(rate: np.ndarray, positives: np.ndarray, negatives: np.ndarray) -> float:
    """The AUC of scoring each row by its level's ``rate``, from the ``positives`` and ``negatives`` of each level
    (tied pairs count 1/2): the rows of a level all score the same, so none needs ranking."""
    scores, score = np.unique(rate, return_inverse=True)
    positives, negatives = (np.bincount(score, weights=w, minlength=len(scores)) for w in (positives, negatives))
    below = np.cumsum(negatives) - negatives
    return float(positives @ (below + negatives / 2) / (positives.sum() * negatives.sum()))


def _minority(y: np.ndarray) -> int:
    """The rows of the smaller class of the 0/1 labels ``y``."""
    positives = int(y.sum())
    return min(positives, len(y) - positives)


def _better_auc(y: np.ndarray, scores: np.ndarray) -> float:
    """The AUC of ``scores`` against ``y`` (both classes present) in the better direction."""
    value = auc(y, scores)
    return max(value, 1.0 - value)


#: Set while a model is refit on rows its selecting fit already judged (:func:`judged_already`).
_JUDGED = ContextVar("promokit_leaks_judged", default=False)


@contextmanager
def judged_already() -> Iterator[None]:
    """Within it :func:`find_leaks` finds nothing: a refit on every row (:mod:`promokit.training.refit`) learns from
    the columns its selecting fit was already warned of, and judging them again would only repeat the warning."""
    token = _JUDGED.set(True)
    try:
        yield
    finally:
        _JUDGED.reset(token)


def find_leaks(frame: pd.DataFrame, categorical: list[str], numeric: list[str], labels: dict[str, tuple],
               allow=(), threshold: float = LEAK_AUC, suspect: float = SUSPECT_AUC) -> list[Leak]:
    """The features of ``frame`` (its ``categorical`` and ``numeric`` columns, less those of ``allow``) whose
    :func:`feature_auc` against a label exceeds ``threshold``, and, marked ``suspect``, those whose AUC exceeds only
    ``suspect``. ``labels`` maps a label's name to ``(y, rows)``: its 0/1 array over the rows of ``frame`` and a
    boolean mask of the rows where it is defined (None: every row). Judged on at most :data:`MAX_ROWS` rows per
    label, drawn with a fixed seed (the global random state is left alone); nothing within :func:`judged_already`."""
    if _JUDGED.get():
        return []
    allowed = set(allow)
    keys = {column: _key(frame[column], column in categorical)
            for column in [*categorical, *numeric] if column not in allowed}
    leaks = []
    for name, (y, rows) in labels.items():
        rng = np.random.default_rng(_SEED)
        positions = np.arange(len(frame)) if rows is None else np.flatnonzero(rows)
        if len(positions) > MAX_ROWS:
            positions = np.sort(rng.choice(positions, MAX_ROWS, replace=False))
        y_rows = np.asarray(y, dtype=np.float64)[positions]
        for column, key in keys.items():
            value = _judged_auc(key[positions], y_rows, column in categorical, rng)
            if value > suspect:
                leaks.append(Leak(column, name, value, suspect=value <= threshold))
    return leaks


def leak_warning(leaks: list[Leak], threshold: float = LEAK_AUC, suspect: float = SUSPECT_AUC) -> str | None:
    """One line naming each leaky feature with its AUC and how to drop or allow it, then the suspects (``check
    these: …``), or the suspects alone; None when there is neither."""
    sure, doubtful = [leak for leak in leaks if not leak.suspect], [leak for leak in leaks if leak.suspect]
    parts = []
    if sure:
        found = "; ".join(f"feature {leak.feature!r} alone has AUC {leak.auc:.3f} for {leak.label}" for leak in sure)
        parts.append(f"{found} (above {threshold}): a label leak, a column measured after the outcome? Drop it from "
                     f"the features, or allow it with `allow_leaky` {_names(sure)}")
    if doubtful:
        listed = ", ".join(f"{leak.feature!r} {leak.auc:.3f} for {leak.label}" for leak in doubtful)
        parts.append(f"check these: {listed} (alone above {suspect}, short of a leak's {threshold}: measured after "
                     f"the outcome? allow them with `allow_leaky` {_names(doubtful)})")
    return "; ".join(parts) or None


def _names(leaks: list[Leak]) -> str:
    """The features of ``leaks``, each once, comma-separated."""
    return ",".join(dict.fromkeys(str(leak.feature) for leak in leaks))


def validation_leak_warning(aucs: dict[str, float], threshold: float = VALIDATION_LEAK_AUC) -> str | None:
    """One line naming the validation AUCs (name → value) above ``threshold``; None when there is none."""
    high = {name: value for name, value in aucs.items() if value is not None and value > threshold}
    if not high:
        return None
    listed = ", ".join(f"{name} {value:.4f}" for name, value in high.items())
    return (f"validation {listed} (above {threshold}): so near perfect that a feature probably gives the label away "
            "(a label leak); check the features measured after the outcome")


def allowed_columns(value, argument: str = "allow_leaky") -> list[str]:
    """The columns the guard leaves alone, given as None, comma-separated names or a list of names (each once, in
    order); anything else is a one-line error naming ``argument``."""
    names = value.split(",") if isinstance(value, str) else value
    if names is None:
        return []
    if isinstance(names, (list, tuple)) and all(isinstance(name, str) for name in names):
        return list(dict.fromkeys(name.strip() for name in names if name.strip()))
    raise DataError(f"`{argument}` must be column names (a list, or comma-separated), got {value!r}")

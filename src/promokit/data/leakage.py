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

Features known before the outcome stay far below :data:`LEAK_AUC`: on KuaiRand-Pure's log the best (video_id,
author_id, user_id) reach 0.60–0.66 for the click and the like, on the synthetic conversion world 0.65, and whole
trained models reach 0.7–0.9. A column above 0.95 orders 95 % of the (positive, negative) pairs by itself, which a
measurement of the outcome does: KuaiRand's play_time_ms has 0.978 for the click, and its ``like`` column 1.0 for
``is_like``. (watch_ratio, 0.91, and long_view, 0.85, are leaks the guard misses alone; the validation AUC above
:data:`VALIDATION_LEAK_AUC` then speaks.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.metrics.ranking import auc

#: A single feature whose univariate AUC against a label exceeds this is reported as a probable label leak.
LEAK_AUC = 0.95
#: A validation AUC above this after training is reported as a probable label leak.
VALIDATION_LEAK_AUC = 0.99
#: The guard judges at most this many rows per label (a seeded sample): its AUCs' error is then about 0.002.
MAX_ROWS = 200_000
#: The guard needs at least this many rows of each class of a label to judge it (fewer: no verdict).
MIN_CLASS_ROWS = 20
_SEED = 20240601


@dataclass(frozen=True)
class Leak:
    """A feature whose univariate ``auc`` against ``label`` is above the threshold."""

    feature: str
    label: str
    auc: float


def feature_auc(values: pd.Series, y: np.ndarray, categorical: bool, rng: np.random.Generator | None = None) -> float:
    """The univariate AUC of one feature column against the 0/1 labels ``y`` (same length), in the better
    direction (in [0.5, 1]): by value for a numeric column (missing values below every other), by the level's
    label rate learnt on a random half and scored on the other half for a ``categorical`` one. NaN when ``y`` (or
    the scored half) holds a single class."""
    y = np.asarray(y, dtype=np.float64)
    if categorical:
        rng = rng or np.random.default_rng(_SEED)
        codes = pd.factorize(values, use_na_sentinel=False)[0]
        learn = rng.random(len(y)) < 0.5
        rows, hits = (np.bincount(codes[learn], weights=w, minlength=codes.max() + 1) for w in (None, y[learn]))
        prior = y[learn].mean() if learn.any() else 0.5
        rate = np.divide(hits, rows, out=np.full(len(rows), prior), where=rows > 0)
        scores, y = rate[codes[~learn]], y[~learn]
    else:
        numbers = pd.Series(pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan))
        scores = numbers.rank(na_option="top").to_numpy()  # ranks: finite, and missing values below the rest
    positives = int(y.sum())
    if min(positives, len(y) - positives) < MIN_CLASS_ROWS:
        return float("nan")
    value = auc(y, scores)
    return max(value, 1.0 - value)


def find_leaks(frame: pd.DataFrame, categorical: list[str], numeric: list[str], labels: dict[str, tuple],
               allow=(), threshold: float = LEAK_AUC) -> list[Leak]:
    """The features of ``frame`` (its ``categorical`` and ``numeric`` columns, less those of ``allow``) whose
    :func:`feature_auc` against a label exceeds ``threshold``. ``labels`` maps a label's name to ``(y, rows)``: its
    0/1 array over the rows of ``frame`` and a boolean mask of the rows where it is defined (None: every row).
    Judged on at most :data:`MAX_ROWS` rows per label, drawn with a fixed seed (the global random state is left
    alone)."""
    allowed = set(allow)
    leaks = []
    for name, (y, rows) in labels.items():
        rng = np.random.default_rng(_SEED)
        positions = np.arange(len(frame)) if rows is None else np.flatnonzero(rows)
        if len(positions) > MAX_ROWS:
            positions = np.sort(rng.choice(positions, MAX_ROWS, replace=False))
        y_rows = np.asarray(y)[positions]
        for column in [*categorical, *numeric]:
            if column in allowed:
                continue
            value = feature_auc(frame[column].iloc[positions], y_rows, column in categorical, rng)
            if value > threshold:
                leaks.append(Leak(column, name, value))
    return leaks


def leak_warning(leaks: list[Leak], threshold: float = LEAK_AUC) -> str | None:
    """One line naming each leaky feature with its AUC and how to drop or allow it; None when there is none."""
    if not leaks:
        return None
    found = "; ".join(f"feature {leak.feature!r} alone has AUC {leak.auc:.3f} for {leak.label}" for leak in leaks)
    names = list(dict.fromkeys(str(leak.feature) for leak in leaks))
    return (f"{found} (above {threshold}): a label leak, a column measured after the outcome? Drop it from the "
            f"features, or allow it with `allow_leaky` {','.join(names)}")


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

"""Ranking metrics of the ESM² paper (Wen et al., SIGIR 2020): AUC, group AUC, precision/recall/F1 at top.

AUC is computed with the Mann–Whitney U statistic: sort once, give tied scores their average rank, and
AUC = (R_pos - n_pos(n_pos + 1)/2) / (n_pos n_neg), where R_pos is the rank sum of the positives. This
counts a tied (positive, negative) pair as 1/2 and costs O(n log n).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.metrics._validation import as_float_1d, check_labels_and_scores

GAUC_WEIGHTS = ("impressions", "uniform")
#: A GAUC scored on fewer than this share of its groups (the others hold one class) is the average of a few groups'
#: AUCs, not the population's: :func:`gauc_coverage_warning` says so. Rare conversions leave many groups with one
#: class (about 12 % of the users are scored on the synthetic conversion world's test rows); under 5 % is a minority
#: too small to stand for the population.
GAUC_MIN_SHARE = 0.05


class MetricWarning(UserWarning):
    """A metric is undefined on this input (e.g. a single class) and was returned as NaN."""


@dataclass(frozen=True)
class GAUCResult:
    """Group AUC and how many groups it covers; ``n_skipped`` groups had a single class and no AUC."""

    value: float
    n_groups: int
    n_scored: int
    n_skipped: int


@dataclass(frozen=True)
class TopKResult:
    """Precision, recall and F1 when the top ``k`` rows (``fraction`` of the set) are predicted positive."""

    fraction: float
    k: int
    precision: float
    recall: float
    f1: float


def auc(y_true, y_score) -> float:
    """ROC AUC over the whole set: ESM² eq. (12), with tied (positive, negative) pairs counted as 1/2.

    Returns NaN with a ``MetricWarning`` when ``y_true`` is empty or has a single class.
    """
    labels, scores = check_labels_and_scores(y_true, y_score)
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        warnings.warn(f"AUC is undefined: y_true has {n_pos} positives and {n_neg} negatives; returning NaN",
                      MetricWarning, stacklevel=2)
        return float("nan")
    ranks = _average_ranks_within(np.zeros(len(scores), dtype=np.intp), scores)
    return float(_mann_whitney_auc(ranks[labels == 1].sum(), n_pos, n_neg))


def expected_auc(p_true, y_score) -> float:
    r"""The AUC of ``y_score`` expected over labels drawn from their true probabilities ``p_true`` (a synthetic
    world's truth): every ordered pair of distinct rows counts with the chance that the first is a positive and
    the second a negative,

    .. math::
        \mathrm{AUC}^* = \frac{\sum_{i \ne j} p_i (1 - p_j)\,[s_i > s_j] + \tfrac12 [s_i = s_j]}
                              {\sum_{i \ne j} p_i (1 - p_j)},

    the AUC that a test set of infinitely many label draws per row would give. It equals :func:`auc` when every
    ``p_true`` is 0 or 1, and removes the test labels' sampling noise from a comparison of models. O(n log n).
    Returns NaN with a ``MetricWarning`` when no pair has weight (fewer than two rows, or all p equal to 0 or 1).
    """
    probabilities = as_float_1d(p_true, "p_true")
    _, scores = check_labels_and_scores(np.zeros(len(probabilities)), y_score)
    if len(scores) != len(probabilities) or ((probabilities < 0) | (probabilities > 1)).any():
        raise ValueError("p_true must hold probabilities in [0, 1], one per score")
    order = np.argsort(scores, kind="stable")
    s, positive = scores[order], probabilities[order]
    negative = 1 - positive
    block = np.cumsum(np.r_[True, s[1:] != s[:-1]]) - 1
    block_negative = np.bincount(block, weights=negative)
    below = np.r_[0.0, np.cumsum(block_negative)[:-1]][block]  # negative weight of strictly lower scores
    beaten = below + 0.5 * (block_negative[block] - negative)  # ties count 1/2, the row itself not at all
    pairs = positive.sum() * negative.sum() - positive @ negative
    if pairs <= 0:
        warnings.warn("expected AUC is undefined: no pair of rows can hold a positive and a negative; returning NaN",
                      MetricWarning, stacklevel=2)
        return float("nan")
    return float(positive @ beaten / pairs)


def gauc(y_true, y_score, groups, weight: str = "impressions") -> GAUCResult:
    """Group AUC, ESM² eq. (13): GAUC = Σ_u w_u·AUC_u / Σ_u w_u over the groups u (e.g. users).

    ``weight="impressions"`` sets w_u to the number of rows of group u (Zhu et al., DIN); ``weight="uniform"``
    sets w_u = 1 (the ESM² offline setting). Groups with a single class have no AUC and are skipped.
    ``groups`` may hold any hashable keys (ints, strings). Vectorised: one sort, no loop over groups.
    """
    if weight not in GAUC_WEIGHTS:
        raise ValueError(f"weight must be one of {GAUC_WEIGHTS}, got {weight!r}")
    labels, scores = check_labels_and_scores(y_true, y_score)
    codes, uniques = pd.factorize(pd.Series(groups, copy=False))
    if len(codes) != len(labels):
        raise ValueError(f"groups must have the same length as y_true, got {len(codes)} and {len(labels)}")
    n_missing = int((codes < 0).sum())
    if n_missing:
        raise ValueError(f"groups has {n_missing} missing keys; every row needs a group")
    n_groups = len(uniques)
    ranks = _average_ranks_within(codes, scores)
    n_rows = np.bincount(codes, minlength=n_groups)
    n_pos = np.bincount(codes, weights=labels, minlength=n_groups)
    n_neg = n_rows - n_pos
    pos_rank_sum = np.bincount(codes, weights=ranks * labels, minlength=n_groups)
    scored = (n_pos > 0) & (n_neg > 0)
    n_scored = int(scored.sum())
    if n_scored == 0:
        warnings.warn(f"GAUC is undefined: none of the {n_groups} groups has both classes; returning NaN",
                      MetricWarning, stacklevel=2)
        return GAUCResult(float("nan"), n_groups, 0, n_groups)
    group_auc = _mann_whitney_auc(pos_rank_sum[scored], n_pos[scored], n_neg[scored])
    group_weight = n_rows[scored] if weight == "impressions" else np.ones(n_scored)
    value = float(np.sum(group_weight * group_auc) / np.sum(group_weight))
    return GAUCResult(value, n_groups, n_scored, n_groups - n_scored)


def gauc_coverage_warning(result: GAUCResult, name: str = "GAUC", groups: str = "groups",
                          min_share: float = GAUC_MIN_SHARE) -> str | None:
    """A caution when ``result`` (:func:`gauc`'s) scores fewer than ``min_share`` of its ``groups`` (what they are,
    e.g. "users"); None otherwise, or when it scores none (:func:`gauc` warns of that itself)."""
    if not result.n_scored or result.n_scored >= min_share * result.n_groups:
        return None
    return (f"{name} rests on {result.n_scored:,} of {result.n_groups:,} {groups} ({result.n_scored / result.n_groups:.1%}, "
            f"under {min_share:.0%}): the others hold a single class; it is the average of a few {groups}' AUCs, read "
            "it with care (or score more rows per group)")


def precision_recall_f1_at_top(y_true, y_score, fraction: float) -> TopKResult:
    """Precision, recall and F1 of the top ``fraction`` of rows: ESM² eqs. (14)–(16), Tables 4–5.

    The k = max(1, ceil(fraction·n)) highest-scored rows are predicted positive (fraction·n is rounded to
    9 decimals first, so 0.07·100 gives k = 7, not 8). Ties at the cut are broken by a stable sort: among
    equal scores, the row that comes first in the input is ranked higher. precision = TP/k,
    recall = TP/#positives (NaN with a ``MetricWarning`` if there are no positives), F1 = 2PR/(P+R)
    (0 when P + R = 0). On empty input k = 0 and every value is NaN.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    labels, scores = check_labels_and_scores(y_true, y_score)
    n = len(labels)
    n_pos = int(labels.sum())
    if n_pos == 0:
        warnings.warn(f"recall at top is undefined: y_true has no positives among {n} rows; returning NaN",
                      MetricWarning, stacklevel=2)
    k = min(n, max(1, math.ceil(round(fraction * n, 9))))
    top = np.argsort(-scores, kind="stable")[:k]
    true_positives = int(labels[top].sum())
    precision = true_positives / k if k else float("nan")
    if n_pos == 0:
        recall = f1 = float("nan")
    else:
        recall = true_positives / n_pos
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return TopKResult(fraction, k, precision, recall, f1)


def _average_ranks_within(codes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """1-based rank of each score within its group (``codes``), tied scores sharing their average rank."""
    order = np.lexsort((scores, codes))
    sorted_codes, sorted_scores = codes[order], scores[order]
    new_group = np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]
    new_block = new_group | np.r_[True, sorted_scores[1:] != sorted_scores[:-1]]
    group_start = np.flatnonzero(new_group)[np.cumsum(new_group) - 1]
    block_starts = np.flatnonzero(new_block)
    block_ends = np.r_[block_starts[1:], len(scores)]
    block_rank = (block_starts + block_ends + 1) / 2
    ranks = np.empty(len(scores))
    ranks[order] = block_rank[np.cumsum(new_block) - 1] - group_start
    return ranks


def _mann_whitney_auc(pos_rank_sum, n_pos, n_neg):
    """AUC from the rank sum of the positives (works elementwise on arrays of groups)."""
    return (pos_rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)

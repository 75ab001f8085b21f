"""Losses on probabilities that are products of sigmoids (so logits are not at hand)."""

from __future__ import annotations

from torch import Tensor

EPS = 1e-7


def binary_log_loss(p: Tensor, y: Tensor, weight: Tensor | None = None) -> Tensor:
    """Mean (or ``weight``-weighted mean) logloss, ESM² eqs. (8)–(10) divided by the number of terms.

    ``p`` is clamped to ``[EPS, 1 − EPS]`` because composed probabilities such as p_ctcvr = y1·p_cvr can
    underflow. Rows with zero weight do not count; an all-zero weight gives 0.
    """
    terms = log_loss_terms(p, y)
    if weight is None:
        return terms.mean()
    return (terms * weight).sum() / weight.sum().clamp_min(1.0)


def log_loss_terms(p: Tensor, y: Tensor) -> Tensor:
    """Element-wise logloss ``−y log p − (1 − y) log(1 − p)``, ``p`` clamped as in :func:`binary_log_loss`."""
    p = p.clamp(EPS, 1 - EPS)
    return -(y * p.log() + (1 - y) * (1 - p).log())

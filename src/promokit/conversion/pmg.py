"""The purchase-related micro-behaviour graph's prior: the concurrence probability matrix P (GMCM section 3)."""

from __future__ import annotations

import numpy as np


def concurrence_probability(micro: np.ndarray, click: np.ndarray) -> np.ndarray:
    r""":math:`p_{ij} = c_{ij} / \sum_j c_{ij}`, with :math:`c_{ij}` the number of clicked rows where micro-behaviours
    ``i`` and ``j`` both happened, ``i ≠ j``.

    Only clicked rows count (micro-behaviours follow a click). The diagonal is left at 0: GCN adds each node's own
    loop through :math:`\tilde A = A + I` (eq. 15), so counting it here would weigh a node's own signal twice. A
    behaviour that never happens together with another has a zero row: its node then starts from its own loop
    only, and the learnable edge bias ``B`` can still connect it. ``micro`` is ``(rows, N)`` of 0/1.
    """
    fired = np.asarray(micro, dtype=np.float64)[np.asarray(click) == 1]
    counts = fired.T @ fired
    np.fill_diagonal(counts, 0.0)
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)

"""The manual-priority allocation the EOCA paper compares against (section 5.1.2).

Fund types are taken in a priority order; each gets the top-d_j remaining users by its ETV. Like HA, it keeps
the remaining problem feasible (``quota_core.risk_slack``): a type may take at most ``slack_r`` users whose
tolerance reaches a riskier level r, so the users the riskier types need are never used up.

With bounds L_j ≤ n_j ≤ U_j the specialist first fixes each type's d_j in the same priority order
(``priority_counts``): as many users as its max allows while the minimums of the types after it stay reachable,
so the first types fill up and the last ones take what is left; then the allocation runs as above.
"""

from __future__ import annotations

import numpy as np

from promokit.allocation.quota_core import QuotaPlan, QuotaProblem, finish_plan, risk_slack
from promokit.data.errors import DataError


def solve_manual(problem: QuotaProblem, priority=None) -> QuotaPlan:
    """Allocate type by type in ``priority`` order (default: by mean ETV over the users allowed the type,
    highest first), each type taking its top-d_j remaining eligible users by ETV (d_j from
    ``priority_counts`` with bounds)."""
    order = _priority(problem, priority)
    quota_left = priority_counts(problem, order)
    assignment = np.full(problem.n_users, -1, dtype=np.int64)
    for j in order:
        remaining = np.flatnonzero(assignment < 0)
        hall = risk_slack(problem.tolerance[remaining], problem.risk, quota_left)
        eligible = remaining[problem.tolerance[remaining] >= problem.risk[j]]
        above = hall.levels > problem.risk[j]
        chosen = _top_within_caps(problem.etv[eligible, j], problem.tolerance[eligible], hall.levels[above],
                                  hall.slack[above], int(quota_left[j]))
        assignment[eligible[chosen]] = j
        quota_left[j] = 0
    return finish_plan(problem, assignment, "manual", priority=order.tolist())


def priority_counts(problem: QuotaProblem, order: np.ndarray) -> np.ndarray:
    """Exact counts within the bounds, fixed type by type in ``order``: each type the largest count that keeps
    every bound reachable, min(U_j, L_j + the least slack of the levels at or below r_j).

    Raising L_j by one lowers the slack of every level ≤ r_j by one and changes no room (``risk_slack``), so
    that is the largest n_j of any feasible plan, and fixing n_j there keeps the problem feasible. Exact quotas
    come back unchanged."""
    counts = problem.min_users.copy()
    levels = np.unique(problem.risk)
    at_or_below = np.searchsorted(levels, problem.risk) + 1  # levels[:at_or_below[j]] are those ≤ r_j
    users_at_least = np.array([np.count_nonzero(problem.tolerance >= level) for level in levels], dtype=np.int64)
    for j in order:
        slack = users_at_least - np.array([counts[problem.risk >= level].sum() for level in levels])
        counts[j] = min(problem.max_users[j], counts[j] + slack[:at_or_below[j]].min())
    return counts


def _priority(problem: QuotaProblem, priority) -> np.ndarray:
    if priority is None:
        allowed = problem.allowed()
        totals = np.where(allowed, problem.etv, 0.0).sum(axis=0)
        mean = np.divide(totals, allowed.sum(axis=0), out=np.zeros(problem.n_types), where=allowed.any(axis=0))
        return np.argsort(-mean, kind="stable")
    order = np.asarray(priority)
    if sorted(order.tolist()) != list(range(problem.n_types)):
        raise DataError(f"priority must list each of the {problem.n_types} fund types once, got {order.tolist()}")
    return order.astype(np.int64)


def _top_within_caps(values, tolerance, levels, caps, count: int) -> np.ndarray:
    """Indices of the ``count`` highest ``values`` such that at most ``caps[m]`` have tolerance ≥ ``levels[m]``.

    The capped sets are nested (``levels`` ascending), so greedy by value is optimal and equals: keep the top
    caps[m] of each set, innermost first, carrying the survivors outward.
    """
    survivors = np.empty(0, dtype=np.int64)
    bounds = np.append(levels, np.inf)
    for m in range(len(levels) - 1, -1, -1):
        band = np.flatnonzero((tolerance >= bounds[m]) & (tolerance < bounds[m + 1]))
        survivors = _top(values, np.concatenate([band, survivors]), int(caps[m]))
    free = np.flatnonzero(tolerance < bounds[0])
    return _top(values, np.concatenate([free, survivors]), count)


def _top(values, candidates, count: int) -> np.ndarray:
    if count <= 0:
        return candidates[:0]
    if len(candidates) <= count:
        return candidates
    return candidates[np.argpartition(-values[candidates], count - 1)[:count]]

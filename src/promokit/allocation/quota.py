"""The EOCA customer-allocation problem with quotas and risk limits (eqs. 1–5): validation and the solvers.

Maximise Σ_ij X_ij·ETV_ij (eq. 1) over X ∈ {0, 1} (eq. 2) with one fund type per user (eq. 3), exactly
d_j users per type (eq. 4) — or, with ``min_users`` / ``max_users``, between L_j and U_j — and type j only for
users with risk tolerance t_i ≥ r_j (eq. 5). ``solve_quota`` validates the inputs and dispatches to
``quota_prices`` (prices), ``quota_ha`` (the paper's Algorithm 1), ``quota_manual`` (the paper's manual-priority
baseline) and ``quota_exact`` (min-cost flow); the types and the dual bound they share live in ``quota_core``.
"""

from __future__ import annotations

import time

import numpy as np

from promokit.allocation.checks import check_matrix, check_vector
from promokit.allocation.defaults import QUOTA_METHOD
from promokit.allocation.quota_core import (QuotaPlan, QuotaProblem, dual_bound, plan_prices, risk_slack,
                                             slack_at_levels, users_at_least)
from promokit.allocation.quota_exact import solve_exact
from promokit.allocation.quota_ha import solve_ha
from promokit.allocation.quota_manual import solve_manual
from promokit.allocation.quota_prices import solve_prices
from promokit.data.errors import DataError

__all__ = ["METHODS", "QuotaPlan", "QuotaProblem", "check_plan", "check_quota_problem", "dual_bound",
           "plan_prices", "prepare_quota_problem", "risk_slack", "solve_quota"]

SOLVERS = {"prices": solve_prices, "ha": solve_ha, "manual": solve_manual, "exact": solve_exact}
METHODS = tuple(SOLVERS)


def solve_quota(etv, quotas=None, tolerance=None, risk=None, method: str = QUOTA_METHOD, *, min_users=None,
                max_users=None, funds=None, **options) -> QuotaPlan:
    """Allocate fund types to users under quotas and risk limits (eqs. 1–5) with ``method``:

    - ``"prices"`` (the default): certified prices on the k quota rows from nested samples, then an exact repair
      at the margins and a dual certificate (``quota_prices.solve_prices``); exactly optimal whenever ``gap`` is 0.
    - ``"ha"``: the EOCA paper's heuristic, Algorithm 1 (``quota_ha.solve_ha``).
    - ``"manual"``: the paper's manual-priority baseline (``quota_manual.solve_manual``).
    - ``"exact"``: min-cost flow with OR-Tools, or HiGHS with ``backend="highs"`` (``quota_exact.solve_exact``).

    Give ``quotas`` (exactly d_j users per type) or ``min_users`` and/or ``max_users`` (per type at least / at
    most; a missing side is 0 / N, and ``np.inf`` is no maximum). ``funds`` names the types in error messages.
    ``options`` go to the chosen solver. Every returned plan meets eqs. 3–5 (checked before returning).
    """
    if method not in SOLVERS:
        raise DataError(f"method must be one of {list(METHODS)}, got {method!r}")
    start = time.perf_counter()
    problem = prepare_quota_problem(etv, quotas, tolerance, risk, min_users=min_users, max_users=max_users,
                                    funds=funds)
    plan = SOLVERS[method](problem, **options)
    check_plan(plan.assignment, tolerance=problem.tolerance, risk=problem.risk, min_users=problem.min_users,
               max_users=problem.max_users)
    plan.seconds = time.perf_counter() - start
    return plan


def prepare_quota_problem(etv, quotas=None, tolerance=None, risk=None, *, min_users=None, max_users=None,
                          funds=None) -> QuotaProblem:
    """Validate the inputs of eqs. 1–5 and return them as a :class:`QuotaProblem`; raise DataError otherwise."""
    etv = check_matrix("etv", etv)
    n_users, n_types = etv.shape
    if n_users == 0 or n_types == 0:
        raise DataError(f"etv must have at least one user and one fund type, got shape {etv.shape}")
    bounded = min_users is not None or max_users is not None
    if quotas is not None and bounded:
        raise DataError("give quotas (exactly d_j users per type, eq. 4) or min_users / max_users (bounds), not both")
    if quotas is None and not bounded:
        raise DataError("give quotas (exactly d_j users per type, eq. 4) or min_users and/or max_users (bounds)")
    if funds is not None and len(funds) != n_types:
        raise DataError(f"funds has {len(funds)} names but etv has {n_types} fund types")
    if quotas is not None:
        lower = upper = _exact_quotas(quotas, n_users, n_types, funds)
    else:
        lower, upper = _bounds(min_users, max_users, n_users, n_types, funds)
    if (tolerance is None) != (risk is None):
        raise DataError("tolerance and risk go together (eq. 5): give both or neither")
    if tolerance is None:
        tolerance, risk = np.zeros(n_users), np.zeros(n_types)
    else:
        tolerance = check_vector("tolerance", tolerance, length=n_users, allow_negative=True)
        risk = check_vector("risk", risk, length=n_types, allow_negative=True)
    _check_hall(tolerance, risk, lower, upper, funds)
    return QuotaProblem(etv, lower, upper, tolerance, risk)


def check_quota_problem(etv, quotas=None, tolerance=None, risk=None, *, min_users=None, max_users=None,
                        funds=None) -> None:
    """Raise DataError when the inputs are malformed or no plan can meet eqs. 3–5."""
    prepare_quota_problem(etv, quotas, tolerance, risk, min_users=min_users, max_users=max_users, funds=funds)


def _exact_quotas(quotas, n_users: int, n_types: int, funds) -> np.ndarray:
    quotas = _whole("quotas", check_vector("quotas", quotas, length=n_types), funds).astype(np.int64)
    if quotas.sum() != n_users:
        raise DataError(f"quotas sum to {int(quotas.sum())} but etv has {n_users} users: every user gets exactly "
                        f"one type (eq. 3) and type j exactly d_j users (eq. 4), so they must be equal")
    return quotas


def _bounds(min_users, max_users, n_users: int, n_types: int, funds) -> tuple[np.ndarray, np.ndarray]:
    """L and U as int64, U capped at N (no type can take more); np.inf or a missing side means no bound."""
    lower = np.zeros(n_types)
    if min_users is not None:
        lower = _whole("min_users", check_vector("min_users", min_users, length=n_types), funds)
    upper = np.full(n_types, np.inf)
    if max_users is not None:
        given = np.asarray(max_users, dtype=np.float64).reshape(-1)
        finite = _whole("max_users", check_vector("max_users", np.where(given == np.inf, 0.0, given),
                                                  length=n_types), funds)
        upper = np.where(given == np.inf, np.inf, finite)
    crossed = lower > upper
    if crossed.any():
        j = int(np.argmax(crossed))
        raise DataError(f"min_users is above max_users for {int(crossed.sum())} of {n_types} types, e.g. "
                        f"{_named([j], funds, one=True)}: min {lower[j]:g} > max {upper[j]:g}")
    upper = np.minimum(upper, n_users)
    if lower.sum() > n_users:
        raise DataError(f"min_users sum to {lower.sum():g} but etv has only {n_users} users: each user counts "
                        f"towards one type (eq. 3), so the minimums cannot all be met")
    if upper.sum() < n_users:
        raise DataError(f"max_users sum to {upper.sum():g} but etv has {n_users} users: every user gets one type "
                        f"(eq. 3), so {n_users - upper.sum():g} users would have none")
    return lower.astype(np.int64), upper.astype(np.int64)


def _whole(name: str, counts: np.ndarray, funds) -> np.ndarray:
    fractional = counts != np.round(counts)
    if fractional.any():
        j = int(np.argmax(fractional))
        raise DataError(f"{name} must be whole numbers of users: {int(fractional.sum())} of {len(counts)} are not, "
                        f"e.g. {_named([j], funds, one=True)}: {counts[j].item()!r}")
    return counts


def _check_hall(tolerance: np.ndarray, risk: np.ndarray, lower: np.ndarray, upper: np.ndarray, funds) -> None:
    """Fail unless counts within [L, U] can meet eqs. 3–5 (``risk_slack``), naming the types and the shortfall."""
    check_hall_counts(users_at_least(tolerance, np.unique(risk)), len(tolerance), risk, lower, upper, funds)


def check_hall_counts(at_least: np.ndarray, n_users: int, risk: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                      funds) -> None:
    """:func:`_check_hall` from the counts #{t ≥ r} per risk level of ``n_users`` users (``users_at_least``; a
    partitioned table sums them over its parts)."""
    hall = slack_at_levels(at_least, n_users, risk, lower, upper)
    short = np.flatnonzero(hall.slack < 0)
    if len(short):
        level = hall.levels[short[-1]]  # the riskiest level that fails: its minimums are the ones that cannot be met
        types = np.flatnonzero(risk >= level)
        need = int(lower[types].sum())
        have = need + int(hall.slack[short[-1]])
        what, amount = ("quotas", need) if np.array_equal(lower, upper) else ("minimums", f"at least {need}")
        raise DataError(f"{what} of {_named(types, funds)} (risk ≥ {level:g}) cannot be met: they need {amount} "
                        f"users but only {have} users have tolerance ≥ {level:g}; short by {need - have} users "
                        f"({len(short)} risk levels fail)")
    crowded = np.flatnonzero(hall.room < 0)  # never with exact quotas: room equals slack then
    if len(crowded):
        level = hall.levels[crowded[0]]  # the safest level that fails
        below = np.flatnonzero(risk < level)
        users = n_users - int(at_least[crowded[0]])
        if len(below) == 0:
            raise DataError(f"{users} users have tolerance below {level:g}, the lowest risk of any type, so eq. 5 "
                            f"allows them none")
        places = int(upper[below].sum())
        raise DataError(f"{users} users have tolerance below {level:g} and may only take {_named(below, funds)} "
                        f"(risk < {level:g}, eq. 5), but their maximums take at most {places} users; "
                        f"{users - places} users would have no type ({len(crowded)} risk levels fail)")


def _named(types, funds, one: bool = False) -> str:
    """``types [0, 2]`` (``type 0``), or ``funds ['F1', 'F3']`` (``fund 'F1'``) when the funds have names."""
    types = [int(j) for j in types]
    if funds is None:
        return f"type {types[0]}" if one else f"types {types}"
    names = [str(funds[j]) for j in types]
    return f"fund {names[0]!r}" if one else f"funds {names}"


def check_plan(assignment, quotas=None, tolerance=None, risk=None, *, min_users=None, max_users=None) -> None:
    """Raise DataError unless ``assignment`` gives each user one type (eq. 3), type j exactly d_j users (eq. 4) —
    or, with ``min_users`` / ``max_users``, between L_j and U_j — and no user a type above its risk tolerance
    (eq. 5)."""
    assignment = np.asarray(assignment)
    if assignment.ndim != 1 or not np.issubdtype(assignment.dtype, np.integer):
        raise DataError(f"assignment must be a 1-D integer array, got dtype {assignment.dtype} "
                        f"and shape {assignment.shape}")
    lower, upper = _plan_bounds(quotas, min_users, max_users, len(assignment))
    outside = (assignment < 0) | (assignment >= len(lower))
    if outside.any():
        i = int(np.argmax(outside))
        raise DataError(f"assignment has {int(outside.sum())} users with no valid type (eq. 3), "
                        f"e.g. user {i}: {int(assignment[i])} (types are 0..{len(lower) - 1})")
    counts = np.bincount(assignment, minlength=len(lower))
    off = np.flatnonzero((counts < lower) | (counts > upper))
    if len(off):
        j = off[0]
        bound = (f"quota is {lower[j]}" if lower[j] == upper[j] else
                 f"min is {lower[j]}" if counts[j] < lower[j] else f"max is {upper[j]}")
        raise DataError(f"assignment misses {len(off)} quotas (eq. 4), e.g. type {j} has {counts[j]} users "
                        f"but its {bound}")
    if tolerance is None and risk is None:
        return
    tolerance = np.asarray(tolerance, dtype=np.float64)
    risk = np.asarray(risk, dtype=np.float64)
    if tolerance.shape != assignment.shape:
        raise DataError(f"tolerance has shape {tolerance.shape}, expected {assignment.shape}")
    above = tolerance < risk[assignment]
    if above.any():
        i = int(np.argmax(above))
        raise DataError(f"assignment gives {int(above.sum())} users a type above their risk tolerance (eq. 5), "
                        f"e.g. user {i} (tolerance {tolerance[i]:g}) gets type {assignment[i]} "
                        f"(risk {risk[assignment[i]]:g})")


def _plan_bounds(quotas, min_users, max_users, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    if quotas is not None:
        quotas = np.asarray(quotas, dtype=np.int64)
        return quotas, quotas
    if min_users is None and max_users is None:
        raise DataError("give quotas (exactly d_j users per type, eq. 4) or min_users and/or max_users (bounds)")
    n_types = len(min_users if min_users is not None else max_users)
    lower = np.zeros(n_types, dtype=np.int64) if min_users is None else np.asarray(min_users, dtype=np.int64)
    upper = np.full(n_types, n_users, dtype=np.int64) if max_users is None else np.asarray(
        np.minimum(np.asarray(max_users, dtype=np.float64), n_users), dtype=np.int64)
    return lower, upper

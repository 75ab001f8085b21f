"""The exact reference for :func:`promokit.allocation.budget.solve_budget`: eqs. 11–16 handed to HiGHS.

The LP relaxation (``x_ij ∈ [0, 1]``, eqs. 12–15) through ``scipy.optimize.linprog`` gives the LP optimum and
the budget row's dual λ*; ``integral=True`` solves the integer problem with ``scipy.optimize.milp`` (tiny
instances only). One variable per (request, option): HiGHS needs minutes at 10⁵ × 10, so this is for checking,
not for production sizes.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from promokit.allocation.budget import BudgetPlan, check_budget_problem, check_feasible


def solve_budget_lp(value, cost, budget: float, integral: bool = False,
                    time_limit: float | None = None) -> BudgetPlan:
    """Solve ``max Σ value·x`` s.t. ``Σ cost·x ≤ budget``, ``Σ_j x_ij = 1``, ``0 ≤ x ≤ 1`` exactly with HiGHS.

    LP (default): ``objective``/``spent`` are those of the fractional optimum (at most one request is split
    between two options), ``choice`` is each request's largest ``x_ij``, ``lam`` the budget row's dual and
    ``upper_bound = objective``. ``integral=True``: the integer optimum, ``upper_bound`` HiGHS's dual bound and
    ``lam`` NaN. Raises :class:`DataError` on bad input or an infeasible budget, ``RuntimeError`` if HiGHS
    stops without an optimum (e.g. at ``time_limit`` seconds).
    """
    started = time.perf_counter()
    value, cost, budget = check_budget_problem(value, cost, budget)
    n_rows, n_options = value.shape
    check_feasible(cost, budget)
    one_per_row = sparse.kron(sparse.eye(n_rows, format="csr"), np.ones((1, n_options)), format="csr")
    objective = -np.asarray(value, np.float64).ravel()
    budget_row = np.asarray(cost, np.float64).reshape(1, -1)
    options = {} if time_limit is None else {"time_limit": time_limit}
    if integral:
        result = milp(objective, integrality=np.ones(objective.size),
                      bounds=Bounds(0, 1),
                      constraints=[LinearConstraint(one_per_row, 1, 1), LinearConstraint(budget_row, -np.inf, budget)],
                      options=options)
    else:
        result = linprog(objective, A_ub=budget_row, b_ub=[budget], A_eq=one_per_row, b_eq=np.ones(n_rows),
                         bounds=(0, 1), method="highs", options=options)
    if result.status != 0 or result.x is None:
        raise RuntimeError(f"HiGHS stopped without an optimum: {result.message}")
    x = result.x.reshape(n_rows, n_options)
    best = float(-result.fun)
    if integral:
        lam, upper = math.nan, max(best, float(-result.mip_dual_bound))
    else:
        lam, upper = float(-result.ineqlin.marginals[0]), best
    spent = float((x * cost).sum())
    return BudgetPlan(choice=x.argmax(axis=1).astype(np.int64), lam=lam, objective=best, spent=spent,
                      budget=budget, slack=budget - spent, upper_bound=upper, gap=upper - best,
                      seconds=time.perf_counter() - started, method="highs-milp" if integral else "highs-lp")

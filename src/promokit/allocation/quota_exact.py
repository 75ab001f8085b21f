"""Exact solution of eqs. 1–5 as a transportation problem: min-cost flow (OR-Tools) or an LP (HiGHS).

Users are supply nodes (1 each), fund types demand nodes (d_j each), with an arc of capacity 1 for every pair
eq. 5 allows. With bounds L_j ≤ Σ_i X_ij ≤ U_j, type j demands L_j and passes up to U_j − L_j more users on to a
sink node that demands the other N − Σ L. The constraint matrix is totally unimodular, so the LP optimum is
integral and the flow is the optimum of the 0/1 problem (eqs. 1–5).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import numpy as np

from promokit.allocation.quota_core import (QuotaPlan, QuotaProblem, dual_bound, finish_plan, plan_prices,
                                            price_limits)
from promokit.data.errors import DataError
from promokit.extras import require_extra

COST_RANGE = 2 ** 40    # largest |integer arc cost|; rounding then moves each user's value by ≤ 2^-41 of the max
OVERFLOW_ROOM = 2 ** 61  # OR-Tools scales costs by (nodes + 1) internally: keep that product in int64


@dataclass
class FlowAssignment:
    assignment: np.ndarray  # (n,) int64
    cost_scale: float       # integer cost = −round(ETV · cost_scale)
    rounding_bound: float   # n / cost_scale: how far below the float optimum rounding can leave the plan


def min_cost_flow_assignment(masked_etv: np.ndarray, min_users: np.ndarray,
                             max_users: np.ndarray | None = None) -> FlowAssignment | None:
    """The optimal assignment of the users of ``masked_etv`` (−inf = forbidden) to between ``min_users`` and
    ``max_users`` per type (exactly ``min_users`` when ``max_users`` is None), by OR-Tools' SimpleMinCostFlow on
    costs −round(ETV · scale); None if no assignment meets the quotas.

    The sink node and its arcs exist only for types with U_j > L_j, so exact quotas give the plain transportation
    graph."""
    require_extra("allocation", "the quota solver's min-cost flow")
    from ortools.graph.python.min_cost_flow import SimpleMinCostFlow

    n_users, n_types = masked_etv.shape
    lower = np.asarray(min_users, dtype=np.int64)
    upper = lower if max_users is None else np.asarray(max_users, dtype=np.int64)
    spare = np.flatnonzero(upper > lower)
    n_nodes = n_users + n_types + (1 if len(spare) else 0)
    users, types = np.nonzero(np.isfinite(masked_etv))
    values = masked_etv[users, types]
    largest = float(values.max(initial=0.0)) or 1.0
    cost_scale = min(COST_RANGE, OVERFLOW_ROOM / (n_nodes + 1)) / largest
    flow = SimpleMinCostFlow()
    flow.add_arcs_with_capacity_and_unit_cost(users.astype(np.int64), (n_users + types).astype(np.int64),
                                             np.ones(len(users), dtype=np.int64),
                                             -np.rint(values * cost_scale).astype(np.int64))
    supplies = [np.ones(n_users, dtype=np.int64), -lower]
    if len(spare):
        sink = n_users + n_types
        flow.add_arcs_with_capacity_and_unit_cost(n_users + spare, np.full(len(spare), sink, dtype=np.int64),
                                                 upper[spare] - lower[spare], np.zeros(len(spare), dtype=np.int64))
        supplies.append(np.array([lower.sum() - n_users], dtype=np.int64))
    flow.set_nodes_supplies(np.arange(n_nodes, dtype=np.int64), np.concatenate(supplies))
    status = flow.solve()
    if status == flow.INFEASIBLE:
        return None
    if status != flow.OPTIMAL:
        raise RuntimeError(f"OR-Tools min-cost flow failed with status {status!r}")
    used = flow.flows(np.arange(len(users), dtype=np.int64)) > 0
    assignment = np.empty(n_users, dtype=np.int64)
    assignment[users[used]] = types[used]
    return FlowAssignment(assignment, cost_scale, n_users / cost_scale)


def margin_assignment(masked_etv: np.ndarray, min_users: np.ndarray,
                      max_users: np.ndarray | None = None) -> np.ndarray | None:
    """The optimal assignment of :func:`min_cost_flow_assignment` where OR-Tools is installed (promokit[allocation]),
    else of :func:`lp_assignment` (SciPy's HiGHS: the same optimum, slower on a large margin); None if no assignment
    meets the quotas. The ``prices`` solver repairs its margins with it, so it needs no extra."""
    if importlib.util.find_spec("ortools") is None:
        return lp_assignment(masked_etv, min_users, max_users)
    flow = min_cost_flow_assignment(masked_etv, min_users, max_users)
    return None if flow is None else flow.assignment


def lp_assignment(masked_etv: np.ndarray, min_users: np.ndarray,
                  max_users: np.ndarray | None = None) -> np.ndarray | None:
    """The optimal assignment by HiGHS dual simplex (a vertex, hence integral); None if no assignment meets the
    quotas.

    Quota rows are written Σ_i X_ij ≤ U_j (U = d for exact quotas): with one type per user they imply
    Σ_i X_ij ≥ N − Σ_{l≠j} U_l, so a row −Σ_i X_ij ≤ −L_j is added only where L_j is above that (never with exact
    quotas, where Σ d = N) — HiGHS' presolve is far slower on the all-equality form.
    """
    from scipy.optimize import linprog
    from scipy.sparse import csr_array

    n_users, n_types = masked_etv.shape
    lower = np.asarray(min_users, dtype=np.int64)
    upper = lower if max_users is None else np.asarray(max_users, dtype=np.int64)
    binding = np.flatnonzero(lower > n_users - (upper.sum() - upper))
    users, types = np.nonzero(np.isfinite(masked_etv))
    columns = np.arange(len(users))
    ones = np.ones(len(users))
    floored = np.isin(types, binding)
    rows = np.concatenate([types, n_types + np.searchsorted(binding, types[floored])])
    entries = np.concatenate([ones, -ones[floored]])
    result = linprog(-masked_etv[users, types],
                     A_eq=csr_array((ones, (users, columns)), shape=(n_users, len(users))), b_eq=np.ones(n_users),
                     A_ub=csr_array((entries, (rows, np.concatenate([columns, columns[floored]]))),
                                    shape=(n_types + len(binding), len(users))),
                     b_ub=np.concatenate([upper, -lower[binding]]), bounds=(0, 1), method="highs-ds")
    if result.status == 2:
        return None
    if result.status != 0:
        raise RuntimeError(f"HiGHS failed: {result.message}")
    chosen = result.x > 0.5
    assignment = np.empty(n_users, dtype=np.int64)
    assignment[users[chosen]] = types[chosen]
    return assignment


def solve_exact(problem: QuotaProblem, backend: str = "ortools") -> QuotaPlan:
    """The optimum of eqs. 1–5, by min-cost flow (``backend="ortools"``) or LP (``backend="highs"``).

    ``upper_bound`` is the dual bound D(p) at the plan's own prices (``plan_prices``), computed from the float
    ETV, so ``gap`` shows whether the integer cost rounding of the flow cost anything (it reports the
    rounding's worst case too, as ``rounding_bound``).
    """
    masked = problem.masked_etv()
    if backend == "ortools":
        flow = min_cost_flow_assignment(masked, problem.min_users, problem.max_users)
        if flow is None:  # prepare_quota_problem's Hall check rules this out
            raise RuntimeError("min-cost flow found the validated quotas infeasible")
        assignment = flow.assignment
        diagnostics = {"cost_scale": flow.cost_scale, "rounding_bound": flow.rounding_bound}
    elif backend == "highs":
        assignment, diagnostics = lp_assignment(masked, problem.min_users, problem.max_users), {}
        if assignment is None:
            raise RuntimeError("HiGHS found the validated quotas infeasible")
    else:
        raise DataError(f"backend must be 'ortools' or 'highs', got {backend!r}")
    counts = np.bincount(assignment, minlength=problem.n_types)
    prices = plan_prices(masked, assignment, limits=price_limits(counts, problem.min_users, problem.max_users))
    bound = dual_bound(masked, prices, problem.min_users, problem.max_users)
    return finish_plan(problem, assignment, f"exact-{backend}", bound, **diagnostics)

"""The EOCA customer-allocation problem with quotas and risk limits (eqs. 1–5), its checks and dual bound.

Maximise Σ_ij X_ij·ETV_ij (eq. 1) over X ∈ {0, 1} (eq. 2) with one fund type per user (eq. 3), exactly
d_j users per type (eq. 4), and type j only for users with risk tolerance t_i ≥ r_j (eq. 5).
``solve_quota`` dispatches to the solvers in ``quota_ha`` (the paper's Algorithm 1), ``quota_manual``
(the paper's manual-priority baseline), ``quota_exact`` (min-cost flow) and ``quota_prices`` (ours).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from promokit.allocation.checks import check_matrix, check_vector
from promokit.data.errors import DataError

METHODS = ("ours", "ha", "manual", "exact")
BLOCK_ROWS = 1 << 16  # row block for passes over the (N, k) matrix: keeps temporaries in cache


@dataclass
class QuotaPlan:
    """One allocation: ``assignment[i]`` is the fund type of user i."""

    assignment: np.ndarray        # (N,) int64
    objective: float              # Σ etv[i, assignment[i]]
    method: str
    seconds: float                # wall time of solve_quota, validation included
    upper_bound: float | None     # certified bound on the optimum (dual, D(p)), None when the method has none
    gap: float | None = None      # upper_bound − objective: 0 (up to float rounding) proves the plan optimal
    diagnostics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class QuotaProblem:
    """Validated inputs of eqs. 1–5. Without risk limits, ``tolerance`` and ``risk`` are all zeros."""

    etv: np.ndarray        # (N, k) float64, finite, ≥ 0
    quotas: np.ndarray     # (k,) int64, ≥ 0, summing to N
    tolerance: np.ndarray  # (N,) float64
    risk: np.ndarray       # (k,) float64

    @property
    def n_users(self) -> int:
        return self.etv.shape[0]

    @property
    def n_types(self) -> int:
        return self.etv.shape[1]

    def allowed(self) -> np.ndarray:
        """(N, k) bool: user i may receive type j iff t_i ≥ r_j (eq. 5)."""
        return self.tolerance[:, None] >= self.risk[None, :]

    def masked_etv(self) -> np.ndarray:
        """ETV with −inf where eq. 5 forbids the type, so an argmax never picks a forbidden type.

        Column-major (Fortran order): the passes over users then run over k contiguous columns."""
        masked = np.empty(self.etv.shape, order="F")
        for rows in row_blocks(self.n_users):
            forbidden = self.tolerance[rows, None] < self.risk[None, :]
            masked[rows] = np.where(forbidden, -np.inf, self.etv[rows])
        return masked


@dataclass
class RiskSlack:
    levels: np.ndarray  # distinct fund risk levels, ascending
    slack: np.ndarray   # per level r: #{users with t ≥ r} − Σ_{j: r_j ≥ r} d_j


def risk_slack(tolerance: np.ndarray, risk: np.ndarray, quotas: np.ndarray) -> RiskSlack:
    """Hall's condition for nested eligibility, per distinct risk level r.

    ``slack[r] = #{users with t ≥ r} − Σ_{j: r_j ≥ r} d_j``. Because the users allowed type j are exactly those
    with t_i ≥ r_j, the sets are nested and the quotas can be met (eqs. 3–5) iff every slack is ≥ 0 and
    Σ d_j = N. Giving a user of tolerance t a type of risk r_j lowers the slack of every level in (r_j, t].
    """
    levels = np.unique(risk)
    users_at_least = np.array([np.count_nonzero(tolerance >= level) for level in levels], dtype=np.int64)
    demand_at_least = np.array([quotas[risk >= level].sum() for level in levels], dtype=np.int64)
    return RiskSlack(levels, users_at_least - demand_at_least)


def prepare_quota_problem(etv, quotas, tolerance=None, risk=None) -> QuotaProblem:
    """Validate the inputs of eqs. 1–5 and return them as a :class:`QuotaProblem`; raise DataError otherwise."""
    etv = check_matrix("etv", etv)
    n_users, n_types = etv.shape
    if n_users == 0 or n_types == 0:
        raise DataError(f"etv must have at least one user and one fund type, got shape {etv.shape}")
    quotas = check_vector("quotas", quotas, length=n_types)
    fractional = quotas != np.round(quotas)
    if fractional.any():
        j = int(np.argmax(fractional))
        raise DataError(f"quotas must be whole numbers of users: {int(fractional.sum())} of {n_types} are not, "
                        f"e.g. type {j}: {quotas[j]!r}")
    quotas = quotas.astype(np.int64)
    if quotas.sum() != n_users:
        raise DataError(f"quotas sum to {int(quotas.sum())} but etv has {n_users} users: every user gets exactly "
                        f"one type (eq. 3) and type j exactly d_j users (eq. 4), so they must be equal")
    if (tolerance is None) != (risk is None):
        raise DataError("tolerance and risk go together (eq. 5): give both or neither")
    if tolerance is None:
        tolerance, risk = np.zeros(n_users), np.zeros(n_types)
    else:
        tolerance = check_vector("tolerance", tolerance, length=n_users, allow_negative=True)
        risk = check_vector("risk", risk, length=n_types, allow_negative=True)
    _check_hall(tolerance, risk, quotas)
    return QuotaProblem(etv, quotas, tolerance, risk)


def check_quota_problem(etv, quotas, tolerance=None, risk=None) -> None:
    """Raise DataError when the inputs are malformed or no plan can meet eqs. 3–5."""
    prepare_quota_problem(etv, quotas, tolerance, risk)


def _check_hall(tolerance: np.ndarray, risk: np.ndarray, quotas: np.ndarray) -> None:
    hall = risk_slack(tolerance, risk, quotas)
    short = np.flatnonzero(hall.slack < 0)
    if len(short) == 0:
        return
    level = hall.levels[short[-1]]  # the riskiest level that fails: its quotas are the ones that cannot be met
    types = np.flatnonzero(risk >= level)
    need = int(quotas[types].sum())
    have = need + int(hall.slack[short[-1]])
    raise DataError(f"quotas of types {types.tolist()} (risk ≥ {level:g}) cannot be met: they need {need} users "
                    f"but only {have} users have tolerance ≥ {level:g}; short by {need - have} users "
                    f"({len(short)} risk levels fail)")


def check_plan(assignment, quotas, tolerance=None, risk=None) -> None:
    """Raise DataError unless ``assignment`` gives each user one type (eq. 3), type j exactly d_j users (eq. 4)
    and no user a type above its risk tolerance (eq. 5)."""
    quotas = np.asarray(quotas, dtype=np.int64)
    assignment = np.asarray(assignment)
    if assignment.ndim != 1 or not np.issubdtype(assignment.dtype, np.integer):
        raise DataError(f"assignment must be a 1-D integer array, got dtype {assignment.dtype} "
                        f"and shape {assignment.shape}")
    outside = (assignment < 0) | (assignment >= len(quotas))
    if outside.any():
        i = int(np.argmax(outside))
        raise DataError(f"assignment has {int(outside.sum())} users with no valid type (eq. 3), "
                        f"e.g. user {i}: {int(assignment[i])} (types are 0..{len(quotas) - 1})")
    counts = np.bincount(assignment, minlength=len(quotas))
    off = np.flatnonzero(counts != quotas)
    if len(off):
        j = off[0]
        raise DataError(f"assignment misses {len(off)} quotas (eq. 4), e.g. type {j} has {counts[j]} users "
                        f"but its quota is {quotas[j]}")
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


def row_blocks(n_rows: int):
    """Slices covering ``range(n_rows)`` in blocks of BLOCK_ROWS."""
    return (slice(start, min(start + BLOCK_ROWS, n_rows)) for start in range(0, n_rows, BLOCK_ROWS))


def plan_objective(etv: np.ndarray, assignment: np.ndarray) -> float:
    """Σ_i ETV_{i, assignment[i]} (eq. 1) in float64."""
    return float(np.take_along_axis(etv, assignment[:, None], axis=1).sum())


def dual_bound(masked_etv: np.ndarray, prices: np.ndarray, quotas: np.ndarray) -> float:
    """D(p) = Σ_i max_{j allowed} (ETV_ij − p_j) + Σ_j d_j p_j, the Lagrangian dual of eqs. 1–5.

    Relaxing eq. 4 with prices p leaves each user free to take its best allowed type, so D(p) ≥ the optimum
    for every p (weak duality); at optimal prices it equals the optimum because the LP is integral.
    """
    total = 0.0
    for rows in row_blocks(len(masked_etv)):
        block = masked_etv[rows]
        best = block[:, 0] - prices[0]
        for j in range(1, len(prices)):
            np.maximum(best, block[:, j] - prices[j], out=best)
        total += float(best.sum())
    return total + float(quotas @ prices)


def plan_prices(masked_etv: np.ndarray, assignment: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
    """Prices under which every user's assigned type is its best choice of ETV − p, when the plan is optimal.

    Such prices satisfy p_b − p_a ≥ W[a, b] = max over users i given a and allowed b of (ETV_ib − ETV_ia),
    a system of difference constraints on the k types: the longest paths of the graph W solve it, and exist
    iff W has no positive cycle, i.e. iff no cyclic exchange of users improves the plan (the plan is optimal).
    Bellman–Ford (from ``start``, default 0: the smallest solution above it) runs k + 1 rounds either way;
    ``dual_bound`` of the result certifies how close the plan is.
    """
    n_types = masked_etv.shape[1]
    exchange = np.full((n_types, n_types), -np.inf)
    for rows in row_blocks(len(masked_etv)):
        block, given = masked_etv[rows], assignment[rows]
        order = np.argsort(given, kind="stable")  # group the block's users by their type
        counts = np.bincount(given, minlength=n_types)
        present = np.flatnonzero(counts)
        starts = (np.cumsum(counts) - counts)[present]
        own = block[order, given[order]]
        for b in range(n_types):
            gain = np.maximum.reduceat(block[order, b] - own, starts)
            exchange[present, b] = np.maximum(exchange[present, b], gain)
    prices = np.zeros(n_types) if start is None else np.array(start, dtype=np.float64)
    for _ in range(n_types + 1):
        prices = np.maximum(prices, (prices[:, None] + exchange).max(axis=0))
    return prices


def solve_quota(etv, quotas, tolerance=None, risk=None, method: str = "ours", **options) -> QuotaPlan:
    """Allocate fund types to users under quotas and risk limits (eqs. 1–5) with ``method``:

    - ``"ours"``: prices on the k quota rows from nested samples, then an exact repair at the margins and a
      dual certificate (``quota_prices.solve_prices``); exactly optimal whenever ``gap`` is 0.
    - ``"ha"``: the EOCA paper's heuristic, Algorithm 1 (``quota_ha.solve_ha``).
    - ``"manual"``: the paper's manual-priority baseline (``quota_manual.solve_manual``).
    - ``"exact"``: min-cost flow with OR-Tools, or HiGHS with ``backend="highs"`` (``quota_exact.solve_exact``).

    ``options`` go to the chosen solver. Every returned plan meets eqs. 3–5 (checked before returning).
    """
    # Imported here because the solver modules import QuotaProblem and QuotaPlan from this module.
    from promokit.allocation import quota_exact, quota_ha, quota_manual, quota_prices

    solvers = {"ours": quota_prices.solve_prices, "ha": quota_ha.solve_ha,
               "manual": quota_manual.solve_manual, "exact": quota_exact.solve_exact}
    if method not in solvers:
        raise DataError(f"method must be one of {list(METHODS)}, got {method!r}")
    start = time.perf_counter()
    problem = prepare_quota_problem(etv, quotas, tolerance, risk)
    plan = solvers[method](problem, **options)
    check_plan(plan.assignment, problem.quotas, problem.tolerance, problem.risk)
    plan.seconds = time.perf_counter() - start
    return plan


def finish_plan(problem: QuotaProblem, assignment: np.ndarray, method: str, upper_bound: float | None = None,
                **diagnostics) -> QuotaPlan:
    """Wrap a solver's assignment as a QuotaPlan with its objective (eq. 1) and, if any, its certified gap."""
    assignment = np.asarray(assignment, dtype=np.int64)
    objective = plan_objective(problem.etv, assignment)
    gap = None if upper_bound is None else upper_bound - objective
    return QuotaPlan(assignment, objective, method, 0.0, upper_bound, gap, diagnostics)

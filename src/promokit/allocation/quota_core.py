"""What every EOCA quota solver shares (eqs. 1–5): the problem, the plan, feasibility slack and the dual bound.

Maximise Σ_ij X_ij·ETV_ij (eq. 1) over X ∈ {0, 1} (eq. 2) with one fund type per user (eq. 3), type j for
L_j ≤ Σ_i X_ij ≤ U_j users (eq. 4 as bounds; the paper's exact d_j is L_j = U_j = d_j), and type j only for users
with risk tolerance t_i ≥ r_j (eq. 5). The solver modules (``quota_prices``, ``quota_exact``, ``quota_ha``,
``quota_manual``) import from here; ``quota`` validates inputs and dispatches to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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
    min_users: np.ndarray  # (k,) int64 L_j ≥ 0, Σ L ≤ N
    max_users: np.ndarray  # (k,) int64 U_j, L_j ≤ U_j ≤ N, Σ U ≥ N; U = L = d for the paper's exact quotas
    tolerance: np.ndarray  # (N,) float64
    risk: np.ndarray       # (k,) float64

    @property
    def n_users(self) -> int:
        return self.etv.shape[0]

    @property
    def n_types(self) -> int:
        return self.etv.shape[1]

    @property
    def quotas(self) -> np.ndarray | None:
        """The exact counts d_j of eq. 4 when every type has one (L = U), else None."""
        return self.min_users if np.array_equal(self.min_users, self.max_users) else None

    def allowed(self) -> np.ndarray:
        """(N, k) bool: user i may receive type j iff t_i ≥ r_j (eq. 5)."""
        return self.tolerance[:, None] >= self.risk[None, :]

    def masked_etv(self) -> np.ndarray:
        """ETV with −inf where eq. 5 forbids the type, so an argmax never picks a forbidden type.

        Column-major (Fortran order): the passes over users then run over k contiguous columns."""
        return masked_etv(self.etv, self.tolerance, self.risk)


def masked_etv(etv: np.ndarray, tolerance: np.ndarray, risk: np.ndarray) -> np.ndarray:
    """``etv`` with −inf where eq. 5 forbids the type (t_i < r_j), in Fortran order (``QuotaProblem.masked_etv``;
    a partitioned solve masks each part's rows the same way)."""
    masked = np.empty(etv.shape, order="F")
    for rows in row_blocks(len(etv)):
        forbidden = tolerance[rows, None] < risk[None, :]
        masked[rows] = np.where(forbidden, -np.inf, etv[rows])
    return masked


@dataclass
class RiskSlack:
    levels: np.ndarray  # distinct fund risk levels, ascending
    slack: np.ndarray   # per level r: #{users with t ≥ r} − Σ_{j: r_j ≥ r} L_j, users to spare for the minimums
    room: np.ndarray    # per level r: Σ_{j: r_j < r} U_j − #{users with t < r}, places to spare below r


def risk_slack(tolerance: np.ndarray, risk: np.ndarray, min_users: np.ndarray,
               max_users: np.ndarray | None = None) -> RiskSlack:
    """Hall's conditions for nested eligibility, per distinct risk level r (``max_users`` None: exact, U = L).

    The users allowed type j are exactly those with t_i ≥ r_j, so the sets are nested, and counts n_j meet eqs.
    3–5 iff Σ n_j = N and #{t ≥ r} ≥ Σ_{r_j ≥ r} n_j at every level. Counts within bounds L ≤ n ≤ U exist iff
    every ``slack`` ≥ 0, every ``room`` ≥ 0 and Σ U ≥ N: going down the levels, the users S_r of the types of
    risk ≥ r can take every value from Σ_{r_j ≥ r} L_j (which needs slack ≥ 0) up to
    min_{r' ≥ r}(#{t ≥ r'} + Σ_{r ≤ r_j < r'} U_j) and Σ_{r_j ≥ r} U_j, and N lies in that range at the lowest
    level iff room ≥ 0 everywhere and Σ U ≥ N. With exact quotas (L = U = d, Σ d = N) slack and room coincide.

    Giving a user of tolerance t a type of risk r_j lowers the slack and the room of every level in (r_j, t], and
    also the slack of every level ≤ r_j when the type's minimum is already met.
    """
    levels = np.unique(risk)
    return slack_at_levels(users_at_least(tolerance, levels), len(tolerance), risk, min_users, max_users)


def users_at_least(tolerance: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """#{users with t ≥ r} for each level r: all that Hall's conditions need to know of the tolerances."""
    return np.array([np.count_nonzero(tolerance >= level) for level in levels], dtype=np.int64)


def slack_at_levels(at_least: np.ndarray, n_users: int, risk: np.ndarray, min_users: np.ndarray,
                    max_users: np.ndarray | None = None) -> RiskSlack:
    """``risk_slack`` from the counts ``at_least`` = ``users_at_least(tolerance, np.unique(risk))`` of ``n_users``
    users (summed over the parts of a partitioned table)."""
    levels = np.unique(risk)
    upper = min_users if max_users is None else max_users
    demand_at_least = np.array([min_users[risk >= level].sum() for level in levels], dtype=np.int64)
    places_below = np.array([upper[risk < level].sum() for level in levels], dtype=np.int64)
    return RiskSlack(levels, at_least - demand_at_least, places_below - (n_users - at_least))


def meets_bounds(counts: np.ndarray, min_users: np.ndarray, max_users: np.ndarray) -> bool:
    """L_j ≤ n_j ≤ U_j for every type (eq. 4 as bounds)."""
    return bool(np.all((counts >= min_users) & (counts <= max_users)))


def row_blocks(n_rows: int):
    """Slices covering ``range(n_rows)`` in blocks of BLOCK_ROWS."""
    return (slice(start, min(start + BLOCK_ROWS, n_rows)) for start in range(0, n_rows, BLOCK_ROWS))


def plan_objective(etv: np.ndarray, assignment: np.ndarray) -> float:
    """Σ_i ETV_{i, assignment[i]} (eq. 1) in float64."""
    return float(np.take_along_axis(etv, assignment[:, None], axis=1).sum())


def dual_bound(masked_etv: np.ndarray, prices: np.ndarray, min_users: np.ndarray,
               max_users: np.ndarray | None = None) -> float:
    """D(p) = Σ_i max_{j allowed} (ETV_ij − p_j) + Σ_j max(p_j·L_j, p_j·U_j), the Lagrangian dual of eqs. 1–5
    (``max_users`` None: exact quotas, U = L = d, and the last sum is Σ_j d_j p_j).

    Weak duality, for every p ∈ R^k whatever its signs: a plan meeting eqs. 2–5 gives user i one allowed type
    a(i) and type j some n_j ∈ [L_j, U_j] users, so its objective is
    Σ_i (ETV_{i,a(i)} − p_{a(i)}) + Σ_j p_j n_j ≤ Σ_i max_{j allowed} (ETV_ij − p_j) + Σ_j max(p_j L_j, p_j U_j),
    the first sum term by term and the second because p_j n_j is linear in n_j, so largest at an end of
    [L_j, U_j]. Hence D(p) ≥ the optimum. The constraint matrix is totally unimodular, so the LP optimum is
    integral and equals min_p D(p) (strong duality); at a minimiser p_j ≥ 0 where the max binds, p_j ≤ 0 where
    the min binds and p_j = 0 strictly between (``price_limits``).
    """
    return user_term(masked_etv, prices) + bound_term(prices, min_users, max_users)


def user_term(masked_etv: np.ndarray, prices: np.ndarray) -> float:
    """Σ_i max_{j allowed} (ETV_ij − p_j), the users' part of ``dual_bound`` (a sum over users: a partitioned
    table adds its parts' terms)."""
    total = 0.0
    for rows in row_blocks(len(masked_etv)):
        block = masked_etv[rows]
        best = block[:, 0] - prices[0]
        for j in range(1, len(prices)):
            np.maximum(best, block[:, j] - prices[j], out=best)
        total += float(best.sum())
    return total


def bound_term(prices: np.ndarray, min_users: np.ndarray, max_users: np.ndarray | None = None) -> float:
    """Σ_j max(p_j·L_j, p_j·U_j), the quota rows' part of ``dual_bound`` (Σ_j d_j p_j for exact quotas)."""
    upper = min_users if max_users is None else max_users
    return float(np.where(prices >= 0, upper, min_users) @ prices)


def price_limits(counts: np.ndarray, min_users: np.ndarray, max_users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) price of each type at which D(p) can equal the objective of a plan with these counts.

    If every user holds its best type at p, D(p) − objective = Σ_j (U_j − n_j)·max(p_j, 0) + (n_j − L_j)·max(−p_j, 0)
    (``dual_bound``), which is 0 iff p_j ≤ 0 unless the max binds and p_j ≥ 0 unless the min binds: an exact
    quota leaves p_j free (−inf, inf), a type strictly inside its bounds pins it to 0."""
    lowest = np.where(counts > min_users, 0.0, -np.inf)
    highest = np.where(counts < max_users, 0.0, np.inf)
    return lowest, highest


def plan_prices(masked_etv: np.ndarray, assignment: np.ndarray, start: np.ndarray | None = None,
                limits: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Prices under which every user's assigned type is its best choice of ETV − p, when the plan is optimal.

    Such prices satisfy p_b − p_a ≥ W[a, b] = max over users i given a and allowed b of (ETV_ib − ETV_ia),
    a system of difference constraints on the k types: the longest paths of the graph W solve it, and exist
    iff W has no positive cycle, i.e. iff no cyclic exchange of users improves the plan (the plan is optimal).
    Bellman–Ford (from ``start``, default 0: the smallest solution above it) runs one round more than the graph
    has nodes either way; ``dual_bound`` of the result certifies how close the plan is.

    ``limits`` (``price_limits`` of the whole plan, with bounds) add lowest ≤ p_j ≤ highest as the difference
    constraints p_j − p_z ≥ lowest_j and p_z − p_j ≥ −highest_j on a zero node z; the solution is shifted so
    that p_z = 0. With no finite limit (exact quotas) there is no zero node.
    """
    return longest_path_prices(exchange_matrix(masked_etv, assignment), start, limits)


def exchange_matrix(masked_etv: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """W[a, b] = max over users i given a and allowed b of (ETV_ib − ETV_ia), −inf where no user is given a
    (``plan_prices``). A max over users: a partitioned table takes the elementwise max of its parts' matrices."""
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
    return exchange


def longest_path_prices(exchange: np.ndarray, start: np.ndarray | None = None,
                        limits: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """The smallest prices above ``start`` (default 0) with p_b − p_a ≥ ``exchange[a, b]`` and, with ``limits``,
    lowest ≤ p ≤ highest: Bellman–Ford on the exchange graph (``plan_prices``)."""
    n_types = len(exchange)
    prices = np.zeros(n_types) if start is None else np.array(start, dtype=np.float64)
    signed = limits is not None and bool(np.isfinite(np.concatenate(limits)).any())
    if signed:
        lowest, highest = limits
        graph = np.full((n_types + 1, n_types + 1), -np.inf)
        graph[:n_types, :n_types] = exchange
        graph[n_types, :n_types] = lowest
        graph[:n_types, n_types] = -highest
        exchange, prices = graph, np.append(np.clip(prices, lowest, highest), 0.0)
    for _ in range(len(exchange) + 1):
        prices = np.maximum(prices, (prices[:, None] + exchange).max(axis=0))
    return prices[:n_types] - prices[n_types] if signed else prices


def finish_plan(problem: QuotaProblem, assignment: np.ndarray, method: str, upper_bound: float | None = None,
                **diagnostics) -> QuotaPlan:
    """Wrap a solver's assignment as a QuotaPlan with its objective (eq. 1) and, if any, its certified gap."""
    assignment = np.asarray(assignment, dtype=np.int64)
    objective = plan_objective(problem.etv, assignment)
    gap = None if upper_bound is None else upper_bound - objective
    return QuotaPlan(assignment, objective, method, 0.0, upper_bound, gap, diagnostics)

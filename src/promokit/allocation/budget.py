"""Budget allocation: one incentive level per request under one budget row (the joint-incentive paper, eqs. 11–20).

The problem is the multiple-choice knapsack ``max Σ_i value[i, x_i]`` s.t. ``Σ_i cost[i, x_i] ≤ budget``, one
option ``x_i`` per request (eqs. 11–15). Its two budget forms, :func:`ratio_form` (eq. 16) and
:func:`absolute_form`, and the stacking of customers and merchants into one problem (:func:`stack_populations`)
only build ``value``, ``cost`` and ``budget``; :func:`solve_budget` solves any of them and :func:`decide` is the
real-time rule of eqs. 19–20.

How :func:`solve_budget` finds λ*
--------------------------------
The paper dualises the budget row (eqs. 17–18) and searches λ with L-BFGS. With one coupling row the dual is
piecewise linear and is solved exactly instead: the Lagrangian ``λ·B + Σ_i max_j (value_ij − λ·cost_ij)`` has
its kinks at the slopes of each request's upper concave hull of (cost, value) points, so the LP relaxation is
the greedy over hull segments in decreasing efficiency Δvalue/Δcost, and λ* is the efficiency of the segment
where the budget runs out. Every segment above λ* gives an integral plan within the budget; a greedy fill
then spends the slack on the next segments that still fit (those tied with λ* first), so the gap to the dual
bound stays below the marginal segment's Δvalue — one request's contribution. Hulling costs about 1.5 µs
per request in NumPy (15 s at 10⁷), so large inputs are solved in three steps, each exact about what it
decides:

1. hull a seeded random sample of requests and read a bracket ``[λ_lo, λ_hi]`` around λ* off its greedy, a
   few standard errors of the sample's budget estimate wide;
2. narrow the bracket while more than ``gather_rows`` requests (10⁵, estimated from the sample) have a choice to
   make inside it: each pass hulls the requests whose choice changes inside the bracket (part by part) and
   sums, over ``NARROW_BINS`` bins of the bracket, the Δcost of their hull segments whose efficiency falls in
   each bin; with Σ cost of the rest this gives the exact total cost C(λ) = Σ_i cost_i(argmax_j value_ij −
   λ·cost_ij) at every bin edge, so λ* (where C crosses the budget) is located to a bin, the new bracket;
3. one sweep over all requests (chunked, float64, two threads) decides the requests that have an option
   optimal at both ends of the bracket: ``max_j (value_ij − λ·cost_ij)`` is convex in λ, so that option is
   optimal on the whole bracket;
4. the requests left (at most about ``gather_rows``, however large N) are hulled and solved by the greedy with
   what remains of the budget. If their λ* falls outside the bracket (a sampling miss, which step 2 also
   detects), the sample's bracket is widened and steps 2–4 rerun; the last bracket, ``[0, ∞)``, is not
   narrowed and leaves undecided every request with a choice to make, so λ* and the bound are always the
   exact LP's.

Steps 1–3 run on parts of the rows, each step (each narrowing pass) one map over the parts that returns small
summaries (the sample's rows, a part's histogram, a part's sums and undecided rows); step 4 runs on the gathered
undecided rows. Requests tied exactly at λ* (a segment of efficiency λ*) stay undecided in every bracket around
it, so narrowing stops when a pass leaves every request inside: inputs with many identical rows may gather
more than ``gather_rows``.
:func:`solve_budget` maps threads over ``workers`` in-memory parts (:class:`ArrayPart`);
:mod:`promokit.allocation.budget_parts` maps any executor over parts that load themselves (files), with the same
functions, the same global sample rows, and so the same λ*, bound and choices.
"""

from __future__ import annotations

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Literal, NamedTuple, Sequence

import numpy as np

from promokit.allocation.checks import check_matrix, check_vector
from promokit.data.errors import DataError

#: Inputs with at most this many requests are hulled whole, without a sample.
DIRECT_ROWS = 20_000
#: Bracket half-widths, in standard errors of the sample's budget estimate; ``None`` is the bracket [0, ∞).
BRACKET_WIDTHS = (4.0, 32.0, None)
#: Requests per chunk of the sweep: two (K × chunk) float64 buffers stay in the core's cache.
SWEEP_CHUNK = 4096
#: Step 2 narrows the bracket until at most about this many requests are left undecided to gather.
GATHER_ROWS = 100_000
#: Bins of a narrowing pass: each part returns about 24 bytes a bin; a pass shrinks the bracket this many times.
NARROW_BINS = 256
#: The sample has 2·N^(2/3) requests (balancing its hull against the undecided ones), at most this many.
SAMPLE_ROWS = 100_000
#: Requests per chunk when hulling, to bound the temporaries at about 10 (chunk × K) arrays.
HULL_CHUNK = 1 << 17
#: At most this many rounds of the greedy fill after λ* (each takes at least one segment).
FILL_ROUNDS = 32

PaidOn = Literal["response", "request"]


class BudgetProblem(NamedTuple):
    """``value`` and ``cost`` (requests × options) and the ``budget`` on Σ cost; unpacks as a triple."""

    value: np.ndarray
    cost: np.ndarray
    budget: float


@dataclass
class BudgetPlan:
    """One option per request, its objective and a certificate of how far it can be from the optimum."""

    choice: np.ndarray | None  # (N,) int64, index of the chosen option per request; None from solve_budget_parts
    lam: float  # λ*, the multiplier of the budget row
    objective: float  # Σ value[i, choice[i]]
    spent: float  # Σ cost[i, choice[i]]
    budget: float
    slack: float  # budget − spent (≥ 0 up to rounding)
    upper_bound: float  # LP-relaxation / dual bound on the objective
    gap: float  # upper_bound − objective (≥ 0)
    seconds: float
    method: str  # "lagrange" (this module), "highs-lp" or "highs-milp" (budget_lp)
    lagrange_path: str | None = None  # lagrange only: "hull" (every request hulled) or "hull+sweep"
    hulled_rows: int = 0  # requests whose hull was built (sample + undecided requests)
    sweeps: int = 0  # full passes over all requests


# --------------------------------------------------------------------------------------------- problem forms


def ratio_form(scores, levels, max_ratio: float, paid_on: PaidOn = "response") -> BudgetProblem:
    """Eq. 16, expected incentive per expected response at most ``max_ratio`` (B), as a budget row.

    ``Σ r_j x_ij f_ij / Σ x_ij f_ij ≤ B`` is, for a positive denominator, ``Σ x_ij f_ij (r_j − B) ≤ 0``: value
    ``f``, cost ``f·(r − B)`` (negative for levels below B: cheap requests fund dear ones) and budget 0. With
    these, ``argmax_j value − λ·cost`` is eq. 19's ``argmin_j f_ij (λ r_j − λ B − 1)``.

    ``paid_on="request"`` is the merchant term of eqs. 17–18 as printed, cost ``r − B`` not weighted by ``f``
    (a commission paid on every request and counted once in the denominator); its rule is eq. 20. The default
    follows eq. 16, where the merchant's incentive is paid, and counted, only on a response. Eq. 17 drops
    ``f^m`` from the merchant cost although eq. 16 has it; we read that as a typo and keep eq. 16, but offer
    the printed reading for comparison.
    """
    scores, levels = _check_scores(scores, levels)
    max_ratio = _check_number("max_ratio", max_ratio)
    return BudgetProblem(scores, _paid_cost(scores, levels - max_ratio, paid_on), 0.0)


def absolute_form(scores, levels, total: float, paid_on: PaidOn = "response") -> BudgetProblem:
    """A total budget, ``Σ x_ij r_j f_ij ≤ total``: value ``f``, cost ``r·f`` (or ``r`` when paid on request)."""
    scores, levels = _check_scores(scores, levels)
    return BudgetProblem(scores, _paid_cost(scores, levels, paid_on), _check_number("total", total))


def stack_populations(problems: Sequence[BudgetProblem], budget: float | None = None) -> BudgetProblem:
    """Eqs. 11–15: the requests of several populations (customers, then merchants) under one budget row.

    Rows are stacked in the order given, so ``plan.choice[:len(customers.value)]`` are the customers'. The
    budget defaults to the sum of the problems' budgets (0 for :func:`ratio_form`, i.e. one shared eq. 16);
    pass ``budget`` for one shared total. The populations must offer the same number of options.
    """
    if not problems:
        raise DataError("stack_populations needs at least one problem, got none")
    problems = [BudgetProblem(*problem) for problem in problems]
    widths = [np.shape(problem.value)[-1] for problem in problems]
    if len(set(widths)) > 1:
        raise DataError(f"populations must have the same number of options, got {widths}")
    total = sum(problem.budget for problem in problems) if budget is None else budget
    return BudgetProblem(np.concatenate([problem.value for problem in problems]),
                         np.concatenate([problem.cost for problem in problems]), _check_number("budget", total))


def check_budget_problem(value, cost, budget) -> BudgetProblem:
    """Validate shapes and finiteness; float32/float64 arrays are kept as they are (no copy), others → float64.

    Values and costs may be negative (the ratio form has negative costs). Finiteness is checked by two
    reductions per array; only a failing array goes through :func:`check_matrix` for the message.
    """
    value, cost = _finite_matrix("value", value), _finite_matrix("cost", cost)
    if value.shape != cost.shape:
        raise DataError(f"value has shape {value.shape} but cost has shape {cost.shape}")
    if value.shape[0] == 0 or value.shape[1] == 0:
        raise DataError(f"value has shape {value.shape}: need at least one request and one option")
    return BudgetProblem(value, cost, _check_number("budget", budget))


# -------------------------------------------------------------------------------------------- real-time rule


def decide(value, cost, lam: float) -> np.ndarray:
    """Eqs. 19–20, the real-time rule: per request, ``argmax_j value_j − λ·cost_j``, ties to the cheaper option.

    ``value``/``cost`` are one request's options ``(K,)`` or a batch ``(n, K)``; returns the option index with
    shape ``value.shape[:-1]``. With a :func:`ratio_form` problem this is eq. 19 (eq. 20 with
    ``paid_on="request"``). At ``lam = plan.lam`` it reproduces ``plan.choice`` except on the marginal
    request (tied at λ*: it keeps the cheaper, feasible side) and the few the plan's fill upgraded below λ*,
    so online decisions at λ* stay within the budget on the traffic λ* was solved for.
    """
    value, cost = np.asarray(value), np.asarray(cost)
    if value.shape != cost.shape or value.ndim not in (1, 2) or value.shape[-1] == 0:
        raise DataError(f"decide needs value and cost of one shape, (K,) or (n, K); got {value.shape} and "
                        f"{cost.shape}")
    if not (math.isfinite(lam) and lam >= 0):
        raise DataError(f"lam must be a finite number ≥ 0, got {lam!r}")
    score = value - lam * cost
    if not np.isfinite(score).all():  # NaN or ∞ in value or cost shows here; one check instead of two
        for name, array in (("value", value), ("cost", cost)):
            check_matrix(name, array.reshape(-1, array.shape[-1]), allow_negative=True)
    tied = score == score.max(axis=-1, keepdims=True)
    return np.asarray(np.where(tied, cost, np.inf).argmin(axis=-1), dtype=np.int64)


# ------------------------------------------------------------------------------------------------- the solver


def solve_budget(value, cost, budget: float, *, sample_size: int | None = None, seed: int = 0,
                 workers: int = 2, gather_rows: int = GATHER_ROWS) -> BudgetPlan:
    """Maximise ``Σ value[i, x_i]`` s.t. ``Σ cost[i, x_i] ≤ budget`` (eqs. 11–16), one option per request.

    Returns the integral plan of the exact LP relaxation's greedy (see the module docstring): feasible, with
    ``gap`` below the marginal segment's Δvalue (one request's contribution) and ``upper_bound`` the dual
    value at λ* (by weak duality a bound on the LP and integer optima; it equals the LP optimum).
    ``value``/``cost`` may be float32 to halve memory; they are read in float64 chunks. Inputs above
    ``DIRECT_ROWS`` requests are bracketed from a seeded sample of ``sample_size`` requests (default
    2·N^(2/3), at most ``SAMPLE_ROWS``), the bracket narrowed until about ``gather_rows`` requests are
    undecided in it, and swept as ``workers`` in-memory parts, one thread each.
    Raises :class:`DataError` on bad shapes, NaN/infinite entries or an infeasible budget.
    """
    started = time.perf_counter()
    value, cost, budget = check_budget_problem(value, cost, budget)
    n_rows = value.shape[0]
    size = _sample_size(n_rows, sample_size)
    if _is_direct(n_rows, size):
        return _solve_direct(value, cost, budget, started)
    workers = max(1, min(workers, os.cpu_count() or 1))
    edges = np.linspace(0, n_rows, workers + 1).astype(np.int64)
    parts = [ArrayPart(value[lo:hi], cost[lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]
    with ThreadPoolExecutor(workers) as pool:
        solved = _solve_sampled(parts, edges, budget, size, seed, pool.map, gather_rows, keep_choice=True)
    choice = np.concatenate([sweep.choice for sweep in solved.sweeps])
    choice[solved.open_rows] = solved.rest.choice
    return solved.plan(choice, budget, started)


@dataclass(eq=False)
class ArrayPart:
    """Rows of in-memory ``value``/``cost`` arrays (views: no copy), a part of a partitioned problem.

    :func:`solve_budget` splits its input into such parts; ``promokit.allocation.budget_parts`` takes them,
    or any object with the same two methods (e.g. one that reads a file).
    """

    value: np.ndarray
    cost: np.ndarray

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        """The part's ``value`` and ``cost`` (requests × options)."""
        return self.value, self.cost

    def finish(self, choice: np.ndarray) -> np.ndarray:
        """What the last step of a partitioned solve returns for this part: its choices."""
        return choice


def _sample_size(n_rows: int, sample_size: int | None) -> int:
    return sample_size if sample_size is not None else min(int(2 * n_rows ** (2 / 3)), SAMPLE_ROWS)


def _is_direct(n_rows: int, size: int) -> bool:
    """Whether ``n_rows`` requests are hulled whole, without a sample (they are few, or the sample is most)."""
    return n_rows <= max(DIRECT_ROWS, 2 * size)


def _solve_direct(value, cost, budget, started) -> BudgetPlan:
    value, cost = np.asarray(value, np.float64), np.asarray(cost, np.float64)
    check_feasible(cost, budget)  # the same Σ_i min_j cost_ij as the hull's, so rows is not None below
    rows = _solve_rows(value, cost, budget)
    return _plan(rows.choice, rows.lam, rows.objective, rows.spent, budget, rows.lam * budget + rows.dual,
                 started, "hull", value.shape[0], 0)


@dataclass
class _Sampled:
    """Steps 1–4 over parts: the last bracket, its sweeps (one per non-empty part), Σ value / Σ cost of the
    requests they decide, the undecided requests (global indices, increasing) and the greedy on them."""

    bracket: tuple[float, float]
    sweeps: list
    value: float
    cost: float
    open_rows: np.ndarray
    rest: _Rows
    n_sweeps: int  # passes over all requests after the sample: narrowing passes and sweeps
    narrowed: bool
    hulled: int

    def plan(self, choice, budget: float, started: float) -> BudgetPlan:
        lam = self.rest.lam
        upper = lam * budget + (self.value - lam * self.cost) + self.rest.dual
        return _plan(choice, lam, self.value + self.rest.objective, self.cost + self.rest.spent, budget, upper,
                     started, "hull+narrow+sweep" if self.narrowed else "hull+sweep", self.hulled, self.n_sweeps)


def _solve_sampled(parts, edges, budget, size, seed, map_parts, gather_rows, keep_choice=False) -> _Sampled:
    """Steps 1–4 of the module docstring on ``parts``, part i holding rows ``edges[i]:edges[i + 1]``.

    Each step is one ``map_parts(fn, tasks)`` (in order) over the non-empty parts, returning small summaries;
    the sample rows are those one array of ``edges[-1]`` rows would draw, so any partition gives one answer.
    ``keep_choice`` has the sweeps return their parts' decided options (in-memory parts, where it is free).
    """
    n_rows = int(edges[-1])
    sample = _Hull(*_draw_sample(parts, edges, size, seed, map_parts))
    scale = size / n_rows
    spans = [(part, lo) for part, lo, hi in zip(parts, edges[:-1], edges[1:]) if hi > lo]
    n_sweeps, narrowed = 0, False
    for width in BRACKET_WIDTHS:
        bracket = sample.bracket(budget * scale, width)
        if width is not None:
            estimate = sample.open_rows(*bracket) / scale
            bracket, passes = _narrow(spans, n_rows, bracket, budget, estimate, gather_rows, map_parts)
            n_sweeps, narrowed = n_sweeps + passes, narrowed or passes > 0
            if bracket is None:
                continue
        n_sweeps += 1
        sweeps = list(map_parts(_sweep_part, [(part, lo, *bracket, keep_choice) for part, lo in spans]))
        value, cost = sum(sweep.value for sweep in sweeps), sum(sweep.cost for sweep in sweeps)
        _check_parts_feasible(spans, n_rows, budget, sum(sweep.cheapest for sweep in sweeps), map_parts)
        remaining = budget - cost
        if -1e-12 * (abs(budget) + abs(cost)) <= remaining < 0:
            remaining = 0.0  # rounding, when the decided requests alone use the whole budget
        rest = _solve_rows(np.concatenate([sweep.open_value for sweep in sweeps]),
                           np.concatenate([sweep.open_cost for sweep in sweeps]), remaining)
        if rest is not None and (bracket[0] == 0 or rest.lam >= bracket[0]) and rest.lam <= bracket[1]:
            break
    open_rows = np.concatenate([sweep.open_rows for sweep in sweeps])
    return _Sampled(bracket, sweeps, value, cost, open_rows, rest, n_sweeps, narrowed, size + open_rows.size)


def _draw_sample(parts, edges, size, seed, map_parts) -> tuple[np.ndarray, np.ndarray]:
    """Step 1's seeded sample of ``size`` rows out of ``edges[-1]``, gathered part by part (float64)."""
    rows = np.sort(np.random.default_rng(seed).integers(0, int(edges[-1]), size))
    cuts = np.searchsorted(rows, edges)
    tasks = [(part, rows[a:b] - lo) for part, lo, a, b in zip(parts, edges[:-1], cuts[:-1], cuts[1:]) if b > a]
    pieces = list(map_parts(_sample_part, tasks))
    return np.concatenate([piece[0] for piece in pieces]), np.concatenate([piece[1] for piece in pieces])


def _sample_part(task) -> tuple[np.ndarray, np.ndarray]:
    """``(part, rows)`` → the part's ``value`` and ``cost`` at its local ``rows``, float64 (16·K bytes a row)."""
    part, rows = task
    value, cost = part.load()
    return np.asarray(value[rows], np.float64), np.asarray(cost[rows], np.float64)


def _plan(choice, lam, objective, spent, budget, upper, started, path, hulled, sweeps) -> BudgetPlan:
    upper = max(upper, objective)  # ≥ in exact arithmetic; rounding can leave it a hair below when the gap is 0
    return BudgetPlan(choice=choice, lam=float(lam), objective=float(objective), spent=float(spent),
                      budget=float(budget), slack=float(budget - spent), upper_bound=float(upper),
                      gap=float(upper - objective), seconds=time.perf_counter() - started, method="lagrange",
                      lagrange_path=path, hulled_rows=int(hulled), sweeps=sweeps)


# ---------------------------------------------------------------------------------- exact greedy over hulls


class _Hull:
    """Per request, the upper concave hull of its (cost, value) points, from the cheapest option upwards.

    Andrew's monotone chain, vectorised over requests: options sorted by cost, each pushed on a per-request
    stack after popping the vertices it leaves under the hull; an option no more valuable than the top is
    dominated and skipped. Options off this increasing hull are never optimal for any λ ≥ 0. Segments are
    stored step-major with their request, Δcost and efficiency Δvalue/Δcost; efficiencies are made
    non-increasing along each chain against rounding, so "every segment above a threshold" is always a prefix
    of each request's chain.
    """

    def __init__(self, value: np.ndarray, cost: np.ndarray):
        n_rows, n_options = value.shape
        self.n_rows = n_rows
        self.start = np.empty(n_rows, np.int64)
        width = max(n_options - 1, 1)
        self.vertices = np.empty((n_rows, width), np.int32)  # option reached after each step
        self.segment = np.empty((n_rows, width), np.int64)  # flat index of each step's segment
        self.n_segments = np.empty(n_rows, np.int64)
        self._stored = 0
        chains = [self._chain(value[lo:lo + HULL_CHUNK], cost[lo:lo + HULL_CHUNK], lo)
                  for lo in range(0, n_rows, HULL_CHUNK)]
        no_segments = np.empty(0, np.int64), np.empty(0), np.empty(0)  # for no requests
        self.row, self.dcost, self.efficiency = (np.concatenate(field) for field in zip(*chains, no_segments))
        self.start_cost = cost[np.arange(n_rows), self.start]
        self.base_cost = float(self.start_cost.sum())

    def _chain(self, value, cost, offset):
        n_rows, n_options = value.shape
        c, v, option = _sort_by_cost(cost, value)  # (K, n): row k is each request's k-th cheapest option
        stack = np.zeros((n_options, n_rows), np.int64)  # sorted positions of the hull vertices
        flat_stack, flat_c, flat_v = stack.reshape(-1), c.reshape(-1), v.reshape(-1)
        depth = np.ones(n_rows, np.int64)
        top_c, top_v = c[0].copy(), v[0].copy()
        below_c, below_v = np.zeros(n_rows), np.zeros(n_rows)  # the vertex under the top, when depth ≥ 2
        columns = np.arange(n_rows)
        for k in range(1, n_options):
            pc, pv = c[k], v[k]
            grow = pv > top_v  # else option k is dominated by the top
            # pop the top while it has k's cost, or lies on or under the segment from the vertex below it to k
            pop = grow & ((pc == top_c) | ((depth >= 2) & _not_above(below_c, below_v, top_c, top_v, pc, pv)))
            popping = np.flatnonzero(pop)
            while popping.size:
                depth[popping] -= 1
                top_c[popping], top_v[popping] = below_c[popping], below_v[popping]
                deep = popping[depth[popping] >= 2]
                under = flat_stack[(depth[deep] - 2) * n_rows + deep] * n_rows + deep
                below_c[deep], below_v[deep] = flat_c[under], flat_v[under]
                popping = popping[depth[popping] >= 1]
                ends = below_c[popping], below_v[popping], top_c[popping], top_v[popping], pc[popping], pv[popping]
                popping = popping[(ends[4] == ends[2]) | ((depth[popping] >= 2) & _not_above(*ends))]
            growing = np.flatnonzero(grow)
            flat_stack[depth[growing] * n_rows + growing] = k
            np.copyto(below_c, top_c, where=grow & (depth >= 1))
            np.copyto(below_v, top_v, where=grow & (depth >= 1))
            np.copyto(top_c, pc, where=grow)
            np.copyto(top_v, pv, where=grow)
            depth += grow
        self.start[offset:offset + n_rows] = option.reshape(-1)[stack[0] * n_rows + columns]
        self.n_segments[offset:offset + n_rows] = depth - 1
        rows, dcosts, efficiencies = [], [], []
        previous = np.full(n_rows, np.inf)
        for step in range(int(depth.max()) - 1):
            live = np.flatnonzero(depth > step + 1)
            here, there = stack[step, live] * n_rows + live, stack[step + 1, live] * n_rows + live
            dcost, dvalue = flat_c[there] - flat_c[here], flat_v[there] - flat_v[here]
            efficiency = np.minimum(dvalue / dcost, previous[live])
            previous[live] = efficiency
            self.vertices[offset + live, step] = option.reshape(-1)[there]
            self.segment[offset + live, step] = self._stored + np.arange(live.size)
            self._stored += live.size
            rows.append(offset + live)
            dcosts.append(dcost)
            efficiencies.append(efficiency)
        empty = [np.empty(0, np.int64), np.empty(0), np.empty(0)]
        return [np.concatenate(part) if part else e for part, e in zip((rows, dcosts, efficiencies), empty)]

    def open_rows(self, lam_lo: float, lam_hi: float) -> int:
        """How many requests have a hull segment of efficiency strictly inside (λ_lo, λ_hi): a choice to make."""
        return int(np.unique(self.row[(self.efficiency > lam_lo) & (self.efficiency < lam_hi)]).size)

    def threshold(self, room: float) -> float:
        """λ where segments taken by efficiency fill ``room`` (Σ Δcost): 0 if all fit, ∞ if ``room < 0``."""
        if room < 0:
            return math.inf
        if self.dcost.sum() <= room:
            return 0.0
        return _weighted_threshold(self.efficiency, self.dcost, room)

    def plan(self, room: float) -> tuple[np.ndarray, float]:
        """Steps taken per request and λ*: every segment above λ*, then a greedy fill of what ``room`` is left.

        The fill takes, by decreasing efficiency, the requests' next segments that still fit (a prefix per
        round, until none fits): segments tied with λ* first, so the gap stays below the marginal segment's
        Δvalue, then cheaper upgrades that use the slack.
        """
        lam = self.threshold(room)
        above = self.efficiency > lam
        steps = np.bincount(self.row[above], minlength=self.n_rows)
        room -= self.dcost[above].sum()
        for _ in range(FILL_ROUNDS):
            rows = np.flatnonzero(steps < self.n_segments)
            segment = self.segment[rows, steps[rows]]
            fits = self.dcost[segment] <= room
            rows, segment = rows[fits], segment[fits]
            if not rows.size:
                break
            order = np.argsort(-self.efficiency[segment], kind="stable")
            filled = np.cumsum(self.dcost[segment[order]])
            count = np.searchsorted(filled, room, side="right")  # ≥ 1: every candidate fits on its own
            steps[rows[order[:count]]] += 1
            room -= filled[count - 1]
        return steps, lam

    def choice(self, steps: np.ndarray) -> np.ndarray:
        reached = self.vertices[np.arange(self.n_rows), np.maximum(steps - 1, 0)]
        return np.where(steps > 0, reached, self.start).astype(np.int64)

    def bracket(self, budget: float, width: float | None) -> tuple[float, float]:
        """λ_lo < λ* < λ_hi of the whole input from this sample's greedy, at ``budget`` (the sample's share).

        The sample's Σ cost at λ* estimates the full one with standard error ``sd·√m`` (in sample units, ``sd``
        the spread of the chosen costs); the bracket moves the budget by ``width`` such errors plus one largest
        segment each way.
        """
        if width is None:
            return 0.0, math.inf
        room = budget - self.base_cost
        lam = self.threshold(room)
        above = self.efficiency > lam
        chosen = self.start_cost + np.bincount(self.row[above], weights=self.dcost[above], minlength=self.n_rows)
        margin = width * (chosen.std() * math.sqrt(self.n_rows)) + (self.dcost.max() if self.dcost.size else 0.0)
        low, high = self.threshold(room + margin), self.threshold(room - margin)
        # keep λ* strictly inside, so that requests with a kink exactly at λ* stay undecided
        if 0 < lam <= low:
            low = float(self.efficiency[self.efficiency < lam].max(initial=0.0))
        if high <= lam:
            high = float(self.efficiency[self.efficiency > lam].min(initial=math.inf))
        return low, high


def _not_above(low_c, low_v, mid_c, mid_v, high_c, high_v) -> np.ndarray:
    """Whether the middle point lies on or under the segment from the low point to the high one (costs rise)."""
    return (mid_v - low_v) * (high_c - mid_c) <= (high_v - mid_v) * (mid_c - low_c)


def _sort_by_cost(cost: np.ndarray, value: np.ndarray):
    """Transposed (K × n) copies of cost, value and option index, each column sorted by cost.

    Odd–even transposition sort across the K rows, vectorised over requests (a per-row ``argsort`` plus
    gathers costs several times more for small K). It stops once a round of each parity swaps nothing, so
    inputs whose costs already rise with the option index cost two rounds.
    """
    c, v = cost.T.copy(), value.T.copy()
    n_options = c.shape[0]
    option = np.repeat(np.arange(n_options, dtype=np.int32)[:, None], c.shape[1], axis=1)
    quiet = 0  # consecutive rounds without a swap: two (one of each parity) mean sorted
    for round_ in range(n_options):  # K rounds sort K elements
        left, right = slice(round_ % 2, n_options - 1, 2), slice(round_ % 2 + 1, n_options, 2)
        swap = c[left] > c[right]  # strict: equal costs keep their order
        if not swap.any():
            quiet += 1
            if quiet == 2:
                break
            continue
        quiet = 0
        for array in (c, v, option):
            low = array[left].copy()
            np.copyto(array[left], array[right], where=swap)
            np.copyto(array[right], low, where=swap)
    return c, v, option


def _weighted_threshold(efficiency: np.ndarray, weight: np.ndarray, room: float) -> float:
    """The efficiency e with ``Σ_{eff > e} weight ≤ room < Σ_{eff ≥ e} weight`` (weights > 0, total > room).

    Weighted quickselect: partition around the median, keep the side where ``room`` runs out. Linear time,
    no full sort of the (up to N·(K−1)) segments.
    """
    above_total = 0.0
    while efficiency.size > 2048:
        pivot = np.partition(efficiency, efficiency.size // 2)[efficiency.size // 2]
        above = efficiency > pivot
        weight_above = weight[above].sum()
        if above_total + weight_above > room:
            efficiency, weight = efficiency[above], weight[above]
            continue
        weight_at = weight[efficiency == pivot].sum()
        if above_total + weight_above + weight_at > room:
            return float(pivot)
        above_total += weight_above + weight_at
        below = efficiency < pivot
        if not below.any():  # only by rounding: the caller's total exceeded room
            return float(pivot)
        efficiency, weight = efficiency[below], weight[below]
    order = np.argsort(-efficiency, kind="stable")
    filled = above_total + np.cumsum(weight[order])
    return float(efficiency[order[min(np.searchsorted(filled, room, side="right"), order.size - 1)]])


@dataclass
class _Rows:
    """The exact greedy's plan on a set of requests; ``dual`` is Σ_i max_j (value_ij − λ·cost_ij)."""

    choice: np.ndarray
    lam: float
    objective: float
    spent: float
    dual: float


def _solve_rows(value: np.ndarray, cost: np.ndarray, budget: float) -> _Rows | None:
    """The hull greedy on all given requests (float64), or ``None`` when even the cheapest options overspend."""
    n_rows = value.shape[0]
    if n_rows == 0:
        return _Rows(np.empty(0, np.int64), 0.0, 0.0, 0.0, 0.0) if budget >= 0 else None
    hull = _Hull(value, cost)
    room = budget - hull.base_cost
    if room < 0:
        # a budget equal to the least possible spend may come out a few ulps short, summed another way
        if room < -1e-12 * (abs(budget) + float(np.abs(hull.start_cost).sum())):
            return None
        room = 0.0
    index = np.arange(n_rows)
    while True:
        steps, lam = hull.plan(room)
        choice = hull.choice(steps)
        spent = float(cost[index, choice].sum())
        if spent <= budget or not steps.any():
            break
        room -= spent - budget  # rounding in Σ Δcost let the plan overspend by a hair: refill a bit less
        room = math.nextafter(room, -math.inf)
    dual = float((value - lam * cost).max(axis=1).sum())
    return _Rows(choice, lam, float(value[index, choice].sum()), spent, dual)


# ------------------------------------------------------------------------------------------------- the sweep


@dataclass
class _Sweep:
    """Step 2 on one part: Σ value / Σ cost of the requests it decides, Σ of every request's cheapest cost (for
    the feasibility check), the undecided requests (global indices) with their float64 rows, and ``choice``
    (the part's decided options, undecided ones 0) when kept. Without ``choice``: 24 + u·(8 + 16·K) bytes."""

    value: float
    cost: float
    cheapest: float
    open_rows: np.ndarray
    open_value: np.ndarray
    open_cost: np.ndarray
    choice: np.ndarray | None


def _sweep_part(task) -> _Sweep:
    """``(part, offset, λ_lo, λ_hi, keep_choice)`` → the part's :class:`_Sweep`; ``offset`` is its first row."""
    part, offset, lam_lo, lam_hi, keep_choice = task
    value, cost = part.load()
    choice = np.empty(value.shape[0], np.int64)
    sums, undecided = _sweep_rows(value, cost, lam_lo, lam_hi, choice)
    return _Sweep(float(sums[0]), float(sums[1]), float(sums[2]), undecided + offset,
                  np.asarray(value[undecided], np.float64), np.asarray(cost[undecided], np.float64),
                  choice if keep_choice else None)


def _sweep_rows(value, cost, lam_lo, lam_hi, choice) -> tuple[np.ndarray, np.ndarray]:
    """Decide the rows whose maximisers of ``value − λ·cost`` at λ_lo and at λ_hi share an option.

    Writes the shared option into ``choice`` (0 for undecided rows); returns Σ value and Σ cost of the
    decided rows with Σ of every row's cheapest cost and of its largest |cost|, and the undecided rows. Works
    on transposed (K × chunk) float64 copies so every reduction runs along contiguous memory; the first shared
    maximiser is found as ``K − max_j(shared_j · (K − j))`` in int8. At λ_hi = ∞ the maximisers are the cheapest
    options of highest value (the limit of ``value − λ·cost``).
    """
    n_rows, n_options = value.shape
    width = min(SWEEP_CHUNK, max(n_rows, 1))
    v_t, c_t, s_hi, s_lo = (np.empty((n_options, width)) for _ in range(4))
    at_hi, at_lo = np.empty((n_options, width), bool), np.empty((n_options, width), bool)
    small = np.int8 if n_options < 128 else np.int32
    key = np.empty((n_options, width), small)
    rank = (n_options - np.arange(n_options)).astype(small)[:, None]
    columns = np.arange(width)
    sums = np.zeros(4)  # Σ value, Σ cost of decided rows, Σ cheapest cost, Σ largest |cost|
    undecided = [np.empty(0, np.int64)]
    for lo in range(0, n_rows, width):
        hi = min(lo + width, n_rows)
        n = hi - lo
        v, c, sh, sl, eh, el, k = (a[:, :n] for a in (v_t, c_t, s_hi, s_lo, at_hi, at_lo, key))
        v[...] = value[lo:hi].T
        c[...] = cost[lo:hi].T
        cheapest = c.min(axis=0)
        sums[2] += cheapest.sum()
        sums[3] += np.maximum(c.max(axis=0), -cheapest).sum()
        if math.isinf(lam_hi):
            np.equal(c, cheapest, out=eh)
            np.copyto(sh, v)
            sh[~eh] = -np.inf
            np.equal(sh, sh.max(axis=0), out=eh)
        else:
            np.multiply(c, lam_hi, out=sh)
            np.subtract(v, sh, out=sh)
            np.equal(sh, sh.max(axis=0), out=eh)
        np.multiply(c, lam_lo, out=sl)
        np.subtract(v, sl, out=sl)
        np.equal(sl, sl.max(axis=0), out=el)
        eh &= el
        np.multiply(eh, rank, out=k)
        first_shared = n_options - k.max(axis=0).astype(np.int64)
        decided = first_shared < n_options
        picked = np.where(decided, first_shared, 0)
        choice[lo:hi] = picked
        sums[0] += np.sum(v[picked, columns[:n]], where=decided)
        sums[1] += np.sum(c[picked, columns[:n]], where=decided)
        if not decided.all():
            undecided.append(lo + np.flatnonzero(~decided))
    return sums, np.concatenate(undecided)


# --------------------------------------------------------------------------------------------- the narrowing


def _narrow(spans, n_rows, bracket, budget, open_rows, gather_rows, map_parts):
    """Step 2: ``(bracket, passes)``, the bracket shrunk around λ* by histogram maps while ``open_rows`` (its
    undecided requests, first the sample's estimate) exceed ``gather_rows``; bracket ``None`` when the
    histograms put λ* outside it (a sampling miss: widen).

    The last pass keeps as many bins around λ*'s as stay within ``gather_rows`` requests: more requests for the
    greedy fill of step 4 to spend the slack on, as the sample's bracket would give.
    """
    passes = 0
    while open_rows > gather_rows:
        edges = _bin_edges(*bracket)
        total = _Histogram.total(map_parts(_histogram_part, [(part, edges) for part, _ in spans]))
        passes += 1
        _check_parts_feasible(spans, n_rows, budget, total.cheapest, map_parts)
        around = total.around(edges, budget)
        if around is None:
            return None, passes
        low, high = around
        inside = int(total.count[low:high].sum())
        if inside <= gather_rows:
            low, high = _grow(total.count, low, high, gather_rows)
        elif inside == total.count.sum():  # no progress: requests tied at λ* stay inside every bracket around it
            inside = 0
        bracket, open_rows = (float(edges[low]), float(edges[high])), inside
    return bracket, passes


def _grow(count: np.ndarray, low: int, high: int, limit: int) -> tuple[int, int]:
    """Edges ``low < high`` moved out a bin on each side at a time while the bins between hold ≤ ``limit``."""
    inside = int(count[low:high].sum())
    while low > 0 or high < count.size:
        grown = inside + int(count[max(low - 1, 0):low].sum() + count[high:high + 1].sum())
        if grown > limit:
            break
        low, high, inside = max(low - 1, 0), min(high + 1, count.size), grown
    return low, high


def _bin_edges(lam_lo: float, lam_hi: float) -> np.ndarray:
    """``NARROW_BINS`` + 1 increasing edges from λ_lo to λ_hi: evenly spaced, or for λ_hi = ∞ evenly spaced in
    the float64 bit patterns (which increase with the number: a few bins a binade, then even ones)."""
    if math.isinf(lam_hi):
        ends = np.array([lam_lo, math.inf]).view(np.int64)
        edges = np.linspace(*ends, NARROW_BINS + 1).astype(np.int64).view(np.float64)
    else:
        edges = np.linspace(lam_lo, lam_hi, NARROW_BINS + 1)
    edges[0], edges[-1] = lam_lo, lam_hi
    return np.unique(edges)  # a bracket a few ulps wide has fewer distinct edges


@dataclass
class _Histogram:
    """A narrowing pass over one part (or the sum over parts) for bin edges t_0 = λ_lo < … < t_G = λ_hi.

    ``base`` is Σ cost on the open bracket above its last bin: the requests the sweep decides at their option,
    the others at the hull vertex after every segment of efficiency ≥ λ_hi. ``cost[g]`` is the Δcost of the
    segments with efficiency in (t_g, t_{g+1}] (the last bin open at λ_hi), ``count[g]`` their number, and
    ``at_edge[g]`` the Δcost of those exactly at t_g (in bin g − 1), so Σ cost at λ = t_g (eqs. 17–18's argmax, segments
    above t_g taken) is ``base + Σ_{h ≥ g} cost[h]`` and just below t_g ``at_edge[g]`` more. ``magnitude`` is
    Σ_i max_j |cost_ij|, the scale of the rounding in these sums.
    """

    base: float
    cheapest: float
    magnitude: float
    cost: np.ndarray
    at_edge: np.ndarray
    count: np.ndarray

    @staticmethod
    def total(histograms) -> _Histogram:
        """The sum over parts, in order, reading the parts' histograms one by one."""
        histograms = iter(histograms)
        total = next(histograms)
        for histogram in histograms:
            total = _Histogram(*(getattr(total, f.name) + getattr(histogram, f.name) for f in fields(_Histogram)))
        return total

    def around(self, edges: np.ndarray, budget: float) -> tuple[int, int] | None:
        """``(a, b)``: the bin edges nearest λ* with Σ cost at t_a above the budget and just below t_b under it,
        so t_a < λ* < t_b strictly; ``None`` if λ* is not inside (λ_lo, λ_hi).

        Sums within ``1e-12·magnitude`` of the budget count as neither side, so that the rounding of sums over
        another partition of the rows cannot move the bracket (such edges stay inside it).
        """
        tolerance = 1e-12 * self.magnitude
        at = self.base + np.append(np.cumsum(self.cost[::-1])[::-1], 0.0)
        over = np.flatnonzero(at[:-1] > budget + tolerance)
        under = np.flatnonzero((at + self.at_edge)[1:] < budget - tolerance) + 1
        if not under.size or (not over.size and edges[0] > 0):
            return None
        return int(over[-1]) if over.size else 0, int(under[0])


def _histogram_part(task) -> _Histogram:
    """``(part, edges)`` → the part's :class:`_Histogram`: swept at the bracket ``edges[0], edges[-1]``, its
    undecided requests hulled (a few per cent of it on the first pass, fewer on the next)."""
    part, edges = task
    value, cost = part.load()
    sums, undecided = _sweep_rows(value, cost, edges[0], edges[-1], np.empty(value.shape[0], np.int64))
    hull = _Hull(np.asarray(value[undecided], np.float64), np.asarray(cost[undecided], np.float64))
    base, bins, at_edge, count = _bin_segments(hull, edges)
    return _Histogram(float(sums[1]) + base, float(sums[2]), float(sums[3]), bins, at_edge, count)


def _bin_segments(hull: _Hull, edges: np.ndarray):
    """The hull's part of a :class:`_Histogram`: Σ cost above the last bin, Δcost per bin, Δcost exactly at
    each edge, and segments per bin."""
    lam_lo, lam_hi, n_bins = edges[0], edges[-1], edges.size - 1
    efficiency, dcost = hull.efficiency, hull.dcost
    base = hull.base_cost + float(dcost[efficiency >= lam_hi].sum())
    inside = (efficiency > lam_lo) & (efficiency < lam_hi)
    efficiency, dcost = efficiency[inside], dcost[inside]
    upper = np.searchsorted(edges, efficiency)  # edges[upper − 1] < efficiency ≤ edges[upper]
    on_edge = edges[upper] == efficiency
    return (base, np.bincount(upper - 1, dcost, n_bins), np.bincount(upper[on_edge], dcost[on_edge], n_bins + 1),
            np.bincount(upper - 1, minlength=n_bins))


# ------------------------------------------------------------------------------------------------ validation


def _finite_matrix(name: str, values) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    if array.ndim != 2:
        raise DataError(f"{name} must be a matrix (requests × options), got an array of shape {array.shape}")
    if array.size and not (np.isfinite(array.min()) and np.isfinite(array.max())):
        check_matrix(name, array, allow_negative=True)  # raises, naming the count and an example
    return array


def _check_scores(scores, levels) -> tuple[np.ndarray, np.ndarray]:
    """Response scores f (requests × levels) ≥ 0 and finite; levels finite, ≥ 0, strictly increasing."""
    scores = _finite_matrix("scores", scores)
    if scores.size and scores.min() < 0:
        check_matrix("scores", scores)  # raises, naming the negative entries
    levels = check_vector("levels", levels)
    if levels.size != scores.shape[1]:
        raise DataError(f"scores have {scores.shape[1]} columns but there are {levels.size} levels")
    steps = np.diff(levels)
    if (steps <= 0).any():
        at = int(np.argmax(steps <= 0)) + 1
        raise DataError(f"levels must be strictly increasing (sorted, unique): {int((steps <= 0).sum())} of "
                        f"{steps.size} steps are not, e.g. levels[{at}]={float(levels[at]):g} after "
                        f"levels[{at - 1}]={float(levels[at - 1]):g}")
    return scores, levels.astype(scores.dtype)


def _paid_cost(scores: np.ndarray, per_level: np.ndarray, paid_on: PaidOn) -> np.ndarray:
    if paid_on == "response":
        return scores * per_level
    if paid_on == "request":
        return np.broadcast_to(per_level, scores.shape)
    raise DataError(f"paid_on must be 'response' or 'request', got {paid_on!r}")


def _check_number(name: str, number) -> float:
    try:
        number = float(number)
    except (TypeError, ValueError):
        raise DataError(f"{name} must be a number, got {number!r}") from None
    if not math.isfinite(number):
        raise DataError(f"{name} must be finite, got {number!r}")
    return number


def check_feasible(cost, budget: float) -> None:
    """Raise :class:`InfeasibleBudget` if the cheapest option of every request already costs more than ``budget``."""
    cheapest = np.asarray(cost).min(axis=1)
    total = float(cheapest.sum(dtype=np.float64))
    if total > budget:
        worst = int(np.argmax(cheapest))
        raise _infeasible(budget, cheapest.size, total, worst, float(cheapest[worst]))


def _check_parts_feasible(spans, n_rows: int, budget: float, cheapest_total: float, map_parts) -> None:
    """:func:`check_feasible` from the sweeps' Σ_i min_j cost_ij; only a failure maps over the parts again."""
    if cheapest_total <= budget:
        return
    worst = list(map_parts(_worst_part, [part for part, _ in spans]))
    at = max(range(len(worst)), key=lambda i: worst[i][1])
    raise _infeasible(budget, n_rows, cheapest_total, int(spans[at][1]) + worst[at][0], worst[at][1])


def _worst_part(part) -> tuple[int, float]:
    """The part's request whose cheapest option costs most (local index) and that cost."""
    cheapest = part.load()[1].min(axis=1)
    worst = int(np.argmax(cheapest))
    return worst, float(cheapest[worst])


class InfeasibleBudget(DataError):
    """No plan meets the budget: even the cheapest option of every request costs more (the message says how much)."""


def _infeasible(budget: float, n_rows: int, total: float, worst: int, worst_cost: float) -> InfeasibleBudget:
    return InfeasibleBudget(f"budget {budget:g} is infeasible: the cheapest options of the {n_rows} requests already "
                     f"cost {total:g} in total (e.g. request {worst}: {worst_cost:g} at least)")

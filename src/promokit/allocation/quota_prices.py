"""Ours: prices on the k quota rows, market clearing, an exact repair at the margins, a dual certificate.

With prices p_j on the quota rows (eq. 4), every user takes its best allowed type by ETV − p (eq. 5). The
dual D(p) = Σ_i max_j (ETV_ij − p_j) + Σ_j max(L_j p_j, U_j p_j) (``quota_core.dual_bound``; Σ_j d_j p_j for
exact quotas) bounds the optimum for every p, and equals it at optimal prices, where the users' best types meet
the quotas up to ties — with bounds L_j ≤ n_j ≤ U_j, at prices of the right signs: p_j ≥ 0 for a type at its
max, ≤ 0 at its min, 0 strictly between. So:

1. starting prices come from a random sample of 1/``sample_ratio`` of the users, solved the same way
   (recursively, down to ``base_users`` users solved by min-cost flow); the sample's quotas are the scaled
   quotas (bounds: minimums rounded down, maximums up), kept feasible under the risk limits
   (``sample_quotas``, ``sample_bounds``);
2. sample prices are off by O(1/sqrt(sample size)), so only users whose best and second-best reduced values
   ETV − p are close can change their choice: the ``candidate_constant / sqrt(sample size)`` fraction with
   the smallest gaps are the candidates, every other user keeps its best type;
3. market clearing on the candidates (``market_clearing``): for each type in turn, the price at which
   exactly its remaining quota of candidates prefers it (with bounds: its max if too many prefer it at price 0,
   its min if too few, else price 0), a few sweeps (coordinate descent on D(p));
4. at the cleared prices each user takes its best type; if the quotas are met, with prices of the right signs,
   the plan is optimal (D(p) = objective). Otherwise the users with the smallest gaps get the remaining quotas
   by an exact min-cost flow (``quota_exact``), and the plan's own prices (``quota_core.plan_prices``, signs
   limited by ``price_limits``) certify it; if D(p) > objective the margin is widened 4× (at worst it is every
   user: the exact solver).

Every plan meets eqs. 3–5 and every bound exactly; ``upper_bound`` = D(p) ≥ the optimum, and ``gap`` ≈ 0
certifies optimality.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from promokit.allocation.quota_core import (QuotaPlan, QuotaProblem, dual_bound, finish_plan, meets_bounds,
                                            plan_prices, price_limits, row_blocks)
from promokit.allocation.quota_exact import min_cost_flow_assignment

CERTIFY_RTOL = 1e-10  # gap / objective below which float rounding, not the plan, explains the gap
CLEARING_ROUNDS = 3  # market-clearing rounds, candidates re-chosen at the new prices, before a margin flow
SAMPLE_STREAM = 0x5155_4F54_41  # "QUOTA": the first word of the seed of the sampling stream


def solve_prices(problem: QuotaProblem, seed: int = 0, sample_ratio: float = 10.0, base_users: int = 50_000,
                 candidate_constant: float = 20.0, max_sweeps: int = 10, min_margin_users: int = 1000) -> QuotaPlan:
    """Solve eqs. 1–5 by sample prices, market clearing and exact margin repair (module docstring).

    Reproducible from ``seed`` (it draws the samples). ``diagnostics["levels"]`` describes each sample size,
    smallest first; ``diagnostics["certified"]`` is True when the dual bound proves the plan optimal.
    """
    masked = problem.masked_etv()
    # A stream of its own: samples drawn by default_rng(seed) would coincide with data drawn from the same seed.
    rng = np.random.default_rng([SAMPLE_STREAM, seed])
    solver = _NestedSolver(problem.risk, rng, sample_ratio, base_users, candidate_constant, max_sweeps,
                           min_margin_users)
    result = solver.solve(masked, Bounds(problem.min_users, problem.max_users), problem.tolerance)
    plan = finish_plan(problem, result.assignment, "ours", result.upper_bound, prices=result.prices.tolist(),
                       levels=solver.levels)
    plan.diagnostics["certified"] = _certified(result.upper_bound, plan.objective)
    return plan


class Bounds(NamedTuple):
    """Fewest and most users per type (eq. 4 as bounds); ``lower`` is ``upper`` for exact quotas."""

    lower: np.ndarray  # (k,) int64
    upper: np.ndarray  # (k,) int64

    @property
    def exact(self) -> bool:
        return np.array_equal(self.lower, self.upper)

    def rest(self, fixed: np.ndarray, n_free: int) -> Bounds | None:
        """The bounds left for ``n_free`` users once the users of ``fixed`` hold their types; None when the fixed
        users overfill a type or the free ones are too few for the minimums left."""
        taken = np.bincount(fixed, minlength=len(self.lower))
        upper = self.upper - taken
        lower = np.maximum(self.lower - taken, 0)
        if upper.min() < 0 or lower.sum() > n_free:
            return None
        return Bounds(lower, upper)

    def excess(self, counts: np.ndarray) -> int:
        """The fewest users who must change type for ``counts`` to meet the bounds: the larger of the users above
        the maximums and the users missing from the minimums."""
        return int(max(np.maximum(counts - self.upper, 0).sum(), np.maximum(self.lower - counts, 0).sum()))


@dataclass
class MarketClearing:
    prices: np.ndarray  # (k,) cleared prices
    choice: np.ndarray  # (n,) each user's best type by ETV − prices (lowest index on ties)
    sweeps: int
    met: bool           # the choices meet the quotas, with prices of the signs that make D(prices) = objective


@dataclass
class _PricedPlan:
    assignment: np.ndarray
    prices: np.ndarray
    upper_bound: float  # D(prices)


class _NestedSolver:
    def __init__(self, risk, rng, sample_ratio, base_users, candidate_constant, max_sweeps, min_margin_users):
        self.risk, self.rng = risk, rng
        self.sample_ratio, self.base_users = sample_ratio, base_users
        self.candidate_constant, self.max_sweeps = candidate_constant, max_sweeps
        self.min_margin_users = min_margin_users
        self.levels: list[dict] = []  # one entry per sample size, smallest first

    def solve(self, masked, bounds: Bounds, tolerance) -> _PricedPlan:
        start = time.perf_counter()
        n_users = len(masked)
        log = {"users": n_users}
        if n_users <= self.base_users:
            result = self._repair(masked, bounds, np.zeros(n_users, dtype=np.int64), np.zeros(n_users),
                                  np.zeros(len(bounds.lower)), 1.0, log)
        else:
            sample = np.flatnonzero(self.rng.random(n_users) < 1 / self.sample_ratio)
            prices = self.solve(masked[sample], self._sample_bounds(bounds, n_users, tolerance[sample]),
                                tolerance[sample]).prices
            fraction = self.candidate_constant / np.sqrt(max(len(sample), 1))
            best, gap = _best_and_gap(masked, prices)
            log.update(candidates=[], sweeps=[])
            for _ in range(CLEARING_ROUNDS):
                best, prices, met = self._clear(masked, bounds, best, gap, prices, fraction, log)
                result = _certify(masked, bounds, best, prices)
                if result is not None:
                    break
                # a user outside the candidates should move at the new prices, or clearing left ties unmet
                best, gap = _best_and_gap(masked, prices)
                result = _certify(masked, bounds, best, prices)
                if result is not None or not met:  # another round cannot settle what clearing could not
                    break
            if result is None:
                excess = bounds.excess(np.bincount(best, minlength=len(bounds.lower)))
                log["excess_users"] = excess
                margin_users = max(self.min_margin_users, 8 * excess)
                result = self._repair(masked, bounds, best, gap, prices, margin_users / n_users, log)
        log["seconds"] = round(time.perf_counter() - start, 3)
        self.levels.append(log)
        return result

    def _sample_bounds(self, bounds: Bounds, n_users: int, tolerance) -> Bounds:
        if bounds.exact:
            scaled = sample_quotas(bounds.lower, tolerance, self.risk)
            return Bounds(scaled, scaled)
        return sample_bounds(bounds, n_users, tolerance, self.risk)

    def _clear(self, masked, bounds: Bounds, best, gap, prices, fraction, log):
        """Market-clear the prices on the ``fraction`` of users nearest indifference (more if the others alone
        overfill a type or leave too few for the minimums), every other user fixed at ``best``: (new best types,
        new prices, quotas met)."""
        candidates = _smallest(gap, fraction)
        while (rest := bounds.rest(best[~candidates], int(candidates.sum()))) is None:
            candidates = _smallest(gap, 2 * candidates.mean())
        cleared = market_clearing(masked[candidates], rest.lower, prices, self.max_sweeps, rest.upper)
        best = best.copy()
        best[candidates] = cleared.choice
        log["candidates"].append(int(candidates.sum()))
        log["sweeps"].append(cleared.sweeps)
        return best, cleared.prices, cleared.met

    def _repair(self, masked, bounds: Bounds, best, gap, prices, fraction, log) -> _PricedPlan:
        """Keep every user at ``best`` (its best type at ``prices``) except a margin, the ``fraction`` smallest
        gaps, that gets the remaining quotas by min-cost flow; certify; widen the margin 4× until certified
        (a margin of every user is the exact solver, accepted as is).

        The certificate first tries ``prices`` lifted just enough to suit the margin users (cheap: the others
        already prefer their type at ``prices``), then the prices of the whole plan; either within the sign
        limits the whole plan's counts allow (``price_limits``)."""
        log["margin_attempts"] = 0
        while True:
            log["margin_attempts"] += 1
            margin = _smallest(gap, fraction)
            rest = bounds.rest(best[~margin], int(margin.sum()))
            flow = min_cost_flow_assignment(masked[margin], *rest) if rest is not None else None
            if flow is None and margin.all():  # sample bounds are kept feasible, so this is a bug
                raise RuntimeError(f"quotas {bounds.lower.tolist()}..{bounds.upper.tolist()} are infeasible for "
                                   f"{len(masked)} users")
            if flow is not None:
                assignment = best.copy()
                assignment[margin] = flow.assignment
                limits = price_limits(np.bincount(assignment, minlength=len(bounds.lower)), *bounds)
                result = (_certify(masked, bounds, assignment,
                                   plan_prices(masked[margin], flow.assignment, prices, limits))
                          or _certify(masked, bounds, assignment, plan_prices(masked, assignment, limits=limits),
                                      accept=margin.all()))
                if result is not None:
                    log["margin_users"] = int(margin.sum())
                    return result
            fraction *= 4


def _certify(masked, bounds: Bounds, assignment, prices, accept: bool = False) -> _PricedPlan | None:
    """The plan with its dual bound if it meets the quotas and D(prices) proves it optimal (or ``accept``)."""
    if not meets_bounds(np.bincount(assignment, minlength=len(bounds.lower)), *bounds):
        return None
    bound = dual_bound(masked, prices, *bounds)
    objective = float(np.take_along_axis(masked, assignment[:, None], axis=1).sum())
    return _PricedPlan(assignment, prices, bound) if accept or _certified(bound, objective) else None


def market_clearing(masked: np.ndarray, min_users: np.ndarray, prices: np.ndarray, max_sweeps: int,
                    max_users: np.ndarray | None = None) -> MarketClearing:
    """Coordinate descent on D(p) over these users, from ``prices`` (``max_users`` None: exact quotas).

    Along p_j, D has slope B_j − #{i : m_ij > p_j} with margins m_ij = ETV_ij − max_{l≠j}(ETV_il − p_l) and
    B_j = U_j for p_j > 0, L_j for p_j < 0 (``dual_bound``). With an exact quota d_j it is minimised between the
    d_j-th and (d_j+1)-th largest margin: p_j is set to their midpoint, the price at which exactly d_j users
    prefer type j. With bounds it is minimised at that price for U_j when it is positive (too many users prefer
    j at price 0), at the price for L_j when that is negative (too few), and at 0 otherwise. Sweeps stop once
    the choices meet the quotas with prices of those signs.
    """
    lower = np.asarray(min_users)
    upper = lower if max_users is None else np.asarray(max_users)
    prices = prices.astype(np.float64, copy=True)
    masked = np.asfortranarray(masked)
    reduced = masked - prices
    n_users, n_types = masked.shape
    for sweep in range(1, max_sweeps + 1):
        for j in range(n_types):
            others = np.full(n_users, -np.inf)
            for other in range(n_types):
                if other != j:
                    np.maximum(others, reduced[:, other], out=others)
            margins = masked[:, j] - others
            if lower[j] == upper[j]:
                prices[j] = _clearing_price(margins, lower[j], prices[j])
            else:
                floor = _clearing_price(margins, upper[j], -np.inf) if upper[j] < n_users else -np.inf
                ceiling = _clearing_price(margins, lower[j], np.inf) if lower[j] > 0 else np.inf
                prices[j] = min(max(0.0, floor), ceiling)
            reduced[:, j] = masked[:, j] - prices[j]
        choice = reduced.argmax(axis=1)
        if met := _clears(np.bincount(choice, minlength=n_types), prices, lower, upper):
            break
    return MarketClearing(prices, choice, sweep, met)


def _clearing_price(margins: np.ndarray, count: int, default: float) -> float:
    """The midpoint of the ``count``-th and (``count``+1)-th largest margins, at which exactly ``count`` users
    prefer the type (the finite one alone at an end); ``default`` when neither is finite."""
    n_users = len(margins)
    ranked = -np.partition(-margins, [max(count - 1, 0), min(count, n_users - 1)])
    upper = ranked[count - 1] if count > 0 else np.inf
    lower = ranked[count] if count < n_users else -np.inf
    finite = [v for v in (upper, lower) if np.isfinite(v)]
    return np.mean(finite) if finite else default


def _clears(counts: np.ndarray, prices: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> bool:
    """The counts meet the bounds, and no price keeps D above the objective (``price_limits``): positive only
    at a type's max, negative only at its min."""
    return meets_bounds(counts, lower, upper) and bool(np.all((prices <= 0) | (counts == upper))
                                                       and np.all((prices >= 0) | (counts == lower)))


def _best_and_gap(masked: np.ndarray, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each user's best type by ETV − p (lowest index on ties) and the gap to its second best (+inf when
    a single type is allowed), by a running top-2 over the k columns."""
    best = np.zeros(len(masked), dtype=np.int64)
    gap = np.empty(len(masked))
    for rows in row_blocks(len(masked)):
        block, block_best = masked[rows], best[rows]
        first = np.full(len(block), -np.inf)
        second = np.full(len(block), -np.inf)
        for j in range(len(prices)):
            value = block[:, j] - prices[j]
            block_best[value > first] = j
            np.maximum(second, np.minimum(first, value), out=second)
            np.maximum(first, value, out=first)
        gap[rows] = first - second
    return best, gap


def sample_quotas(quotas: np.ndarray, tolerance: np.ndarray, risk: np.ndarray) -> np.ndarray:
    """Quotas scaled to a sample of ``len(tolerance)`` users (largest remainders), then made feasible under
    the risk limits: from the riskiest level down, any demand above the users able to meet it moves to the
    next lower risk level (the lowest level admits every user, so it can always absorb it)."""
    n_sample = len(tolerance)
    target = quotas * (n_sample / quotas.sum())
    scaled = np.floor(target).astype(np.int64)
    short = n_sample - scaled.sum()
    scaled[np.argsort(scaled - target, kind="stable")[:short]] += 1
    levels = np.unique(risk)[::-1]
    for level, lower in zip(levels[:-1], levels[1:]):
        excess = scaled[risk >= level].sum() - np.count_nonzero(tolerance >= level)
        for j in np.flatnonzero(risk == level):
            moved = min(excess, scaled[j]) if excess > 0 else 0
            scaled[j] -= moved
            excess -= moved
            receiver = np.flatnonzero(risk == lower)
            scaled[receiver[np.argmax(scaled[receiver])]] += moved
    return scaled


def sample_bounds(bounds: Bounds, n_users: int, tolerance: np.ndarray, risk: np.ndarray) -> Bounds:
    """Bounds of ``n_users`` users scaled to a sample of ``len(tolerance)`` of them, minimums rounded down and
    maximums up (so Σ L ≤ sample size ≤ Σ U), then made feasible under the risk limits (``risk_slack``): from the
    riskiest level down, minimums above the users able to meet them drop at that level; from the safest level
    up, users who fit under no maximum below a level widen the maximum of a type of the next lower level."""
    n_sample = len(tolerance)
    lower = bounds.lower * n_sample // n_users
    upper = -(-bounds.upper * n_sample // n_users)
    levels = np.unique(risk)
    for level in levels[::-1]:
        shortfall = lower[risk >= level].sum() - np.count_nonzero(tolerance >= level)
        for j in np.flatnonzero(risk == level):
            cut = min(max(shortfall, 0), lower[j])
            lower[j] -= cut
            shortfall -= cut
    for level, below in zip(levels[1:], levels[:-1]):
        homeless = np.count_nonzero(tolerance < level) - upper[risk < level].sum()
        upper[np.flatnonzero(risk == below)[0]] += max(homeless, 0)
    return Bounds(lower, upper)


def _smallest(values: np.ndarray, fraction: float) -> np.ndarray:
    """Mask of the ⌈fraction·n⌉ smallest values (with any ties of the largest of them): none at 0, all at 1."""
    count = int(np.ceil(fraction * len(values)))
    if count <= 0 or count >= len(values):
        return np.full(len(values), count > 0)
    return values <= np.partition(values, count - 1)[count - 1]


def _certified(bound: float, objective: float) -> bool:
    return bound - objective <= CERTIFY_RTOL * max(abs(objective), np.finfo(float).tiny)

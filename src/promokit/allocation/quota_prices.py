"""The ``prices`` method: prices on the k quota rows, market clearing, an exact repair at the margins, a certificate.

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

:class:`NestedSolver` runs these steps on a level's :class:`Users`, which make every pass over the users: in
memory here (:class:`MemoryUsers`), or over the parts of a partitioned table in ``quota_parts``, where each pass
is a map over the parts and only a sample small enough to gather, the picked users and per-part sums reach the
driver (larger samples are levels in parts themselves).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from promokit.allocation.quota_core import (QuotaPlan, QuotaProblem, bound_term, exchange_matrix, finish_plan,
                                            longest_path_prices, meets_bounds, plan_prices, price_limits, row_blocks,
                                            user_term, users_at_least)
from promokit.allocation.quota_exact import margin_assignment

CERTIFY_RTOL = 1e-10  # gap / objective below which float rounding, not the plan, explains the gap
CLEARING_ROUNDS = 3  # market-clearing rounds, candidates re-chosen at the new prices, before a margin flow
SAMPLE_STREAM = 0x5155_4F54_41  # "QUOTA": the first word of the seed of the sampling stream


@dataclass(frozen=True)
class PriceOptions:
    """The tuning of ``prices`` (module docstring): sample ratio, size solved exactly, candidate fraction, sweeps of
    market clearing, fewest users in a margin."""

    sample_ratio: float = 10.0
    base_users: int = 50_000
    candidate_constant: float = 20.0
    max_sweeps: int = 10
    min_margin_users: int = 1000


def solve_prices(problem: QuotaProblem, seed: int = 0, **options) -> QuotaPlan:
    """Solve eqs. 1–5 by sample prices, market clearing and exact margin repair (module docstring); ``options``
    are those of :class:`PriceOptions`.

    Reproducible from ``seed`` (it draws the samples). ``diagnostics["levels"]`` describes each sample size,
    smallest first; ``diagnostics["certified"]`` is True when the dual bound proves the plan optimal.
    """
    solver = NestedSolver(problem.risk, sampling_rng(seed), PriceOptions(**options))
    users = MemoryUsers(problem.masked_etv(), problem.tolerance)
    result = solver.solve(users, Bounds(problem.min_users, problem.max_users))
    plan = finish_plan(problem, users.assignment(result.plan), "prices", result.upper_bound,
                       prices=result.prices.tolist(), levels=solver.levels)
    plan.diagnostics["certified"] = certified(result.upper_bound, plan.objective)
    return plan


def sampling_rng(seed: int) -> np.random.Generator:
    """The stream that draws the samples: one of its own, since samples drawn by default_rng(seed) would coincide
    with data drawn from the same seed. Users are sampled in row order, one uniform draw each."""
    return np.random.default_rng([SAMPLE_STREAM, seed])


class Bounds(NamedTuple):
    """Fewest and most users per type (eq. 4 as bounds); ``lower`` is ``upper`` for exact quotas."""

    lower: np.ndarray  # (k,) int64
    upper: np.ndarray  # (k,) int64

    @property
    def exact(self) -> bool:
        return np.array_equal(self.lower, self.upper)

    def rest(self, taken: np.ndarray, n_free: int) -> Bounds | None:
        """The bounds left for ``n_free`` users once fixed users hold ``taken`` users of each type; None when the
        fixed users overfill a type or the free ones are too few for the minimums left."""
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


# ------------------------------------------------------------------------------------ the users of one level


class Picked(NamedTuple):
    """Some users of a level, in row order: their masked ETV rows and the types their choice gives them."""

    masked: np.ndarray  # (m, k)
    best: np.ndarray    # (m,) int64
    counts: np.ndarray  # (k,) bincount of ``best``
    everyone: bool      # all the level's users
    who: object         # which users, in the form their ``Users`` understands (a mask, positions per part)

    @property
    def count(self) -> int:
        return len(self.best)


class Plan(NamedTuple):
    """Every user at its best type of ``choice`` (``Users.choose``), except the ``picked`` users at ``types``."""

    choice: object
    picked: Picked | None = None
    types: np.ndarray | None = None

    def counts(self) -> np.ndarray:
        counts = self.choice.counts
        if self.picked is None:
            return counts
        return counts - self.picked.counts + np.bincount(self.types, minlength=len(counts))


class Users(Protocol):
    """The users one level of the solver works on, and every pass it makes over them: in memory
    (:class:`MemoryUsers`) or spread over the parts of a table (``quota_parts``). A choice (``choose``) is each
    user's best type at some prices with the gap to its second best; everything the solver reads of it is its
    ``counts`` and what ``smallest``, ``measure`` and ``exchange`` return."""

    n_users: int

    def sample(self, rng: np.random.Generator, ratio: float) -> Users:
        """The level of the users for which ``rng.random() < 1 / ratio``, one draw a user in row order (their masked
        ETV rows and tolerances, in row order)."""

    def at_least(self, levels: np.ndarray) -> np.ndarray:
        """#{users with t ≥ r} for each risk level r (``users_at_least``): all that sample bounds need of them."""

    def everyone(self):
        """A choice in which every user is tied (gap 0), so that ``smallest`` picks them all."""

    def choose(self, prices: np.ndarray):
        """Each user's best type by ETV − p (lowest index on ties) and its gap to the second best (``best_and_gap``);
        the result has ``counts``, the users per type."""

    def smallest(self, choice, fraction: float) -> Picked:
        """The ⌈fraction·n⌉ users with the smallest gaps of ``choice``, with any ties of the largest (``smallest``)."""

    def measure(self, plan: Plan, prices: np.ndarray, exchange: bool = False) -> tuple[float, float]:
        """(``user_term`` at ``prices``, Σ masked ETV of the plan); ``exchange``: ``exchange(plan)`` may follow."""

    def exchange(self, plan: Plan) -> np.ndarray:
        """``exchange_matrix`` of the plan's assignment."""


class MemoryUsers:
    """A level's users held in memory: their masked ETV (−inf where eq. 5 forbids) and tolerances."""

    def __init__(self, masked: np.ndarray, tolerance: np.ndarray):
        self.masked, self.tolerance = masked, tolerance
        self.n_users, self.n_types = masked.shape

    def sample(self, rng, ratio) -> MemoryUsers:
        sample = np.flatnonzero(rng.random(self.n_users) < 1 / ratio)
        return MemoryUsers(self.masked[sample], self.tolerance[sample])

    def at_least(self, levels) -> np.ndarray:
        return users_at_least(self.tolerance, levels)

    def everyone(self) -> MemoryChoice:
        return self._choice(np.zeros(self.n_users, dtype=np.int64), np.zeros(self.n_users))

    def choose(self, prices) -> MemoryChoice:
        return self._choice(*best_and_gap(self.masked, prices))

    def smallest(self, choice: MemoryChoice, fraction) -> Picked:
        mask = smallest(choice.gap, fraction)
        best = choice.best[mask]
        return Picked(self.masked[mask], best, np.bincount(best, minlength=self.n_types), bool(mask.all()), mask)

    def measure(self, plan: Plan, prices, exchange=False) -> tuple[float, float]:
        assignment = self.assignment(plan)
        return user_term(self.masked, prices), float(np.take_along_axis(self.masked, assignment[:, None], axis=1).sum())

    def exchange(self, plan: Plan) -> np.ndarray:
        return exchange_matrix(self.masked, self.assignment(plan))

    def assignment(self, plan: Plan) -> np.ndarray:
        if plan.picked is None:
            return plan.choice.best
        assignment = plan.choice.best.copy()
        assignment[plan.picked.who] = plan.types
        return assignment

    def _choice(self, best, gap) -> MemoryChoice:
        return MemoryChoice(best, gap, np.bincount(best, minlength=self.n_types))


class MemoryChoice(NamedTuple):
    best: np.ndarray
    gap: np.ndarray
    counts: np.ndarray


# ------------------------------------------------------------------------------------------------ the solver


@dataclass
class PricedPlan:
    plan: Plan
    prices: np.ndarray
    upper_bound: float  # D(prices)


class NestedSolver:
    """Steps 1–4 of the module docstring on one level's ``Users``, and on each sample level below it (the
    ``Users`` that ``sample`` returns: in memory, or in parts for a partitioned level's large sample)."""

    def __init__(self, risk: np.ndarray, rng: np.random.Generator, options: PriceOptions = PriceOptions()):
        self.risk, self.rng, self.options = risk, rng, options
        self.levels: list[dict] = []  # one entry per sample size, smallest first

    def solve(self, users: Users, bounds: Bounds) -> PricedPlan:
        start = time.perf_counter()
        options, n_users = self.options, users.n_users
        log = {"users": n_users}
        if n_users <= options.base_users:
            result = self._repair(users, bounds, users.everyone(), np.zeros(len(bounds.lower)), 1.0, log)
        else:
            sample = users.sample(self.rng, options.sample_ratio)
            prices = self.solve(sample, self._sample_bounds(bounds, n_users, sample)).prices
            fraction = options.candidate_constant / np.sqrt(max(sample.n_users, 1))
            choice = users.choose(prices)
            log.update(candidates=[], sweeps=[])
            for _ in range(CLEARING_ROUNDS):
                cleared, prices, met = self._clear(users, bounds, choice, prices, fraction, log)
                result = _certify(users, bounds, cleared, prices)
                if result is not None:
                    break
                # a user outside the candidates should move at the new prices, or clearing left ties unmet
                choice = users.choose(prices)
                result = _certify(users, bounds, Plan(choice), prices)
                if result is not None or not met:  # another round cannot settle what clearing could not
                    break
            if result is None:
                excess = bounds.excess(choice.counts)
                log["excess_users"] = excess
                margin_users = max(options.min_margin_users, 8 * excess)
                result = self._repair(users, bounds, choice, prices, margin_users / n_users, log)
        log["seconds"] = round(time.perf_counter() - start, 3)
        self.levels.append(log)
        return result

    def _sample_bounds(self, bounds: Bounds, n_users: int, sample: Users) -> Bounds:
        tolerance = (sample.n_users, sample.at_least(np.unique(self.risk)))
        if bounds.exact:
            scaled = sample_quotas(bounds.lower, tolerance, self.risk)
            return Bounds(scaled, scaled)
        return sample_bounds(bounds, n_users, tolerance, self.risk)

    def _clear(self, users: Users, bounds: Bounds, choice, prices, fraction, log) -> tuple[Plan, np.ndarray, bool]:
        """Market-clear the prices on the ``fraction`` of users nearest indifference (more if the others alone
        overfill a type or leave too few for the minimums), every other user fixed at its choice: (the plan,
        the new prices, quotas met)."""
        candidates = users.smallest(choice, fraction)
        while (rest := bounds.rest(choice.counts - candidates.counts, candidates.count)) is None:
            candidates = users.smallest(choice, 2 * (candidates.count / users.n_users))
        cleared = market_clearing(candidates.masked, rest.lower, prices, self.options.max_sweeps, rest.upper)
        log["candidates"].append(candidates.count)
        log["sweeps"].append(cleared.sweeps)
        return Plan(choice, candidates, cleared.choice), cleared.prices, cleared.met

    def _repair(self, users: Users, bounds: Bounds, choice, prices, fraction, log) -> PricedPlan:
        """Keep every user at its ``choice`` (its best type at ``prices``) except a margin, the ``fraction``
        smallest gaps, that gets the remaining quotas by min-cost flow (:func:`margin_assignment`); certify; widen
        the margin 4× until certified (a margin of every user is the exact solver, accepted as is).

        The certificate first tries ``prices`` lifted just enough to suit the margin users (cheap: the others
        already prefer their type at ``prices``), then the prices of the whole plan; either within the sign
        limits the whole plan's counts allow (``price_limits``)."""
        log["margin_attempts"] = 0
        while True:
            log["margin_attempts"] += 1
            margin = users.smallest(choice, fraction)
            rest = bounds.rest(choice.counts - margin.counts, margin.count)
            assignment = margin_assignment(margin.masked, *rest) if rest is not None else None
            if assignment is None and margin.everyone:  # sample bounds are kept feasible, so this is a bug
                raise RuntimeError(f"quotas {bounds.lower.tolist()}..{bounds.upper.tolist()} are infeasible for "
                                   f"{users.n_users} users")
            if assignment is not None:
                plan = Plan(choice, margin, assignment)
                limits = price_limits(plan.counts(), *bounds)
                result = (_certify(users, bounds, plan, plan_prices(margin.masked, assignment, prices, limits),
                                   exchange=True)
                          or _certify(users, bounds, plan, longest_path_prices(users.exchange(plan), limits=limits),
                                      accept=margin.everyone))
                if result is not None:
                    log["margin_users"] = margin.count
                    return result
            fraction *= 4


def _certify(users: Users, bounds: Bounds, plan: Plan, prices, accept: bool = False,
             exchange: bool = False) -> PricedPlan | None:
    """The plan with its dual bound if it meets the quotas and D(prices) proves it optimal (or ``accept``)."""
    if not meets_bounds(plan.counts(), *bounds):
        return None
    term, objective = users.measure(plan, prices, exchange)
    bound = term + bound_term(prices, *bounds)
    return PricedPlan(plan, prices, bound) if accept or certified(bound, objective) else None


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


def best_and_gap(masked: np.ndarray, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def sample_quotas(quotas: np.ndarray, tolerance, risk: np.ndarray) -> np.ndarray:
    """Quotas scaled to a sample of ``len(tolerance)`` users (largest remainders), then made feasible under
    the risk limits: from the riskiest level down, any demand above the users able to meet it moves to the
    next lower risk level (the lowest level admits every user, so it can always absorb it). ``tolerance``: the
    sample's tolerances, or (its size, ``users_at_least`` of them at ``np.unique(risk)``)."""
    n_sample, able = _tolerance_counts(tolerance, risk)
    target = quotas * (n_sample / quotas.sum())
    scaled = np.floor(target).astype(np.int64)
    short = n_sample - scaled.sum()
    scaled[np.argsort(scaled - target, kind="stable")[:short]] += 1
    levels = np.unique(risk)[::-1]
    for level, lower in zip(levels[:-1], levels[1:]):
        excess = scaled[risk >= level].sum() - able[level]
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
    up, users who fit under no maximum below a level widen the maximum of a type of the next lower level.
    ``tolerance`` as in ``sample_quotas``."""
    n_sample, able = _tolerance_counts(tolerance, risk)
    lower = bounds.lower * n_sample // n_users
    upper = -(-bounds.upper * n_sample // n_users)
    levels = np.unique(risk)
    for level in levels[::-1]:
        shortfall = lower[risk >= level].sum() - able[level]
        for j in np.flatnonzero(risk == level):
            cut = min(max(shortfall, 0), lower[j])
            lower[j] -= cut
            shortfall -= cut
    for level, below in zip(levels[1:], levels[:-1]):
        homeless = n_sample - able[level] - upper[risk < level].sum()
        upper[np.flatnonzero(risk == below)[0]] += max(homeless, 0)
    return Bounds(lower, upper)


def _tolerance_counts(tolerance, risk: np.ndarray) -> tuple[int, dict]:
    """(users, {r: #{users with t ≥ r}} per distinct risk level r) of ``sample_quotas``' ``tolerance``."""
    n_users, at_least = tolerance if isinstance(tolerance, tuple) else (len(tolerance), None)
    levels = np.unique(risk)
    return n_users, dict(zip(levels, users_at_least(tolerance, levels) if at_least is None else at_least))


def smallest(values: np.ndarray, fraction: float) -> np.ndarray:
    """Mask of the ⌈fraction·n⌉ smallest values (with any ties of the largest of them): none at 0, all at 1."""
    count = int(np.ceil(fraction * len(values)))
    if count <= 0 or count >= len(values):
        return np.full(len(values), count > 0)
    return values <= np.partition(values, count - 1)[count - 1]


def certified(bound: float, objective: float) -> bool:
    return bound - objective <= CERTIFY_RTOL * max(abs(objective), np.finfo(float).tiny)

"""Quota allocation over a partitioned score table (EOCA eqs. 1–5): ``prices`` with every pass a map over the parts.

:func:`solve_quota_parts` runs the solver of ``quota_prices`` (sample prices, market clearing, exact margin
repair, certified dual bound) on the parts of a table without holding its N × k scores in one process, and gives
the plan, bound and gap that ``solve_quota(method="prices")`` gives on the concatenated rows with the same seed and
options: the same seeded sample (the draws are made in row order, split by part), the same candidates and margins
(picked by a global gap threshold), the same market clearing and min-cost flow on them, in the same row order.
It is executor-free: every step is one ``map_parts(fn, tasks)`` over the non-empty parts, ``fn`` a module-level
function and each task a picklable tuple, so builtin ``map`` runs it locally and an executor passes its own
ordered, parallel map. With N users, k funds, n_p users in part p, s = ``sample_ratio`` and B ≤
``HISTOGRAM_BINS`` histogram bins:

1. count (only for parts without ``rows``): part → n_p, a few bytes;
2. sample: part and the state of the sampling stream at its first row → its sampled rows' masked ETV rows and
   tolerances (the part draws them itself), and #{t ≥ r} per risk level for Hall's check (eq. 5): 8·(k + 1)·n_p/s
   bytes (inputs of at most ``base_users`` users are gathered whole and solved in memory: they fit one process by
   definition). A sample of more than ``gather_users`` rows is not gathered: each part writes its sampled rows,
   in row order, as a part of a temporary sample table (``scratch``, storage every worker shares) and returns
   only its counts; the sample is then a level in parts, solved by the same maps over those sample parts, and
   its own sample is drawn by a map 2 over them, down to a sample small enough to gather;
3. choose/measure at prices p: part (to measure a plan, also the prices its users choose at and the part's
   rows the plan overrides, with their types) → Σ_i max_j (ETV_ij − p_j) (its share of D(p),
   ``quota_core.user_term``), per-fund counts and Σ ETV of the best types at p, a histogram of their gaps to the
   second best on B edges (order statistics of the sample's gaps at p, so about N/B users a bin), the plan's
   Σ ETV and, in the margin repair, its k × k exchange matrix (``quota_core.exchange_matrix``): about
   8·(B + 2k + k²) bytes; and, in the same pass, the users near indifference at p (those of 4 below), about as
   many as were last picked (the sample's quantile at p, 5 % and 4 standard errors wider);
4. gather, when map 3 gathered too few: part, prices and the gap threshold that the summed histograms put at or
   above the ⌈fraction·N⌉-th smallest gap → the users at or under it (row, masked ETV row, gap, best type):
   8·(k + 3) bytes a user, the pick plus about N/B users of the threshold's bin. The driver keeps the exact
   ⌈fraction·N⌉ smallest gaps (with ties), as ``quota_prices.smallest`` does on one array;
5. finish: part and the plan (its prices, the part's overridden rows and types) → ``part.finish``: the plan part
   written (or the assignment returned), per-fund counts and ETV sums: 8·(2k + 1) bytes.

A solve certified after one round of market clearing maps 2, 3 (at the sample prices, gathering the candidates),
3 (at the cleared prices: the certificate) and 5, reading each part four times; each further round adds a 3, a
margin repair a 3 or two and a 4 for each widening, and a candidate pick that must grow (the other users alone
overfill a fund) a 4; a sample level in parts adds its own 2, 3s and 4s over the sample parts. The driver holds
the gathered sample (at most ``gather_users`` × k, whatever N; it also sets every level's histogram edges),
the picked users (candidates and margins: about ``candidate_constant``·sqrt(s·N) users at the top level) and
per-part sums, never N × k nor N/s × k — except in the last resort of the margin repair, a margin of every user
(the exact solver), which gathers every row of its level, as the local solver's last resort solves every row at
once.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from promokit.allocation.checks import check_vector
from promokit.allocation.quota import _bounds, _exact_quotas, check_hall_counts
from promokit.allocation.quota_core import (QuotaPlan, exchange_matrix, masked_etv, meets_bounds,
                                            user_term, users_at_least)
from promokit.allocation.quota_prices import (Bounds, MemoryUsers, NestedSolver, Picked, Plan, PriceOptions,
                                              best_and_gap, certified, sampling_rng)
from promokit.allocation.tables import (AUTO, DEFAULT_PREFIX, FUND, RISK, SCORE, TOLERANCE, USER, QuotaTable,
                                        read_quota_table)
from promokit.data.errors import DataError
from promokit.data.io import write_parquet
from promokit.data.parts import parquet, parquet_rows

MapParts = Callable[[Callable, Iterable], Iterable]
HISTOGRAM_BINS = 2048  # gap histogram bins per pass: the threshold's bin holds about N / 2048 users
GATHER_SLACK = 1.05  # map 3 gathers this many times the users last picked (plus 4 standard errors of the sample)
# a sample of at most this many rows is gathered and solved in memory, a larger one stays in parts: on the
# driver about 8·(k + 1) bytes a row (72 MB at 8 funds), twice while concatenating, about what a worker needs
# for a part of a few 10⁵ users, so the driver's peak is that of a few parts whatever N
GATHER_USERS = 1_000_000


@dataclass(frozen=True)
class QuotaPart:
    """One score file of a partitioned table (``tables.read_quota_table``'s layouts) and where its plan goes.

    ``funds`` are the funds every part shares, in the plan's order (a part listing them in another order is
    reordered; an empty Parquet part, allowed as datasets often hold some, cannot tell them); empty: the part's
    own. ``finish`` writes the part's plan to ``out`` and returns None, or returns the assignment without ``out``.
    """

    path: str
    layout: str = AUTO
    prefix: str = DEFAULT_PREFIX
    tolerance: str = TOLERANCE
    rows: int | None = None
    funds: tuple[str, ...] = ()
    out: str | None = None
    key: str = USER  # the column naming the users

    def table(self) -> QuotaTable:
        if Path(self.path).suffix.lower() in (".parquet", ".pq") and parquet_rows(self.path) == 0:
            frame = parquet(self.path)
            user_ids = frame[self.key].to_numpy() if self.key in frame else np.empty(0, object)
            return QuotaTable(user_ids, list(self.funds), np.empty((0, len(self.funds))), np.empty(0, np.int64),
                              self.key)
        table = read_quota_table(self.path, self.layout, self.prefix, self.tolerance, self.key)
        if self.funds and table.funds != list(self.funds):
            if sorted(table.funds) != sorted(self.funds):
                raise DataError(f"{self.path}: funds {table.funds} differ from {list(self.funds)} of the other parts: "
                                f"every part needs a score for every fund")
            order = [table.funds.index(fund) for fund in self.funds]
            table = replace(table, funds=list(self.funds), etv=table.etv[:, order])
        return table

    def finish(self, table: QuotaTable, assignment: np.ndarray, risk: np.ndarray | None):
        if self.out is None:
            return assignment
        write_parquet(plan_frame(table, assignment, risk, self.tolerance), self.out)
        return None


class PartInfo(NamedTuple):
    """What the command line learns of a part before solving: its users, funds and whether it has tolerances."""

    rows: int
    funds: tuple[str, ...] | None  # None for a part without rows
    has_tolerance: bool | None


@dataclass
class QuotaPartsPlan:
    """The plan of a partitioned solve (``plan.assignment`` is None: the assignment stays with the parts), the
    per-fund counts and ETV sums, and per part in order what its ``finish`` returned."""

    plan: QuotaPlan
    counts: np.ndarray  # (k,) users per fund
    etv: np.ndarray     # (k,) Σ ETV per fund
    outputs: list


def solve_quota_parts(parts: Sequence, quotas=None, risk=None, *, min_users=None, max_users=None,
                      map_parts: MapParts = map, seed: int = 0, funds=None, gather_users: int = GATHER_USERS,
                      scratch: str | Path | None = None, **options) -> QuotaPartsPlan:
    """Allocate fund types to the users of ``parts`` under quotas and risk limits (eqs. 1–5) with ``prices``.

    ``quotas`` (exactly d_j users per fund) or ``min_users`` / ``max_users`` as in ``solve_quota``; ``risk`` the
    funds' risk levels, the users' tolerances being each part's tolerance column (None: no risk rule). The same
    plan as ``solve_quota(etv, …, method="prices", seed=seed, **options)`` on the parts' rows concatenated in order;
    see the module docstring for the maps. The assignment is the local one user for user; objective and bound
    agree up to the order of float sums. A part is any picklable object with ``path`` (named in errors),
    ``table()`` (a ``QuotaTable``), ``finish(table, assignment, risk)`` and optionally ``rows``, which skips map 1
    (:class:`QuotaPart`). Every plan meets eqs. 3–5 and every bound (checked as the parts are finished). Raises
    :class:`DataError` on bad parts, quotas or risk limits, naming the part's file.

    A sample of more than ``gather_users`` rows (and ``base_users``) is not gathered: its parts are written to a
    temporary folder under ``scratch`` (created if missing; None: the system's temporary folder) and it is solved
    as a level in parts, with its own sample, down to one small enough to gather. The maps read and write that
    folder, so with an executor on several machines it must be storage they all share (the command line uses
    ``--out``). It is removed when the solve ends, also when it fails.
    """
    started = time.perf_counter()
    options = PriceOptions(**options)
    parts, maps = list(parts), _Maps(map_parts)
    edges = _edges(parts, maps)
    n_users = int(edges[-1])
    bounds = _bounds_of(quotas, min_users, max_users, n_users, funds)
    n_types = len(bounds.lower)
    rule = _Rule(np.zeros(n_types) if risk is None else check_vector("risk", risk, length=n_types,
                                                                      allow_negative=True), risk is not None)
    spans = [(i, part, hi - lo) for i, (part, lo, hi) in enumerate(zip(parts, edges[:-1], edges[1:])) if hi > lo]
    direct = n_users <= options.base_users
    rng = sampling_rng(seed)
    solver = NestedSolver(rule.risk, rng, options)
    if scratch is not None:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="promokit-quota-sample-", dir=scratch) as folder:
        levels = _Levels(rule, maps, options, max(gather_users, options.base_users), folder)
        # small inputs are gathered whole (no draws); else the top level's sample, drawn as the local solver draws
        users, sampled = levels.sample(spans, None if direct else rng)
        _check_funds(spans, sampled)
        if risk is not None:
            check_hall_counts(sum(piece.at_least for piece in sampled), n_users, rule.risk, *bounds, funds)
        if not direct:
            users = PartUsers(spans, n_users, rule, maps, users, sum(piece.at_least for piece in sampled))
        result = solver.solve(users, bounds)
    if direct:  # the assignment is in memory: each part gets its slice, overriding every row
        assignment = users.assignment(result.plan)
        plans = [(None, np.arange(hi - lo), assignment[lo:hi]) for lo, hi in zip(edges[:-1], edges[1:])]
    else:
        plans = users.part_plans(result.plan, len(parts))
    risk_values = None if risk is None else np.asarray(risk)
    finished = maps("finish", _finish_part, [(part, rule, *plan, risk_values) for part, plan in zip(parts, plans)])
    counts = sum(piece.counts for piece in finished)
    if not np.array_equal(counts, result.plan.counts()) or not meets_bounds(counts, *bounds):
        raise RuntimeError(f"the parts' plan has {counts.tolist()} users per fund, not the certified plan's "
                           f"{result.plan.counts().tolist()} within {bounds.lower.tolist()}..{bounds.upper.tolist()}")
    objective = sum(piece.objective for piece in finished)
    diagnostics = {"prices": result.prices.tolist(), "levels": solver.levels, "parts": len(parts),
                   "maps": maps.steps, "certified": certified(result.upper_bound, objective)}
    plan = QuotaPlan(None, objective, "prices", time.perf_counter() - started, result.upper_bound,
                     result.upper_bound - objective, diagnostics)
    return QuotaPartsPlan(plan, counts, sum(piece.etv for piece in finished), [piece.output for piece in finished])


def inspect_part(part: QuotaPart) -> PartInfo:
    """The command line's first map: read and check one part (errors name its file and first bad row)."""
    table = part.table()
    rows = len(table.user_ids)
    return PartInfo(rows, tuple(table.funds) if rows else None, table.tolerance is not None if rows else None)


def plan_frame(table: QuotaTable, assignment: np.ndarray, risk: np.ndarray | None = None,
               tolerance: str = TOLERANCE) -> pd.DataFrame:
    """``user_id, fund, score[, tolerance, risk]`` per user in the table's order (the key column named as in the
    score table): the plan file's rows (funds as strings even without rows, so that an empty part's plan has the
    others' schema)."""
    frame = pd.DataFrame({table.key: table.user_ids, FUND: pd.Series(np.asarray(table.funds, dtype=object)[assignment],
                                                                dtype="str"),
                          SCORE: np.take_along_axis(table.etv, assignment[:, None], axis=1)[:, 0]})
    if risk is not None:
        frame[tolerance], frame[RISK] = table.tolerance, risk[assignment]
    return frame


# ---------------------------------------------------------------------------------------------- the driver


class _Rule(NamedTuple):
    """The funds' risk levels (float64, zeros without the rule) and whether eq. 5 applies."""

    risk: np.ndarray
    on: bool


class _Stats(NamedTuple):
    """What map 3 sums of the users' best types at some prices."""

    user_term: float       # Σ_i max_j (ETV_ij − p_j)
    counts: np.ndarray     # (k,) users per best type
    objective: float       # Σ_i masked ETV of the best type
    edges: np.ndarray      # gap histogram edges, the last +inf
    histogram: np.ndarray  # users with edges[b − 1] < gap ≤ edges[b]


class _Gather(NamedTuple):
    """The users whose gap at some prices is at most ``threshold``, per non-empty part."""

    key: bytes  # the prices
    threshold: float
    pieces: list


class _PartChoice:
    """The users' best types at ``prices``, kept in the parts; its sums come from map 3 when first needed."""

    def __init__(self, users: PartUsers, prices: np.ndarray):
        self.users, self.prices = users, prices

    @property
    def counts(self) -> np.ndarray:
        return self.users.stats(self.prices).counts


class PartUsers:
    """``quota_prices.Users`` over the parts of a table: each pass one map, the sums and the picked users back.

    Map 3 gathers, in the same pass, about as many users near indifference at its prices as ``smallest`` was
    last asked for (a threshold read off the sample's gaps, with some slack): a ``smallest`` at those prices
    that the gathered users cover then needs no pass of its own. ``sample`` returns the level's sample, drawn
    before the solve with the same draws (``rng`` has made them): ``MemoryUsers``, or ``PartUsers`` of sample
    parts (``_Levels``); ``at_least`` is ``users_at_least`` of the level's tolerances. ``everyone`` is never
    needed, as levels small enough for it are solved in memory.

    The histogram edges and gather estimates are read off rows in memory: the sample's, or for a sample in parts
    its own sample's (a sample of the sample: they set how many users a pass gathers, never which are picked)."""

    def __init__(self, spans: list, n_users: int, rule: _Rule, maps: _Maps, sample, at_least: np.ndarray):
        self.spans, self.n_users, self.rule, self.maps = spans, n_users, rule, maps  # spans: (index, part, rows)
        self.n_types = len(rule.risk)
        self._sample, self._at_least = sample, at_least
        self.rows_in_memory = sample.masked if isinstance(sample, MemoryUsers) else sample.rows_in_memory
        self._stats: dict[bytes, _Stats] = {}
        self._gather: _Gather | None = None  # the latest users gathered
        self._gaps: tuple[bytes, np.ndarray] | None = None  # the sample's sorted gaps at the latest prices
        self._exchange: tuple[Plan, np.ndarray] | None = None
        self._fraction: float | None = None  # what ``smallest`` was last asked for

    def sample(self, rng, ratio):
        return self._sample

    def at_least(self, levels) -> np.ndarray:
        return self._at_least

    def choose(self, prices) -> _PartChoice:
        return _PartChoice(self, np.array(prices, dtype=np.float64))

    def stats(self, prices: np.ndarray) -> _Stats:
        if prices.tobytes() not in self._stats:
            self._evaluate(prices)
        return self._stats[prices.tobytes()]

    def smallest(self, choice: _PartChoice, fraction: float) -> Picked:
        """The users ``quota_prices.smallest`` picks on the whole gap array: the summed histograms give a
        threshold at or above the ⌈fraction·N⌉-th smallest gap; the users under it (gathered by map 3 at these
        prices, else by map 4) hold the exact pick."""
        self._fraction, prices, key = fraction, choice.prices, choice.prices.tobytes()
        count = int(np.ceil(fraction * self.n_users))
        if count <= 0:
            none = np.empty(0, np.int64)
            return Picked(np.empty((0, self.n_types)), none, np.zeros(self.n_types, np.int64), False,
                          [none] * len(self.spans))
        stats = self.stats(prices)
        needed = (np.inf if count >= self.n_users else
                  stats.edges[np.searchsorted(np.cumsum(stats.histogram), count)])
        gather = self._gather
        if gather is None or gather.key != key or gather.threshold < needed:
            # asked again at the same prices, for more users (a wider pick): the next ask may want more still
            ahead = 2 * fraction if gather is not None and gather.key == key else fraction
            threshold = max(needed, self._estimate(prices, ahead))
            gather = self._gather = _Gather(key, threshold, self._map(
                "gather", _gather_part, [(prices, threshold)] * len(self.spans)))
        gap = np.concatenate([piece.gap for piece in gather.pieces])
        keep = gap <= (np.partition(gap, count - 1)[count - 1] if count < self.n_users else np.inf)
        cuts = np.cumsum([0] + [len(piece.gap) for piece in gather.pieces])
        who = [piece.rows[keep[a:b]] for piece, a, b in zip(gather.pieces, cuts[:-1], cuts[1:])]
        masked = np.concatenate([piece.masked for piece in gather.pieces])[keep]
        best = np.concatenate([piece.best for piece in gather.pieces])[keep]
        return Picked(masked, best, np.bincount(best, minlength=self.n_types), len(best) == self.n_users, who)

    def measure(self, plan: Plan, prices, exchange=False) -> tuple[float, float]:
        prices = np.asarray(prices, dtype=np.float64)
        if plan.picked is None and np.array_equal(plan.choice.prices, prices):
            stats = self.stats(prices)
            return stats.user_term, stats.objective
        evaluated = self._evaluate(prices, plan, exchange)
        return self._stats[prices.tobytes()].user_term, sum(piece.plan_objective for piece in evaluated)

    def exchange(self, plan: Plan) -> np.ndarray:
        if self._exchange is None or self._exchange[0] is not plan:
            self._evaluate(plan.choice.prices, plan, exchange=True)
        return self._exchange[1]

    def part_plans(self, plan: Plan, n_parts: int) -> list[tuple]:
        """Per part, empty ones too: (the prices its users choose their best type at, rows overridden, types)."""
        overrides = dict(zip((i for i, _, _ in self.spans), self._overrides(plan)))
        empty = (np.empty(0, np.int64), np.empty(0, np.int64))
        return [(plan.choice.prices, *overrides.get(i, empty)) for i in range(n_parts)]

    def _overrides(self, plan: Plan) -> list[tuple[np.ndarray, np.ndarray]]:
        if plan.picked is None:
            return [(np.empty(0, np.int64), np.empty(0, np.int64))] * len(self.spans)
        cuts = np.cumsum([0] + [len(rows) for rows in plan.picked.who])
        return [(rows, plan.types[a:b]) for rows, a, b in zip(plan.picked.who, cuts[:-1], cuts[1:])]

    def _evaluate(self, prices: np.ndarray, plan: Plan | None = None, exchange: bool = False) -> list:
        """Map 3 at ``prices``: the best types' sums (kept for ``stats``), users gathered near indifference (kept
        for ``smallest``) and, with ``plan``, the plan's sums."""
        edges = self._edges(prices)
        # no speculation for the margin repair's certificate (its lifted prices are never chosen at), nor for a
        # pick of (nearly) every user, the last resort
        threshold = -np.inf if self._fraction is None or exchange else self._estimate(prices, self._fraction)
        if threshold == np.inf:
            threshold = -np.inf
        if plan is None:
            tasks = [(prices, edges, threshold, None, None, None, False)] * len(self.spans)
        else:
            tasks = [(prices, edges, threshold, plan.choice.prices, rows, types, exchange)
                     for rows, types in self._overrides(plan)]
        evaluated = self._map("choose" if plan is None else "measure", _evaluate_part, tasks)
        key = prices.tobytes()
        self._stats[key] = _Stats(
            sum(piece.user_term for piece in evaluated), sum(piece.counts for piece in evaluated),
            sum(piece.objective for piece in evaluated), edges, sum(piece.histogram for piece in evaluated))
        if threshold > -np.inf:
            self._gather = _Gather(key, threshold, [piece.gathered for piece in evaluated])
        if exchange:
            self._exchange = (plan, np.maximum.reduce([piece.exchange for piece in evaluated]))
        return evaluated

    def _sample_gaps(self, prices: np.ndarray) -> np.ndarray:
        """The gaps of the rows in memory at ``prices``, sorted."""
        if self._gaps is None or self._gaps[0] != prices.tobytes():
            self._gaps = (prices.tobytes(), np.sort(best_and_gap(self.rows_in_memory, prices)[1]))
        return self._gaps[1]

    def _edges(self, prices: np.ndarray) -> np.ndarray:
        """Histogram edges at ``prices``: evenly spaced order statistics of the sample's gaps, then +inf, so each
        bin holds about N / HISTOGRAM_BINS users."""
        gap = self._sample_gaps(prices)
        spots = np.linspace(0, len(gap) - 1, min(HISTOGRAM_BINS, len(gap))).round().astype(np.int64)
        return np.unique(np.append(gap[spots], np.inf))

    def _estimate(self, prices: np.ndarray, fraction: float) -> float:
        """A gap threshold that about ``fraction`` of the users, and then some, fall under: the sample's quantile a
        few standard errors and a few per cent above ``fraction`` (+inf when that is every user)."""
        gap = self._sample_gaps(prices)
        share = GATHER_SLACK * fraction + 4 * np.sqrt(fraction * max(1 - fraction, 0) / max(len(gap), 1))
        spot = int(np.ceil(share * len(gap)))
        return float(gap[spot]) if spot < len(gap) else np.inf

    def _map(self, step: str, fn: Callable, settings: list[tuple]) -> list:
        return self.maps(step, fn, [(part, self.rule, *setting) for (_, part, _), setting in zip(self.spans, settings)])


class _Maps:
    """``map_parts``, recording the steps it runs (diagnostics)."""

    def __init__(self, map_parts: MapParts):
        self.map_parts, self.steps = map_parts, []

    def __call__(self, step: str, fn: Callable, tasks: list) -> list:
        self.steps.append(step)
        return list(self.map_parts(fn, tasks))


class _Levels:
    """Map 2 over the parts of one level after another: each level's sample, gathered or in parts of its own."""

    def __init__(self, rule: _Rule, maps: _Maps, options: PriceOptions, gather_users: int, folder: str):
        self.rule, self.maps, self.options, self.gather_users, self.folder = rule, maps, options, gather_users, folder

    def sample(self, spans: list, rng: np.random.Generator | None, depth: int = 0) -> tuple[object, list]:
        """The ``Users`` of the sample of ``spans`` (rng None: of every row) and the map's pieces. The parts draw
        the local solver's draws, one a row in row order from ``rng``'s state at their first row, while ``rng``
        makes them here to count the sample; a sample of more than ``gather_users`` rows is written, part by part
        in row order, to sample parts and becomes a level in parts, its own sample drawn next as the local
        solver's next level draws it."""
        ratio = self.options.sample_ratio
        offsets = np.cumsum([0] + [n_rows for *_, n_rows in spans])[:-1]
        state = None if rng is None else rng.bit_generator.state
        draws = [None if rng is None else (state, int(offset), ratio) for offset in offsets]
        sizes = [n_rows if rng is None else int(np.count_nonzero(rng.random(n_rows) < 1 / ratio))
                 for *_, n_rows in spans]
        spill = sum(sizes) > self.gather_users
        out = [f"{self.folder}/sample{depth}-part-{i:05d}.npz" if spill else None for i, _, _ in spans]
        sampled = self.maps("sample", _sample_part, [(part, self.rule, n_rows, draw, path) for (_, part, n_rows), draw,
                                                     path in zip(spans, draws, out)])
        if not spill:
            return MemoryUsers(np.concatenate([piece.masked for piece in sampled]),
                               np.concatenate([piece.tolerance for piece in sampled])), sampled
        level = [(i, _SamplePart(path, size), size) for (i, _, _), path, size in zip(spans, out, sizes) if size]
        sample, pieces = self.sample(level, rng, depth + 1)
        return PartUsers(level, sum(sizes), self.rule, self.maps, sample,
                         sum(piece.at_least for piece in pieces)), sampled


def _edges(parts: list, maps: _Maps) -> np.ndarray:
    """Part i's rows are ``edges[i]:edges[i + 1]``; map 1 counts (and checks) the parts without ``rows``."""
    unknown = [part for part in parts if getattr(part, "rows", None) is None]
    counted = iter(maps("count", _count_part, unknown) if unknown else [])
    sizes = [next(counted) if getattr(part, "rows", None) is None else part.rows for part in parts]
    edges = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    if edges[-1] == 0:
        raise DataError(f"the {len(parts)} parts hold no users")
    return edges


def _bounds_of(quotas, min_users, max_users, n_users: int, funds) -> Bounds:
    """Exact quotas or bounds, validated as ``solve_quota`` validates them (``quota.prepare_quota_problem``)."""
    bounded = min_users is not None or max_users is not None
    if quotas is not None and bounded:
        raise DataError("give quotas (exactly d_j users per type, eq. 4) or min_users / max_users (bounds), not both")
    if quotas is None and not bounded:
        raise DataError("give quotas (exactly d_j users per type, eq. 4) or min_users and/or max_users (bounds)")
    given = quotas if quotas is not None else min_users if min_users is not None else max_users
    n_types = np.asarray(given, dtype=np.float64).size
    if funds is not None and len(funds) != n_types:
        raise DataError(f"funds has {len(funds)} names but the quotas have {n_types} fund types")
    if quotas is not None:
        quotas = _exact_quotas(quotas, n_users, n_types, funds)
        return Bounds(quotas, quotas)
    return Bounds(*_bounds(min_users, max_users, n_users, n_types, funds))


def _check_funds(spans: list, sampled: list) -> None:
    """Every part has the first part's funds, in its order (a ``QuotaPart`` with ``funds`` reorders its own)."""
    (_, first, _), funds = spans[0], sampled[0].funds
    for (_, part, _), piece in zip(spans[1:], sampled[1:]):
        if piece.funds != funds:
            raise DataError(f"{part.path}: funds {list(piece.funds)} differ from {list(funds)} in {first.path}: "
                            f"every part needs the same funds, in the same order unless the parts are given them")


# ------------------------------------------------------------------------------------------------- the maps


@dataclass(frozen=True)
class _SamplePart:
    """A part of a sample level: the masked ETV rows and tolerances (float64) a map 2 wrote to ``path``."""

    path: str
    rows: int

    def table(self) -> QuotaTable:
        with np.load(self.path) as saved:
            return QuotaTable(np.arange(self.rows), [], saved["masked"], saved["tolerance"])


class _Sample(NamedTuple):
    masked: np.ndarray     # (m, k) masked ETV of the sampled rows (none when written to a sample part)
    tolerance: np.ndarray  # (m,) float64, zeros without the risk rule
    at_least: np.ndarray   # #{t ≥ r} per distinct risk level r, over the whole part
    funds: tuple[str, ...]


class _Gathered(NamedTuple):
    rows: np.ndarray    # (m,) the part's rows, ascending
    masked: np.ndarray  # (m, k)
    gap: np.ndarray     # (m,)
    best: np.ndarray    # (m,)


class _Evaluation(NamedTuple):
    user_term: float
    counts: np.ndarray
    objective: float
    histogram: np.ndarray
    gathered: _Gathered
    plan_objective: float | None
    exchange: np.ndarray | None


class _Finished(NamedTuple):
    counts: np.ndarray
    etv: np.ndarray
    objective: float
    output: object


def _load(part, rule: _Rule) -> tuple[QuotaTable, np.ndarray, np.ndarray]:
    """The part's table, masked ETV (Fortran order, −inf where eq. 5 forbids) and tolerances (float64)."""
    table = part.table()
    n_rows, n_types = len(table.user_ids), len(rule.risk)
    etv = table.etv if n_rows else np.empty((0, n_types))
    if etv.shape[1] != n_types:
        raise DataError(f"{part.path}: {etv.shape[1]} funds {table.funds}, but the quotas have {n_types}")
    tolerance = np.zeros(n_rows)
    if rule.on:
        if table.tolerance is None and n_rows:
            raise DataError(f"{part.path}: the risk rule (eq. 5) needs a {part.tolerance!r} column, which this part "
                            f"lacks")
        tolerance = np.asarray(table.tolerance if n_rows else tolerance, dtype=np.float64)
    return table, masked_etv(etv, tolerance, rule.risk), tolerance


def _count_part(part) -> int:
    """Map 1: a part's users."""
    return len(part.table().user_ids)


def _sample_part(task) -> _Sample:
    """Map 2: ``(part, rule, n_rows, draws, out)`` → the masked ETV and tolerances of the sampled rows (``draws``:
    (generator state at row 0, the part's first row, ratio); None: every row), and Hall's counts; with ``out``,
    the rows are written there (``np.savez``, a ``_SamplePart``) instead of returned."""
    part, rule, n_rows, draws, out = task
    table, masked, tolerance = _load(part, rule)
    if len(masked) != n_rows:
        raise DataError(f"{part.path}: {len(masked)} users, but the part was given as {n_rows}")
    at_least = users_at_least(tolerance, np.unique(rule.risk))
    if draws is not None:
        state, offset, ratio = draws
        bits = getattr(np.random, state["bit_generator"])()
        bits.state = state
        rows = np.flatnonzero(np.random.Generator(bits.advance(offset)).random(n_rows) < 1 / ratio)
        masked, tolerance = masked[rows], tolerance[rows]
    if out is not None:
        np.savez(out, masked=masked, tolerance=tolerance)
        masked, tolerance = masked[:0], tolerance[:0]
    return _Sample(masked, tolerance, at_least, tuple(table.funds))


def _evaluate_part(task) -> _Evaluation:
    """Map 3: ``(part, rule, prices, edges, threshold, base, rows, types, exchange)`` → the sums of the best
    types at ``prices``, the gap histogram on ``edges`` and the users with gaps up to ``threshold``; with
    ``base``, also of the plan in which users take their best type at ``base`` except ``rows``, which take
    ``types`` (Σ ETV, and the exchange matrix if ``exchange``)."""
    part, rule, prices, edges, threshold, base, rows, types, exchange = task
    _, masked, _ = _load(part, rule)
    best, gap = best_and_gap(masked, prices)
    histogram = np.bincount(np.searchsorted(edges, gap), minlength=len(edges))
    plan_objective = plan_exchange = None
    if base is not None:
        assignment = best.copy() if np.array_equal(base, prices) else best_and_gap(masked, base)[0]
        assignment[rows] = types
        plan_objective = _objective(masked, assignment)
        plan_exchange = exchange_matrix(masked, assignment) if exchange else None
    return _Evaluation(user_term(masked, prices), np.bincount(best, minlength=len(prices)), _objective(masked, best),
                       histogram, _near(masked, best, gap, threshold), plan_objective, plan_exchange)


def _gather_part(task) -> _Gathered:
    """Map 4: ``(part, rule, prices, threshold)`` → the users whose gap at ``prices`` is at most ``threshold``."""
    part, rule, prices, threshold = task
    _, masked, _ = _load(part, rule)
    return _near(masked, *best_and_gap(masked, prices), threshold)


def _near(masked: np.ndarray, best: np.ndarray, gap: np.ndarray, threshold: float) -> _Gathered:
    rows = np.flatnonzero(gap <= threshold)
    return _Gathered(rows, masked[rows], gap[rows], best[rows])


def _finish_part(task) -> _Finished:
    """Map 5: ``(part, rule, base, rows, types, risk)`` → ``part.finish`` of the plan (users at their best type at
    ``base``, ``rows`` at ``types``; ``base`` None: ``types`` is the whole assignment), with its sums."""
    part, rule, base, rows, types, risk = task
    table, masked, _ = _load(part, rule)
    n_rows = len(masked)
    assignment = np.empty(n_rows, np.int64) if base is None else best_and_gap(masked, base)[0]
    assignment[rows] = types
    chosen = np.take_along_axis(masked, assignment[:, None], axis=1)[:, 0]
    if not np.isfinite(chosen).all():  # the solver never picks a forbidden fund: this would be a bug
        row = int(np.argmax(~np.isfinite(chosen)))
        raise RuntimeError(f"{part.path}: row {row} would get fund {assignment[row]} above its risk tolerance (eq. 5)")
    etv = table.etv if n_rows else np.empty((0, len(rule.risk)))
    values = np.take_along_axis(etv, assignment[:, None], axis=1)[:, 0]
    return _Finished(np.bincount(assignment, minlength=len(rule.risk)),
                     np.bincount(assignment, weights=values, minlength=len(rule.risk)), float(values.sum()),
                     part.finish(table, assignment, risk))


def _objective(masked: np.ndarray, assignment: np.ndarray) -> float:
    return float(np.take_along_axis(masked, assignment[:, None], axis=1).sum())


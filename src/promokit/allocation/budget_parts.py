"""Budget allocation over a partitioned score table: λ* from per-part summaries, choices made part by part.

:func:`solve_budget_parts` gives the λ*, upper bound and per-request choices that :func:`~promokit.allocation.
budget.solve_budget` gives on the concatenated rows (eqs. 11–20; how λ* is found exactly is in that module's
docstring), without holding all rows in one process. It is executor-free: every step is one
``map_parts(fn, tasks)`` over the parts, ``fn`` a module-level function and each task a picklable tuple, so
builtin ``map`` runs it locally and a distributed executor passes its own parallel map (results in order). With
N requests, K options, P parts and n_p requests in part p:

1. counts (only for parts without a known ``rows``): part → ``(n_p, K)``, a few bytes;
2. sample: the seeded global rows ``solve_budget`` would draw for N, split by part → their value/cost rows,
   16·K bytes a sampled row (about 2·N^(2/3)·n_p/N of them, at most ``SAMPLE_ROWS`` in all);
3. narrowing, while the bracket the sample gives leaves more than ``gather_rows`` requests undecided (the
   sample's estimate, then the histograms' count): part + ``NARROW_BINS`` + 1 bin edges over the bracket → a
   histogram of the Δcost of its undecided requests' hull segments per bin, with three sums, about 24·G bytes
   (6 KB). One pass usually brings 10⁶ undecided requests under 10⁴; the driver keeps the bins around λ*
   that hold at most ``gather_rows`` requests;
4. sweep at that bracket: part → Σ value / Σ cost of the requests the bracket decides, Σ of every request's
   cheapest cost and the u_p undecided requests (global index, value/cost rows): 32 + u_p·(8 + 16·K) bytes,
   Σ_p u_p about ``gather_rows`` at most. The driver solves the undecided rest with the exact greedy and, when
   its λ* falls outside the bracket, widens it and maps steps 3–4 again, as ``solve_budget`` does;
5. choices: part, bracket and the rest's choices at its undecided rows (16 bytes each) → ``part.finish(choice)``
   with the options the bracket decides recomputed in place: the choices themselves (8·n_p bytes) or, for a
   :class:`BudgetPart` with ``out``, a per-level summary after writing its plan file.

The driver holds the sample, one histogram, the gathered rows and what the parts return per part (a few
hundred bytes and the per-level summaries), so its memory does not grow with N beyond that per-part share.
Inputs small enough to be hulled whole (N ≤ ``DIRECT_ROWS`` or 2·sample) are gathered and solved by
``solve_budget`` itself: they fit one process by definition. A part is any picklable object with ``load() →
(value, cost)`` and ``finish(choice)`` (:class:`~promokit.allocation.budget.ArrayPart` in memory,
:class:`BudgetPart` for a score file) and optionally ``rows``, its request count, which skips map 1.
Limitations: requests tied exactly at λ* (identical rows, say) stay undecided in every bracket and are all
gathered; the last-resort bracket [0, ∞), used only if a 32-standard-error bracket misses λ*, is not narrowed,
leaves almost every request undecided and so gathers almost all rows, exactly as the local solver hulls them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd

from promokit.allocation.budget import (
    GATHER_ROWS,
    BudgetPlan,
    PaidOn,
    _check_number,
    _is_direct,
    _sample_size,
    _solve_sampled,
    _sweep_rows,
    absolute_form,
    check_budget_problem,
    ratio_form,
    solve_budget,
)
from promokit.allocation.tables import AUTO, DEFAULT_PREFIX, LEVEL, SCORE, USER, VALUE, BudgetTable, read_budget_table
from promokit.data.errors import DataError
from promokit.data.io import write_parquet
from promokit.data.parts import parquet, parquet_rows

MapParts = Callable[[Callable, Iterable], Iterable]


class TableForm(NamedTuple):
    """One score table as budget rows: ``value`` maximised, ``cost`` on the budget row, ``spend`` in money."""

    value: np.ndarray
    cost: np.ndarray
    spend: np.ndarray


class PartInfo(NamedTuple):
    """What map 1 of the command line learns about a part: its requests, levels and whether it has values."""

    rows: int
    levels: tuple[float, ...] | None  # None for a part without rows
    has_value: bool


@dataclass(frozen=True)
class BudgetPart:
    """One score file of a partitioned table and how a worker turns it into budget rows (eqs. 11–16).

    ``ratio`` is B of eq. 16 (cost f·(r − B), budget row 0) or ``None`` for the absolute form (cost r·f, the
    total is the solver's budget). ``levels`` are the levels every part shares, which an empty Parquet part
    (allowed: datasets often hold some) cannot tell. ``finish`` returns the choices, or with ``out`` writes the
    part's plan there and returns its per-level totals.
    """

    path: str
    ratio: float | None = None
    paid_on: PaidOn = "response"
    layout: str = AUTO
    prefix: str = DEFAULT_PREFIX
    population: str = "customer"
    rows: int | None = None
    levels: tuple[float, ...] = ()
    out: str | None = None
    with_population: bool = False  # the plan has a population column (customers and merchants)
    with_value: bool = False  # the plan has a value column (some part has value columns)
    key: str = USER  # the column naming the requests

    def table(self) -> BudgetTable:
        stat = Path(self.path).stat() if Path(self.path).is_file() else None
        stamp = (stat.st_mtime_ns, stat.st_size) if stat else None
        return _read_part(self.path, self.layout, self.prefix, self.levels, stamp, self.key)

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        form = table_form(self.table(), self.ratio, self.paid_on)
        return form.value, form.cost

    def finish(self, choice: np.ndarray):
        if self.out is None:
            return choice
        table = self.table()
        frame = plan_frame(table, table_form(table, self.ratio, self.paid_on), choice,
                           self.population if self.with_population else None, self.with_value)
        write_parquet(frame, self.out)
        return level_totals(frame)


@dataclass
class PartsPlan:
    """λ*, objective and bound of a partitioned solve (``plan.choice`` is None: the choices stay with the parts)
    and, per part in order, what its ``finish(choice)`` returned."""

    plan: BudgetPlan
    outputs: list


def solve_budget_parts(parts: Sequence, budget: float, *, map_parts: MapParts = map,
                       sample_size: int | None = None, seed: int = 0, gather_rows: int = GATHER_ROWS) -> PartsPlan:
    """Maximise ``Σ value[i, x_i]`` s.t. ``Σ cost[i, x_i] ≤ budget`` (eqs. 11–16) over the rows of ``parts``.

    The same plan as ``solve_budget`` on the parts' rows concatenated in order, with the same ``sample_size``,
    ``seed`` and ``gather_rows``; see the module docstring for the maps. Raises :class:`DataError` on bad parts or an
    infeasible budget.
    """
    started = time.perf_counter()
    budget, parts = _check_number("budget", budget), list(parts)
    edges = _edges(parts, map_parts)
    size = _sample_size(int(edges[-1]), sample_size)
    if _is_direct(int(edges[-1]), size):
        plan = solve_budget(*_gather(parts, edges, map_parts), budget, sample_size=sample_size, seed=seed,
                            gather_rows=gather_rows)
        tasks = [(part, None, None, plan.choice[lo:hi]) for part, lo, hi in zip(parts, edges[:-1], edges[1:])]
    else:
        solved = _solve_sampled(parts, edges, budget, size, seed, map_parts, gather_rows)
        plan = solved.plan(None, budget, started)
        cuts = np.searchsorted(solved.open_rows, edges)
        tasks = [(part, solved.bracket, solved.open_rows[a:b] - lo, solved.rest.choice[a:b])
                 for part, lo, a, b in zip(parts, edges[:-1], cuts[:-1], cuts[1:])]
    outputs = list(map_parts(_choose_part, tasks))
    return PartsPlan(replace(plan, choice=None, seconds=time.perf_counter() - started), outputs)


def inspect_part(part: BudgetPart) -> PartInfo:
    """Map 1 of the command line: read and check one part (errors name its file and first bad row)."""
    table = part.table()
    rows = len(table.user_ids)
    return PartInfo(rows, tuple(table.levels.tolist()) if rows else None, table.value is not None)


def table_form(table: BudgetTable, ratio: float | None, paid_on: PaidOn) -> TableForm:
    """A table's budget rows: eq. 16 with B = ``ratio`` (:func:`ratio_form`), or the absolute form (``None``).

    A ``cost`` column is the expected spend and replaces r·f in either form; a ``value`` column replaces f as
    what is maximised.
    """
    spend = absolute_form(table.scores, table.levels, 0.0, paid_on).cost
    cost = ratio_form(table.scores, table.levels, ratio, paid_on).cost if ratio is not None else spend
    if table.cost is not None:
        cost, spend = cost - spend + table.cost, table.cost
    value = table.value if table.value is not None else table.scores
    return TableForm(value, cost, np.broadcast_to(spend, table.scores.shape))


def plan_frame(table: BudgetTable, form: TableForm, choice: np.ndarray, population: str | None = None,
               with_value: bool = False) -> pd.DataFrame:
    """``[population,] user_id, level, score, [value,] cost`` per request (the key column named as in the score
    table); cost is the chosen level's spend."""
    rows = np.arange(len(choice))
    columns = {"population": np.full(len(choice), population)} if population else {}
    columns.update({table.key: table.user_ids, LEVEL: table.levels[choice], SCORE: table.scores[rows, choice]})
    if with_value:
        columns[VALUE] = form.value[rows, choice]
    columns["cost"] = form.spend[rows, choice]
    return pd.DataFrame(columns)


def level_totals(frame: pd.DataFrame) -> pd.DataFrame:
    """Requests, expected responses and spend per ``[population,] level`` of a plan frame (K rows or fewer)."""
    keys = ["population", LEVEL] if "population" in frame else [LEVEL]
    return frame.groupby(keys).agg(requests=(SCORE, "size"), expected_responses=(SCORE, "sum"),
                                   expected_spend=("cost", "sum")).reset_index()


# ------------------------------------------------------------------------------------------------- the maps


def _edges(parts: list, map_parts: MapParts) -> np.ndarray:
    """Part i's rows are ``edges[i]:edges[i + 1]``; map 1 counts (and checks) the parts without ``rows``."""
    unknown = [part for part in parts if getattr(part, "rows", None) is None]
    counted = iter(list(map_parts(_count_part, unknown)))
    shapes = [next(counted) if getattr(part, "rows", None) is None else (part.rows, None) for part in parts]
    widths = sorted({width for rows, width in shapes if rows and width is not None})
    if len(widths) > 1:
        raise DataError(f"the parts must offer the same number of options, got {widths}")
    edges = np.concatenate([[0], np.cumsum([rows for rows, _ in shapes], dtype=np.int64)])
    if edges[-1] == 0:
        raise DataError(f"the {len(parts)} parts hold no requests")
    return edges


def _count_part(part) -> tuple[int, int | None]:
    value, cost = part.load()
    return check_budget_problem(value, cost, 0.0).value.shape if len(value) else (0, None)


def _gather(parts: list, edges: np.ndarray, map_parts: MapParts) -> tuple[np.ndarray, np.ndarray]:
    """Every row, for an input small enough to be hulled whole."""
    pieces = list(map_parts(_load_part, [part for part, lo, hi in zip(parts, edges[:-1], edges[1:]) if hi > lo]))
    return np.concatenate([value for value, _ in pieces]), np.concatenate([cost for _, cost in pieces])


def _load_part(part) -> tuple[np.ndarray, np.ndarray]:
    return part.load()


def _choose_part(task):
    """Map 5: ``(part, bracket, open_rows, chosen)`` → ``part.finish(choice)``, where ``choice`` holds the options
    the bracket decides and ``chosen`` at the part's ``open_rows`` (``bracket`` None: ``chosen`` is all of it)."""
    part, bracket, rows, chosen = task
    if bracket is None:
        return part.finish(chosen)
    value, cost = part.load()
    choice = np.empty(len(value), np.int64)
    _sweep_rows(value, cost, *bracket, choice)
    choice[rows] = chosen
    return part.finish(choice)


@lru_cache(maxsize=1)  # map 5 loads a part, then finishes it: read its file once
def _read_part(path: str, layout: str, prefix: str, levels: tuple[float, ...], stamp, key: str) -> BudgetTable:
    """A part's table (``stamp``: the file's mtime and size, so a rewritten file is read again); a Parquet part
    without rows is an empty table over ``levels``."""
    if stamp is not None and Path(path).suffix.lower() in (".parquet", ".pq") and parquet_rows(path) == 0:
        frame = parquet(path)
        user_ids = frame[key].to_numpy() if key in frame else np.empty(0, object)
        return BudgetTable(user_ids, np.asarray(levels, np.float64), np.empty((0, len(levels))), None, None, layout,
                           key)
    return read_budget_table(path, layout, prefix, key)


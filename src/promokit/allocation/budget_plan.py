"""Budget plans from score tables (eqs. 11–20): what ``promokit allocate budget`` makes, as a function.

:func:`plan_budget` reads the customers' score table (and the merchants'), stacks them under one budget row and
solves it with the chosen method; a table in parts is read, checked, solved and written part by part by
``lagrange`` (:mod:`promokit.allocation.budget_parts`), never all rows in one process.
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from promokit.allocation.budget import (BudgetPlan, BudgetProblem, InfeasibleBudget, PaidOn, solve_budget,
                                       stack_populations)
from promokit.allocation.budget_parts import (BudgetPart, MapParts, inspect_part, level_totals, plan_frame,
                                              solve_budget_parts, table_form)
from promokit.allocation.defaults import AUTO, BUDGET_METHOD, DEFAULT_PREFIX, MERCHANT_PAID_ON
from promokit.allocation.result import Allocation, relative_gap
from promokit.allocation.sources import (Progress, Source, TableSource, check_unique_users, drop_stale_parts,
                                         in_parts, source, step)
from promokit.allocation.tables import LEVEL, BudgetTable, key_column, read_budget_table
from promokit.data.errors import DataError
from promokit.data.uris import local_dir

METHODS = ("lagrange", "lp", "milp")
PAID_ON = ("response", "request")


class _Run(NamedTuple):
    """The options that both paths (one table in memory, a table in parts) need."""

    ratio: float | None
    budget: float | None
    paid_on: dict  # population → what its incentive is paid on
    method: str
    seed: int
    layout: str
    columns: str
    key: str  # the column naming the requests in every score table and the plan
    map_parts: MapParts
    progress: Progress | None
    reading: str  # the text of the reading step

    @property
    def row_budget(self) -> float:
        """The budget row's right side: 0 for the ratio form (eq. 16 as Σ f·(r − B) ≤ 0), else the budget."""
        return 0.0 if self.ratio is not None else self.budget


class _Solved(NamedTuple):
    plan: pd.DataFrame | None  # None for a table in parts: its plan is in OUT/plan
    solution: BudgetPlan
    counts: dict  # population → requests
    levels: np.ndarray
    totals: list  # per-level totals (level_totals frames): one per part, or one for the whole table
    parts: int | None


def plan_budget(scores: TableSource, *, ratio: float | None = None, budget: float | None = None,
                merchants: TableSource | None = None, merchant_paid_on: PaidOn = MERCHANT_PAID_ON,
                method: str = BUDGET_METHOD, seed: int = 0, layout: str = AUTO, columns: str = DEFAULT_PREFIX,
                key: str | None = None, map_parts: MapParts = map, out: str | os.PathLike | None = None,
                progress: Progress | None = None) -> Allocation:
    """Choose one incentive level per request to maximise the expected responses under a budget (eqs. 11–20).

    ``scores`` is the customers' score table, long or wide (docs/allocation.md#score-tables): a DataFrame, a CSV
    or Parquet file, or a table in parts (a directory or glob of Parquet parts); ``merchants`` the merchants'
    one, on the same levels, sharing the budget. Give exactly one of ``ratio`` (B of eq. 16: expected incentive
    per expected response ≤ B) or ``budget`` (expected spend Σ r·f ≤ budget). ``merchant_paid_on`` is
    ``"response"`` (eq. 16) or ``"request"`` (eqs. 17 and 20 as printed). ``method``: ``"lagrange"`` (λ*, eqs.
    19–20, a certified gap; ``seed`` seeds the sample that brackets λ* on large inputs), ``"lp"`` (the HiGHS LP
    relaxation) or ``"milp"`` (the HiGHS integer optimum; tiny inputs). ``layout`` (``"auto"``, ``"long"``,
    ``"wide"``) and ``columns`` (the wide score columns' prefix) say how to read the tables, ``key`` names their
    requests' column (default ``user_id``, else a table's only ``*_id`` column).

    A table in parts is solved by ``lagrange``, every step one ``map_parts(fn, tasks)`` over the parts (builtin
    ``map``, or an executor's ordered map), and its plan written part by part as it is solved, to
    ``out/plan/part-NNNNN.parquet``: it needs ``out``, a folder every worker can write. With ``out``, the plan and
    the report are written there (:meth:`Allocation.write`). ``progress(text)`` is entered around each step.
    Raises :class:`DataError` naming the argument in backquotes (where the command line puts its option) or the
    table's file, column, rows and an example.
    """
    ratio, budget = _checked_budget(ratio, budget)
    if method not in METHODS:
        raise DataError(f"`method` must be one of {list(METHODS)}, got {method!r}")
    if merchant_paid_on not in PAID_ON:
        raise DataError(f"`merchant_paid_on` must be one of {list(PAID_ON)}, got {merchant_paid_on!r}")
    out = None if out is None else local_dir(out)  # the plan and its report: a local folder
    sources = {"customer": source(scores, "scores")}
    if merchants is not None:
        sources["merchant"] = source(merchants, "merchants")
    partitioned = in_parts(list(sources.values()), out)
    if partitioned and method != BUDGET_METHOD:
        raise DataError(f"`method` {method} needs the whole table in one file; a directory or glob of parts is "
                        f"solved with `method` {BUDGET_METHOD}")
    run = _Run(ratio, budget, {"customer": "response", "merchant": merchant_paid_on}, method, seed, layout, columns,
               key_column(sources["customer"].first, key), map_parts, progress,
               "reading " + " and ".join(s.name for s in sources.values()))
    solved = _in_parts(sources, out, run) if partitioned else _in_one(sources, run)
    allocation = _allocation(solved, run, sources["customer"], out if partitioned else None)
    if out is not None:
        with step(progress, f"writing {out}") if solved.plan is not None else nullcontext():
            allocation.write(out)
    return allocation


def _checked_budget(ratio, budget) -> tuple[float | None, float | None]:
    if (ratio is None) == (budget is None):
        raise DataError("give exactly one of `ratio` B (eq. 16) or `budget` B (absolute budget)")
    name, bound = ("ratio", ratio) if ratio is not None else ("budget", budget)
    try:
        bound = float(bound)
    except (TypeError, ValueError):
        raise DataError(f"`{name}` must be a finite number, got {bound!r}") from None
    if not math.isfinite(bound):
        raise DataError(f"`{name}` must be a finite number, got {bound}")
    return (bound, None) if name == "ratio" else (None, bound)


def _in_one(sources: dict[str, Source], run: _Run) -> _Solved:
    """Every table in memory, solved by ``run.method``."""
    with step(run.progress, run.reading):
        tables = {name: read_budget_table(s.first, run.layout, run.columns, run.key) for name, s in sources.items()}
        problem, forms = _problem(tables, run)
    n_rows, n_levels = problem.value.shape
    with step(run.progress, f"solving {n_rows:,} requests × {n_levels} levels with {run.method}"), \
            _naming(run, tables["customer"].levels):
        solution = _solve(problem, run.method, run.seed)
    plan = _plan_frame(tables, forms, solution.choice)
    counts = {name: len(table.user_ids) for name, table in tables.items()}
    return _Solved(plan, solution, counts, tables["customer"].levels, [level_totals(plan)], None)


def _in_parts(sources: dict[str, Source], out: Path, run: _Run) -> _Solved:
    """Every file a part (merchants after customers), checked, solved and written part by part (the maps of
    ``budget_parts``, each by ``run.map_parts``); plan part i is ``out/plan/part-{i:05d}.parquet``."""
    parts = [BudgetPart(str(path), run.ratio, run.paid_on[name], run.layout, run.columns, name, key=run.key)
             for name, s in sources.items() for path in s.files]
    with step(run.progress, f"{run.reading}: {len(parts)} parts"):
        infos = list(run.map_parts(inspect_part, parts))
        levels = _shared_levels(parts, infos)
        for s in sources.values():  # a customer and a merchant may share an id; a customer in two parts not
            check_unique_users(s.files, out, run.map_parts, run.key)
    with_value = any(info.has_value for info in infos)
    parts = [replace(part, rows=info.rows, levels=levels, out=str(out / "plan" / f"part-{i:05d}.parquet"),
                     with_population=len(sources) > 1, with_value=with_value)
             for i, (part, info) in enumerate(zip(parts, infos))]
    n_rows = sum(info.rows for info in infos)
    with step(run.progress, f"solving {n_rows:,} requests × {len(levels)} levels with {BUDGET_METHOD}, writing "
                            f"{out / 'plan'}"), _naming(run, levels):
        solved = solve_budget_parts(parts, run.row_budget, seed=run.seed, map_parts=run.map_parts)
    drop_stale_parts(out / "plan", {Path(part.out).name for part in parts})
    counts = {name: sum(info.rows for part, info in zip(parts, infos) if part.population == name) for name in sources}
    return _Solved(None, solved.plan, counts, np.asarray(levels), solved.outputs, len(parts))


def _shared_levels(parts: list, infos: list) -> tuple[float, ...]:
    """The levels every non-empty part shares (eq. 11: one level list R for all requests)."""
    filled = [(part, info) for part, info in zip(parts, infos) if info.rows]
    if not filled:
        raise DataError(f"the {len(parts)} parts ({parts[0].path}, …) hold no requests")
    first, levels = filled[0][0], filled[0][1].levels
    for part, info in filled[1:]:
        if info.levels != levels:
            raise DataError(f"{part.path}: levels {list(info.levels)} differ from {list(levels)} in {first.path}: "
                            f"one level list R serves every request (eq. 11)")
    return levels


@contextmanager
def _naming(run: _Run, levels):
    """Start the solver's errors (e.g. an infeasible budget) with the budget argument that caused them; a ratio
    below the lowest level is said as such (each level r pays r per expected response, so no plan's ratio is lower)."""
    try:
        yield
    except InfeasibleBudget as exc:
        lowest = float(np.min(levels))
        if run.ratio is None or run.ratio >= lowest:
            raise _named(run, exc) from None
        raise DataError(f"`ratio` {run.ratio:g} is below the lowest level {lowest:g}: even the lowest level costs "
                        f"{lowest:g} per expected response, so the ratio must be at least {lowest:g} (or the scores "
                        "need a level 0, no coupon)") from None
    except DataError as exc:
        raise _named(run, exc) from None


def _named(run: _Run, exc: DataError) -> DataError:
    return DataError(f"`ratio` {run.ratio:g} (eq. 16 as Σ f·(r − B) ≤ 0): {exc}" if run.ratio is not None
                     else f"`budget` {run.budget:g}: {exc}")


def _problem(tables: dict[str, BudgetTable], run: _Run):
    """The stacked problem of eqs. 11–16 and each table's :class:`~promokit.allocation.budget_parts.TableForm`
    (rows as in ``tables``)."""
    levels = tables["customer"].levels
    for population, table in tables.items():
        if not np.array_equal(table.levels, levels):
            raise DataError(f"{population} levels {table.levels.tolist()} differ from customer levels "
                            f"{levels.tolist()}: one level list R serves both populations (eq. 11)")
    forms = {population: table_form(table, run.ratio, run.paid_on[population]) for population, table in tables.items()}
    problems = [BudgetProblem(form.value, form.cost, 0.0) for form in forms.values()]
    return stack_populations(problems, run.row_budget), forms


def _solve(problem: BudgetProblem, method: str, seed: int) -> BudgetPlan:
    if method == "lagrange":
        return solve_budget(*problem, seed=seed)
    from promokit.allocation.budget_lp import solve_budget_lp  # SciPy: only for these methods

    return solve_budget_lp(*problem, integral=method == "milp")


def _plan_frame(tables: dict[str, BudgetTable], forms: dict, choice: np.ndarray) -> pd.DataFrame:
    """The plan rows of every table in order (see ``budget_parts.plan_frame``), with a population column when
    there are merchants and a value column when some table has one."""
    with_value = any(table.value is not None for table in tables.values())
    ends = np.cumsum([len(table.user_ids) for table in tables.values()])
    return pd.concat([plan_frame(table, forms[name], chosen, name if len(tables) > 1 else None, with_value)
                      for (name, table), chosen in zip(tables.items(), np.split(choice, ends[:-1]))],
                     ignore_index=True)


def _allocation(solved: _Solved, run: _Run, customers: Source, out: Path | None) -> Allocation:
    """The report's fields and per-level table from the plan and the per-level totals."""
    totals = pd.concat([frame for frame in solved.totals if len(frame)])
    counts, levels, plan = solved.counts, solved.levels, solved.solution
    keys = ["population", LEVEL] if "population" in totals else [LEVEL]
    every = pd.MultiIndex.from_product([list(counts), levels], names=keys) if len(keys) > 1 \
        else pd.Index(levels, name=LEVEL)
    per_level = totals.groupby(keys).sum().reindex(every, fill_value=0).reset_index()
    responses, spent = float(per_level["expected_responses"].sum()), float(per_level["expected_spend"].sum())
    ratio, budget = run.ratio, run.budget
    summary = {"problem": "budget", "form": "ratio" if ratio is not None else "absolute",
               "B": ratio if ratio is not None else budget,
               **{f"{population}s": count for population, count in counts.items()},
               **({"parts": solved.parts} if solved.parts is not None else {}),
               # the cost model λ* was solved under: `campaign build` serves merchants with the same one
               **({"merchant_paid_on": run.paid_on["merchant"]} if "merchant" in counts else {}),
               "levels": [float(level) for level in levels], "method": run.method,
               **({"lagrange_path": plan.lagrange_path} if plan.lagrange_path else {}),
               "seconds": round(plan.seconds, 3), "objective": plan.objective, "expected_responses": responses,
               "expected_spend": spent, "spend_per_response": spent / responses if responses else None,
               "budget_row": plan.budget, "budget_row_used": plan.spent, "slack": plan.slack, "lam": plan.lam,
               "upper_bound": plan.upper_bound, "gap": plan.gap,
               "relative_gap": relative_gap(plan.gap, plan.upper_bound)}
    title = "Budget plan" + ("" if isinstance(customers.table, pd.DataFrame) else f" for {customers.table.name}")
    return Allocation(title, solved.plan, summary, {"per_level": per_level}, plan,
                      out / "plan" if out is not None else None)

"""Quota plans from ETV tables (EOCA eqs. 1–5): what ``promokit allocate quota`` makes, as a function.

:func:`plan_quota` reads the users' ETV table and the funds' quotas, checks them and gives each user one fund with
the chosen method; a table in parts is read, checked, solved and written part by part by ``prices``
(:mod:`promokit.allocation.quota_parts`), never all rows in one process.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from promokit.allocation.defaults import AUTO, DEFAULT_PREFIX, QUOTA_METHOD, TOLERANCE
from promokit.allocation.quota import METHODS, solve_quota
from promokit.allocation.quota_core import QuotaPlan
from promokit.allocation.quota_parts import MapParts, QuotaPart, inspect_part, plan_frame, solve_quota_parts
from promokit.allocation.result import Allocation, relative_gap
from promokit.allocation.sources import (Progress, Source, TableSource, check_unique_users, drop_stale_parts,
                                         in_parts, source, step)
from promokit.allocation.tables import (FUND, MAX, MIN, QUOTA, RISK, SCORE, FundQuotas, key_column, read_quota_table,
                                        read_quotas)
from promokit.data.errors import DataError
from promokit.data.uris import local_dir


class _Run(NamedTuple):
    """The options that both paths (one table in memory, a table in parts) need."""

    scores: Source
    quotas: Source
    method: str
    tolerance: str  # the users' tolerance column
    seed: int
    layout: str
    columns: str
    key: str  # the column naming the users in the score table and the plan
    map_parts: MapParts
    progress: Progress | None


class _Solved(NamedTuple):
    plan: pd.DataFrame | None  # None for a table in parts: its plan is in OUT/plan
    solution: QuotaPlan  # its assignment None for parts
    funds: list
    bounds: FundQuotas
    assigned: np.ndarray  # (k,) users per fund
    etv: np.ndarray  # (k,) Σ ETV per fund
    n_users: int
    parts: int | None


def plan_quota(scores: TableSource, quotas: TableSource, *, method: str = QUOTA_METHOD,
               tolerance_column: str = TOLERANCE, seed: int = 0, layout: str = AUTO, columns: str = DEFAULT_PREFIX,
               key: str | None = None, map_parts: MapParts = map, out: str | os.PathLike | None = None,
               progress: Progress | None = None) -> Allocation:
    """Give each user one fund: exactly d_j users per fund (or min/max bounds), fund risk ≤ user tolerance (EOCA
    eqs. 1–5), maximising the users' expected transaction value.

    ``scores`` is the ETV table, long or wide (docs/allocation.md#score-tables), with the users' risk tolerance in
    ``tolerance_column`` when the risk rule applies: a DataFrame, a CSV or Parquet file, or a table in parts (a
    directory or glob of Parquet parts). ``quotas`` (a DataFrame or a path, read whole) has ``fund`` and ``quota``
    (exactly that many users) or ``min`` and/or ``max``, and ``risk`` with the risk rule. ``method``: ``"prices"``
    (certified prices from nested samples, exact repair at the margins, a dual bound; ``seed`` seeds the
    samples), ``"ha"`` (EOCA Algorithm 1), ``"manual"`` (fund-by-fund priority) or ``"exact"`` (min-cost flow).
    ``layout`` (``"auto"``, ``"long"``, ``"wide"``) and ``columns`` (the wide score columns' prefix) say how to
    read ``scores``, ``key`` names its users' column (default ``user_id``, else its only ``*_id`` column).

    A table in parts is solved by ``prices``, every step one ``map_parts(fn, tasks)`` over the parts (builtin
    ``map``, or an executor's ordered map), and its plan written part by part as it is solved, to
    ``out/plan/part-NNNNN.parquet``: it needs ``out``, a folder every worker can write (large samples are solved
    in parts there too). With ``out``, the plan and the report are written there (:meth:`Allocation.write`).
    ``progress(text)`` is entered around each step. Raises :class:`DataError` naming the argument in backquotes
    (where the command line puts its option) or the table's file, column, rows and an example.
    """
    if method not in METHODS:
        raise DataError(f"`method` must be one of {list(METHODS)}, got {method!r}")
    out = None if out is None else local_dir(out)  # the plan and its report: a local folder
    scores_source, quotas_source = source(scores, "scores"), source(quotas, "quotas")
    partitioned = in_parts([scores_source], out)
    if partitioned and method != QUOTA_METHOD:
        raise DataError(f"`method` {method} needs the whole table in one file; a directory or glob of parts is "
                        f"solved with `method` {QUOTA_METHOD}")
    run = _Run(scores_source, quotas_source, method, tolerance_column, seed, layout, columns,
               key_column(scores_source.first, key), map_parts, progress)
    solved = _in_parts(out, run) if partitioned else _in_one(run)
    allocation = _allocation(solved, run, out if partitioned else None)
    if out is not None:
        with step(progress, f"writing {out}") if solved.plan is not None else nullcontext():
            allocation.write(out)
    return allocation


def _in_one(run: _Run) -> _Solved:
    """The table in memory, solved by ``run.method``."""
    with step(run.progress, f"reading {run.scores.name} and {run.quotas.name}"):
        table = read_quota_table(run.scores.first, run.layout, run.columns, run.tolerance, run.key)
        bounds = read_quotas(run.quotas.table, table.funds)
        _check_risk_rule(table.tolerance is not None, bounds.risk is not None, run)
    n_users, k = len(table.user_ids), len(table.funds)
    options = {"seed": run.seed} if run.method == QUOTA_METHOD else {}
    with step(run.progress, f"solving {n_users:,} users × {k} funds with {run.method}"):
        solution = solve_quota(table.etv, tolerance=table.tolerance, risk=bounds.risk, method=run.method,
                               funds=table.funds, **_counts(bounds), **options)
    plan = plan_frame(table, solution.assignment, bounds.risk, run.tolerance)
    assigned = np.bincount(solution.assignment, minlength=k)
    etv = np.bincount(solution.assignment, weights=plan[SCORE].to_numpy(), minlength=k)
    return _Solved(plan, solution, table.funds, bounds, assigned, etv, n_users, None)


def _in_parts(out: Path, run: _Run) -> _Solved:
    """Every file a part, checked, solved by ``prices`` over the parts and written part by part (the maps of
    ``quota_parts``, each by ``run.map_parts``); plan part i is ``out/plan/part-{i:05d}.parquet``."""
    files = run.scores.files
    parts = [QuotaPart(str(path), run.layout, run.columns, run.tolerance, key=run.key) for path in files]
    with step(run.progress, f"reading {run.scores.name} and {run.quotas.name}: {len(parts)} parts"):
        infos = list(run.map_parts(inspect_part, parts))
        check_unique_users(files, out, run.map_parts, run.key)
        funds, has_tolerance = _shared_funds(parts, infos)
        bounds = read_quotas(run.quotas.table, funds)
        _check_risk_rule(has_tolerance, bounds.risk is not None, run)
    parts = [replace(part, rows=info.rows, funds=tuple(funds), out=str(out / "plan" / f"part-{i:05d}.parquet"))
             for i, (part, info) in enumerate(zip(parts, infos))]
    n_users = sum(info.rows for info in infos)
    with step(run.progress, f"solving {n_users:,} users × {len(funds)} funds with {QUOTA_METHOD}, writing "
                            f"{out / 'plan'}"):
        # a large sample is solved in temporary parts beside the plan, where every worker can read them
        solved = solve_quota_parts(parts, risk=bounds.risk, map_parts=run.map_parts, seed=run.seed, funds=funds,
                                   scratch=out, **_counts(bounds))
    drop_stale_parts(out / "plan", {Path(part.out).name for part in parts})
    return _Solved(None, solved.plan, funds, bounds, solved.counts, solved.etv, n_users, len(parts))


def _shared_funds(parts: list, infos: list) -> tuple[list, bool]:
    """The funds of the first non-empty part (the plan's order, as in the concatenated file) and whether the parts
    have tolerances; every non-empty part must have the same funds (in any order) and all or none tolerances."""
    filled = [(part, info) for part, info in zip(parts, infos) if info.rows]
    if not filled:
        raise DataError(f"the {len(parts)} parts ({parts[0].path}, …) hold no users")
    (first, info), rest = filled[0], filled[1:]
    for part, other in rest:
        if sorted(other.funds) != sorted(info.funds):
            raise DataError(f"{part.path}: funds {list(other.funds)} differ from {list(info.funds)} in {first.path}: "
                            f"every part needs a score for every fund")
        if other.has_tolerance != info.has_tolerance:
            with_it, without = (part, first) if other.has_tolerance else (first, part)
            raise DataError(f"{without.path}: no {first.tolerance!r} column, but {with_it.path} has one: the risk "
                            f"rule (eq. 5) needs it in every part or in none")
    return list(info.funds), info.has_tolerance


def _check_risk_rule(has_tolerance: bool, has_risk: bool, run: _Run) -> None:
    if has_tolerance != has_risk:
        raise DataError(f"the risk rule (eq. 5) needs a {run.tolerance!r} column in {run.scores.name} and a {RISK!r} "
                        f"column in {run.quotas.name}; only the {'risk' if has_risk else 'tolerance'} is there")


def _counts(bounds: FundQuotas) -> dict:
    """``solve_quota``'s quotas or bounds from the quotas table."""
    if bounds.quotas is not None:
        return {"quotas": bounds.quotas}
    return {"min_users": bounds.min_users, "max_users": bounds.max_users}


def _allocation(solved: _Solved, run: _Run, out: Path | None) -> Allocation:
    """The report's fields and per-fund table."""
    plan, bounds, n = solved.solution, solved.bounds, solved.n_users
    counts = ({QUOTA: bounds.quotas} if bounds.quotas is not None else  # a missing max shows as N
              {MIN: bounds.min_users, MAX: np.minimum(bounds.max_users, n).astype(np.int64)})
    per_fund = pd.DataFrame({FUND: solved.funds, **counts, "assigned": solved.assigned, "etv": solved.etv})
    if bounds.risk is not None:
        per_fund.insert(1, RISK, bounds.risk)
    summary = {"problem": "quota", "users": n, "funds": len(solved.funds), "risk_rule": bounds.risk is not None,
               "quotas": "exact" if bounds.quotas is not None else "bounds",
               **({"parts": solved.parts} if solved.parts is not None else {}),
               "method": plan.method, "seconds": round(plan.seconds, 3), "objective": plan.objective,
               "upper_bound": plan.upper_bound, "gap": plan.gap,
               "relative_gap": relative_gap(plan.gap, plan.upper_bound)}
    scores = run.scores.table
    title = "Quota plan" + ("" if isinstance(scores, pd.DataFrame) else f" for {scores.name}")
    return Allocation(title, solved.plan, summary, {"per_fund": per_fund}, plan,
                      out / "plan" if out is not None else None, diagnostics=plan.diagnostics)

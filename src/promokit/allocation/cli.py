"""``promokit allocate …``: budget and quota plans from score tables, and synthetic instances to try them on.

Each plan command writes ``OUT/plan.parquet`` (one row per user) and ``OUT/report.md`` / ``OUT/report.json``
(the summary). NumPy, pandas and the solvers load inside the commands so that ``promokit --help`` stays light.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NamedTuple, Optional

import typer

from promokit.cli_support import TABLE_HELP, AddressOpt, EngineOpt, WorkersOpt, get_console, user_errors

app = typer.Typer(help="Decide who gets which promotion: budgets over incentive levels, quotas over funds.",
                  no_args_is_help=True)
synth_app = typer.Typer(help="Write a synthetic instance as tables to try the allocate commands on.",
                        no_args_is_help=True)
app.add_typer(synth_app, name="synth")

OutOpt = Annotated[Path, typer.Option("--out", help="Folder for plan.parquet, report.md and report.json.")]
LayoutOpt = Annotated[str, typer.Option("--layout", help="auto | long | wide.")]
ColumnsOpt = Annotated[str, typer.Option("--columns", help="Prefix of the score columns in wide form.")]
SeedOpt = Annotated[int, typer.Option("--seed")]
FormatOpt = Annotated[str, typer.Option("--format", help="parquet | csv.")]
SynthLayoutOpt = Annotated[str, typer.Option("--layout", help="wide | long.")]
KeyOpt = Annotated[Optional[str], typer.Option("--key", help="Column naming the users (requests) in the score tables, kept in the plan; default user_id, else the table's only *_id column (customer_id …).")]
BUDGET_METHODS = ("lagrange", "lp", "milp")
BudgetScoresOpt = Annotated[Path, typer.Option("--scores", help=f"Score table, long or wide: {TABLE_HELP} (quote a glob); parts are solved part by part (plan in OUT/plan/part-NNNNN.parquet).")]
QuotaScoresOpt = Annotated[Path, typer.Option("--scores", help=f"ETV table, long or wide: {TABLE_HELP} (quote a glob); parts are solved by ours over the parts (plan in OUT/plan/part-NNNNN.parquet).")]


@app.command()
def budget(scores: BudgetScoresOpt, out: OutOpt,
           ratio: Annotated[Optional[float], typer.Option("--ratio", help="B of eq. 16: expected incentive per expected response ≤ B.")] = None,
           total: Annotated[Optional[float], typer.Option("--total", help="Absolute budget: expected spend Σ r·f ≤ TOTAL.")] = None,
           merchants: Annotated[Optional[Path], typer.Option("--merchants", help="Merchant requests' score table (eqs. 11–20), same levels; shares the budget. With parts: one more part (or a directory or glob of them).")] = None,
           merchant_paid_on: Annotated[str, typer.Option("--merchant-paid-on", help="response (eq. 16) | request (eqs. 17, 20 as printed: r paid on every merchant request).")] = "response",
           method: Annotated[str, typer.Option("--method", help="lagrange (λ*, eqs. 19–20, certified gap; any input) | lp (HiGHS LP relaxation; minutes at 10⁵ requests) | milp (HiGHS integer optimum; tiny inputs).")] = "lagrange",
           seed: Annotated[int, typer.Option("--seed", help="Seed of the sample lagrange brackets λ* with on large inputs.")] = 0,
           layout: LayoutOpt = "auto", columns: ColumnsOpt = "score_", key: KeyOpt = None,
           engine: EngineOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None):
    """Choose one incentive level per request to maximise expected responses under a budget (eqs. 11–20)."""
    with user_errors():
        from promokit.data import DataError

        if (ratio is None) == (total is None):
            raise DataError("give exactly one of --ratio B (eq. 16) or --total B (absolute budget)")
        bound = ratio if ratio is not None else total
        if not math.isfinite(bound):
            raise DataError(f"--{'ratio' if ratio is not None else 'total'} must be a finite number, got {bound}")
        if method not in BUDGET_METHODS:
            raise DataError(f"--method must be one of {list(BUDGET_METHODS)}, got {method!r}")
        sources = {"customer": _budget_sources(scores)}
        if merchants is not None:
            sources["merchant"] = _budget_sources(merchants)
        in_parts = any(partitioned for _, partitioned in sources.values())
        _check_parts_options(in_parts, method, "lagrange", engine)
        from promokit.allocation.tables import key_column
        from promokit.scale.engine import make_engine

        run = _BudgetRun(ratio, total, {"customer": "response", "merchant": merchant_paid_on}, method, seed, layout,
                         columns, get_console(), f"reading {scores}" + (f" and {merchants}" if merchants else ""),
                         make_engine(engine, address, workers) if in_parts else None,
                         key_column(sources["customer"][0][0], key))
        solve = _budget_in_parts if in_parts else _budget_in_one
        # totals: per-level frames, one per part (their count is reported) or one for the whole table
        plan, counts, levels, totals = solve({name: files for name, (files, _) in sources.items()}, out, run)
        summary, per_level = _budget_summary(counts, levels, totals, plan, run, len(totals) if in_parts else None)
        _report(f"Budget plan for {scores.name}", summary, "Per level", per_level).write(out)
        run.console.print(_headline(summary))


@app.command()
def quota(scores: QuotaScoresOpt, out: OutOpt,
          quotas: Annotated[Path, typer.Option("--quotas", help=f"Table with fund, quota | min | max[, risk] ({TABLE_HELP}): exactly `quota` users per fund, or at least `min` and/or at most `max`.")],
          method: Annotated[str, typer.Option("--method", help="ours (prices + exact repair, certified bound; any input) | ha (EOCA Algorithm 1) | manual (fund-by-fund priority) | exact (min-cost flow).")] = "ours",
          tolerance: Annotated[str, typer.Option("--tolerance-column", help="Column of the users' risk tolerance t_i.")] = "tolerance",
          seed: Annotated[int, typer.Option("--seed", help="Seed of the samples ours draws its starting prices from.")] = 0,
          layout: LayoutOpt = "auto", columns: ColumnsOpt = "score_", key: KeyOpt = None,
          engine: EngineOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None):
    """Give each user one fund: exactly d_j users per fund (or min/max bounds), fund risk ≤ user tolerance (EOCA eqs. 1–5)."""
    with user_errors():
        from promokit.allocation.quota import METHODS
        from promokit.allocation.tables import key_column
        from promokit.data import DataError
        from promokit.scale.parts import is_partitioned, list_parts

        if method not in METHODS:
            raise DataError(f"--method must be one of {list(METHODS)}, got {method!r}")
        files, in_parts = list_parts(scores), is_partitioned(scores)
        _check_parts_options(in_parts, method, "ours", engine)
        from promokit.scale.engine import make_engine

        run = _QuotaRun(scores, quotas, method, tolerance, seed, layout, columns, get_console(),
                        make_engine(engine, address, workers) if in_parts else None, key_column(files[0], key))
        solved = _quota_in_parts(files, out, run) if in_parts else _quota_in_one(files[0], out, run)
        summary, per_fund = _quota_summary(solved, run)
        _report(f"Quota plan for {scores.name}", summary, "Per fund", per_fund,
                diagnostics=solved.plan.diagnostics).write(out)
        run.console.print(_headline(summary))


@synth_app.command("budget")
def synth_budget(out: Annotated[Path, typer.Option("--out", help="Folder for scores.parquet (+ merchants.parquet).")],
                 users: Annotated[int, typer.Option("--users", help="Number of (customer) requests N.")] = 10_000,
                 merchants: Annotated[int, typer.Option("--merchants", help="Also write this many merchant requests.")] = 0,
                 levels: Annotated[Optional[str], typer.Option("--levels", help="Comma-separated incentive levels (default: 10 levels 0.5…10).")] = None,
                 seed: SeedOpt = 0, layout: SynthLayoutOpt = "wide", fmt: FormatOpt = "parquet"):
    """Hazard responses f_ij = 1 − exp(−(a_i + b_i·r_j)) of N requests to K incentive levels."""
    with user_errors():
        import numpy as np

        from promokit.allocation.synthetic import DEFAULT_LEVELS, make_budget_instance
        from promokit.allocation.tables import LEVEL, SCORE, score_frame
        from promokit.data import write_table

        grid = _floats("--levels", levels) if levels else DEFAULT_LEVELS
        suffix = _suffix(fmt)
        written = []
        # merchants draw from their own stream so the customers do not depend on --merchants
        streams = (("scores", users, seed), ("merchants", merchants, np.random.SeedSequence([seed, 1])))
        for name, count, stream in streams:
            if name == "scores" or count > 0:
                instance = make_budget_instance(count, grid, seed=stream)
                frame = score_frame(np.arange(count), instance.levels, {SCORE: instance.scores}, LEVEL, layout)
                written.append(write_table(frame, out / f"{name}.{suffix}"))
        get_console().print(f"{users + max(merchants, 0):,} requests × {len(grid)} levels written to "
                         + ", ".join(map(str, written)))


@synth_app.command("quota")
def synth_quota(out: Annotated[Path, typer.Option("--out", help="Folder for scores.parquet and quotas.csv.")],
                users: Annotated[int, typer.Option("--users", help="Number of users N.")] = 10_000,
                types: Annotated[int, typer.Option("--types", help="Number of fund types k.")] = 8,
                seed: SeedOpt = 0, layout: SynthLayoutOpt = "wide", fmt: FormatOpt = "parquet"):
    """Latent-preference ETVs of N users for k funds, risk tolerances 1–5 and feasible quotas."""
    with user_errors():
        import numpy as np
        import pandas as pd

        from promokit.allocation.synthetic import make_quota_instance
        from promokit.allocation.tables import FUND, QUOTA, RISK, SCORE, TOLERANCE, score_frame
        from promokit.data import write_table

        suffix = _suffix(fmt)
        instance = make_quota_instance(users, types, seed)
        frame = score_frame(np.arange(users), instance.funds, {SCORE: instance.etv}, FUND, layout,
                            per_user={TOLERANCE: instance.tolerance})
        scores_path = write_table(frame, out / f"scores.{suffix}")
        quotas = pd.DataFrame({FUND: instance.funds, QUOTA: instance.quotas, RISK: instance.risk})
        quotas_path = write_table(quotas, out / "quotas.csv")
        get_console().print(f"{users:,} users × {types} funds written to {scores_path} and {quotas_path}")


# ------------------------------------------------------------------------------------------------ budget


class _BudgetRun(NamedTuple):
    """The options of one ``allocate budget`` run that both of its paths (one file, parts) need."""

    ratio: float | None
    total: float | None
    paid_on: dict
    method: str
    seed: int
    layout: str
    columns: str
    console: object
    reading: str
    engine: object  # promokit.scale's engine for a table in parts (its map runs every step), else None
    key: str  # the column naming the requests in every score table and the plan

    @property
    def budget(self) -> float:
        return 0.0 if self.ratio is not None else self.total


def _check_parts_options(in_parts: bool, method: str, parts_method: str, engine: str) -> None:
    """A table in parts is solved by ``parts_method`` only, and only a table in parts goes to an engine."""
    from promokit.data import DataError

    if in_parts and method != parts_method:
        raise DataError(f"--method {method} needs the whole table in one file; a directory or glob of parts is "
                        f"solved with --method {parts_method}")
    if engine != "local" and not in_parts:
        raise DataError(f"--engine {engine} runs a table in parts: give --scores a directory or glob of Parquet parts")


def _budget_sources(path: Path) -> tuple[list[Path], bool]:
    """A score table's files and whether it is partitioned: a directory (its Parquet parts) or a glob."""
    from promokit.scale.parts import is_partitioned, list_parts

    return list_parts(path), is_partitioned(path)


def _budget_in_one(sources: dict, out: Path, run: _BudgetRun):
    """One file per population, solved in memory by ``--method``; writes ``OUT/plan.parquet``."""
    from promokit.allocation.budget_parts import level_totals
    from promokit.allocation.tables import read_budget_table
    from promokit.data import write_parquet

    with _stage(run.console, run.reading):
        tables = {name: read_budget_table(files[0], run.layout, run.columns, run.key)
                  for name, files in sources.items()}
        problem, forms = _budget_problem(tables, run.ratio, run.total, run.paid_on)
    n_rows, n_levels = problem.value.shape
    with _stage(run.console, f"solving {n_rows:,} requests × {n_levels} levels with {run.method}"), _budget_naming(run):
        plan = _solve_budget(problem, run.method, run.seed)
    with _stage(run.console, f"writing {out}"):
        frame = _budget_plan_frame(tables, forms, plan.choice)
        write_parquet(frame, out / "plan.parquet")
    counts = {name: len(table.user_ids) for name, table in tables.items()}
    return plan, counts, tables["customer"].levels, [level_totals(frame)]


def _budget_in_parts(sources: dict, out: Path, run: _BudgetRun):
    """Every file a part (merchants after customers), checked, solved and written part by part (the maps of
    ``budget_parts``, each on ``run.engine``); plan part i is ``OUT/plan/part-{i:05d}.parquet``."""
    from dataclasses import replace

    import numpy as np

    from promokit.allocation.budget_parts import BudgetPart, inspect_part, solve_budget_parts

    parts = [BudgetPart(str(path), run.ratio, run.paid_on[name], run.layout, run.columns, name, key=run.key)
             for name, files in sources.items() for path in files]
    with _stage(run.console, f"{run.reading}: {len(parts)} parts"):
        infos = run.engine.map(inspect_part, parts, label="reading parts")
        levels = _budget_levels(parts, infos)
        for files in sources.values():  # a customer and a merchant may share an id; a customer in two parts not
            _unique_users(files, out, run.engine, run.key)
    with_value = any(info.has_value for info in infos)
    parts = [replace(part, rows=info.rows, levels=levels, out=str(out / "plan" / f"part-{i:05d}.parquet"),
                     with_population=len(sources) > 1, with_value=with_value)
             for i, (part, info) in enumerate(zip(parts, infos))]
    n_rows = sum(info.rows for info in infos)
    with _stage(run.console, f"solving {n_rows:,} requests × {len(levels)} levels with lagrange, writing "
                             f"{out / 'plan'}"), _budget_naming(run):
        solved = solve_budget_parts(parts, run.budget, seed=run.seed, map_parts=run.engine.map)
    _drop_stale_parts(out / "plan", {Path(part.out).name for part in parts})
    counts = {name: sum(info.rows for part, info in zip(parts, infos) if part.population == name) for name in sources}
    return solved.plan, counts, np.asarray(levels), solved.outputs


def _unique_users(files: list, out: Path, engine, key: str) -> None:
    """Each user (``key``) in one part: the parts' own checks cannot see a user two parts hold (hashed in buckets on
    the engine, in a scratch folder inside OUT, where every worker can read it)."""
    from promokit.scale.keys import check_unique_keys

    check_unique_keys(files, key, out / ".user-keys", map_parts=engine.map)


def _budget_levels(parts: list, infos: list) -> tuple[float, ...]:
    """The levels every non-empty part shares (eq. 11: one level list R for all requests)."""
    from promokit.data import DataError

    filled = [(part, info) for part, info in zip(parts, infos) if info.rows]
    if not filled:
        raise DataError(f"the {len(parts)} parts ({parts[0].path}, …) hold no requests")
    first, levels = filled[0][0], filled[0][1].levels
    for part, info in filled[1:]:
        if info.levels != levels:
            raise DataError(f"{part.path}: levels {list(info.levels)} differ from {list(levels)} in {first.path}: "
                            f"one level list R serves every request (eq. 11)")
    return levels


def _drop_stale_parts(folder: Path, written: set) -> None:
    """Remove plan parts an earlier run with more input parts left in ``folder``."""
    for stale in folder.glob("part-*.parquet"):
        if stale.name not in written:
            stale.unlink()


@contextmanager
def _budget_naming(run: _BudgetRun):
    """Start the solver's errors (e.g. an infeasible budget) with the budget option that caused them."""
    from promokit.data import DataError

    try:
        yield
    except DataError as exc:
        raise DataError(f"--ratio {run.ratio:g} (eq. 16 as Σ f·(r − B) ≤ 0): {exc}" if run.ratio is not None
                        else f"--total {run.total:g}: {exc}") from None


def _budget_problem(tables: dict, ratio: float | None, total: float | None, paid_on: dict):
    """The stacked problem of eqs. 11–16 and each table's :class:`~promokit.allocation.budget_parts.TableForm`
    (rows as in ``tables``)."""
    import numpy as np

    from promokit.allocation.budget import BudgetProblem, stack_populations
    from promokit.allocation.budget_parts import table_form
    from promokit.data import DataError

    levels = tables["customer"].levels
    for population, table in tables.items():
        if not np.array_equal(table.levels, levels):
            raise DataError(f"{population} levels {table.levels.tolist()} differ from customer levels "
                            f"{levels.tolist()}: one level list R serves both populations (eq. 11)")
    forms = {population: table_form(table, ratio, paid_on[population]) for population, table in tables.items()}
    problems = [BudgetProblem(form.value, form.cost, 0.0) for form in forms.values()]
    return stack_populations(problems, 0.0 if ratio is not None else total), forms


def _solve_budget(problem, method: str, seed: int):
    if method == "lagrange":
        from promokit.allocation.budget import solve_budget

        return solve_budget(*problem, seed=seed)
    from promokit.allocation.budget_lp import solve_budget_lp

    return solve_budget_lp(*problem, integral=method == "milp")


def _budget_plan_frame(tables: dict, forms: dict, choice):
    """The plan rows of every table in order (see ``budget_parts.plan_frame``), with a population column when
    there are merchants and a value column when some table has one."""
    import numpy as np
    import pandas as pd

    from promokit.allocation.budget_parts import plan_frame

    with_value = any(table.value is not None for table in tables.values())
    ends = np.cumsum([len(table.user_ids) for table in tables.values()])
    return pd.concat([plan_frame(table, forms[name], chosen, name if len(tables) > 1 else None, with_value)
                      for (name, table), chosen in zip(tables.items(), np.split(choice, ends[:-1]))],
                     ignore_index=True)


def _budget_summary(counts: dict, levels, totals: list, plan, run: _BudgetRun, parts: int | None):
    """The report's fields and per-level table from the plan and per-level totals (``level_totals`` frames)."""
    import pandas as pd

    from promokit.allocation.tables import LEVEL

    totals = pd.concat([frame for frame in totals if len(frame)])
    keys = ["population", LEVEL] if "population" in totals else [LEVEL]
    every = pd.MultiIndex.from_product([list(counts), levels], names=keys) if len(keys) > 1 \
        else pd.Index(levels, name=LEVEL)
    per_level = totals.groupby(keys).sum().reindex(every, fill_value=0).reset_index()
    responses, spent = float(per_level["expected_responses"].sum()), float(per_level["expected_spend"].sum())
    ratio, total = run.ratio, run.total
    summary = {"problem": "budget", "form": "ratio" if ratio is not None else "absolute",
               "B": ratio if ratio is not None else total,
               **{f"{population}s": count for population, count in counts.items()},
               **({"parts": parts} if parts is not None else {}),
               # the cost model λ* was solved under: `campaign build` serves merchants with the same one
               **({"merchant_paid_on": run.paid_on["merchant"]} if "merchant" in counts else {}),
               "levels": [float(level) for level in levels], "method": run.method,
               **({"lagrange_path": plan.lagrange_path} if plan.lagrange_path else {}),
               "seconds": round(plan.seconds, 3), "objective": plan.objective, "expected_responses": responses,
               "expected_spend": spent, "spend_per_response": spent / responses if responses else None,
               "budget_row": plan.budget, "budget_row_used": plan.spent, "slack": plan.slack, "lam": plan.lam,
               "upper_bound": plan.upper_bound, "gap": plan.gap, "relative_gap": _relative(plan.gap, plan.upper_bound)}
    return summary, per_level


# ------------------------------------------------------------------------------------------------- quota


class _QuotaRun(NamedTuple):
    """The options of one ``allocate quota`` run that both of its paths (one file, parts) need."""

    scores: Path
    quotas: Path
    method: str
    tolerance: str
    seed: int
    layout: str
    columns: str
    console: object
    engine: object  # promokit.scale's engine for a table in parts (its map runs every step), else None
    key: str  # the column naming the users in the score table and the plan


class _QuotaSolved(NamedTuple):
    plan: object        # QuotaPlan (its assignment None for parts)
    funds: list
    bounds: object      # FundQuotas
    assigned: object    # (k,) users per fund
    etv: object         # (k,) Σ ETV per fund
    n_users: int
    parts: int | None   # the number of parts, None for one file


def _quota_in_one(path: Path, out: Path, run: _QuotaRun) -> _QuotaSolved:
    """One file, solved in memory by ``--method``; writes ``OUT/plan.parquet``."""
    import numpy as np

    from promokit.allocation.quota import solve_quota
    from promokit.allocation.quota_parts import plan_frame
    from promokit.allocation.tables import SCORE, read_quota_table, read_quotas
    from promokit.data import write_parquet

    with _stage(run.console, f"reading {run.scores} and {run.quotas}"):
        table = read_quota_table(path, run.layout, run.columns, run.tolerance, run.key)
        funds = read_quotas(run.quotas, table.funds)
        _check_risk_rule(table.tolerance is not None, funds.risk is not None, run)
    n_users, k = len(table.user_ids), len(table.funds)
    options = {"seed": run.seed} if run.method == "ours" else {}
    with _stage(run.console, f"solving {n_users:,} users × {k} funds with {run.method}"):
        plan = solve_quota(table.etv, tolerance=table.tolerance, risk=funds.risk, method=run.method,
                           funds=table.funds, **_quota_counts(funds), **options)
    with _stage(run.console, f"writing {out}"):
        frame = plan_frame(table, plan.assignment, funds.risk, run.tolerance)
        write_parquet(frame, out / "plan.parquet")
    assigned = np.bincount(plan.assignment, minlength=k)
    etv = np.bincount(plan.assignment, weights=frame[SCORE].to_numpy(), minlength=k)
    return _QuotaSolved(plan, table.funds, funds, assigned, etv, n_users, None)


def _quota_in_parts(files: list, out: Path, run: _QuotaRun) -> _QuotaSolved:
    """Every file a part, checked, solved by ``ours`` over the parts and written part by part (the maps of
    ``quota_parts``, each on ``run.engine``); plan part i is ``OUT/plan/part-{i:05d}.parquet``."""
    from dataclasses import replace

    from promokit.allocation.quota_parts import QuotaPart, inspect_part, solve_quota_parts
    from promokit.allocation.tables import read_quotas

    parts = [QuotaPart(str(path), run.layout, run.columns, run.tolerance, key=run.key) for path in files]
    with _stage(run.console, f"reading {run.scores} and {run.quotas}: {len(parts)} parts"):
        infos = run.engine.map(inspect_part, parts, label="reading parts")
        _unique_users(files, out, run.engine, run.key)
        funds, has_tolerance = _quota_part_funds(parts, infos)
        bounds = read_quotas(run.quotas, funds)
        _check_risk_rule(has_tolerance, bounds.risk is not None, run)
    parts = [replace(part, rows=info.rows, funds=tuple(funds), out=str(out / "plan" / f"part-{i:05d}.parquet"))
             for i, (part, info) in enumerate(zip(parts, infos))]
    n_users = sum(info.rows for info in infos)
    with _stage(run.console, f"solving {n_users:,} users × {len(funds)} funds with ours, writing {out / 'plan'}"):
        # a large sample is solved in temporary parts beside the plan, where every worker can read them
        solved = solve_quota_parts(parts, risk=bounds.risk, map_parts=run.engine.map, seed=run.seed, funds=funds,
                                   scratch=out, **_quota_counts(bounds))
    _drop_stale_parts(out / "plan", {Path(part.out).name for part in parts})
    return _QuotaSolved(solved.plan, funds, bounds, solved.counts, solved.etv, n_users, len(parts))


def _quota_part_funds(parts: list, infos: list) -> tuple[list, bool]:
    """The funds of the first non-empty part (the plan's order, as in the concatenated file) and whether the parts
    have tolerances; every non-empty part must have the same funds (in any order) and all or none tolerances."""
    from promokit.data import DataError

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


def _check_risk_rule(has_tolerance: bool, has_risk: bool, run: _QuotaRun) -> None:
    from promokit.allocation.tables import RISK
    from promokit.data import DataError

    if has_tolerance != has_risk:
        raise DataError(f"the risk rule (eq. 5) needs a {run.tolerance!r} column in {run.scores} and a {RISK!r} column "
                        f"in {run.quotas}; only the {'risk' if has_risk else 'tolerance'} is there")


def _quota_counts(funds) -> dict:
    """``solve_quota``'s quotas or bounds from the quotas table."""
    if funds.quotas is not None:
        return {"quotas": funds.quotas}
    return {"min_users": funds.min_users, "max_users": funds.max_users}


def _quota_summary(solved: _QuotaSolved, run: _QuotaRun):
    """The report's fields and per-fund table."""
    import numpy as np
    import pandas as pd

    from promokit.allocation.tables import FUND, MAX, MIN, QUOTA, RISK

    plan, funds, n = solved.plan, solved.bounds, solved.n_users
    bounds = ({QUOTA: funds.quotas} if funds.quotas is not None else  # a missing max shows as N
              {MIN: funds.min_users, MAX: np.minimum(funds.max_users, n).astype(np.int64)})
    per_fund = pd.DataFrame({FUND: solved.funds, **bounds, "assigned": solved.assigned, "etv": solved.etv})
    if funds.risk is not None:
        per_fund.insert(1, RISK, funds.risk)
    summary = {"problem": "quota", "users": n, "funds": len(solved.funds), "risk_rule": funds.risk is not None,
               "quotas": "exact" if funds.quotas is not None else "bounds",
               **({"parts": solved.parts} if solved.parts is not None else {}),
               "method": plan.method, "seconds": round(plan.seconds, 3), "objective": plan.objective,
               "upper_bound": plan.upper_bound, "gap": plan.gap, "relative_gap": _relative(plan.gap, plan.upper_bound)}
    return summary, per_fund


# ---------------------------------------------------------------------------------------------- shared


@contextmanager
def _stage(console, text: str):
    """A spinner while a step runs, then one line with its duration."""
    start = time.perf_counter()
    with console.status(f"{text}…"):
        yield
    console.print(f"{text} ({time.perf_counter() - start:.1f} s)")



def _report(title: str, summary: dict, heading: str, table, **extra):
    """Summary fields (JSON: all; Markdown: those that are set) and one table, as a promokit Report."""
    import pandas as pd

    from promokit.report import Report

    report = Report(title, data={**summary, heading.lower().replace(" ", "_"): table.to_dict(orient="list"), **extra})
    shown = {k: v for k, v in summary.items() if v is not None}
    report.add("Summary", pd.DataFrame({"field": list(shown), "value": [_cell(v) for v in shown.values()]}))
    return report.add(heading, table)


def _headline(summary: dict) -> str:
    parts = [f"objective {summary['objective']:,.4f}"]
    if "slack" in summary:
        parts += [f"slack {summary['slack']:,.4f}", f"λ* {summary['lam']:.6g}"]
    if summary.get("upper_bound") is not None:
        parts.append(f"upper bound {summary['upper_bound']:,.4f} (relative gap {summary['relative_gap']:.2e})")
    return f"{summary['method']}: " + ", ".join(parts) + f" in {summary['seconds']:.2f} s"


def _relative(gap: float | None, bound: float | None) -> float | None:
    if gap is None or bound is None:
        return None
    return gap / abs(bound) if bound else 0.0


def _cell(value) -> str:
    return f"{value:.8g}" if isinstance(value, float) else str(value)


def _floats(option: str, text: str) -> tuple[float, ...]:
    from promokit.data import DataError

    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise DataError(f"{option} must be comma-separated numbers, got {text!r}") from None


def _suffix(fmt: str) -> str:
    from promokit.data import DataError

    if fmt not in ("parquet", "csv"):
        raise DataError(f"--format must be 'parquet' or 'csv', got {fmt!r}")
    return fmt

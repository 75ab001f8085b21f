"""``promokit allocate …``: budget and quota plans from score tables, and synthetic instances to try them on.

Each plan command writes ``OUT/plan.parquet`` (one row per user) and ``OUT/report.md`` / ``OUT/report.json``
(the summary). NumPy, pandas and the solvers load inside the commands so that ``promokit --help`` stays light.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli_support import get_console, user_errors

app = typer.Typer(help="Decide who gets which promotion: budgets over incentive levels, quotas over funds.",
                  no_args_is_help=True)
synth_app = typer.Typer(help="Write a synthetic instance as tables to try the allocate commands on.",
                        no_args_is_help=True)
app.add_typer(synth_app, name="synth")

ScoresOpt = Annotated[Path, typer.Option("--scores", help="Score table, CSV or Parquet, long or wide.")]
OutOpt = Annotated[Path, typer.Option("--out", help="Folder for plan.parquet, report.md and report.json.")]
LayoutOpt = Annotated[str, typer.Option("--layout", help="auto | long | wide.")]
ColumnsOpt = Annotated[str, typer.Option("--columns", help="Prefix of the score columns in wide form.")]
SeedOpt = Annotated[int, typer.Option("--seed")]
FormatOpt = Annotated[str, typer.Option("--format", help="parquet | csv.")]
SynthLayoutOpt = Annotated[str, typer.Option("--layout", help="wide | long.")]
BUDGET_METHODS = ("lagrange", "lp", "milp")


@app.command()
def budget(scores: ScoresOpt, out: OutOpt,
           ratio: Annotated[Optional[float], typer.Option("--ratio", help="B of eq. 16: expected incentive per expected response ≤ B.")] = None,
           total: Annotated[Optional[float], typer.Option("--total", help="Absolute budget: expected spend Σ r·f ≤ TOTAL.")] = None,
           merchants: Annotated[Optional[Path], typer.Option("--merchants", help="Merchant requests' score table (eqs. 11–20), same levels; shares the budget.")] = None,
           merchant_paid_on: Annotated[str, typer.Option("--merchant-paid-on", help="response (eq. 16) | request (eqs. 17, 20 as printed: r paid on every merchant request).")] = "response",
           method: Annotated[str, typer.Option("--method", help="lagrange (λ*, eqs. 19–20, certified gap) | lp (HiGHS LP relaxation; minutes at 10⁵ requests) | milp (HiGHS integer optimum; tiny inputs).")] = "lagrange",
           seed: Annotated[int, typer.Option("--seed", help="Seed of the sample lagrange brackets λ* with on large inputs.")] = 0,
           layout: LayoutOpt = "auto", columns: ColumnsOpt = "score_"):
    """Choose one incentive level per request to maximise expected responses under a budget (eqs. 11–20)."""
    with user_errors():
        from promokit.allocation.tables import read_budget_table
        from promokit.data import DataError, write_parquet

        if (ratio is None) == (total is None):
            raise DataError("give exactly one of --ratio B (eq. 16) or --total B (absolute budget)")
        bound = ratio if ratio is not None else total
        if not math.isfinite(bound):
            raise DataError(f"--{'ratio' if ratio is not None else 'total'} must be a finite number, got {bound}")
        if method not in BUDGET_METHODS:
            raise DataError(f"--method must be one of {list(BUDGET_METHODS)}, got {method!r}")
        console = get_console()
        with _stage(console, f"reading {scores}" + (f" and {merchants}" if merchants else "")):
            tables = {"customer": read_budget_table(scores, layout, columns)}
            if merchants is not None:
                tables["merchant"] = read_budget_table(merchants, layout, columns)
            paid_on = {"customer": "response", "merchant": merchant_paid_on}
            problem, spend = _budget_problem(tables, ratio, total, paid_on)
        with _stage(console, f"solving {len(spend):,} requests × {spend.shape[1]} levels with {method}"):
            try:
                plan = _solve_budget(problem, method, seed)
            except DataError as exc:
                raise DataError(f"--ratio {ratio:g} (eq. 16 as Σ f·(r − B) ≤ 0): {exc}" if ratio is not None
                                else f"--total {total:g}: {exc}") from None
        with _stage(console, f"writing {out}"):
            frame = _budget_plan_frame(tables, problem, spend, plan.choice)
            write_parquet(frame, out / "plan.parquet")
            summary, per_level = _budget_summary(tables, frame, plan, ratio, total, merchant_paid_on)
            _report(f"Budget plan for {scores.name}", summary, "Per level", per_level).write(out)
        console.print(_headline(summary))


@app.command()
def quota(scores: ScoresOpt, out: OutOpt,
          quotas: Annotated[Path, typer.Option("--quotas", help="Table with fund, quota[, risk]: exactly `quota` users per fund.")],
          method: Annotated[str, typer.Option("--method", help="ours (prices + exact repair, certified bound) | ha (EOCA Algorithm 1) | manual (fund-by-fund priority) | exact (min-cost flow).")] = "ours",
          tolerance: Annotated[str, typer.Option("--tolerance-column", help="Column of the users' risk tolerance t_i.")] = "tolerance",
          layout: LayoutOpt = "auto", columns: ColumnsOpt = "score_"):
    """Give each user one fund: exactly d_j users per fund, fund risk ≤ user tolerance (EOCA eqs. 1–5)."""
    with user_errors():
        import numpy as np
        import pandas as pd

        from promokit.allocation.quota import METHODS, solve_quota
        from promokit.allocation.tables import FUND, RISK, SCORE, USER, read_quota_table, read_quotas
        from promokit.data import DataError, write_parquet

        if method not in METHODS:
            raise DataError(f"--method must be one of {list(METHODS)}, got {method!r}")
        console = get_console()
        with _stage(console, f"reading {scores} and {quotas}"):
            table = read_quota_table(scores, layout, columns, tolerance)
            funds = read_quotas(quotas, table.funds)
            if (table.tolerance is None) != (funds.risk is None):
                raise DataError(f"the risk rule (eq. 5) needs a {tolerance!r} column in {scores} and a {RISK!r} column "
                                f"in {quotas}; only the {'tolerance' if funds.risk is None else 'risk'} is there")
        with _stage(console, f"solving {len(table.user_ids):,} users × {len(table.funds)} funds with {method}"):
            plan = solve_quota(table.etv, funds.quotas, table.tolerance, funds.risk, method=method)
        with _stage(console, f"writing {out}"):
            chosen = plan.assignment
            frame = pd.DataFrame({USER: table.user_ids, FUND: np.asarray(table.funds, dtype=object)[chosen],
                                  SCORE: np.take_along_axis(table.etv, chosen[:, None], axis=1)[:, 0]})
            if funds.risk is not None:
                frame[tolerance], frame[RISK] = table.tolerance, funds.risk[chosen]
            write_parquet(frame, out / "plan.parquet")
            k = len(table.funds)
            per_fund = pd.DataFrame({FUND: table.funds, "quota": funds.quotas,
                                     "assigned": np.bincount(chosen, minlength=k),
                                     "etv": np.bincount(chosen, weights=frame[SCORE].to_numpy(), minlength=k)})
            if funds.risk is not None:
                per_fund.insert(1, RISK, funds.risk)
            summary = {"problem": "quota", "users": len(frame), "funds": k, "risk_rule": funds.risk is not None,
                       "method": plan.method, "seconds": round(plan.seconds, 3), "objective": plan.objective,
                       "upper_bound": plan.upper_bound, "gap": plan.gap,
                       "relative_gap": _relative(plan.gap, plan.upper_bound)}
            _report(f"Quota plan for {scores.name}", summary, "Per fund", per_fund,
                    diagnostics=plan.diagnostics).write(out)
        console.print(_headline(summary))


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


def _budget_problem(tables: dict, ratio: float | None, total: float | None, paid_on: dict):
    """The stacked problem of eqs. 11–16 and each request's expected spend per level (rows as in ``tables``).

    A table's ``cost`` column is the expected spend and replaces r·f in either form; its ``value`` column
    replaces f as what is maximised.
    """
    import numpy as np

    from promokit.allocation.budget import absolute_form, ratio_form, stack_populations
    from promokit.data import DataError

    levels = tables["customer"].levels
    problems, spends = [], []
    for population, table in tables.items():
        if not np.array_equal(table.levels, levels):
            raise DataError(f"{population} levels {table.levels.tolist()} differ from customer levels "
                            f"{levels.tolist()}: one level list R serves both populations (eq. 11)")
        spend = absolute_form(table.scores, table.levels, 0.0, paid_on[population]).cost
        form = (ratio_form(table.scores, table.levels, ratio, paid_on[population]) if ratio is not None
                else absolute_form(table.scores, table.levels, total, paid_on[population]))
        if table.cost is not None:
            form, spend = form._replace(cost=form.cost - spend + table.cost), table.cost
        if table.value is not None:
            form = form._replace(value=table.value)
        problems.append(form)
        spends.append(np.broadcast_to(spend, table.scores.shape))
    return stack_populations(problems, None if ratio is not None else total), np.concatenate(spends)


def _solve_budget(problem, method: str, seed: int):
    if method == "lagrange":
        from promokit.allocation.budget import solve_budget

        return solve_budget(*problem, seed=seed)
    from promokit.allocation.budget_lp import solve_budget_lp

    return solve_budget_lp(*problem, integral=method == "milp")


def _budget_plan_frame(tables: dict, problem, spend, choice):
    """``[population,] user_id, level, score, [value,] cost`` per request; cost is the chosen level's expected spend."""
    import numpy as np
    import pandas as pd

    from promokit.allocation.tables import LEVEL, SCORE, USER, VALUE

    rows = np.arange(len(choice))
    frame = pd.DataFrame({USER: np.concatenate([t.user_ids for t in tables.values()]),
                          LEVEL: tables["customer"].levels[choice],
                          SCORE: np.concatenate([t.scores for t in tables.values()])[rows, choice]})
    if any(t.value is not None for t in tables.values()):
        frame[VALUE] = problem.value[rows, choice]
    frame["cost"] = spend[rows, choice]
    if len(tables) > 1:
        frame.insert(0, "population", np.repeat(list(tables), [len(t.user_ids) for t in tables.values()]))
    return frame


def _budget_summary(tables: dict, frame, plan, ratio: float | None, total: float | None, merchant_paid_on: str):
    import pandas as pd

    from promokit.allocation.tables import LEVEL, SCORE

    responses, spent = float(frame[SCORE].sum()), float(frame["cost"].sum())
    summary = {"problem": "budget", "form": "ratio" if ratio is not None else "absolute",
               "B": ratio if ratio is not None else total,
               **{f"{population}s": len(table.user_ids) for population, table in tables.items()},
               # the cost model λ* was solved under: `campaign build` serves merchants with the same one
               **({"merchant_paid_on": merchant_paid_on} if "merchant" in tables else {}),
               "levels": tables["customer"].levels.tolist(), "method": plan.method, "seconds": round(plan.seconds, 3),
               "objective": plan.objective, "expected_responses": responses, "expected_spend": spent,
               "spend_per_response": spent / responses if responses else None,
               "budget_row": plan.budget, "budget_row_used": plan.spent, "slack": plan.slack, "lam": plan.lam,
               "upper_bound": plan.upper_bound, "gap": plan.gap, "relative_gap": _relative(plan.gap, plan.upper_bound)}
    keys = ["population", LEVEL] if "population" in frame else [LEVEL]
    every = pd.MultiIndex.from_product([list(tables), tables["customer"].levels], names=keys) if len(keys) > 1 \
        else pd.Index(tables["customer"].levels, name=LEVEL)
    per_level = (frame.groupby(keys).agg(requests=(SCORE, "size"), expected_responses=(SCORE, "sum"),
                                         expected_spend=("cost", "sum"))
                 .reindex(every, fill_value=0).reset_index())
    return summary, per_level


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

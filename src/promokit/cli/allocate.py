"""``promokit allocate …``: budget and quota plans from score tables, and synthetic instances to try them on.

The plan commands are :func:`~promokit.allocation.budget_plan.plan_budget` and
:func:`~promokit.allocation.quota_plan.plan_quota` with ``out`` (``OUT/plan.parquet``, or ``OUT/plan/`` for a table
in parts, and ``OUT/report.md`` / ``OUT/report.json``). NumPy, pandas and the solvers load inside the commands so
that ``promokit --help`` stays light.
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.allocation.defaults import AUTO, BUDGET_METHOD, DEFAULT_PREFIX, MERCHANT_PAID_ON, QUOTA_METHOD, TOLERANCE
from promokit.cli.options.common import TABLE_HELP, AddressOpt, EngineOpt, ExecutorOpt, WorkersOpt
from promokit.cli.support import executor_from_options, executor_option, flags_in_errors, user_errors
from promokit.console import get_console

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
BudgetScoresOpt = Annotated[Path, typer.Option("--scores", help=f"Score table, long or wide: {TABLE_HELP} (quote a glob); parts are solved part by part (plan in OUT/plan/part-NNNNN.parquet).")]
QuotaScoresOpt = Annotated[Path, typer.Option("--scores", help=f"ETV table, long or wide: {TABLE_HELP} (quote a glob); parts are solved by prices over the parts (plan in OUT/plan/part-NNNNN.parquet).")]
#: old names of quota methods, still accepted with a warning
RENAMED_QUOTA_METHODS = {"ours": "prices"}
#: the option that gives each argument of plan_budget / plan_quota, named instead of the argument in their errors
FLAGS = {"scores": "--scores", "merchants": "--merchants", "quotas": "--quotas", "out": "--out", "ratio": "--ratio",
         "budget": "--total", "merchant_paid_on": "--merchant-paid-on", "method": "--method", "key": "--key",
         "tolerance_column": "--tolerance-column"}


@app.command()
def budget(scores: BudgetScoresOpt, out: OutOpt,
           ratio: Annotated[Optional[float], typer.Option("--ratio", help="B of eq. 16: expected incentive per expected response ≤ B.")] = None,
           total: Annotated[Optional[float], typer.Option("--total", help="Absolute budget: expected spend Σ r·f ≤ TOTAL.")] = None,
           merchants: Annotated[Optional[Path], typer.Option("--merchants", help="Merchant requests' score table (eqs. 11–20), same levels; shares the budget. With parts: one more part (or a directory or glob of them).")] = None,
           merchant_paid_on: Annotated[str, typer.Option("--merchant-paid-on", help="response (eq. 16) | request (eqs. 17, 20 as printed: r paid on every merchant request).")] = MERCHANT_PAID_ON,
           method: Annotated[str, typer.Option("--method", help="lagrange (λ*, eqs. 19–20, certified gap; any input) | lp (HiGHS LP relaxation; minutes at 10⁵ requests) | milp (HiGHS integer optimum; tiny inputs).")] = BUDGET_METHOD,
           seed: Annotated[int, typer.Option("--seed", help="Seed of the sample lagrange brackets λ* with on large inputs.")] = 0,
           layout: LayoutOpt = AUTO, columns: ColumnsOpt = DEFAULT_PREFIX, key: KeyOpt = None,
           executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
           engine: EngineOpt = None):
    """Choose one incentive level per request to maximise expected responses under a budget (eqs. 11–20)."""
    with user_errors(out=out), flags_in_errors(FLAGS):
        from promokit.allocation.budget_plan import plan_budget

        map_parts = _map_parts(executor_option(executor, engine), address, workers, scores, merchants)
        allocation = plan_budget(scores, ratio=ratio, budget=total, merchants=merchants,
                                 merchant_paid_on=merchant_paid_on, method=method, seed=seed, layout=layout,
                                 columns=columns, key=key, map_parts=map_parts, out=out, progress=_stage)
        get_console().print(allocation.headline())


@app.command()
def quota(scores: QuotaScoresOpt, out: OutOpt,
          quotas: Annotated[Path, typer.Option("--quotas", help=f"Table with fund, quota | min | max[, risk] ({TABLE_HELP}): exactly `quota` users per fund, or at least `min` and/or at most `max`.")],
          method: Annotated[str, typer.Option("--method", help="prices (sampled prices + exact repair, certified bound; any input) | ha (EOCA Algorithm 1) | manual (fund-by-fund priority) | exact (min-cost flow). ours: the deprecated name of prices.")] = QUOTA_METHOD,
          tolerance: Annotated[str, typer.Option("--tolerance-column", help="Column of the users' risk tolerance t_i.")] = TOLERANCE,
          seed: Annotated[int, typer.Option("--seed", help="Seed of the samples the prices method draws its starting prices from.")] = 0,
          layout: LayoutOpt = AUTO, columns: ColumnsOpt = DEFAULT_PREFIX, key: KeyOpt = None,
          executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
          engine: EngineOpt = None):
    """Give each user one fund: exactly d_j users per fund (or min/max bounds), fund risk ≤ user tolerance (EOCA eqs. 1–5)."""
    with user_errors(out=out), flags_in_errors(FLAGS):
        from promokit.allocation.quota_plan import plan_quota

        if method in RENAMED_QUOTA_METHODS:
            warnings.warn(f"--method {method} is deprecated: the same method is now --method "
                          f"{RENAMED_QUOTA_METHODS[method]}", FutureWarning, stacklevel=1)
            method = RENAMED_QUOTA_METHODS[method]
        map_parts = _map_parts(executor_option(executor, engine), address, workers, scores)
        allocation = plan_quota(scores, quotas, method=method, tolerance_column=tolerance, seed=seed, layout=layout,
                                columns=columns, key=key, map_parts=map_parts, out=out, progress=_stage)
        get_console().print(allocation.headline())


@synth_app.command("budget")
def synth_budget(out: Annotated[Path, typer.Option("--out", help="Folder for scores.parquet (+ merchants.parquet).")],
                 users: Annotated[int, typer.Option("--users", help="Number of (customer) requests N.")] = 10_000,
                 merchants: Annotated[int, typer.Option("--merchants", help="Also write this many merchant requests.")] = 0,
                 levels: Annotated[Optional[str], typer.Option("--levels", help="Comma-separated incentive levels (default: 10 levels 0.5…10).")] = None,
                 seed: SeedOpt = 0, layout: SynthLayoutOpt = "wide", fmt: FormatOpt = "parquet"):
    """Hazard responses f_ij = 1 − exp(−(a_i + b_i·r_j)) of N requests to K incentive levels."""
    with user_errors():
        import numpy as np

        from promokit.allocation.tables import LEVEL, SCORE, score_frame
        from promokit.data import write_table
        from promokit.experiments.allocation.instances import DEFAULT_LEVELS, make_budget_instance

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

        from promokit.allocation.tables import FUND, QUOTA, RISK, SCORE, TOLERANCE, score_frame
        from promokit.data import write_table
        from promokit.experiments.allocation.instances import make_quota_instance

        suffix = _suffix(fmt)
        instance = make_quota_instance(users, types, seed)
        frame = score_frame(np.arange(users), instance.funds, {SCORE: instance.etv}, FUND, layout,
                            per_user={TOLERANCE: instance.tolerance})
        scores_path = write_table(frame, out / f"scores.{suffix}")
        quotas = pd.DataFrame({FUND: instance.funds, QUOTA: instance.quotas, RISK: instance.risk})
        quotas_path = write_table(quotas, out / "quotas.csv")
        get_console().print(f"{users:,} users × {types} funds written to {scores_path} and {quotas_path}")


# ---------------------------------------------------------------------------------------------- shared


def _map_parts(executor: str, address: str | None, workers: int | None, *tables: Path | None):
    """The executor's map for tables in parts; builtin ``map`` (and only the local executor) for tables in one
    file."""
    from promokit.data import DataError
    from promokit.data.parts import is_partitioned

    if any(table is not None and is_partitioned(table) for table in tables):
        return executor_from_options(executor, address, workers).map
    if executor != "local":
        raise DataError(f"--executor {executor} runs a table in parts: give --scores a directory or glob of Parquet parts")
    return map


@contextmanager
def _stage(text: str):
    """A spinner while a step runs, then one line with its duration."""
    console = get_console()
    start = time.perf_counter()
    with console.status(f"{text}…"):
        yield
    console.print(f"{text} ({time.perf_counter() - start:.1f} s)")


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

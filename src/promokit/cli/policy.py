"""``promokit policy …``: judge plans and score tables on a randomized log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli.conventions import label_options
from promokit.cli.options.common import TABLE_HELP
from promokit.cli.support import flags_in_errors, user_errors
from promokit.console import get_console
from promokit.policy.defaults import BOOTSTRAP, INTERVAL, MISSING, REFERENCE

app = typer.Typer(help="Judge decisions on a randomized log: off-policy estimates of plans, uplift curves.",
                  no_args_is_help=True)

LogOpt = Annotated[Path, typer.Option("--log", help=f"The randomized log ({TABLE_HELP}): an incentive log (customer_id or merchant_id, level, redeemed[, paid]) or a value log (user_id, fund, convert, amount), one row per subject.")]

#: the flag of each argument the library's errors name
FLAGS = {**{name: f"--{name.replace('_', '-')}" for name in (
    "propensity", "design", "estimate_propensity", "reference", "clip", "bootstrap", "interval", "missing",
    "outcome", "outcomes", "control")}, "labels": "--label"}


@app.command()
def evaluate(log: LogOpt,
             plan: Annotated[list[Path], typer.Option("--plan", help="A plan: allocate budget's or allocate quota's --out folder (or its plan table), or a stochastic plan (id, action, probability). Repeat for several.")],
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and estimates.png.")],
             scores: Annotated[Optional[Path], typer.Option("--scores", help="The model's score table (wide score_<action> or long) for DM, DR and SNDR: response probabilities (incentive) or ETV (value).")] = None,
             propensity: Annotated[Optional[str], typer.Option("--propensity", help="The log's column holding each logged action's logging probability (default: a 'propensity' column, if there is one).")] = None,
             design: Annotated[Optional[str], typer.Option("--design", help="uniform (every logged action alike) | bucket:COL (uniform over the actions logged within each value of COL).")] = None,
             estimate_propensity: Annotated[Optional[str], typer.Option("--estimate-propensity", help="Comma-separated numeric columns: estimate the logging policy by a multinomial logistic regression of the action on them.")] = None,
             reference: Annotated[str, typer.Option("--reference", help="What each plan is compared with: logging (the log's own policy) | uniform | constant:ACTION | another plan (a path, as --plan).")] = REFERENCE,
             clip: Annotated[Optional[float], typer.Option("--clip", help="Cap the importance weights at this value (less variance, some bias).")] = None,
             bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap replicates for the 95 % intervals.")] = BOOTSTRAP,
             interval: Annotated[str, typer.Option("--interval", help="percentile | bca (bias-corrected and accelerated: better for skewed, heavy-tailed outcomes such as transaction values).")] = INTERVAL,
             seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.")] = 0,
             population: Annotated[Optional[int], typer.Option("--population", help="Subjects a plan's totals count (default: the subjects each plan decides).")] = None,
             missing: Annotated[str, typer.Option("--missing", help="A log subject a plan does not decide: error | drop (judge on the subjects every plan decides).")] = MISSING,
             model: Annotated[Optional[Path], typer.Option("--model", help="The model directory behind the plans: warns when the log's subjects are ones it was trained on.")] = None,
             label: Annotated[Optional[list[str]], typer.Option("--label", help="ROLE=COLUMN: the log's own column for a contract column (user_id, fund, convert, amount; customer_id, level, redeemed, paid; propensity), e.g. --label fund=segment. Repeat for several.")] = None,
             outcomes: Annotated[Optional[str], typer.Option("--outcomes", help="Comma-separated further columns of the log (numbers ≥ 0, e.g. visit) judged beside its own outcomes, by IPS and SNIPS.")] = None):
    """Estimate each plan's responses and spend (or conversions and transaction value) per subject and in total on
    a randomized log, by DM, IPS, SNIPS, DR and SNDR with paired bootstrap intervals, against a reference plan."""
    with user_errors(out=out), flags_in_errors(FLAGS):
        from promokit.policy import evaluate as evaluate_plans
        from promokit.policy.log import ROLES

        columns = [c.strip() for c in estimate_propensity.split(",") if c.strip()] if estimate_propensity else None
        evaluation = evaluate_plans(log, plan, scores=scores, propensity=propensity, design=design,
                                    estimate_propensity=columns, reference=reference, clip=clip, bootstrap=bootstrap,
                                    interval=interval, seed=seed, population=population, missing=missing, model=model,
                                    labels=label_options(label, ROLES),
                                    outcomes=[c.strip() for c in (outcomes or "").split(",") if c.strip()])
        evaluation.write(out)
        console = get_console()
        for line in evaluation.headlines():
            console.print(line)
        for warning in evaluation.warnings:
            console.print(f"warning: {warning}")
        for note in evaluation.notes:
            console.print(f"note: {note}")
        console.print(f"report written to {out}/report.md")


@app.command()
def uplift(log: LogOpt,
           scores: Annotated[Path, typer.Option("--scores", help=f"The score table ({TABLE_HELP}) with a row per subject of the log: wide user_id, score_<level> … (incentive predict's, for an incentive log) or user_id, score_<fund> … (value predict's ETV, for a value log); or long.")],
           out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and uplift_curves.png.")],
           outcome: Annotated[Optional[str], typer.Option("--outcome", help="redeemed (default) or spend for an incentive log; convert (default) or amount for a value log.")] = None,
           control: Annotated[Optional[str], typer.Option("--control", help="The action every other is compared with (default: an incentive log's lowest level; a value log's fund must be named).")] = None):
    """For each action against the control: the uplift and Qini curves of the score table's predicted uplift
    score(action) − score(control) on the log's rows that took one of the two, with the AUUC and the Qini coefficient
    (scikit-uplift's definitions). The log must give the two actions at random, with the same odds to everyone."""
    with user_errors(out=out), flags_in_errors(FLAGS):
        from promokit.console import print_table
        from promokit.data import read_table
        from promokit.policy.judging import read_scores
        from promokit.policy.log import read_log
        from promokit.policy.uplift import uplift_by_action, uplift_report

        the_log = read_log(read_table(log), str(log), design="uniform")
        values, actions = read_scores(scores, the_log)
        result = uplift_by_action(the_log, values, actions, control, outcome)
        uplift_report(result, the_log, str(scores)).write(out)
        print_table(f"{result.outcome}: each action against {result.control}", result.table.set_index("action"))
        get_console().print(f"report written to {out}/report.md")

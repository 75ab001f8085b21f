"""``promokit policy …``: judge plans and score tables on a randomized log."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli_support import TABLE_HELP, get_console, user_errors

app = typer.Typer(help="Judge decisions on a randomized log: off-policy estimates of plans, uplift curves.",
                  no_args_is_help=True)

LogOpt = Annotated[Path, typer.Option("--log", help=f"The randomized log ({TABLE_HELP}): an incentive log (customer_id or merchant_id, level, redeemed[, paid]) or a value log (user_id, fund, convert, amount), one row per subject.")]


@app.command()
def evaluate(log: LogOpt,
             plan: Annotated[list[Path], typer.Option("--plan", help="A plan: allocate budget's or allocate quota's --out folder (or its plan table), or a stochastic plan (id, action, probability). Repeat for several.")],
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and estimates.png.")],
             scores: Annotated[Optional[Path], typer.Option("--scores", help="The model's score table (wide score_<action> or long) for DM, DR and SNDR: response probabilities (incentive) or ETV (value).")] = None,
             propensity: Annotated[Optional[str], typer.Option("--propensity", help="The log's column holding each logged action's logging probability (default: a 'propensity' column, if there is one).")] = None,
             design: Annotated[Optional[str], typer.Option("--design", help="uniform (every logged action alike) | bucket:COL (uniform over the actions logged within each value of COL).")] = None,
             estimate_propensity: Annotated[Optional[str], typer.Option("--estimate-propensity", help="Comma-separated numeric columns: estimate the logging policy by a multinomial logistic regression of the action on them.")] = None,
             reference: Annotated[str, typer.Option("--reference", help="What each plan is compared with: logging (the log's own policy) | uniform | constant:ACTION | another plan (a path, as --plan).")] = "logging",
             clip: Annotated[Optional[float], typer.Option("--clip", help="Cap the importance weights at this value (less variance, some bias).")] = None,
             bootstrap: Annotated[int, typer.Option("--bootstrap", help="Bootstrap replicates for the 95 % intervals.")] = 500,
             interval: Annotated[str, typer.Option("--interval", help="percentile | bca (bias-corrected and accelerated: better for skewed, heavy-tailed outcomes such as transaction values).")] = "bca",
             seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.")] = 0,
             population: Annotated[Optional[int], typer.Option("--population", help="Subjects a plan's totals count (default: the subjects each plan decides).")] = None,
             missing: Annotated[str, typer.Option("--missing", help="A log subject a plan does not decide: error | drop (judge on the subjects every plan decides).")] = "error",
             model: Annotated[Optional[Path], typer.Option("--model", help="The model directory behind the plans: warns when the log's subjects are ones it was trained on.")] = None):
    """Estimate each plan's responses and spend (or conversions and transaction value) per subject and in total on
    a randomized log, by DM, IPS, SNIPS, DR and SNDR with paired bootstrap intervals, against a reference plan."""
    with user_errors():
        from promokit.data import DataError, read_table
        from promokit.policy.log import read_log
        from promokit.policy.plans import reference_plan

        if missing not in ("error", "drop"):
            raise DataError(f"--missing must be error or drop, got {missing!r}")
        columns = [c.strip() for c in estimate_propensity.split(",") if c.strip()] if estimate_propensity else None
        the_log = read_log(read_table(log), str(log), propensity, design, columns)
        against_plan = reference not in ("logging", "uniform") and not reference.startswith("constant:")
        plans, the_log = _plans([*plan, *([Path(reference)] if against_plan else [])], the_log, missing)
        the_reference = plans.pop() if against_plan else reference_plan(reference, the_log)
        predicted = _predicted(scores, the_log, plans, the_reference) if scores else None
        if model is not None:
            the_log.notes.extend(_training_overlap(model, the_log))
        from promokit.policy.evaluate import evaluate as judge
        from promokit.policy.report import build_report, headlines

        evaluation = judge(the_log, plans, the_reference, predicted, clip, bootstrap, seed, population, interval)
        setup = {"log": f"{log}: a {the_log.kind} log of {len(the_log):,} rows, {len(set(the_log.ids)):,} "
                        f"{the_log.key} values, actions {the_log.actions.tolist()}",
                 "propensity": propensity or design or (f"estimated from {columns}" if columns else "the log's "
                                                        "'propensity' column"),
                 "scores": str(scores) if scores else "none (IPS and SNIPS only)", "reference": reference,
                 "bootstrap": f"{bootstrap} replicates, seed {seed}, {interval} intervals",
                 "clip": clip if clip is not None else "none"}
        build_report(evaluation, setup).write(out)
        console = get_console()
        for line in headlines(evaluation):
            console.print(line)
        for warning in [w for r in evaluation.plans for w in r.warnings]:
            console.print(f"warning: {warning}")
        for note in evaluation.notes:
            console.print(f"note: {note}")
        console.print(f"report written to {out}/report.md")


def _plans(paths: list[Path], log, missing: str):
    """Every plan over the log's rows; with ``missing="drop"`` the log keeps the subjects every plan decides."""
    import numpy as np

    from promokit.data import DataError
    from promokit.policy.plans import read_plan

    read = [read_plan(path, log) for path in paths]
    decided = np.logical_and.reduce([mask for _, mask in read])
    if not decided.all():
        first = next((path, mask) for path, (_, mask) in zip(paths, read) if not mask.all())
        example = log.ids[~first[1]][0]
        if missing == "error":
            raise DataError(f"{first[0]}: {int((~first[1]).sum())} of the log's {len(log):,} subjects have no decision "
                            f"in this plan, e.g. {log.key} {example!r}; judge on the subjects every plan decides "
                            "with --missing drop")
        if not decided.any():
            raise DataError(f"no subject of the log is decided by every plan (e.g. {log.key} {example!r} is not)")
        log = log.rows(decided)
        log.notes.append(f"{int((~decided).sum()):,} log subjects that some plan does not decide were left out "
                         f"(--missing drop): the estimates are for the other {int(decided.sum()):,}")
        for p, _ in read:
            p.probabilities = p.probabilities[decided]
    names = set()
    plans = []
    for p, _ in read:
        base, k = p.name, 2
        while p.name in names or p.name in ("logging", "uniform") or p.name.startswith("constant:"):
            p.name, k = f"{base}-{k}", k + 1
        names.add(p.name)
        plans.append(p)
    return plans, log


def _predicted(scores: Path, log, plans, reference):
    from promokit.policy.evaluate import predicted_outcomes, read_scores, union_of_actions

    values, actions = read_scores(scores, log)
    return predicted_outcomes(log, values, actions, union_of_actions(log, [reference, *plans]))


def _training_overlap(model: Path, log) -> list[str]:
    from promokit.data.ids import share_in
    from promokit.training import read_training_ids

    hashes = read_training_ids(model)
    if hashes is None:
        return [f"{model} does not record the subjects it was trained on (trained before it did): if they are "
                "the log's, the estimates are optimistic"]
    share = share_in(log.ids, hashes)
    if share == 0:
        return []
    return [f"{share:.1%} of the log's subjects are ones {model} was trained on: a plan judged on its own training "
            "subjects looks better than it will on new ones; judge it on a log of held-out subjects"]


@app.command()
def uplift(log: LogOpt,
           scores: Annotated[Path, typer.Option("--scores", help=f"The score table ({TABLE_HELP}) with a row per subject of the log: wide user_id, score_<level> … (incentive predict's, for an incentive log) or user_id, score_<fund> … (value predict's ETV, for a value log); or long.")],
           out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and uplift_curves.png.")],
           outcome: Annotated[Optional[str], typer.Option("--outcome", help="redeemed (default) or spend for an incentive log; convert (default) or amount for a value log.")] = None,
           control: Annotated[Optional[str], typer.Option("--control", help="The action every other is compared with (default: an incentive log's lowest level; a value log's fund must be named).")] = None):
    """For each action against the control: the uplift and Qini curves of the score table's predicted uplift
    score(action) − score(control) on the log's rows that took one of the two, with the AUUC and the Qini coefficient
    (scikit-uplift's definitions). The log must give the two actions at random, with the same odds to everyone."""
    with user_errors():
        from promokit.cli_support import print_table
        from promokit.data import read_table
        from promokit.policy.log import read_log
        from promokit.policy.evaluate import read_scores
        from promokit.policy.uplift import uplift_by_action, uplift_report

        the_log = read_log(read_table(log), str(log), design="uniform")
        values, actions = read_scores(scores, the_log)
        result = uplift_by_action(the_log, values, actions, control, outcome)
        uplift_report(result, the_log, str(scores)).write(out)
        print_table(f"{result.outcome}: each action against {result.control}", result.table.set_index("action"))
        get_console().print(f"report written to {out}/report.md")

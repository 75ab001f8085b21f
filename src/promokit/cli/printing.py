"""What the commands print: a trained model's lines (its features' types, its training, what it held out, its
refit), and the reports of evaluate, bench, tune and compare written by the library, then shown on screen. Imports
nothing heavy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from promokit.cli.support import checkpoint_dir, local_out, seeds_option
from promokit.console import get_console, print_table


def write_metrics_report(out, title: str, model_name: str, metrics: dict, table_title: str,
                         tables: dict | None = None) -> None:
    """An ``evaluate`` command's output: ``report.md`` / ``report.json`` in ``out``
    (:func:`promokit.report.metrics_report`: the metrics and the evaluation's ``tables``, calibration by decile …),
    and the metrics on screen."""
    from promokit.report import metrics_report, metrics_table

    out = local_out(out)
    metrics_report(title, model_name, metrics, tables).write(out)
    print_table(table_title, metrics_table(metrics).set_index("metric"))


def write_bench_report(out, title: str, results, oracle: dict | None, setup: str, summary,
                       tables: dict | None = None, floor: tuple[str, tuple[str, ...]] | None = None) -> None:
    """A bench's report.md / report.json in the folder ``out`` (:func:`promokit.experiments.bench_summary.
    bench_report`), and where it went."""
    from promokit.experiments.bench_summary import bench_report

    bench_report(title, results, oracle, setup, summary, tables, floor).write(out)
    get_console().print(f"report written to {out}/report.md")


def run_tune(out: Path, storage: Path | None, title: str, setup: str, search) -> None:
    """A ``tune`` command: :func:`promokit.experiments.tune_results.run_study` runs ``search(storage, on_trial)`` and
    writes ``out`` (params.json for ``train --params``, the report, and by default the study in ``out/study.db``);
    each trial is printed as it finishes, then the best."""
    from promokit.experiments.tune_results import PARAMS, run_study

    console = get_console()
    storage = storage or out / "study.db"

    def on_trial(record: dict) -> None:
        value = "—" if record["value"] is None else f"{record['value']:.4f}"
        epochs = f" after {record['epochs']} epochs" if record["epochs"] else ""
        console.print(f"  trial {record['trial']:>3} {record['state']:>8}: {value}{epochs} ({record['seconds'] or 0:.0f} s)",
                      highlight=False)

    result = run_study(out, storage, search, title=title, setup=setup, on_trial=on_trial)
    if result.interrupted:
        console.print(f"interrupted: {len(result.trials)} trials are stored in {storage}; run the same command to "
                      "continue the search")
    console.print(f"best validation score {result.best_score:.4f} with {json.dumps(result.best_params)}",
                  highlight=False, soft_wrap=True)
    console.print(f"parameters written to {out / PARAMS}; use them with: train --params {out / PARAMS}")


def run_compare(domain: str, data, models: str, seeds: str, out: Path, resamples: int, *, options: dict | None = None,
                validation=None, **training) -> None:
    """A ``compare`` command: :func:`promokit.experiments.compare.compare` with the training flags given (the
    domain's defaults for the others; no per-epoch display), then the leaderboard, the verdicts and the model it
    recommends on screen."""
    from promokit.experiments.compare import compare

    train = {"progress": False, **{name: value for name, value in training.items() if value is not None}}
    comparison = compare(data, models, domain=domain, seeds=seeds_option(seeds), train=train, options=options,
                         validation=validation, resamples=resamples, out=out)
    print_table(f"{domain}: held-out metrics against the floor {comparison.floor}", comparison.table())
    console = get_console()
    for line in comparison.verdicts():
        console.print(line, highlight=False, soft_wrap=True)
    choice = comparison.best()
    console.print(f"which model? {choice.model}: {choice.reason}", highlight=False, soft_wrap=True)
    console.print(f"leaderboard written to {out / 'leaderboard.parquet'} (report: {out / 'report.md'}, report.json)")


def print_feature_types(specs: dict, inferred: bool) -> None:
    """The type of every feature column a model was trained with, per table (``specs``: table name →
    :class:`~promokit.data.FeatureSpec`, as the model directory's config.json keeps them), and how the types came."""
    from promokit.data.spec import MAX_INTEGER_LEVELS

    console = get_console()
    for table, spec in specs.items():
        console.print(f"{table} features: categorical ({len(spec.categorical)}) {', '.join(map(str, spec.categorical))}"
                      f"; numeric ({len(spec.numeric)}) {', '.join(map(str, spec.numeric))}", markup=False,
                      highlight=False, soft_wrap=True)
    given = {name: kind for spec in specs.values() for name, kind in spec.types.items()}
    how = ("types inferred: text and booleans categorical; an integer column categorical when its name ends in id "
           f"or it has at most {MAX_INTEGER_LEVELS} distinct values, else numeric; other numbers numeric"
           if inferred else "features and types as listed in the spec")
    given_text = ", ".join(f"{name} {kind}" for name, kind in given.items())
    console.print(f"{how}{'; given: ' + given_text if given else ''} (--categorical / --numeric set a column's type)",
                  markup=False, highlight=False, soft_wrap=True)


def finish_training(out: Path, history) -> None:
    """Print a trainer ``History`` in one line; keep the checkpoint only when the run was interrupted (for
    ``--resume``), else remove it."""
    if history is not None:
        console = get_console()
        console.print(history.summary())
        if history.stopped == "interrupted":
            console.print("interrupted: the best model so far is saved; continue with --resume")
            return
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)


def print_refit(holdout: dict | None, what: str) -> None:
    """train's lines saying which model ``--model auto`` chose and why, what the refit learnt from, and the held-out
    metrics scored before it (nothing without a refit)."""
    auto = (holdout or {}).get("auto")
    if auto:
        get_console().print(f"--model auto: {auto['reason']}", highlight=False, soft_wrap=True)
    refit = (holdout or {}).get("refit")
    if not refit:
        return
    chosen = [f"{refit['epochs']} epochs"] if refit.get("epochs") else []
    chosen += [f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in refit["params"].items()
               if k.startswith(("l2", "n_trees"))]
    plural = what[:-1] + "ies" if what.endswith("y") else what + "s"  # a delivery, deliveries
    text = f"refit on all {refit['rows']:,} {plural}" + (f" with {', '.join(chosen)}" if chosen else "")
    scores = {k: v for k, v in (refit.get("evaluation") or {}).items() if "auc" in k and isinstance(v, float)}
    if scores:
        text += "; held out before the refit: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
    get_console().print(text, highlight=False, soft_wrap=True)


def print_held_out(held: str | None, what: str) -> None:
    """train's line saying what it held out (``held``: how many ``what`` and by which rule; None: nothing)."""
    text = (f"held out for evaluate: {held}; evaluate scores them by default (--all: every {what}), "
            "--test-fraction 0 trains on them too" if held else
            "held out for evaluate: nothing (--test-fraction 0); evaluate new data with --all")
    get_console().print(text, highlight=False, soft_wrap=True)

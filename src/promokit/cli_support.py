"""What every domain's commands share: one-line user errors, the console and tables. Imports nothing heavy."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from its checkpoint "
                                         "(.OUT.checkpoint beside --out).")]


@contextmanager
def user_errors():
    """Turn contract violations into one red line (never wrapped) and exit code 2, not a traceback."""
    from promokit.data.errors import DataError

    try:
        yield
    except DataError as exc:
        get_console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def get_console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def print_table(title: str, frame) -> None:
    """A DataFrame as a rich table (its named index becomes the first column), floats to 4 decimals."""
    from rich.table import Table

    table = Table(title=title)
    frame = frame.reset_index() if frame.index.name else frame
    for column in frame.columns:
        table.add_column(str(column))
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row))
    get_console().print(table)


def json_option(flag: str, text: str | None, default=None):
    """The value of a JSON command-line option (``default`` when not given), or a one-line error naming it."""
    from promokit.data.errors import DataError

    if not text:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{flag} is not valid JSON: {exc}") from None


def write_metrics_report(out, title: str, model_name: str, metrics: dict, table_title: str) -> None:
    """An ``evaluate`` command's output: ``report.md`` / ``report.json`` in ``out`` and the table on screen."""
    import pandas as pd

    from promokit.report import Report

    frame = pd.DataFrame({"metric": list(metrics), "value": [float(v) for v in metrics.values()]})
    Report(title, data={"model": model_name, "metrics": metrics}).add("Metrics", frame).write(out)
    print_table(table_title, frame.set_index("metric"))


def write_bench_report(out, title: str, results, oracle: dict | None, setup: str, summary) -> None:
    """A bench's report.md / report.json in the folder ``out``: the per-seed ``results``, the oracle row, the
    ``setup`` line and the ``summary`` table."""
    from promokit.report import Report

    report = Report(title, data={"results": results.to_dict(orient="records"), "oracle": oracle})
    report.add("Setup", setup)
    report.add("Mean ± std over seeds", summary)
    report.write(out)
    get_console().print(f"report written to {out}/report.md")


def checkpoint_dir(out: Path) -> Path:
    """Where ``train --out OUT`` keeps its per-epoch checkpoint: ``.OUT.checkpoint`` beside OUT."""
    return out.parent / f".{out.name}.checkpoint"


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

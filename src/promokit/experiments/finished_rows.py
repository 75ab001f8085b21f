"""The rows a demo or bench has finished, on disk as soon as each finishes: a run that is interrupted or timed out
keeps them instead of leaving nothing."""

from __future__ import annotations

import os
from collections.abc import Callable

import pandas as pd

from promokit.data.io import write_table
from promokit.data.uris import local_dir
from promokit.report import Report


class FinishedRows:
    """Collects a demo's or bench's result rows (one per model × seed) and, after each, writes every row so far to
    ``out/results.csv`` and to a report (``out/report.md``, ``report.json``), each file atomically; the run's own
    report replaces that one when the run completes. ``on_result(row)`` (a line on screen) sees each row once it is
    on disk. With ``out`` None the rows are collected and passed on, not written.

    Used as a context manager, a Ctrl-C (``KeyboardInterrupt``) inside it prints one line saying how many rows were
    kept and where, and goes on (the interrupt is not swallowed)::

        with FinishedRows(out, "promokit conversion demo", on_result=show) as finished:
            run(..., on_result=finished.add)
    """

    def __init__(self, out: str | os.PathLike | None, title: str, on_result: Callable[[dict], None] | None = None,
                 console=None):
        self.out = None if out is None else local_dir(out, "out")
        self.title, self.on_result, self.console = title, on_result, console
        self.rows: list[dict] = []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if self.out is not None:
            table = pd.DataFrame(self.rows)
            write_table(table, self.out / "results.csv")
            report = Report(f"{self.title} (unfinished: {_rows(len(self.rows))} so far)", data={"results": self.rows})
            report.add("Finished rows", table).write(self.out)
        if self.on_result is not None:
            self.on_result(row)

    def __enter__(self) -> FinishedRows:
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            from promokit.console import get_console

            kept = (f"kept in {self.out / 'results.csv'} and {self.out / 'report.md'}" if self.out is not None
                    else "not written (no output folder)") if self.rows else "nothing to keep"
            (self.console or get_console(stderr=True)).print(f"interrupted: {_rows(len(self.rows))} finished, {kept}",
                                                             highlight=False, soft_wrap=True)
        return False


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"

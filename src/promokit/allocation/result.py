"""What :func:`~promokit.allocation.budget_plan.plan_budget` and :func:`~promokit.allocation.quota_plan.plan_quota`
return: the plan, the summary figures and the per-option table, written as ``promokit allocate`` writes them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import write_parquet
from promokit.data.uris import local_dir
from promokit.report import Report


@dataclass
class Allocation:
    """A budget or quota plan and its summary.

    ``plan`` has one row per user in input order (budget: ``[population,] <key>, level, score, [value,] cost``;
    quota: ``<key>, fund, score[, tolerance, risk]``); for a table in parts it is None and its parts are
    ``plan_dir/part-NNNNN.parquet``, written as they were solved. ``summary`` holds the report's fields
    (docs/allocation.md#the-summary), ``tables`` the per-level or per-fund table, ``solution`` the solver's
    :class:`~promokit.allocation.budget.BudgetPlan` or :class:`~promokit.allocation.quota_core.QuotaPlan`, and
    ``diagnostics`` what the quota solver reports besides (prices, sample levels, certified), in report.json only.
    """

    title: str
    plan: pd.DataFrame | None
    summary: dict
    tables: dict[str, pd.DataFrame]
    solution: object
    plan_dir: Path | None = None
    diagnostics: dict | None = field(default=None, repr=False)

    def report(self) -> Report:
        """Summary fields (JSON: all; Markdown: those that are set) and the per-option table."""
        extra = {"diagnostics": self.diagnostics} if self.diagnostics is not None else {}
        report = Report(self.title, data={**self.summary, **{name: table.to_dict(orient="list")
                                                              for name, table in self.tables.items()}, **extra})
        shown = {k: v for k, v in self.summary.items() if v is not None}
        report.add("Summary", pd.DataFrame({"field": list(shown), "value": [_cell(v) for v in shown.values()]}))
        for name, table in self.tables.items():
            report.add(name.replace("_", " ").capitalize(), table)
        return report

    def write(self, out_dir: str | os.PathLike) -> Path:
        """Write ``plan.parquet`` (a table in parts: its plan is already in ``out_dir/plan``), ``report.md`` and
        ``report.json`` into ``out_dir``, each file atomically: a local folder (a URI is a one-line error naming
        ``out_dir``)."""
        out = local_dir(out_dir, "out_dir")
        if self.plan is not None:
            write_parquet(self.plan, out / "plan.parquet")
        elif out.resolve() != self.plan_dir.parent.resolve():
            raise DataError(f"`out_dir` {out}: the plan of this table in parts is in {self.plan_dir}; its report goes "
                            f"beside it")
        self.report().write(out)
        return out

    def headline(self) -> str:
        """One line: the method, the objective, slack and λ* (budget), the bound and gap, the seconds."""
        summary = self.summary
        parts = [f"objective {summary['objective']:,.4f}"]
        if "slack" in summary:
            parts += [f"slack {summary['slack']:,.4f}", f"λ* {summary['lam']:.6g}"]
        if summary.get("upper_bound") is not None:
            parts.append(f"upper bound {summary['upper_bound']:,.4f} (relative gap {summary['relative_gap']:.2e})")
        return f"{summary['method']}: " + ", ".join(parts) + f" in {summary['seconds']:.2f} s"


def relative_gap(gap: float | None, bound: float | None) -> float | None:
    if gap is None or bound is None:
        return None
    return gap / abs(bound) if bound else 0.0


def _cell(value) -> str:
    return f"{value:.8g}" if isinstance(value, float) else str(value)

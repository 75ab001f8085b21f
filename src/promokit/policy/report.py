"""What judging plans on a log finds (:class:`PolicyEvaluation`) and how it reads: a headline per plan, estimates
with intervals, paired differences from the reference, diagnostics and warnings (report.md), every figure
(report.json) and the estimates with their intervals (estimates.png)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from promokit.policy.estimators import ESTIMATORS
from promokit.policy.log import Log
from promokit.report import Report, json_safe

#: the estimator a headline quotes: DR when there is a model, else SNIPS
HEADLINE = ("DR", "SNIPS")


@dataclass
class Estimate:
    """A point estimate and its 95 % interval; ``outer`` marks a BCa interval whose levels reach the outer tails
    of the bootstrap replicates (:func:`~promokit.policy.estimators.in_outer_tail`)."""

    value: float
    low: float
    high: float
    outer: bool = False

    def to_dict(self) -> dict:
        return {"estimate": self.value, "low": self.low, "high": self.high}


@dataclass
class PlanResult:
    """One plan's estimates (outcome → estimator → mean per subject), totals, ratio and diagnostics."""

    name: str
    subjects: int
    means: dict[str, dict[str, Estimate]]
    totals: dict[str, dict[str, Estimate]]
    ratio: dict[str, Estimate]
    diagnostics: dict
    differences: dict[str, dict[str, Estimate]] = field(default_factory=dict)  # vs the reference
    relative: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class PolicyEvaluation:
    """Every plan judged on a randomized log against the ``reference``: what :func:`promokit.policy.evaluate`
    returns and ``promokit policy evaluate`` writes. ``estimates`` and ``differences`` are its tables, ``figures``
    its plot; :meth:`to_markdown`, :meth:`to_json` and :meth:`write` (report.md, report.json, estimates.png)
    render it. ``setup`` says how it was made (the report's Setup section)."""

    log: Log
    reference: PlanResult
    plans: list[PlanResult]
    bootstrap: int
    seed: int
    clip: float | None
    notes: list[str]
    interval_warnings: list[str] = field(default_factory=list)  # BCa endpoints among the most extreme replicates
    setup: dict = field(default_factory=dict)

    def headlines(self) -> list[str]:
        """One line per plan: each outcome against the reference, by DR where there is a model, else SNIPS."""
        lines = []
        outcomes = list(self.log.outcomes)
        for result in self.plans:
            parts = []
            for outcome in outcomes:
                estimator = _headline_estimator(result.relative[outcome])
                parts.append(f"{_signed_percent(result.relative[outcome][estimator])} {outcome} ({estimator})")
            line = f"{result.name} against {self.reference.name}: " + ", ".join(parts)
            if result.ratio:
                estimator = _headline_estimator(result.ratio)
                line += f"; spend per response {_estimate(result.ratio[estimator])} ({estimator})"
            lines.append(line)
        if not lines:
            lines.append(f"{self.reference.name}: " + ", ".join(
                f"{_estimate(self.reference.means[o]['IPS'])} {o} per subject" for o in outcomes))
        return lines

    @property
    def warnings(self) -> list[str]:
        """Each plan's warnings (its diagnostics), then the intervals'."""
        return [*(w for r in self.plans for w in r.warnings), *self.interval_warnings]

    @property
    def estimates(self) -> pd.DataFrame:
        """A row per plan, outcome and estimator: the mean per subject and the total, with their intervals."""
        return pd.DataFrame([
            {"plan": r.name, "outcome": outcome, "estimator": estimator, "mean": mean.value, "mean_low": mean.low,
             "mean_high": mean.high, "total": total.value, "total_low": total.low, "total_high": total.high}
            for r in [self.reference, *self.plans] for outcome, by in r.means.items()
            for (estimator, mean), total in zip(by.items(), r.totals[outcome].values())])

    @property
    def differences(self) -> pd.DataFrame:
        """A row per plan, outcome and estimator: the paired difference from the reference and the relative one,
        with their intervals."""
        return pd.DataFrame([
            {"plan": r.name, "outcome": outcome, "estimator": estimator, "difference": d.value, "low": d.low,
             "high": d.high, "relative": rel.value, "relative_low": rel.low, "relative_high": rel.high}
            for r in self.plans for outcome, by in r.differences.items()
            for (estimator, d), rel in zip(by.items(), r.relative[outcome].values())])

    def to_frame(self) -> pd.DataFrame:
        """:attr:`estimates` with each plan's paired difference from the reference beside it (NaN on the
        reference's own rows): a row per plan, outcome and estimator."""
        return self.estimates.merge(self.differences, on=["plan", "outcome", "estimator"], how="left")

    @cached_property
    def figures(self) -> dict[str, object]:
        return {"estimates": _figure(self)}

    def report(self) -> Report:
        log, ref = self.log, self.reference
        report = Report(f"Off-policy evaluation on {log.source}", data=_data(self), figures=dict(self.figures))
        report.add("Headline", "\n".join(f"- {line}" for line in self.headlines()))
        report.add("Setup", "\n".join(f"- {k}: {v}" for k, v in self.setup.items()))
        for result in [ref, *self.plans]:
            report.add(f"{result.name}: mean per subject [95 % interval]", _estimates_table(result, log.outcomes))
        if any("DM" in by for by in ref.means.values()):
            report.add("About the intervals", DM_FIXED)
        if self.plans:
            report.add(f"Against the reference ({ref.name}), paired: difference [95 % interval]",
                       _differences_table(self))
            report.add("Diagnostics", pd.DataFrame([{"plan": r.name, **_diagnostics(r)} for r in self.plans]))
        if self.warnings or self.notes:
            report.add("Warnings and notes", "\n".join(f"- {w}" for w in [*self.warnings, *self.notes]))
        return report

    def to_markdown(self) -> str:
        return self.report().markdown()

    def to_json(self) -> str:
        """What report.json holds: the setup, every estimate with its interval, the headlines and the notes."""
        return json.dumps(json_safe(_data(self)), indent=2)

    def write(self, out_dir: str | os.PathLike) -> Path:
        """Write report.md, report.json and estimates.png into ``out_dir``."""
        return self.report().write(out_dir)

    def _repr_markdown_(self) -> str:  # a notebook shows the report
        return self.to_markdown()


DM_FIXED = ("DM's interval holds the score model fixed: the bootstrap resamples the log's subjects, not the data "
            "the model learnt from, so the model's own error and bias are not in it. DR and SNDR correct the model "
            "with the logged outcomes; IPS and SNIPS do not use it.")


def _headline_estimator(by_estimator: dict) -> str:
    return next(e for e in HEADLINE if e in by_estimator)


def _estimators(table: dict) -> list[str]:
    """The estimators any outcome of ``table`` has, in the order of :data:`ESTIMATORS`."""
    return [e for e in ESTIMATORS if any(e in by for by in table.values())]


def _estimates_table(result: PlanResult, outcomes) -> pd.DataFrame:
    rows = []
    for estimator in _estimators(result.means):
        row = {"estimator": estimator}
        for outcome in outcomes:
            known = estimator in result.means[outcome]
            row[f"{outcome} per subject"] = _estimate(result.means[outcome][estimator]) if known else "—"
            row[f"{outcome} total"] = _estimate(result.totals[outcome][estimator], total=True) if known else "—"
        if result.ratio:
            row["spend per response"] = _estimate(result.ratio[estimator]) if estimator in result.ratio else "—"
        rows.append(row)
    return pd.DataFrame(rows)


def _differences_table(evaluation: PolicyEvaluation) -> pd.DataFrame:
    rows = []
    for result in evaluation.plans:
        for estimator in _estimators(result.differences):
            row = {"plan": result.name, "estimator": estimator}
            for outcome in evaluation.log.outcomes:
                known = estimator in result.differences[outcome]
                row[outcome] = (f"{_estimate(result.differences[outcome][estimator])} "
                                f"({_signed_percent(result.relative[outcome][estimator])})") if known else "—"
            rows.append(row)
    return pd.DataFrame(rows)


def _diagnostics(result: PlanResult) -> dict:
    d = result.diagnostics
    return {"rows": f"{d['rows']:,}", "effective sample size": f"{d['effective_sample_size']:,.1f}",
            "share": f"{d['effective_share']:.1%}", "rows it matches": f"{d['matched_rows']:,}",
            "choices supported": f"{d['supported_share']:.1%}", "largest weight": f"{d['max_weight']:,.2f}"}


def _number(x: float, total: bool = False) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{x:,.0f}" if total and abs(x) >= 100 else f"{x:,.4g}"


def _estimate(e: Estimate, total: bool = False) -> str:
    return f"{_number(e.value, total)} [{_number(e.low, total)}, {_number(e.high, total)}]"


def _signed_percent(e: Estimate) -> str:
    if not math.isfinite(e.value):
        return "—"
    return f"{e.value:+.1%} [{e.low:+.1%}, {e.high:+.1%}]"


def _data(evaluation: PolicyEvaluation) -> dict:
    def plan(result: PlanResult) -> dict:
        nested = lambda table: {o: {e: v.to_dict() for e, v in by.items()} for o, by in table.items()}
        return {"name": result.name, "subjects": result.subjects, "means": nested(result.means),
                "totals": nested(result.totals), "spend_per_response": {e: v.to_dict() for e, v in result.ratio.items()},
                "difference": nested(result.differences), "relative_difference": nested(result.relative),
                "diagnostics": result.diagnostics, "warnings": result.warnings}

    return {"setup": evaluation.setup, "reference": plan(evaluation.reference),
            "plans": [plan(r) for r in evaluation.plans],
            "headline": evaluation.headlines(), "interval_warnings": evaluation.interval_warnings,
            "notes": evaluation.notes}


def _figure(evaluation: PolicyEvaluation):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outcomes = list(evaluation.log.outcomes)
    results = [evaluation.reference, *evaluation.plans]
    figure, axes = plt.subplots(1, len(outcomes), figsize=(5.5 * len(outcomes), 3.8), squeeze=False)
    for ax, outcome in zip(axes[0], outcomes):
        estimators = _estimators({outcome: results[-1].means[outcome]})
        width = 0.8 / len(results)
        for k, result in enumerate(results):
            shown = [e for e in estimators if e in result.means[outcome]]
            xs = [estimators.index(e) + (k - (len(results) - 1) / 2) * width for e in shown]
            values = [result.means[outcome][e] for e in shown]
            ax.errorbar(xs, [v.value for v in values],
                        yerr=[[v.value - v.low for v in values], [v.high - v.value for v in values]],
                        fmt="o", capsize=3, label=result.name)
        ax.set_xticks(range(len(estimators)), estimators)
        ax.set_title(f"{outcome} per subject (95 % intervals)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    return figure

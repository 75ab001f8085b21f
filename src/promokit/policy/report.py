"""The report of ``policy evaluate``: a headline per plan, estimates with intervals, paired differences from the
reference, diagnostics and warnings (Markdown), every figure (JSON) and the estimates with their intervals (PNG)."""

from __future__ import annotations

import math

import pandas as pd

from promokit.policy.estimators import ESTIMATORS
from promokit.policy.evaluate import Estimate, Evaluation, PlanResult
from promokit.report import Report

#: the estimator a headline quotes: DR when there is a model, else SNIPS
HEADLINE = ("DR", "SNIPS")


def build_report(evaluation: Evaluation, setup: dict) -> Report:
    log, ref = evaluation.log, evaluation.reference
    report = Report(f"Off-policy evaluation on {log.source}", data=_data(evaluation, setup))
    report.add("Headline", "\n".join(f"- {line}" for line in headlines(evaluation)))
    report.add("Setup", "\n".join(f"- {k}: {v}" for k, v in setup.items()))
    for result in [ref, *evaluation.plans]:
        report.add(f"{result.name}: mean per subject [95 % interval]", _estimates_table(result, log.outcomes))
    if evaluation.plans:
        report.add(f"Against the reference ({ref.name}), paired: difference [95 % interval]",
                   _differences_table(evaluation))
        report.add("Diagnostics", pd.DataFrame([{"plan": r.name, **_diagnostics(r)} for r in evaluation.plans]))
    warnings = [w for r in evaluation.plans for w in r.warnings]
    if warnings or evaluation.notes:
        report.add("Warnings and notes", "\n".join(f"- {w}" for w in [*warnings, *evaluation.notes]))
    report.figures["estimates"] = _figure(evaluation)
    return report


def headlines(evaluation: Evaluation) -> list[str]:
    """One line per plan: each outcome against the reference, by DR where there is a model for it, else SNIPS."""
    lines = []
    outcomes = list(evaluation.log.outcomes)
    for result in evaluation.plans:
        parts = []
        for outcome in outcomes:
            estimator = _headline_estimator(result.relative[outcome])
            parts.append(f"{_signed_percent(result.relative[outcome][estimator])} {outcome} ({estimator})")
        line = f"{result.name} against {evaluation.reference.name}: " + ", ".join(parts)
        if result.ratio:
            estimator = _headline_estimator(result.ratio)
            line += f"; spend per response {_estimate(result.ratio[estimator])} ({estimator})"
        lines.append(line)
    if not lines:
        lines.append(f"{evaluation.reference.name}: " + ", ".join(
            f"{_estimate(evaluation.reference.means[o]['IPS'])} {o} per subject" for o in outcomes))
    return lines


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


def _differences_table(evaluation: Evaluation) -> pd.DataFrame:
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


def _data(evaluation: Evaluation, setup: dict) -> dict:
    def plan(result: PlanResult) -> dict:
        nested = lambda table: {o: {e: v.to_dict() for e, v in by.items()} for o, by in table.items()}
        return {"name": result.name, "subjects": result.subjects, "means": nested(result.means),
                "totals": nested(result.totals), "spend_per_response": {e: v.to_dict() for e, v in result.ratio.items()},
                "difference": nested(result.differences), "relative_difference": nested(result.relative),
                "diagnostics": result.diagnostics, "warnings": result.warnings}

    return {"setup": setup, "reference": plan(evaluation.reference), "plans": [plan(r) for r in evaluation.plans],
            "headline": headlines(evaluation), "notes": evaluation.notes}


def _figure(evaluation: Evaluation):
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

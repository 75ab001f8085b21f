"""What the benches share: the table a bench shows first (per model, in the order run, the mean ± std over seeds of
its headline metrics, RelaImpr (DMBGN eq. 11) of its mean AUC against the floor's, and its mean fit time), the
sentences on how the models stand against the floor, the models a bench runs (the floor always among them) and the
report it writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from promokit.metrics.compare import mean_std, rela_impr


def model_summary(metrics: pd.DataFrame, columns: Sequence[str], floor: str, auc: str, relaimpr: str,
                  after: str | None = None, extra: Callable[[pd.DataFrame], dict] | None = None) -> pd.DataFrame:
    """One row per model of ``metrics`` (a row per model × seed: ``model``, the ``columns``, ``auc`` and
    ``fit_seconds``), indexed by model: the ``columns`` as mean ± std; the column ``relaimpr``, RelaImpr of the mean
    ``auc`` against the ``floor`` model's, right after the column ``after`` (default the last of ``columns``) when
    the floor ran with an AUC; the columns ``extra(rows of the model)`` gives; then the mean ``fit_seconds``."""
    floor_auc = metrics.loc[metrics["model"] == floor, auc].mean()
    rows = []
    for name, group in metrics.groupby("model", sort=False):
        row = {"model": name}
        for column in columns:
            row[column] = mean_std(group[column].astype(float))
            if column == (after or columns[-1]) and np.isfinite(floor_auc):
                row[relaimpr] = f"{rela_impr(float(group[auc].mean()), floor_auc):+.2f}%"
        row.update(extra(group) if extra is not None else {})
        row["fit_seconds"] = f"{group['fit_seconds'].mean():.0f}"
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")


def floor_verdict(metrics: pd.DataFrame, floor: str, metric: str, *, higher_is_better: bool = True,
                  what: str | None = None, oracle: str = "oracle") -> str | None:
    """One plain sentence on how the models of ``metrics`` (a row per model × seed with ``model`` and ``metric``)
    stand against the ``floor`` model by their mean ``metric``: whether any beats it, and the best one (the ``oracle``
    row, the true probabilities, is no model). None when the floor did not run or no other model did. ``what`` names
    the metric in the sentence (default ``metric``)."""
    means = metrics[metrics["model"] != oracle].groupby("model", sort=False)[metric].mean().dropna()
    if floor not in means.index or len(means) < 2:
        return None
    what = what or f"mean {metric}"
    ranked = means.sort_values(ascending=not higher_is_better)
    better = ranked[(ranked > means[floor]) if higher_is_better else (ranked < means[floor])]
    if better.empty:
        return (f"The floor {floor} has the best {what} ({means[floor]:.4g}): none of the {len(means) - 1} other "
                f"models beats it here.")
    best = better.index[0]
    return (f"{best} has the best {what} ({better.iloc[0]:.4g} against the floor {floor}'s {means[floor]:.4g}); "
            f"{len(better)} of the {len(means) - 1} other models beat the floor.")


def add_floor_section(report, sentences) -> None:
    """The report's "Against the floor" section: the :func:`floor_verdict` sentences that are not None."""
    said = [sentence for sentence in sentences if sentence]
    if said:
        report.add("Against the floor", " ".join(said))


def with_floor(models: Sequence[str], floor: str = "lr") -> list[str]:
    """A bench's ``models`` with the linear ``floor`` first when they do not name it: every bench shows what the
    deep models have to beat."""
    names = list(models)
    return names if floor in names else [floor, *names]


def bench_report(title: str, results: pd.DataFrame, oracle: dict | None, setup: str, summary: pd.DataFrame,
                 tables: dict | None = None, floor: tuple[str, Sequence[str]] | None = None):
    """A bench's report (a :class:`~promokit.report.Report`, for report.md / report.json): the per-seed
    ``results``, the ``oracle`` row, the ``setup`` line, the ``summary`` table, any further ``tables`` (section
    title → table) and, with ``floor`` (the floor model and metrics), how the models stand against the floor."""
    from promokit.report import Report

    report = Report(title, data={"results": results.to_dict(orient="records"), "oracle": oracle})
    report.add("Setup", setup)
    report.add("Mean ± std over seeds", summary)
    for section, table in (tables or {}).items():
        report.add(section, table)
    if floor is not None:
        add_floor_section(report, [floor_verdict(results, floor[0], metric, what=f"test {metric}")
                                   for metric in floor[1]])
    return report

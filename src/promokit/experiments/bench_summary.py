"""The table a bench shows first: per model, in the order run, the mean ± std over seeds of its headline metrics,
RelaImpr (DMBGN eq. 11) of its mean AUC against the floor's, and its mean fit time."""

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

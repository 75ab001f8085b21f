"""Uplift by quantile of a predicted sensitivity, read off a randomized experiment."""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.metrics._validation import as_float_1d


def uplift_by_quantile(score, treatment, outcome, high: float, low: float, groups: int = 5) -> pd.DataFrame:
    """Rows sorted by ``score`` (descending) into ``groups`` equal groups; in each, the mean ``outcome`` of the
    rows given the ``high`` treatment minus that of the rows given the ``low`` one. Under randomized treatment
    this is the group's uplift (the joint-incentive paper's Figure 4 groups customers by their "gradient").

    Columns: ``group`` (1 = highest scores), ``rows``, ``n_high``, ``n_low``, ``observed_uplift`` (NaN when a
    group has no row of either treatment), ``mean_score``.
    """
    s, t, y = as_float_1d(score, "score"), as_float_1d(treatment, "treatment"), as_float_1d(outcome, "outcome")
    if not len(s) == len(t) == len(y):
        raise ValueError(f"score, treatment and outcome must have one length, got {len(s)}, {len(t)}, {len(y)}")
    if groups < 1 or len(s) < groups:
        raise ValueError(f"need at least {max(groups, 1)} rows for {groups} groups, got {len(s)}")
    order = np.argsort(-s, kind="stable")
    rows = []
    for g, part in enumerate(np.array_split(order, groups), start=1):
        hi, lo = part[t[part] == high], part[t[part] == low]
        uplift = y[hi].mean() - y[lo].mean() if len(hi) and len(lo) else np.nan
        rows.append({"group": g, "rows": len(part), "n_high": len(hi), "n_low": len(lo),
                     "observed_uplift": float(uplift), "mean_score": float(s[part].mean())})
    return pd.DataFrame(rows)

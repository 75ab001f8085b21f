"""Relative improvement of one model's AUC over a baseline's."""

from __future__ import annotations

import math
import warnings

from promokit.metrics.ranking import MetricWarning


def rela_impr(auc_model: float, auc_base: float) -> float:
    """RelaImpr in percent, DMBGN (Xiao et al., KDD 2021) eq. (11).

    RelaImpr = ((AUC_model - 0.5) / (AUC_base - 0.5) - 1) · 100, the gain over random guessing (AUC 0.5).
    NaN with a ``MetricWarning`` if either AUC is NaN or the baseline is exactly 0.5.
    """
    if math.isnan(auc_model) or math.isnan(auc_base):
        warnings.warn(f"RelaImpr is undefined for AUCs {auc_model} and {auc_base}; returning NaN",
                      MetricWarning, stacklevel=2)
        return float("nan")
    if auc_base == 0.5:
        warnings.warn("RelaImpr is undefined for a baseline AUC of 0.5 (random); returning NaN",
                      MetricWarning, stacklevel=2)
        return float("nan")
    return ((auc_model - 0.5) / (auc_base - 0.5) - 1) * 100


def paired_change(values, reference) -> str:
    """The mean relative change of ``values`` against ``reference`` (paired, e.g. by seed) in percent with a 95 %
    t-interval over the pairs: ``"+1.23 % [+0.40, +2.06]"`` (no interval for one pair)."""
    import numpy as np

    change = np.asarray(values, dtype=np.float64) / np.asarray(reference, dtype=np.float64) - 1
    mean, half = float(change.mean()), half_interval(change)
    return f"{100 * mean:+.2f} % [{100 * (mean - half):+.2f}, {100 * (mean + half):+.2f}]"


def half_interval(values) -> float:
    """Half-width of a 95 % t-interval of the mean of ``values`` (0 for one value)."""
    import numpy as np
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return 0.0
    return float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def mean_std(values) -> str:
    """``"0.1234 ± 0.0056"``: the mean and the (population) standard deviation over seeds; the mean alone for one
    value."""
    import numpy as np

    values = np.asarray(values, dtype=np.float64)
    return f"{values.mean():.4f}" + (f" ± {values.std():.4f}" if len(values) > 1 else "")

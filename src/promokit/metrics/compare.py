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

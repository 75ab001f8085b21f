"""Evaluation metrics for promotion-response models (ESM² and DMBGN papers)."""

from promokit.metrics.compare import rela_impr
from promokit.metrics.probabilistic import logloss, mse
from promokit.metrics.ranking import (
    GAUCResult,
    MetricWarning,
    TopKResult,
    auc,
    gauc,
    precision_recall_f1_at_top,
)
from promokit.metrics.regression import mae, squared_error
from promokit.metrics.uplift import uplift_by_quantile

__all__ = [
    "GAUCResult",
    "MetricWarning",
    "TopKResult",
    "auc",
    "gauc",
    "logloss",
    "mae",
    "mse",
    "precision_recall_f1_at_top",
    "rela_impr",
    "squared_error",
    "uplift_by_quantile",
]

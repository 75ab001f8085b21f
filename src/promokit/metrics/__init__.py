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

__all__ = [
    "GAUCResult",
    "MetricWarning",
    "TopKResult",
    "auc",
    "gauc",
    "logloss",
    "mse",
    "precision_recall_f1_at_top",
    "rela_impr",
]

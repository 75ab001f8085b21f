"""Evaluation metrics for promotion-response models (ESM², DMBGN and EOCA papers)."""

from promokit.metrics.calibration import (
    CALIBRATION_RATIO,
    CalibrationReport,
    CalibrationWarning,
    calibration_by,
    calibration_report,
    calibration_table,
    calibration_warning,
    expected_calibration_error,
    worst_first,
)
from promokit.metrics.compare import rela_impr, relative_improvement_permille
from promokit.metrics.probabilistic import logloss, mse
from promokit.metrics.ranking import (
    GAUCResult,
    MetricWarning,
    TopKResult,
    auc,
    expected_auc,
    gauc,
    gauc_coverage_warning,
    precision_recall_f1_at_top,
)
from promokit.metrics.regression import mae, squared_error
from promokit.metrics.uplift import (
    UpliftCurves,
    qini_auc_score,
    qini_curve,
    uplift_auc_score,
    uplift_by_quantile,
    uplift_curve,
)
from promokit.metrics.value import (
    decile_figure,
    decile_table,
    fund_personalisation,
    hit_metrics,
    normalized_gini,
    order_of_magnitude_share,
    per_mille,
)

__all__ = [
    "CALIBRATION_RATIO",
    "CalibrationReport",
    "CalibrationWarning",
    "GAUCResult",
    "MetricWarning",
    "TopKResult",
    "UpliftCurves",
    "auc",
    "calibration_by",
    "calibration_report",
    "calibration_table",
    "calibration_warning",
    "decile_figure",
    "decile_table",
    "expected_auc",
    "expected_calibration_error",
    "fund_personalisation",
    "gauc",
    "gauc_coverage_warning",
    "hit_metrics",
    "logloss",
    "mae",
    "mse",
    "normalized_gini",
    "order_of_magnitude_share",
    "per_mille",
    "precision_recall_f1_at_top",
    "qini_auc_score",
    "qini_curve",
    "rela_impr",
    "relative_improvement_permille",
    "squared_error",
    "uplift_auc_score",
    "uplift_by_quantile",
    "uplift_curve",
    "worst_first",
]

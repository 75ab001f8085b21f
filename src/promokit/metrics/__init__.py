"""Evaluation metrics for promotion-response models (ESM², DMBGN and EOCA papers).

Exports load lazily (PEP 562): a command that needs one metric module (the bootstrap's defaults in ``--help``) does
not import SciPy with the rest."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "auc": "promokit.metrics.ranking",
    "calibration_by": "promokit.metrics.calibration",
    "CALIBRATION_RATIO": "promokit.metrics.calibration",
    "calibration_report": "promokit.metrics.calibration",
    "calibration_table": "promokit.metrics.calibration",
    "calibration_warning": "promokit.metrics.calibration",
    "CalibrationReport": "promokit.metrics.calibration",
    "CalibrationWarning": "promokit.metrics.calibration",
    "decile_figure": "promokit.metrics.value",
    "decile_table": "promokit.metrics.value",
    "expected_auc": "promokit.metrics.ranking",
    "expected_calibration_error": "promokit.metrics.calibration",
    "fund_personalisation": "promokit.metrics.value",
    "gauc": "promokit.metrics.ranking",
    "gauc_coverage_warning": "promokit.metrics.ranking",
    "GAUCResult": "promokit.metrics.ranking",
    "hit_metrics": "promokit.metrics.value",
    "logloss": "promokit.metrics.probabilistic",
    "mae": "promokit.metrics.regression",
    "MetricWarning": "promokit.metrics.ranking",
    "mse": "promokit.metrics.probabilistic",
    "normalized_gini": "promokit.metrics.value",
    "order_of_magnitude_share": "promokit.metrics.value",
    "paired_bootstrap": "promokit.metrics.bootstrap",
    "PairedDifference": "promokit.metrics.bootstrap",
    "per_mille": "promokit.metrics.value",
    "precision_recall_f1_at_top": "promokit.metrics.ranking",
    "qini_auc_score": "promokit.metrics.uplift",
    "qini_curve": "promokit.metrics.uplift",
    "rela_impr": "promokit.metrics.compare",
    "relative_improvement_permille": "promokit.metrics.compare",
    "squared_error": "promokit.metrics.regression",
    "TopKResult": "promokit.metrics.ranking",
    "uplift_auc_score": "promokit.metrics.uplift",
    "uplift_by_quantile": "promokit.metrics.uplift",
    "uplift_curve": "promokit.metrics.uplift",
    "UpliftCurves": "promokit.metrics.uplift",
    "worst_first": "promokit.metrics.calibration",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Incentive response on a customer–merchant graph (the joint-incentive paper): a GNN with piecewise hazard
regression, its baselines, and score tables for ``promokit allocate budget``.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "IncentiveModel": "promokit.incentive.estimator",
    "MODELS": "promokit.incentive.estimator",
    "check_tables": "promokit.incentive.contract",
    "evaluate": "promokit.incentive.offline_metrics",
    "train_parts": "promokit.incentive.parts_training",
    "RecordSpec": "promokit.incentive.records",
    "write_records": "promokit.incentive.records",
    "fit_from_records": "promokit.incentive.record_training",
    "write_training_records": "promokit.incentive.parts_training",
    "prepare_from_records": "promokit.incentive.parts_training",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""The incentive experiments: the synthetic coupon experiment on a customer–merchant graph with its true response
curves (``make_world``, ``write_world``, ``read_truth``) and the bench behind ``promokit incentive bench`` and
``demo`` (:mod:`~promokit.experiments.incentive.bench`)."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "IncentiveWorld": "promokit.experiments.incentive.world",
    "make_world": "promokit.experiments.incentive.world",
    "write_world": "promokit.experiments.incentive.world",
    "read_truth": "promokit.experiments.incentive.world",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""The conversion experiments: the synthetic impression world with its true probabilities (``make_world``), the
bench of ESM² and its baselines (:mod:`~promokit.experiments.conversion.bench`), the demo (``run_demo``) and the
hyper-parameter search behind ``promokit conversion tune`` (``tune_conversion``)."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "ConversionWorld": "promokit.experiments.conversion.world",
    "make_world": "promokit.experiments.conversion.world",
    "run_demo": "promokit.experiments.conversion.demo",
    "tune_conversion": "promokit.experiments.conversion.tune",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""The value experiments: the synthetic fund-promotion world with its true ETVs (``make_world``, ``write_world``,
``feasible_quotas``), the bench behind ``promokit value bench`` and ``demo``
(:mod:`~promokit.experiments.value.bench`) and the plans of ``simulate``
(:mod:`~promokit.experiments.value.simulate`)."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "ValueWorld": "promokit.experiments.value.world",
    "make_world": "promokit.experiments.value.world",
    "write_world": "promokit.experiments.value.world",
    "feasible_quotas": "promokit.experiments.value.world",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

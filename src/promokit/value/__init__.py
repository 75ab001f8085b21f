"""Expected transaction value (the EOCA paper, Weng et al.): ESDPM with the ESJ loss, its baselines and the
hurdle floor, and ETV tables that ``allocate quota`` turns into a delivery plan.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "ValueModel": "promokit.value.estimator",
    "MODELS": "promokit.value.estimator",
    "ValueTables": "promokit.value.contract",
    "check_tables": "promokit.value.contract",
    "value_tables": "promokit.value.contract",
    "from_transactions": "promokit.value.transactions",
    "write_value_tables": "promokit.value.transactions",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Conversion over the entire space: ESM², ESMM, DNN, DNN-OS and GBDT on impression logs.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "ConversionModel": "promokit.conversion.estimator",
    "conversion_metrics": "promokit.conversion.evaluate",
    "check_labels": "promokit.conversion.contract",
    "MODELS": "promokit.conversion.models",
    "load_kuairand": "promokit.conversion.kuairand",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

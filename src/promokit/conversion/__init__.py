"""Conversion over the entire space: ESM², ESMM, DNN, DNN-OS and GBDT on impression logs.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

import importlib

_EXPORTS = {
    "ConversionModel": "promokit.conversion.estimator",
    "conversion_metrics": "promokit.conversion.evaluate",
    "check_labels": "promokit.conversion.contract",
    "MODELS": "promokit.conversion.models",
    "SyntheticWorld": "promokit.conversion.synthetic",
    "make_world": "promokit.conversion.synthetic",
    "load_kuairand": "promokit.conversion.kuairand",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'promokit.conversion' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

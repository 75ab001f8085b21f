"""Voucher redemption: DMBGN with user-behaviour voucher graphs and its baselines (LR, GBDT, DNN, WDL, DIN).

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "VoucherModel": "promokit.voucher.estimator",
    "MODELS": "promokit.voucher.models",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""The voucher experiments: the synthetic voucher world with its true redemption probabilities (``make_world``),
the bench of DMBGN and its baselines (:mod:`~promokit.experiments.voucher.bench`), the demo (``run_demo``) and
the hyper-parameter search behind ``promokit voucher tune`` (``tune_voucher``)."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "VoucherWorld": "promokit.experiments.voucher.world",
    "make_world": "promokit.experiments.voucher.world",
    "run_demo": "promokit.experiments.voucher.demo",
    "tune_voucher": "promokit.experiments.voucher.tune",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

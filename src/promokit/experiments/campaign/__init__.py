"""The campaign demo (``promokit campaign demo``, ``make demo``): world → train → score → allocate → campaign
directory → decision service → replayed traffic with outcomes from the true curves → report."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "DemoConfig": "promokit.experiments.campaign.demo",
    "run_demo": "promokit.experiments.campaign.demo",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

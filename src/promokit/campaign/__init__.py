"""The campaign: :func:`build` writes the directory the decision service serves (``promokit campaign build``), and
the whole path wired together for ``promokit campaign demo`` (``make demo``): world → train → score → allocate →
campaign directory → decision service → replayed traffic with outcomes from the true curves → report.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "build": "promokit.serve.campaign",
    "DemoConfig": "promokit.campaign.demo",
    "run_demo": "promokit.campaign.demo",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

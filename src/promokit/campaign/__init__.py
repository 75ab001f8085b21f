"""The campaign: :func:`build` writes the directory the decision service serves (``promokit campaign build``), or a
new version beside the live one, which :func:`activate_version` makes live (``promokit campaign switch``). The
whole path wired together on a synthetic world (``promokit campaign demo``) is :mod:`promokit.experiments.campaign`.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "build": "promokit.serve.campaign",
    "activate_version": "promokit.serve.campaign",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

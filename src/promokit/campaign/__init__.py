"""The campaign directory: what the decision service (:mod:`promokit.serve`) serves. :func:`build` writes it
(``promokit campaign build``), or a new version beside the live one, which :func:`activate_version` makes live
(``promokit campaign switch``); :func:`load_campaign` reads it back as a :class:`Campaign` (its settings a
:class:`CampaignConfig`, the pacing of λ a :class:`Pacing`). The modules: ``directory`` (the layout, build, load,
switch), ``versions`` (the versions and which one is live), ``lookup`` (each population's lookup, built part by
part), ``money`` (amounts in the currency's minor unit) and ``defaults``. The whole path wired together on a
synthetic world (``promokit campaign demo``) is :mod:`promokit.experiments.campaign`.

The service reads campaign directories; nothing here imports :mod:`promokit.serve`. Exports load lazily (PEP 562)
so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "build": "promokit.campaign.directory",
    "activate_version": "promokit.campaign.directory",
    "load_campaign": "promokit.campaign.directory",
    "Campaign": "promokit.campaign.directory",
    "CampaignConfig": "promokit.campaign.directory",
    "Pacing": "promokit.campaign.directory",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

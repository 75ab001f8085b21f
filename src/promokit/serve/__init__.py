"""The decision service: the FastAPI app (:func:`create_app`; ``promokit serve`` runs it under uvicorn) that serves
a campaign directory (:mod:`promokit.campaign`: :func:`~promokit.campaign.build`,
:func:`~promokit.campaign.load_campaign`), the budget ledger it writes (:class:`Ledger`), the log exported from that
ledger (:func:`export_log`) and a load generator (:func:`run_replay`).

Exports load lazily (PEP 562), so ``promokit --help`` imports neither FastAPI nor SQLAlchemy.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "create_app": "promokit.serve.app",
    "Export": "promokit.serve.export",
    "export_log": "promokit.serve.export",
    "Ledger": "promokit.serve.ledger",
    "run_replay": "promokit.serve.replay",
    "running_service": "promokit.serve.replay",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

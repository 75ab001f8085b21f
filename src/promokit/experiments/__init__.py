"""Experiments: synthetic worlds with their truth, benchmarks, demos, hyper-parameter searches and simulations of
plans against a world's truth. One layer above the domains: it uses them, the use cases and the executors; nothing
below imports it.

One subpackage per domain or use case, each with the same names: ``make_world`` and ``<Domain>World``
(``pk.experiments.conversion.make_world(...)`` → :class:`~promokit.experiments.conversion.ConversionWorld`, likewise
``voucher``, ``incentive``, ``value``), ``run_demo`` where a demo has one; ``allocation`` holds synthetic score
tables and the simulations, ``campaign`` the end-to-end demo. :func:`tune` is the Optuna search the ``tune``
commands share. :func:`promokit.compare` (``pk.compare``, module ``promokit.experiments.compare``) fits a domain's
floor, LightGBM and paper models on one split and writes one leaderboard against the floor (:class:`Comparison`);
:func:`best_model` names the model a leaderboard recommends.

Exports load lazily (PEP 562) so that ``promokit --help`` does not import torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "tune": "promokit.experiments.tuning",
    "TuneResult": "promokit.experiments.tuning",
    "FinishedRows": "promokit.experiments.finished_rows",
    "Comparison": "promokit.experiments.compare",
    "best_model": "promokit.experiments.compare",
}
_SUBPACKAGES = ("conversion", "voucher", "incentive", "value", "allocation", "campaign")

__all__ = [*_EXPORTS, *_SUBPACKAGES]

__getattr__ = lazy_exports(__name__, _EXPORTS, _SUBPACKAGES)

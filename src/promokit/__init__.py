"""promokit: predict how people respond to promotions and decide who gets which promotion.

::

    import promokit as pk

    model = pk.ConversionModel("esm2").fit("impressions.parquet")   # or a DataFrame
    scores = model.predict(test)                                     # keys, then p_ctr, p_cvr, p_ctcvr …
    report = model.evaluate(test)                                    # an Evaluation: metrics, to_markdown()
    plan = pk.plan_budget(incentive_scores, ratio=10)                # who gets which incentive level
    board = pk.compare(table, ["gbdt", "esm2"], domain="conversion")  # each model against the floor, with intervals

Every model follows one contract (:class:`Estimator`); each domain is a subpackage (``pk.conversion``,
``pk.voucher``, ``pk.incentive``, ``pk.value``) and so is each use case (``pk.allocation``, ``pk.policy``,
``pk.campaign``, ``pk.serve``); synthetic worlds, benches, demos and tuning are ``pk.experiments``, the public
real data sets' loaders ``pk.datasets``. Everything
loads on first use (PEP 562): ``import promokit`` is instant.
"""

from promokit.lazy import lazy_exports
from promokit.training.threads import prefer_passive_wait

# Before anything loads torch: OpenMP threads that spin at every barrier collapse a loaded machine (an epoch 24x
# slower beside two busy processes); sleeping at once costs nothing on a quiet one (docs/training.md#threads).
# A wait policy the user set (OMP_WAIT_POLICY, GOMP_SPINCOUNT, KMP_BLOCKTIME) is kept.
prefer_passive_wait()

__version__ = "0.1.0"

_EXPORTS = {
    "Estimator": "promokit.training.estimator",
    "Evaluation": "promokit.training.estimator",
    "TrainConfig": "promokit.training.config",
    "FeatureSpec": "promokit.data.spec",
    "DataError": "promokit.data.errors",
    "MissingExtra": "promokit.extras",
    "read_table": "promokit.data.io",
    "ConversionModel": "promokit.conversion.estimator",
    "VoucherModel": "promokit.voucher.estimator",
    "IncentiveModel": "promokit.incentive.estimator",
    "ValueModel": "promokit.value.estimator",
    "plan_budget": "promokit.allocation.budget_plan",
    "plan_quota": "promokit.allocation.quota_plan",
    "Allocation": "promokit.allocation.result",
    "PolicyEvaluation": "promokit.policy.report",
    "compare": "promokit.experiments.compare",
}
_SUBPACKAGES = ("conversion", "voucher", "incentive", "value", "allocation", "policy", "campaign", "serve",
                "scale", "experiments", "datasets", "data", "metrics", "nn", "training")

__all__ = ["__version__", *_EXPORTS, *_SUBPACKAGES]

__getattr__ = lazy_exports(__name__, _EXPORTS, _SUBPACKAGES)


def __dir__() -> list[str]:
    return sorted(__all__)

"""Decisions judged on a randomized log: off-policy estimates of any plan (DM, IPS, SNIPS, DR, SNDR) with bootstrap
intervals, plan comparisons and uplift curves. Reads logs, plans and score tables; never a model.

Exports load lazily (PEP 562), so ``promokit --help`` imports neither pandas nor SciPy.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "evaluate": "promokit.policy.evaluation",
    "PolicyEvaluation": "promokit.policy.report",
    "judge": "promokit.policy.judging",
    "read_scores": "promokit.policy.judging",
    "Log": "promokit.policy.log",
    "read_log": "promokit.policy.log",
    "Plan": "promokit.policy.plans",
    "read_plan": "promokit.policy.plans",
    "reference_plan": "promokit.policy.plans",
    "uplift_by_action": "promokit.policy.uplift",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

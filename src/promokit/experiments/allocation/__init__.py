"""The allocation experiments: synthetic score tables for the solvers (``make_budget_instance``,
``make_quota_instance``) and plans simulated against a synthetic world's truth (``simulate_budget`` on the
incentive world's curves, ``simulate_quota`` on the value world's ETVs)."""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "BudgetInstance": "promokit.experiments.allocation.instances",
    "QuotaInstance": "promokit.experiments.allocation.instances",
    "make_budget_instance": "promokit.experiments.allocation.instances",
    "make_quota_instance": "promokit.experiments.allocation.instances",
    "simulate_budget": "promokit.experiments.allocation.simulate",
    "simulate_quota": "promokit.experiments.allocation.simulate",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

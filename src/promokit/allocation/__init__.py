"""Allocation: who gets which promotion under a budget (incentive levels) or quotas (fund types).

``plan_budget`` and ``plan_quota`` make a plan from score tables (DataFrames, files or tables in parts), as
``promokit allocate budget | quota`` does; the solvers below work on arrays.

Exports load lazily (PEP 562) so that ``promokit --help`` imports neither NumPy-heavy solvers nor SciPy.
This domain never imports torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "plan_budget": "promokit.allocation.budget_plan",
    "plan_quota": "promokit.allocation.quota_plan",
    "Allocation": "promokit.allocation.result",
    "BudgetPlan": "promokit.allocation.budget",
    "solve_budget": "promokit.allocation.budget",
    "decide": "promokit.allocation.budget",
    "ratio_form": "promokit.allocation.budget",
    "absolute_form": "promokit.allocation.budget",
    "solve_budget_lp": "promokit.allocation.budget_lp",
    "QuotaPlan": "promokit.allocation.quota",
    "solve_quota": "promokit.allocation.quota",
    "check_quota_problem": "promokit.allocation.quota",
    "check_plan": "promokit.allocation.quota",
    "BudgetTable": "promokit.allocation.tables",
    "QuotaTable": "promokit.allocation.tables",
    "FundQuotas": "promokit.allocation.tables",
    "read_budget_table": "promokit.allocation.tables",
    "read_quota_table": "promokit.allocation.tables",
    "read_quotas": "promokit.allocation.tables",
    "score_frame": "promokit.allocation.tables",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

"""Option values of the allocation use cases that ``plan_budget``, ``plan_quota`` and the readers take as
defaults, and that ``promokit allocate`` shows as its own: a module without NumPy, so ``--help`` loads no solver."""

LONG, WIDE, AUTO = "long", "wide", "auto"  # score table layouts; auto picks one from the columns
DEFAULT_PREFIX = "score_"  # wide score tables name their score columns <prefix><option>
TOLERANCE = "tolerance"  # the quota score tables' column of the users' risk tolerance
BUDGET_METHOD = "lagrange"  # plan_budget's default, the method that solves a table in parts
QUOTA_METHOD = "prices"  # plan_quota's and solve_quota's default, the method that solves a table in parts
MERCHANT_PAID_ON = "response"  # merchants are paid (and counted in eq. 16) on a response

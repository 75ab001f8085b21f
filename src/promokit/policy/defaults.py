"""Option values that :func:`promokit.policy.evaluate` takes as defaults and ``promokit policy evaluate`` shows as
its own: a module without NumPy, so ``--help`` loads nothing heavy."""

REFERENCE = "logging"  # each plan is compared with the log's own policy
BOOTSTRAP = 500  # bootstrap replicates of every interval
INTERVAL = "bca"  # bias-corrected and accelerated bootstrap percentiles
MISSING = "error"  # a log subject some plan does not decide is an error

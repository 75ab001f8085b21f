"""Option values that the decision service takes as defaults and ``promokit serve`` shows as its own: a module
without NumPy, so ``--help`` loads nothing heavy."""

DEADLINE_SECONDS = 0.5  # serve --deadline: how long a decision or outcome may wait for the ledger before a 503

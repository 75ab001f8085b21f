"""Option values that :func:`promokit.campaign.build` takes as defaults and ``promokit campaign build`` shows as its
own: a module without NumPy, so ``--help`` loads nothing heavy."""

COUPON_TTL_SECONDS = 7 * 24 * 3600.0  # a coupon is valid for a week
WHEN_EXHAUSTED = "lowest"  # at the cap: the lowest level if its face value fits, else none
COLD_START = "mean"  # an id the score table does not hold: the rule on the population's mean curve
CURRENCY_EXPONENT = 2  # cents
PACING_WINDOW = 4096  # recent requests λ is re-solved on
PACING_EVERY = 256  # re-solve after this many decisions of one worker
PACING_GAIN = 0.5  # exponent of the ratio correction, 0 = no feedback

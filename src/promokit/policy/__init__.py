"""Decisions judged on a randomized log: off-policy estimates of any plan (DM, IPS, SNIPS, DR, SNDR) with bootstrap
intervals, plan comparisons and uplift curves. Reads logs, plans and score tables; never a model."""

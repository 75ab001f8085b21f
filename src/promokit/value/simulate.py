"""Closing the loop on a synthetic world: quotas to allocate under, and the outcome of a delivery plan drawn from
the true model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.data.errors import DataError


def feasible_quotas(tolerance: np.ndarray, risk: np.ndarray, funds, seed: int = 0) -> pd.DataFrame:
    """Quotas d_j that the users can fill exactly under the risk rule t_i ≥ r_j (eq. 5): the fund counts of a
    seeded random assignment of every user to a fund it may receive. Returns ``fund``, ``quota``, ``risk``."""
    allowed = np.asarray(tolerance)[:, None] >= np.asarray(risk)[None, :]
    stuck = ~allowed.any(axis=1)
    if stuck.any():
        raise DataError(f"{int(stuck.sum())} users have a tolerance below every fund's risk (lowest risk "
                        f"{int(np.min(risk))}), e.g. tolerance {int(np.asarray(tolerance)[stuck][0])}")
    rng = np.random.default_rng(seed)
    # a uniform choice among the allowed funds: the argmax of random keys over them
    choice = np.where(allowed, rng.random(allowed.shape), -1.0).argmax(axis=1)
    return pd.DataFrame({"fund": list(funds), "quota": np.bincount(choice, minlength=len(risk)),
                         "risk": np.asarray(risk, dtype=np.int64)})

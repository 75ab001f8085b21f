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


def simulate_plans(name: str, scores: np.ndarray, truth: np.ndarray, quotas: pd.DataFrame, tolerance, risk,
                   user_ids, funds, truth_etv: pd.DataFrame, seed: int = 0,
                   allocators=("manual", "ha", "prices")) -> list[dict]:
    """Allocate every user one fund from the ETV ``scores`` (users × funds) with each allocator under the exact
    ``quotas`` and the risk rule, then score each plan by outcomes drawn from the true model (``truth_etv``, see
    :func:`~promokit.value.synthetic.draw_outcomes`): CPMD and TAPMD (eqs. 17–18), and the expected TAPMD of the
    plan under the ``truth`` ETV matrix (no draw noise)."""
    from promokit.allocation.quota import solve_quota
    from promokit.metrics.value import per_mille
    from promokit.value.synthetic import draw_outcomes

    user_ids, funds = np.asarray(user_ids), np.asarray(funds)
    n = len(user_ids)
    rows = []
    for allocator in allocators:
        plan = solve_quota(scores, quotas["quota"].to_numpy(), tolerance, risk, method=allocator)
        drawn = draw_outcomes(truth_etv, user_ids, funds[plan.assignment], seed)
        rows.append({"model": name, "allocator": allocator, "seed": seed,
                     "cpmd": per_mille(drawn["convert"].sum(), n), "tapmd": per_mille(drawn["amount"].sum(), n),
                     "expected_tapmd": per_mille(truth[np.arange(n), plan.assignment].sum(), n),
                     "solve_seconds": plan.seconds})
    return rows

"""Close the loop offline on a synthetic world whose truth is known: allocate by a model's scores, then let the
truth answer. :func:`simulate_budget` for incentive values under a ratio budget (the joint-incentive paper),
:func:`simulate_quota` for funds under quotas (the EOCA paper: each plan scored by outcomes drawn from the true
model).

Budget. The paper measures its models online (Tables 4–5: payments and cost of each model's allocation at the same
budget). On a synthetic world the true curves are known, so the same comparison runs offline: every model's
scores go through the budget allocator (eqs. 11–19) under one ratio budget B, and the chosen values are scored by
the truth — the expected redemptions and spend (exact, no outcome noise), plus one draw of the outcomes with
common random numbers across models.

Two readings of "the same budget": ``planned`` serves the plan solved on the model's own scores (λ* of its
scores: a model that overrates the response to high values spends more than B in truth), ``paced`` moves λ
in eq. 19's rule until the true spend meets B, as a pacing loop would online, so every model spends the same
and only the ranking of customers and values differs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from promokit.allocation.budget import decide, ratio_form, solve_budget, stack_populations
from promokit.allocation.quota import solve_quota
from promokit.incentive.offline_metrics import ORACLE

RANDOM = "random"


def simulate_budget(levels: np.ndarray, truth_customers: np.ndarray, truth_merchants: np.ndarray | None,
                    scores: Mapping[str, tuple[np.ndarray, np.ndarray | None]], ratio: float,
                    seed: int = 0) -> pd.DataFrame:
    """Two rows (``budget`` = ``planned`` and ``paced``) per model of ``scores`` (name → (f_c, f_m), rows aligned with the truths), plus ``oracle`` (the
    truth as scores: the best any model can do) and ``random`` (scores drawn at random, sorted along each row so
    they rise with the value: an allocation that knows nothing of the nodes, spending the same budget: the
    floor).

    Customers and merchants are stacked under one ratio budget (eq. 16: expected incentive per expected
    response ≤ ``ratio``); with ``truth_merchants`` None only the customers are allocated (the merchant
    scores are ignored), which isolates the customer response model. Columns: ``redemptions`` (Σ true f_c at the chosen values), ``drawn_redemptions``
    (one Bernoulli draw), ``customer_spend`` (Σ r·f_c), ``spend_per_redemption``, ``merchant_response``
    (Σ true f_m), ``merchant_spend``, ``true_ratio`` (all spend over all responses, to compare with B: a model
    whose scores are miscalibrated spends more or less than it planned), ``planned_ratio`` (the same by the
    model's own scores), ``payments`` (redemptions + merchant response, eq. 11's objective) and ``lam`` (λ).
    """
    rng = np.random.default_rng(seed)
    uniform = rng.random(len(truth_customers))
    if truth_merchants is None:
        truth_merchants = np.zeros((0, len(levels)))
        scores = {name: (f_c, truth_merchants) for name, (f_c, _) in scores.items()}
    noise = tuple(np.sort(rng.random(t.shape), axis=1) for t in (truth_customers, truth_merchants))
    rows = []
    for name, (f_c, f_m) in {**scores, ORACLE: (truth_customers, truth_merchants), RANDOM: noise}.items():
        problem = stack_populations([ratio_form(f, levels, ratio) for f in (f_c, f_m) if len(f)])
        plan = solve_budget(*problem, seed=seed)
        paced = _paced_lambda(problem, levels, truth_customers, truth_merchants, ratio)
        for budget, choice, lam in (("planned", plan.choice, plan.lam), ("paced", decide(*problem[:2], paced), paced)):
            c, m = choice[:len(f_c)], choice[len(f_c):]
            planned = _spend(levels, f_c, c) + _spend(levels, f_m, m)
            planned /= max(f_c[np.arange(len(c)), c].sum() + f_m[np.arange(len(m)), m].sum(), 1e-12)
            rows.append({"model": name, "budget": budget,
                         **_outcomes(levels, truth_customers, truth_merchants, c, m, uniform),
                         "planned_ratio": planned, "lam": lam})
    return pd.DataFrame(rows)


def _paced_lambda(problem, levels, truth_c, truth_m, ratio: float, steps: int = 60) -> float:
    """The smallest λ at which eq. 19's rule on the model's scores keeps the true ratio within ``ratio`` (a
    larger λ picks cheaper values), by bisection."""
    n_c = len(truth_c)

    def true_ratio(lam: float) -> float:
        choice = decide(problem.value, problem.cost, lam)
        return _outcomes(levels, truth_c, truth_m, choice[:n_c], choice[n_c:], np.zeros(n_c))["true_ratio"]

    low, high = 0.0, 1.0
    if true_ratio(low) <= ratio:
        return low
    while true_ratio(high) > ratio and high < 1e12:
        low, high = high, high * 4
    for _ in range(steps):
        middle = (low + high) / 2
        low, high = (low, middle) if true_ratio(middle) <= ratio else (middle, high)
    return high


def _spend(levels: np.ndarray, f: np.ndarray, choice: np.ndarray) -> float:
    return float((levels[choice] * f[np.arange(len(choice)), choice]).sum())


def _outcomes(levels, truth_c, truth_m, c, m, uniform) -> dict[str, float]:
    p_c = truth_c[np.arange(len(c)), c]
    p_m = truth_m[np.arange(len(m)), m]
    redemptions, merchant = float(p_c.sum()), float(p_m.sum())
    customer_spend, merchant_spend = _spend(levels, truth_c, c), _spend(levels, truth_m, m)
    return {"redemptions": redemptions, "drawn_redemptions": int((uniform < p_c).sum()),
            "customer_spend": customer_spend, "spend_per_redemption": customer_spend / max(redemptions, 1e-12),
            "merchant_response": merchant, "merchant_spend": merchant_spend,
            "true_ratio": (customer_spend + merchant_spend) / max(redemptions + merchant, 1e-12),
            "payments": redemptions + merchant}


def simulate_quota(name: str, scores: np.ndarray, truth: np.ndarray, quotas: pd.DataFrame, tolerance, risk,
                   user_ids, funds, truth_etv: pd.DataFrame, seed: int = 0,
                   allocators=("manual", "ha", "prices")) -> list[dict]:
    """Allocate every user one fund from the ETV ``scores`` (users × funds) with each allocator under the exact
    ``quotas`` and the risk rule, then score each plan by outcomes drawn from the true model (``truth_etv``, see
    :func:`~promokit.experiments.value.world.draw_outcomes`): CPMD and TAPMD (eqs. 17–18), and the expected TAPMD of the
    plan under the ``truth`` ETV matrix (no draw noise)."""
    from promokit.experiments.value.world import draw_outcomes
    from promokit.metrics.value import per_mille

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

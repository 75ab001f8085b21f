"""Seeded synthetic allocation instances: incentive response scores (budget) and ETV with quotas (quota).

Budget: request i's response to incentive level r_j is a hazard model with a linear cumulative hazard,
f_ij = 1 − exp(−(a_i + b_i·r_j)) (joint-incentive paper, eq. 10), so every row is increasing and concave
in the level; the baseline a_i and the sensitivity b_i are log-normal, so some requests respond to any
incentive, some only to large ones and most barely move.

Quota: ETV_ij = P(convert on fund j | user i) × amount (EOCA paper, section 3). The conversion logit is a
user baseline plus a preference s_i·⟨u_i, v_j⟩ for latent user and fund vectors; a minority of users
have a strong preference (large s_i), the rest are nearly indifferent between funds. Quotas d_j are the
fund counts of a random plan that respects the risk rule t_i ≥ r_j (eq. 5), so every instance is feasible
and the quotas are unrelated to the users' preferences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from promokit.data.errors import DataError

#: Ten incentive values (e.g. coupon amounts in yuan), the treatment list R of the joint-incentive paper.
DEFAULT_LEVELS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
#: Share of users with risk tolerance 1..5.
TOLERANCE_SHARES = (0.15, 0.25, 0.3, 0.2, 0.1)
#: Share of users whose conversion depends strongly on the fund; the rest are nearly indifferent.
STRONG_PREFERENCE_SHARE = 0.2
LATENT_DIM = 4


@dataclass(frozen=True)
class BudgetInstance:
    """Response scores ``scores[i, j]`` of request i to incentive ``levels[j]``."""

    scores: np.ndarray   # (N, K), increasing and concave along each row, in [0, 1)
    levels: np.ndarray   # (K,) increasing incentive values r_j
    baseline: np.ndarray     # (N,) a_i, cumulative hazard at level 0
    sensitivity: np.ndarray  # (N,) b_i, hazard per unit of incentive


@dataclass(frozen=True)
class QuotaInstance:
    """Expected transaction values, fund quotas, user risk tolerances and fund risk levels."""

    etv: np.ndarray        # (N, k) non-negative
    quotas: np.ndarray     # (k,) int64, summing to N
    tolerance: np.ndarray  # (N,) int64 in 1..5
    risk: np.ndarray       # (k,) int64 in 1..5
    funds: list[str]       # fund names F1..Fk


def make_budget_instance(n_requests: int, levels=DEFAULT_LEVELS, seed: int | np.random.SeedSequence = 0,
                         dtype=np.float64) -> BudgetInstance:
    """Draw N requests' hazard responses to ``levels`` (eq. 10 with a linear cumulative hazard)."""
    _check_count("n_requests", n_requests)
    levels = np.asarray(levels, dtype=np.float64)
    if levels.ndim != 1 or levels.size == 0 or not np.all(np.isfinite(levels)) or levels.min() < 0 \
            or np.any(np.diff(levels) <= 0):
        raise DataError(f"levels must be non-negative, unique and increasing, got {levels.tolist()}")
    rng = np.random.default_rng(seed)
    baseline = rng.lognormal(np.log(0.05), 1.0, n_requests).astype(dtype)
    sensitivity = rng.lognormal(np.log(0.08), 0.8, n_requests).astype(dtype)
    hazard = np.multiply.outer(sensitivity, levels.astype(dtype))
    hazard += baseline[:, None]
    np.negative(hazard, out=hazard)
    scores = -np.expm1(hazard, out=hazard)
    return BudgetInstance(scores=scores, levels=levels, baseline=baseline, sensitivity=sensitivity)


def make_quota_instance(n_users: int, n_types: int = 8, seed: int = 0, dtype=np.float64) -> QuotaInstance:
    """Draw ETVs from a latent-preference model and feasible quotas under the risk rule (eqs. 1–5)."""
    _check_count("n_users", n_users)
    _check_count("n_types", n_types)
    rng = np.random.default_rng(seed)
    # risk levels spread over 1..5 with the lowest at 1, so every user has at least one allowed fund
    risk = 1 + np.arange(n_types, dtype=np.int64) * 5 // n_types
    tolerance = 1 + rng.choice(5, size=n_users, p=TOLERANCE_SHARES).astype(np.int64)

    users = rng.standard_normal((n_users, LATENT_DIM)).astype(dtype, copy=False)
    funds = rng.standard_normal((n_types, LATENT_DIM)).astype(dtype) / float(np.sqrt(LATENT_DIM))
    strong = rng.random(n_users) < STRONG_PREFERENCE_SHARE
    strength = np.where(strong, rng.uniform(1.5, 3.0, n_users), rng.uniform(0.0, 0.2, n_users)).astype(dtype)
    logit = users @ funds.T
    logit *= strength[:, None]
    logit += (rng.normal(-3.0, 0.7, n_users).astype(dtype))[:, None]
    logit += rng.normal(0.0, 0.1, n_types).astype(dtype)
    etv = _sigmoid(logit)
    amount = rng.lognormal(np.log(1000.0), 1.0, n_users).astype(dtype)
    etv *= amount[:, None]
    etv *= rng.lognormal(0.0, 0.05, n_types).astype(dtype)

    quotas = np.bincount(_random_feasible_plan(rng, tolerance, risk), minlength=n_types).astype(np.int64)
    return QuotaInstance(etv=etv, quotas=quotas, tolerance=tolerance, risk=risk,
                         funds=[f"F{j + 1}" for j in range(n_types)])


def _random_feasible_plan(rng: np.random.Generator, tolerance: np.ndarray, risk: np.ndarray) -> np.ndarray:
    """Each user draws uniformly among the funds whose risk is at most their tolerance."""
    by_risk = np.argsort(risk, kind="stable")
    n_allowed = np.searchsorted(risk[by_risk], tolerance, side="right")
    return by_risk[(rng.random(tolerance.size) * n_allowed).astype(np.int64)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1
    return np.reciprocal(x, out=x)


def _check_count(name: str, value: int) -> None:
    if int(value) != value or value < 1:
        raise DataError(f"{name} must be a positive integer, got {value!r}")

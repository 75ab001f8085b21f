"""A synthetic fund-promotion world of a fintech platform whose expected transaction values are known.

It is the world of the EOCA paper (Weng et al., sections 3, 4.1 and 5.1): users are shown promotional funds
of k types (F1…Fk), may click, then buy (convert) an amount, and the value of showing fund f to user u is the
paper's eq. 13 with the true parameters, ETV_uf = p_ctcvr·(exp(μ_uf + σ_uf²/2) − 1), where log(1 + amount) |
convert ~ N(μ_uf, σ_uf²). The generator makes the paper's claims testable, not guaranteed: most deliveries
neither click nor convert; every user has an own spread σ_u of the log amounts (Figure 3b), so a model
without a σ tower misjudges E[amount | convert]; the capital behind the amounts shows weakly in the profile
and well in the consumption graph (ESDPM against ESDPM-NCG); and allocating by conversion alone loses value
(money funds are clicked less but bought in larger sums, risky funds the reverse, eq. 5's risk levels matter).

Users. With age_z, tenure_z and every ε an independent N(0, 1), and (x)⁺ = max(x, 0):

    age = clip(round(38 + 11·age_z), 18, 75),   tenure_days = round(exp(5.5 + 0.9·tenure_z), 1)
    capital      c_u = 0.2·age_z + √0.96·ε_c                                              (unobserved)
    tolerance    t_u = clip(round(3 + 0.35·c_u + ε_t), 1, 5)
    income_band      = 1 + #{τ ∈ (−0.85, −0.25, 0.25, 0.85) : τ < 0.45·c_u + √(1 − 0.45²)·ε_i}   (noisy capital)
    city_tier        = 1 + #{τ ∈ (−0.7, 0.2, 1.0) : τ < −0.3·c_u + √0.91·ε_y}
    spread       σ_u = clip(STYLE_SIGMA[investor_style]·exp(0.2·ε_σ), 0.3, 1.4)               (unobserved)
    activity     log α_u = 0.3·tenure_z + 0.4·ε_α                                        (unobserved)
    intent vector a_u = (0.5·(t_u − 3) + 0.7·ε_a1,  −0.5·age_z + √0.75·ε_a2,  ε_a3)          (unobserved)

with investor_style steady, planner, balanced, trader drawn with shares 0.3, 0.3, 0.25, 0.15 and STYLE_SIGMA
0.42, 0.6, 0.82, 1.1. ``device`` (android, ios, web with shares 0.55, 0.4, 0.05) and ``noise_score`` ~ N(0, 1),
rounded to 4 decimals, are noise.

Funds. Fund F(j+1) has category CATEGORIES[j mod 8] (money, bond, mixed, equity, index, qdii, fof, gold) with
risk r_f = 1, 2, 3, 4, 4, 5, 3, 3. With θ_f ~ U(0, 2π) and η_f ~ N(0, 1) centred over the funds (when k > 1),

    b_f = ((r_f − 3)/2, 1.1·cos θ_f, 1.1·sin θ_f),    β_f = APPEAL[cat] + 0.3·η_f
    annual_return = round(RETURN[cat] + 0.015·η_f + 0.01·b_f2 + 0.003·ε_f, 4)
    volatility    = round(VOLATILITY[cat]·exp(0.25·b_f3), 4)

(APPEAL −0.7, −0.2, 0.1, 0.3, 0.2, 0.2, −0.2, 0; RETURN and VOLATILITY per category in CATEGORY_RETURN and
CATEGORY_VOLATILITY), so the fund features reveal its bias and taste vector.

True parameters. With ε_uf ~ N(0, 1) per user × fund and (r_f − t_u)⁺ the risk above the user's tolerance,

    intent   s_uf  = a_u·b_f + β_f + 0.4·ε_uf − 0.5·(r_f − t_u)⁺
    click    p_ctr = σ(−2.05 + 0.6·s_uf + 0.5·log α_u + CHANNEL[channel] + 0.3·cos(2π·(hour − 20)/24))
    convert  p_cvr = σ(−1.35 + 0.6·s_uf + 0.35·c_u)                  (given a click; no context)
    amount   μ_uf  = 7 + c_u + 0.2·s_uf + TICKET[cat] + 0.3·c_u·(3 − r_f)/2 − 0.5·(r_f − t_u)⁺
             σ_uf  = σ_u·exp(0.15·(r_f − 3))

(σ(x) is the logistic function, CHANNEL home 0, push +0.35, banner −0.45; TICKET +0.6, +0.4, 0, −0.3, −0.2,
−0.4, +0.2, −0.1 per category). Rich users buy more, and park more in safe funds; users buy less of a fund
above their tolerance. σ_uf keeps the user's own spread (about 0.3 … 1.4 before the fund factor 0.74 … 1.35,
so purchases of riskier funds spread a little more and σ changes which fund has the highest ETV).

Deliveries. Each user gets 1 + Poisson(deliveries_per_user − 1) deliveries, each of a fund drawn uniformly
(no selection bias) at a uniform day of the 60-day window from START (2026-01-01), an hour drawn from
HOUR_WEIGHT (busy evenings), a uniform second within the hour, and a channel drawn with shares 0.5, 0.3, 0.2.
Then click ~ Bernoulli(p_ctr), convert = click·Bernoulli(p_cvr), and with z ~ N(0, 1)

    amount = max(round(expm1(μ_uf + σ_uf·z), 2), 0.01) if convert else 0

(the one-cent floor, a log amount below log 1.01, practically never binds and the truth ignores it). Rows are
sorted by time. ``truth`` holds, per delivery, p_ctr, p_cvr, p_ctcvr = p_ctr·p_cvr, μ, σ and ETV at the
delivery's own context; ``truth_etv`` holds, per user × fund, p̄_ctcvr = E_{channel, hour}[p_ctr]·p_cvr over the
context distribution above (the value of showing f to u on a random occasion), μ, σ and ETV.

Behaviours. User u has Poisson(behaviors_per_user·α_u·e^{−0.125}) past events (E[α_u] = e^{0.125}) at uniform
seconds of the 30 days before the window and of the window itself. Each picks its fund by softmax_f(s_uf) and
its action by a softmax over the logits

    click 0,   purchase −1.5 + 0.8·s_uf + 0.3·c_u,   sell −2 + 2·log(σ_u/0.7),   favorite −1.2,

so fund choice reveals a_u and the pair noise, purchases intent and capital, and sell frequency σ_u (beyond
investor_style). Every delivery's click adds a ``click`` event and its conversion a ``purchase`` event AT
EXACTLY the delivery's time: a model must read only behaviours strictly before a delivery's time, and a leaky
history reader sees its own label. Rows are sorted by time (stable: a delivery's click before its purchase).

Consumption graph. Merchants have a price level p_m ~ N(0, 1), a tier by rank of p_m (⌊rank·5/n_merchants⌋, the
quintiles) and a popularity π_m ~ LogNormal(0, 1). A user pays at 1 + Poisson(7) merchant slots, except a share
of 3 % (chosen at random) with none. Each slot draws a tier j ~ softmax_j(TIER_PULL·c_u·TIER_LEVEL_j) with
TIER_PULL = 1 and TIER_LEVEL = (−1.4, −0.53, 0, 0.53, 1.4) (empty tiers excluded), a merchant of that tier ∝ π_m,
and pays

    n ~ 1 + Poisson(exp(N(0.5, 0.7))) times a ticket exp(3.7 + 0.6·p_m + 0.4·c_u − 0.5·h_u + 0.6·ε),

with h_u ~ N(0, 1) the user's thrift (unobserved); an edge's ``amount`` is the total, summed over the slots that
drew the same merchant, rounded to cents (at least 0.01). A user's own payments reveal capital blurred by thrift;
the merchants' price levels, which all their customers' payments reveal, add the users two hops away.

Unobserved noise keeps the oracle from being perfect: ε_c, ε_σ, ε_α, the ε_a's, ε_uf and h_u are seen only through
behaviours and payments, and the labels are draws. On 20 000 users the oracle AUC of true_p_ctcvr on the
deliveries is about 0.83 (0.81–0.84 on 3000-user worlds), CTR about 0.13, conversion given a click about 0.30
and CTCVR about 0.039.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from promokit.data.errors import DataError
from promokit.data.io import read_table, write_json, write_parquet, write_table

START = pd.Timestamp("2026-01-01")
#: Deliveries fall in [0, WINDOW_DAYS) days after START; past behaviours in [−HISTORY_DAYS, WINDOW_DAYS).
WINDOW_DAYS, HISTORY_DAYS = 60, 30
#: Dimension of the intent vectors a_u and b_f.
LATENT_DIM = 3

CATEGORIES = ("money", "bond", "mixed", "equity", "index", "qdii", "fof", "gold")
CATEGORY_RISK = np.array([1, 2, 3, 4, 4, 5, 3, 3])
CATEGORY_APPEAL = np.array([-0.7, -0.2, 0.1, 0.3, 0.2, 0.2, -0.2, 0.0])
CATEGORY_TICKET = np.array([0.6, 0.4, 0.0, -0.3, -0.2, -0.4, 0.2, -0.1])
CATEGORY_RETURN = np.array([0.02, 0.035, 0.06, 0.09, 0.08, 0.07, 0.05, 0.045])
CATEGORY_VOLATILITY = np.array([0.003, 0.03, 0.12, 0.22, 0.2, 0.25, 0.1, 0.15])

STYLES = ("steady", "planner", "balanced", "trader")
STYLE_SHARE = (0.3, 0.3, 0.25, 0.15)
STYLE_SIGMA = np.array([0.42, 0.6, 0.82, 1.1])
SIGMA_MIN, SIGMA_MAX = 0.3, 1.4
#: σ_uf = σ_u·exp(FUND_SIGMA·(r_f − 3)): purchases of riskier funds spread a little more.
FUND_SIGMA = 0.15

CHANNELS = ("home", "push", "banner")
CHANNEL_SHARE = np.array([0.5, 0.3, 0.2])
CHANNEL_EFFECT = np.array([0.0, 0.35, -0.45])
HOUR_WEIGHT = np.array([1.0, 0.6, 0.4, 0.3, 0.3, 0.4, 0.8, 1.5, 2.0, 2.0, 2.0, 2.0,
                        2.5, 2.2, 2.0, 2.0, 2.0, 2.2, 2.5, 3.0, 3.5, 3.5, 3.0, 2.0])
HOUR_SHARE = HOUR_WEIGHT / HOUR_WEIGHT.sum()
HOUR_EFFECT = 0.3 * np.cos(2.0 * np.pi * (np.arange(24) - 20) / 24.0)
DEVICES = ("android", "ios", "web")

ACTIONS = ("click", "purchase", "sell", "favorite")

#: Logit intercepts of the click and of the conversion given a click, and the mean log(1 + amount).
CLICK_BASE, CONVERT_BASE, AMOUNT_BASE = -2.05, -1.35, 7.0
#: Weight of the intent s_uf in the click logit, the conversion logit and μ_uf.
CLICK_INTENT, CONVERT_INTENT, AMOUNT_INTENT = 0.6, 0.6, 0.2
#: Penalty per risk level of the fund above the user's tolerance, in s_uf and in μ_uf.
RISK_PENALTY, AMOUNT_RISK_PENALTY = 0.5, 0.5
#: Rich users park larger sums in safe funds: μ_uf gains SAFE_CAPITAL·c_u·(3 − r_f)/2.
SAFE_CAPITAL = 0.3
#: Scale of the pair noise ε_uf in s_uf, length of the fund's taste vector (b_f2, b_f3), spread of the appeal η_f.
PAIR_NOISE, TASTE_RADIUS, APPEAL_NOISE = 0.4, 1.1, 0.3

#: Consumption graph: share of users without merchants, mean extra degree, merchant popularity σ, price tiers.
NO_MERCHANT_SHARE, EXTRA_DEGREE, POPULARITY_SIGMA, N_TIERS = 0.03, 7.0, 1.0, 5
#: Mean price level of each merchant tier (quintiles of N(0, 1)) and the pull of capital towards upscale tiers.
TIER_LEVEL = np.array([-1.4, -0.53, 0.0, 0.53, 1.4])
TIER_PULL = 1.0
TICKET_BASE = 3.7


@dataclass(frozen=True)
class ValueWorld:
    """The five observed tables, the truth per delivery (rows aligned with ``deliveries``) and per user × fund."""

    deliveries: pd.DataFrame   # user_id, fund, click, convert, amount, time, channel, hour
    users: pd.DataFrame        # user_id, tolerance, age, income_band, city_tier, tenure_days, investor_style, ...
    funds: pd.DataFrame        # fund, risk, annual_return, volatility, category
    behaviors: pd.DataFrame    # user_id, fund, action, time
    consumption: pd.DataFrame  # user_id, merchant_id, amount
    truth: pd.DataFrame        # user_id, fund, true_p_ctr, true_p_cvr, true_p_ctcvr, true_mu, true_sigma, true_etv
    truth_etv: pd.DataFrame    # user_id, fund, true_p_ctcvr, true_mu, true_sigma, true_etv
    n_merchants: int
    seed: int


def make_world(n_users: int = 20_000, n_funds: int = 8, deliveries_per_user: float = 5.0,
               behaviors_per_user: float = 20.0, merchants: int | None = None, seed: int = 0) -> ValueWorld:
    """Draw the users, funds, consumption graph, true parameters, behaviours and deliveries (module docstring);
    ``merchants`` defaults to ``n_users // 10`` (at least 1)."""
    n_merchants = max(n_users // 10, 1) if merchants is None else int(merchants)
    if n_users < 1 or n_funds < 1 or n_merchants < 1 or not deliveries_per_user >= 1.0 \
            or not behaviors_per_user >= 0.0:
        raise DataError(f"need n_users, n_funds and merchants ≥ 1, deliveries_per_user ≥ 1 and behaviors_per_user "
                        f"≥ 0, got {n_users}, {n_funds}, {n_merchants}, {deliveries_per_user}, {behaviors_per_user}")
    rng = np.random.default_rng(seed)
    users, funds = _Users(rng, n_users), _Funds(rng, n_funds)
    graph = _consumption(rng, users, n_merchants)
    params = _Parameters(rng, users, funds)
    past = _past_behaviors(rng, users, params.intent, behaviors_per_user)
    d = _deliveries(rng, params, deliveries_per_user)

    user_ids, fund_ids = _ids("u", n_users, 6), np.array([f"F{j + 1}" for j in range(n_funds)])
    deliveries = pd.DataFrame({
        "user_id": _labels(user_ids, d["user"]), "fund": _labels(fund_ids, d["fund"]),
        "click": d["click"].astype(np.int64), "convert": d["convert"].astype(np.int64), "amount": d["amount"],
        "time": _timestamps(d["second"]), "channel": _labels(CHANNELS, d["channel"]), "hour": d["hour"]})
    p_ctcvr = d["p_ctr"] * d["p_cvr"]
    truth = pd.DataFrame({
        "user_id": _labels(user_ids, d["user"]), "fund": _labels(fund_ids, d["fund"]), "true_p_ctr": d["p_ctr"],
        "true_p_cvr": d["p_cvr"], "true_p_ctcvr": p_ctcvr, "true_mu": d["mu"], "true_sigma": d["sigma"],
        "true_etv": expected_value(p_ctcvr, d["mu"], d["sigma"])})
    click, convert = d["click"], d["convert"]
    behaviors = _behavior_table(
        user_ids, fund_ids,
        np.concatenate([past["user"], d["user"][click], d["user"][convert]]),
        np.concatenate([past["fund"], d["fund"][click], d["fund"][convert]]),
        np.concatenate([past["action"], np.full(click.sum(), ACTIONS.index("click")),
                        np.full(convert.sum(), ACTIONS.index("purchase"))]),
        np.concatenate([past["second"], d["second"][click], d["second"][convert]]))
    pair_ctcvr = _context_mean_ctr(params.click_logit) * params.p_cvr
    truth_etv = pd.DataFrame({
        "user_id": _labels(user_ids, np.repeat(np.arange(n_users), n_funds)),
        "fund": _labels(fund_ids, np.tile(np.arange(n_funds), n_users)),
        "true_p_ctcvr": pair_ctcvr.ravel(), "true_mu": params.mu.ravel(), "true_sigma": params.sigma.ravel(),
        "true_etv": expected_value(pair_ctcvr, params.mu, params.sigma).ravel()})
    consumption = pd.DataFrame({"user_id": _labels(user_ids, graph[0]),
                                "merchant_id": _labels(_ids("m", n_merchants, 5), graph[1]), "amount": graph[2]})
    return ValueWorld(deliveries=deliveries, users=users.frame(user_ids), funds=funds.frame(fund_ids),
                      behaviors=behaviors, consumption=consumption, truth=truth, truth_etv=truth_etv,
                      n_merchants=n_merchants, seed=seed)


def expected_value(p_ctcvr, mu, sigma) -> np.ndarray:
    """ETV = p_ctcvr·(exp(μ + σ²/2) − 1), the paper's eq. 13."""
    return np.asarray(p_ctcvr) * np.expm1(np.asarray(mu) + 0.5 * np.asarray(sigma) ** 2)


class _Users:
    """Profile features and the latents that follow from them and from unobserved noise."""

    def __init__(self, rng: np.random.Generator, n: int):
        age_z, tenure_z, capital_noise, tolerance_noise, income_noise, city_noise, sigma_noise, activity_noise = \
            rng.standard_normal((8, n))
        self.age = np.clip(np.rint(38.0 + 11.0 * age_z), 18, 75).astype(np.int64)
        self.tenure_days = np.round(np.exp(5.5 + 0.9 * tenure_z), 1)
        self.capital = 0.2 * age_z + np.sqrt(0.96) * capital_noise
        self.tolerance = np.clip(np.rint(3.0 + 0.35 * self.capital + 1.0 * tolerance_noise), 1, 5).astype(np.int64)
        self.income_band = 1 + np.searchsorted([-0.85, -0.25, 0.25, 0.85],
                                               0.45 * self.capital + np.sqrt(1 - 0.45 ** 2) * income_noise)
        self.city_tier = 1 + np.searchsorted([-0.7, 0.2, 1.0], -0.3 * self.capital + np.sqrt(0.91) * city_noise)
        self.style = rng.choice(len(STYLES), n, p=STYLE_SHARE)
        self.sigma = np.clip(STYLE_SIGMA[self.style] * np.exp(0.2 * sigma_noise), SIGMA_MIN, SIGMA_MAX)
        self.log_activity = 0.3 * tenure_z + 0.4 * activity_noise
        a_noise = rng.standard_normal((n, LATENT_DIM))
        self.a = np.column_stack([0.5 * (self.tolerance - 3) + 0.7 * a_noise[:, 0],
                                  -0.5 * age_z + np.sqrt(0.75) * a_noise[:, 1], a_noise[:, 2]])
        self.device = rng.choice(len(DEVICES), n, p=[0.55, 0.4, 0.05])
        self.noise_score = np.round(rng.standard_normal(n), 4)

    def frame(self, user_ids: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"user_id": _labels(user_ids, np.arange(len(user_ids))), "tolerance": self.tolerance,
                             "age": self.age,
                             "income_band": self.income_band.astype(np.int64),
                             "city_tier": self.city_tier.astype(np.int64), "tenure_days": self.tenure_days,
                             "investor_style": _labels(STYLES, self.style), "device": _labels(DEVICES, self.device),
                             "noise_score": self.noise_score})


class _Funds:
    """Fund categories (cycling through CATEGORIES), risk levels, latent vectors and observed features."""

    def __init__(self, rng: np.random.Generator, k: int):
        self.category = np.arange(k) % len(CATEGORIES)
        self.risk = CATEGORY_RISK[self.category]
        angle = rng.uniform(0.0, 2.0 * np.pi, k)
        appeal_noise = rng.standard_normal(k)
        appeal_noise -= appeal_noise.mean() if k > 1 else 0.0
        self.b = np.column_stack([(self.risk - 3.0) / 2.0, TASTE_RADIUS * np.cos(angle),
                                  TASTE_RADIUS * np.sin(angle)])
        self.bias = CATEGORY_APPEAL[self.category] + APPEAL_NOISE * appeal_noise
        self.annual_return = np.round(CATEGORY_RETURN[self.category] + 0.05 * APPEAL_NOISE * appeal_noise
                                      + 0.01 * self.b[:, 1] + 0.003 * rng.standard_normal(k), 4)
        self.volatility = np.round(CATEGORY_VOLATILITY[self.category] * np.exp(0.25 * self.b[:, 2]), 4)

    def frame(self, fund_ids: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"fund": _labels(fund_ids, np.arange(len(fund_ids))), "risk": self.risk.astype(np.int64),
                             "annual_return": self.annual_return, "volatility": self.volatility,
                             "category": _labels(CATEGORIES, self.category)})


class _Parameters:
    """Intent s_uf and the true click logit (without context), p_cvr, μ and σ as users × funds matrices."""

    def __init__(self, rng: np.random.Generator, users: _Users, funds: _Funds):
        above = np.maximum(funds.risk[None, :] - users.tolerance[:, None], 0).astype(np.float64)  # (r_f − t_u)⁺
        self.intent = (users.a @ funds.b.T + funds.bias + PAIR_NOISE * rng.standard_normal(above.shape)
                       - RISK_PENALTY * above)
        self.click_logit = CLICK_BASE + CLICK_INTENT * self.intent + 0.5 * users.log_activity[:, None]
        self.p_cvr = _sigmoid(CONVERT_BASE + CONVERT_INTENT * self.intent + 0.35 * users.capital[:, None])
        self.mu = (AMOUNT_BASE + users.capital[:, None] + AMOUNT_INTENT * self.intent
                   + CATEGORY_TICKET[funds.category] + SAFE_CAPITAL * np.outer(users.capital, (3.0 - funds.risk) / 2.0)
                   - AMOUNT_RISK_PENALTY * above)
        self.sigma = users.sigma[:, None] * np.exp(FUND_SIGMA * (funds.risk - 3.0))


def _deliveries(rng: np.random.Generator, params: _Parameters, per_user: float) -> dict[str, np.ndarray]:
    """The randomised deliveries with their context, true parameters and outcomes, sorted by time."""
    n_users, n_funds = params.mu.shape
    user = np.repeat(np.arange(n_users), 1 + rng.poisson(per_user - 1.0, n_users))
    n = len(user)
    fund = rng.integers(0, n_funds, n)
    day, hour = rng.integers(0, WINDOW_DAYS, n), rng.choice(24, n, p=HOUR_SHARE)
    second = (day * 24 + hour) * 3600 + rng.integers(0, 3600, n)
    channel = rng.choice(len(CHANNELS), n, p=CHANNEL_SHARE)
    p_ctr = _sigmoid(params.click_logit[user, fund] + CHANNEL_EFFECT[channel] + HOUR_EFFECT[hour])
    p_cvr, mu, sigma = params.p_cvr[user, fund], params.mu[user, fund], params.sigma[user, fund]
    click = rng.random(n) < p_ctr
    convert = click & (rng.random(n) < p_cvr)
    amount = _amounts(rng, mu, sigma, convert)
    order = np.argsort(second, kind="stable")
    columns = {"user": user, "fund": fund, "second": second, "hour": hour.astype(np.int64), "channel": channel,
               "p_ctr": p_ctr, "p_cvr": p_cvr, "mu": mu, "sigma": sigma, "click": click, "convert": convert,
               "amount": amount}
    return {name: values[order] for name, values in columns.items()}


def _consumption(rng: np.random.Generator, users: _Users, n_merchants: int):
    """Edges (user, merchant, total amount) of the payment graph, sorted by user then merchant."""
    n = len(users.capital)
    price = rng.standard_normal(n_merchants)
    popularity = rng.lognormal(0.0, POPULARITY_SIGMA, n_merchants)
    tier = np.empty(n_merchants, np.int64)
    by_price = np.argsort(price, kind="stable")
    tier[by_price] = np.arange(n_merchants) * N_TIERS // n_merchants
    degree = 1 + rng.poisson(EXTRA_DEGREE, n)
    degree[rng.permutation(n)[:int(round(NO_MERCHANT_SHARE * n))]] = 0
    edge_user = np.repeat(np.arange(n), degree)
    tier_size = np.bincount(tier, minlength=N_TIERS)
    tier_weight = np.exp(TIER_PULL * np.outer(users.capital, TIER_LEVEL)) * (tier_size > 0)
    edge_tier = _draw_rows(rng, tier_weight, edge_user)
    members = np.argsort(tier, kind="stable")                       # merchants grouped by tier
    slot = np.arange(n_merchants) - np.repeat(np.cumsum(tier_size) - tier_size, tier_size)
    padded = np.zeros((N_TIERS, max(tier_size.max(), 1)))
    padded[tier[members], slot] = popularity[members]
    edge_merchant = members[(np.cumsum(tier_size) - tier_size)[edge_tier] + _draw_rows(rng, padded, edge_tier)]
    payments = 1 + rng.poisson(rng.lognormal(0.5, 0.7, len(edge_user)))
    thrift = rng.standard_normal(n)
    ticket = np.exp(TICKET_BASE + 0.6 * price[edge_merchant] + 0.4 * users.capital[edge_user] - 0.5 * thrift[edge_user]
                    + 0.6 * rng.standard_normal(len(edge_user)))
    pair, first = np.unique(edge_user * np.int64(n_merchants) + edge_merchant, return_inverse=True)
    amount = np.bincount(first, weights=payments * ticket, minlength=len(pair))
    return pair // n_merchants, pair % n_merchants, np.maximum(np.round(amount, 2), 0.01)


def _past_behaviors(rng: np.random.Generator, users: _Users, intent: np.ndarray,
                    per_user: float) -> dict[str, np.ndarray]:
    """User, fund, action and second (from START) of the behaviours drawn from the latents, unsorted."""
    n, k = intent.shape
    counts = rng.poisson(per_user * np.exp(users.log_activity - 0.125))
    user = np.repeat(np.arange(n), counts)
    fund = _draw_rows(rng, np.exp(intent - intent.max(axis=1, keepdims=True)), user)
    logits = np.zeros((n, k, len(ACTIONS)))
    logits[:, :, 1] = -1.5 + 0.8 * intent + 0.3 * users.capital[:, None]
    logits[:, :, 2] = -2.0 + 2.0 * np.log(users.sigma / 0.7)[:, None]
    logits[:, :, 3] = -1.2
    weights = np.exp(logits - logits.max(axis=2, keepdims=True)).reshape(n * k, len(ACTIONS))
    action = _draw_rows(rng, weights, user * k + fund)
    second = rng.integers(-HISTORY_DAYS * 86400, WINDOW_DAYS * 86400, len(user))
    return {"user": user, "fund": fund, "action": action, "second": second}


def _behavior_table(user_ids, fund_ids, user, fund, action, seconds) -> pd.DataFrame:
    order = np.argsort(seconds, kind="stable")
    return pd.DataFrame({"user_id": _labels(user_ids, user[order]), "fund": _labels(fund_ids, fund[order]),
                         "action": _labels(ACTIONS, action[order]), "time": _timestamps(seconds[order])})


def _context_mean_ctr(click_logit: np.ndarray) -> np.ndarray:
    """E over channel and hour (as deliveries draw them) of σ(click logit + channel effect + hour effect)."""
    total = np.zeros_like(click_logit)
    for c_share, c_effect in zip(CHANNEL_SHARE, CHANNEL_EFFECT):
        for h_share, h_effect in zip(HOUR_SHARE, HOUR_EFFECT):
            total += c_share * h_share * _sigmoid(click_logit + c_effect + h_effect)
    return total


def _amounts(rng: np.random.Generator, mu: np.ndarray, sigma: np.ndarray, convert: np.ndarray) -> np.ndarray:
    """expm1(N(μ, σ²)) rounded to cents (at least 0.01) where converted, else 0."""
    value = np.expm1(mu + sigma * rng.standard_normal(len(mu)))
    return np.where(convert, np.maximum(np.round(value, 2), 0.01), 0.0)


def _draw_rows(rng: np.random.Generator, weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each entry of ``rows``, a column drawn with probability ∝ ``weights[row]`` (non-negative, some > 0)."""
    n_rows, k = weights.shape
    cumulative = np.cumsum(weights, axis=1)
    total = cumulative[:, -1:]
    cumulative = np.divide(cumulative, total, out=np.ones_like(cumulative), where=total > 0)
    flat = (np.arange(n_rows)[:, None] + cumulative).ravel()
    column = np.searchsorted(flat, rows + rng.random(len(rows)), side="right") - rows * k
    last = k - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    return np.minimum(column, last[rows])


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _timestamps(seconds: np.ndarray) -> np.ndarray:
    return (np.datetime64(START, "s") + seconds.astype("timedelta64[s]")).astype("datetime64[ns]")


def _labels(names, codes: np.ndarray) -> pd.api.extensions.ExtensionArray:
    """``names[codes]`` as a pandas string array (built through Arrow: far faster than from Python strings)."""
    dictionary = pa.array(np.asarray(names, dtype=str).tolist(), pa.large_string())
    return pd.array(pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, np.int64)), dictionary)
                    .cast(pa.large_string()), dtype="str")


def _ids(prefix: str, n: int, width: int) -> np.ndarray:
    """``prefix`` followed by the zero-padded 1-based row number, widened for large tables."""
    digits = np.arange(1, n + 1).astype(str)
    return np.char.add(prefix, np.char.zfill(digits, max(width, len(str(n)))))  # np.char: NumPy 1.26 has no np.strings


# ------------------------------------------------------------------------------------------------ files
TABLES = ("deliveries", "users", "funds", "behaviors", "consumption", "truth", "truth_etv")
TRUTH_ETV_COLUMNS = ("user_id", "fund", "true_p_ctcvr", "true_mu", "true_sigma", "true_etv")


def write_world(world: ValueWorld, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the seven tables as ``<name>.parquet`` and the facts (sizes, rates, seed) as ``world.json``."""
    out = Path(out_dir)
    paths = {name: write_parquet(getattr(world, name), out / f"{name}.parquet") for name in TABLES}
    paths["world"] = write_json(_facts(world), out / "world.json")
    return paths


USER_KEYED = ("users", "deliveries", "behaviors", "consumption")


def write_world_parts(world: ValueWorld, out_dir: str | os.PathLike, part_users: list[int], seed: int = 0) -> Path:
    """Write the observed tables as a dataset in parts (``promokit.value.parts``): the users shuffled (seeded) into
    parts of ``part_users`` users each (0: an empty part), ``users/``, ``deliveries/``, ``behaviors/`` and
    ``consumption/`` co-partitioned by user (each part's rows in the world's order) and one ``funds.parquet``. The
    dataset means the one-folder world whose tables are the parts concatenated."""
    if sum(part_users) != len(world.users):
        raise DataError(f"the parts hold {sum(part_users)} users, the world {len(world.users)}")
    out = Path(out_dir)
    owner = np.repeat(np.arange(len(part_users)), part_users)[np.random.default_rng(seed).permutation(len(world.users))]
    part_of = pd.Series(owner, index=world.users["user_id"])
    for name in USER_KEYED:
        table = getattr(world, name)
        rows = part_of.reindex(table["user_id"]).to_numpy()
        for k in range(len(part_users)):
            write_parquet(table[rows == k].reset_index(drop=True), out / name / f"part-{k:05d}.parquet")
    write_parquet(world.funds, out / "funds.parquet")
    return out


def write_world_folders(world: ValueWorld, root: str | os.PathLike, part_users: list[int]) -> Path:
    """``world`` as a dataset in parts, ``root/parts`` (:func:`write_world_parts`), and as the one-folder dataset it
    means, ``root/whole`` (each user-keyed table its parts concatenated): the same data both ways, for comparing
    training over parts with training on one folder."""
    root = Path(root)
    write_world_parts(world, root / "parts", part_users)
    for name in USER_KEYED:
        whole = pd.concat([pd.read_parquet(p) for p in sorted((root / "parts" / name).glob("*.parquet"))],
                          ignore_index=True)
        write_parquet(whole, root / "whole" / f"{name}.parquet")
    write_parquet(world.funds, root / "whole" / "funds.parquet")
    return root


def write_synthetic(out_dir: str | os.PathLike, n_users: int = 20_000, n_funds: int = 8,
                    deliveries_per_user: float = 5.0, seed: int = 0) -> tuple[ValueWorld, dict[str, Path]]:
    """``promokit value synth``: the world of :func:`make_world` written by :func:`write_world`, with
    ``quotas.csv``, quotas its users can fill under the risk rule (:func:`feasible_quotas`, seeded)."""
    world = make_world(n_users, n_funds, deliveries_per_user=deliveries_per_user, seed=seed)
    paths = write_world(world, out_dir)
    quotas = feasible_quotas(world.users["tolerance"].to_numpy(), world.funds["risk"].to_numpy(), world.funds["fund"],
                             seed)
    paths["quotas"] = write_table(quotas, Path(out_dir) / "quotas.csv")
    return world, paths


def _facts(world: ValueWorld) -> dict:
    d, truth = world.deliveries, world.truth
    clicked, converted = d["click"] == 1, d["convert"] == 1
    echoes = int(d["click"].sum() + d["convert"].sum())
    return {
        "seed": world.seed, "start": str(START.date()), "window_days": WINDOW_DAYS, "history_days": HISTORY_DAYS,
        "users": len(world.users), "funds": len(world.funds), "deliveries": len(d),
        "behaviors": len(world.behaviors), "delivery_echo_behaviors": echoes,
        "merchants": world.n_merchants, "merchants_with_payments": int(world.consumption["merchant_id"].nunique()),
        "consumption_edges": len(world.consumption),
        "users_without_merchants": len(world.users) - int(world.consumption["user_id"].nunique()),
        "ctr": float(clicked.mean()), "cvr_given_click": float(converted[clicked].mean()) if clicked.any() else None,
        "ctcvr": float(converted.mean()),
        "mean_amount": float(d.loc[converted, "amount"].mean()) if converted.any() else None,
        "median_amount": float(d.loc[converted, "amount"].median()) if converted.any() else None,
        "oracle_auc_ctcvr": _auc(d["convert"].to_numpy(), truth["true_p_ctcvr"].to_numpy()),
        "mean_true_p_ctcvr": float(truth["true_p_ctcvr"].mean()), "mean_true_etv": float(truth["true_etv"].mean()),
        "true_sigma_range": [float(world.truth_etv["true_sigma"].min()), float(world.truth_etv["true_sigma"].max())],
        "risk_by_fund": dict(zip(world.funds["fund"], world.funds["risk"].tolist())),
        "tolerance_counts": world.users["tolerance"].value_counts().sort_index().to_dict(),
    }


def _auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """Area under the ROC curve by the rank-sum formula (ties get average ranks); None with one class."""
    positive = labels == 1
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = pd.Series(scores).rank(method="average").to_numpy()
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def read_truth_etv(path: str | os.PathLike) -> pd.DataFrame:
    """The oracle's ``truth_etv`` table of a world folder written by :func:`write_world` (or the file itself)."""
    path = Path(path)
    file = path if path.suffix == ".parquet" else path / "truth_etv.parquet"
    if not file.is_file():
        raise DataError(f"{file}: no such file; a world folder written by write_world holds truth_etv.parquet")
    frame = read_table(file)
    missing = [c for c in TRUTH_ETV_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(f"{file}: missing columns {missing}; expected {list(TRUTH_ETV_COLUMNS)}")
    return frame


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


def draw_outcomes(truth_etv: pd.DataFrame, user_ids, funds, seed: int) -> pd.DataFrame:
    """Outcomes of showing ``funds[i]`` to ``user_ids[i]`` drawn from the true model: ``convert`` ~
    Bernoulli(true_p_ctcvr), ``amount`` = expm1(N(true_mu, true_sigma²)) rounded to cents (at least 0.01) if
    converted, else 0. A pair that is not in ``truth_etv`` is a DataError naming it."""
    missing = [c for c in TRUTH_ETV_COLUMNS[:5] if c not in truth_etv.columns]
    if missing:
        raise DataError(f"truth_etv is missing columns {missing}; expected {list(TRUTH_ETV_COLUMNS)}")
    users, fund_names = np.asarray(user_ids).astype(str), np.asarray(funds).astype(str)
    if users.ndim != 1 or users.shape != fund_names.shape:
        raise DataError(f"user_ids and funds must be 1-d and of the same length, got shapes {users.shape} and "
                        f"{fund_names.shape}")
    known = pd.MultiIndex.from_arrays([truth_etv["user_id"].astype(str), truth_etv["fund"].astype(str)])
    if not known.is_unique:
        raise DataError(f"truth_etv repeats {int(known.duplicated().sum())} (user_id, fund) pairs, "
                        f"first {known[known.duplicated()][0]}")
    row = known.get_indexer(pd.MultiIndex.from_arrays([users, fund_names]))
    unknown = np.flatnonzero(row < 0)
    if len(unknown):
        raise DataError(f"{len(unknown)} of {len(row)} (user_id, fund) pairs are not in truth_etv, first "
                        f"({str(users[unknown[0]])!r}, {str(fund_names[unknown[0]])!r})")
    rng = np.random.default_rng(seed)
    convert = rng.random(len(row)) < truth_etv["true_p_ctcvr"].to_numpy(dtype=np.float64)[row]
    amount = _amounts(rng, truth_etv["true_mu"].to_numpy(dtype=np.float64)[row],
                      truth_etv["true_sigma"].to_numpy(dtype=np.float64)[row], convert)
    return pd.DataFrame({"convert": convert.astype(np.int64), "amount": amount})

"""A synthetic e-commerce impression world whose true probabilities are known.

Every impression gets the four conditional probabilities of the ESM² graph
impression → click → DAction/OAction → purchase (ESM² §3.2): y1 = P(click | impression),
y2 = P(DAction | click), y3 = P(purchase | click, DAction), y4 = P(purchase | click, OAction).
Labels are drawn along the graph and the truth columns compose the y's by eqs. 1–4.

The signal is carried by what a few hundred impressions per user and per item reveal: user and item
biases, user-segment × item-category tastes and the fit of price to purchasing power seen through the
categorical features, and monotone effects of noisy numeric features. A latent purchase intent shared by
y2, y3 and y4 makes DAction labels informative about purchase. A small per-impression noise is left for
no model to learn.

Micro-behaviours (GMCM §3; ``make_world(n_micro=N)``)
------------------------------------------------------
With ``n_micro = N > 0`` the table gains N 0/1 post-click LABEL columns (never features), named after the
paper's behaviours in the order of :data:`MICRO_BEHAVIORS` — ``cart, favorite, review, qa, zoom, sku, share,
detail, coupon, buy_button`` — and ``micro_11``, ``micro_12`` … beyond ten. They are 0 on every unclicked row.
On a clicked row, with the purchase label b already drawn from its true p_cvr as before::

    z     = (logit p_cvr − m) / s            buying intent: the purchase logit, standardised over the
                                             impressions (m, s its mean and std); a function of the features
    d     ~ N(0, 1)                          shared "browsing depth" of the visit
    c_k   ~ N(0, 1), k ∈ {evaluate, inspect, purchase}   one factor per behaviour cluster
    η_j   = α_j + β_j·z + γ_j·b + λ_j·d + κ_j·c_{k(j)}
    m_j | click, features, b, d, c  ~  Bernoulli(σ(η_j)),  independent over j

with the clusters review↔qa (evaluate), zoom↔sku↔detail (inspect) and cart↔coupon↔buy_button (purchase);
favorite and share belong to none (κ_j = 0). Every behaviour loads positively on the intent (β_j > 0) and on
the purchase itself (γ_j > 0), so purchases show more of every behaviour (GMCM Figure 2) and the behaviours
share the latent intent with the purchase: a multi-task model learns about CVR from them although they are
never inputs. The depth factor correlates all behaviours with one another, the cluster factor those of one
cluster more (so the concurrence matrix P of the PMG is informative). ``micro_{j+1}`` for j ≥ 10 reuses the
parameters of behaviour ``j mod 10`` with β and γ scaled by 0.7, and joins its cluster.

Truth. d and c are independent of b and of the features, and b | click, features ~ Bernoulli(p_cvr), so the
true probability given the click and the features (the truth column ``p_node_<name>``) is, exactly,

    p_node_j = p_cvr·E[σ(α_j + β_j z + γ_j + τ_j ε)] + (1 − p_cvr)·E[σ(α_j + β_j z + τ_j ε)],
    ε ~ N(0, 1),  τ_j² = λ_j² + κ_j²,

each expectation a logistic-normal integral computed by 16-point Gauss–Hermite quadrature (error < 1e-6).
The purchase, and with it p_cvr and the other truth columns, is untouched: the CVR oracle stays the true
probability given the features. The micro-behaviour draws come from a third child of the world's
SeedSequence, after everything else, so a world with ``n_micro = 0`` is the world drawn without that child,
and the first K behaviours of a world are the same for every ``n_micro ≥ K``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import FeatureSpec, write_parquet, write_text

N_AGE, N_GENDER, N_POWER = 7, 2, 5
N_CATEGORY, BRANDS_PER_CATEGORY, N_PRICE_LEVEL = 20, 6, 5
N_HOUR, N_POSITION, N_DEVICE = 24, 10, 3
#: Mean logits of y1..y4 over the impressions, set so that the base rates have the ESM² graph's shape
#: (denser); pinning the mean keeps the rates steady from one seed to the next.
INTERCEPT = {"y1": -2.43, "y2": -1.65, "y3": -1.4, "y4": -4.1}
#: Evening peak (14 h phase) of both traffic and click propensity over the hours of the day.
EVENING = np.sin(2 * np.pi * (np.arange(N_HOUR) - 14) / N_HOUR)

#: The micro-behaviours of GMCM (Figure 2), in the order ``make_world(n_micro=…)`` adds them.
MICRO_BEHAVIORS = ("cart", "favorite", "review", "qa", "zoom", "sku", "share", "detail", "coupon", "buy_button")
#: Clusters of micro-behaviours sharing a factor of their own on top of the browsing depth.
MICRO_CLUSTERS = ("evaluate", "inspect", "purchase")
#: Per behaviour: base logit α, intent loading β, purchase effect γ, depth loading λ, cluster loading κ, cluster.
MICRO_PARAMS = {
    "cart":       (-1.7, 0.7, 1.6, 0.6, 0.9, "purchase"),
    "favorite":   (-1.9, 0.5, 0.8, 0.7, 0.0, None),
    "review":     (-1.2, 0.5, 0.9, 0.8, 1.0, "evaluate"),
    "qa":         (-2.3, 0.5, 0.9, 0.7, 1.0, "evaluate"),
    "zoom":       (-0.6, 0.4, 0.6, 0.8, 1.0, "inspect"),
    "sku":        (-1.2, 0.6, 1.2, 0.7, 1.0, "inspect"),
    "share":      (-2.7, 0.3, 0.6, 0.6, 0.0, None),
    "detail":     (-0.3, 0.4, 0.5, 0.8, 1.0, "inspect"),
    "coupon":     (-2.3, 0.6, 1.2, 0.6, 0.9, "purchase"),
    "buy_button": (-2.6, 0.8, 2.4, 0.5, 0.9, "purchase"),
}
#: Gauss–Hermite points of the logistic-normal integrals of the p_node truth.
QUADRATURE_POINTS = 16


@dataclass(frozen=True)
class ConversionWorld:
    """An impression log, its true probabilities (same index) and its feature columns."""

    table: pd.DataFrame
    truth: pd.DataFrame
    categorical: list[str]
    numeric: list[str]
    #: The micro-behaviour label columns of ``table`` (none unless ``make_world(n_micro=…)``).
    micro_behaviors: list[str] = field(default_factory=list)


def make_world(n_users: int = 2000, n_items: int = 800, n_impressions: int = 300_000, seed: int = 0,
               n_extra_categorical: int = 0, extra_cardinality: int = 100_000,
               n_extra_numeric: int = 0, n_micro: int = 0) -> ConversionWorld:
    """Draw users, items and impressions, their true y1..y4 and labels along the ESM² graph.

    ``n_extra_categorical`` / ``n_extra_numeric`` add pure-noise fields ``cat_extra_{k}`` (uniform ids in
    ``[0, extra_cardinality)``) and ``num_extra_{k}`` (standard normal), drawn from their own stream so the
    rest of the world does not depend on them. ``n_micro`` adds that many micro-behaviour label columns
    (:func:`micro_behavior_names`; 0 on unclicked rows) and their true probabilities given a click,
    ``p_node_<name>``, to the truth (see the module docstring), also from a stream of their own.
    """
    if isinstance(n_micro, bool) or not isinstance(n_micro, (int, np.integer)) or n_micro < 0:
        raise ValueError(f"n_micro must be a whole number >= 0, got {n_micro!r}")
    world_seed, extra_seed, micro_seed = np.random.SeedSequence(seed).spawn(3)
    rng = np.random.default_rng(world_seed)
    world = _World(rng, n_users, n_items)
    users, items = _popular(rng, n_users, n_impressions), _popular(rng, n_items, n_impressions)
    features, y = world.impressions(rng, users, items, _context(rng, n_impressions))
    labels = _draw_labels(rng, *y)
    extra_cat, extra_num = _extras(np.random.default_rng(extra_seed), n_impressions, n_extra_categorical,
                                   extra_cardinality, n_extra_numeric)
    categorical = [*features["categorical"], *extra_cat]
    numeric = [*features["numeric"], *extra_num]
    truth = compose_truth(*y)
    micro, node_truth = {}, {}
    if n_micro > 0:
        micro, node_truth = draw_micro_behaviors(np.random.default_rng(micro_seed), n_micro, labels["click"],
                                                 labels["purchase"], truth["p_cvr"].to_numpy())
        truth = pd.concat([truth, pd.DataFrame(node_truth, index=truth.index)], axis=1)
    table = pd.DataFrame({**features["categorical"], **extra_cat, **features["numeric"], **extra_num, **labels,
                          **micro}, copy=False)
    return ConversionWorld(table, truth, categorical, numeric, list(micro))


def micro_behavior_names(n: int) -> list[str]:
    """The first ``n`` micro-behaviour names: GMCM's ten behaviours, then ``micro_11``, ``micro_12`` …"""
    return [MICRO_BEHAVIORS[j] if j < len(MICRO_BEHAVIORS) else f"micro_{j + 1}" for j in range(n)]


def micro_params(j: int) -> tuple[float, float, float, float, float, str | None]:
    """(α, β, γ, λ, κ, cluster) of behaviour ``j`` (0-based): those of ``MICRO_PARAMS``, and for j ≥ 10 those of
    behaviour ``j mod 10`` with the intent and purchase loadings β, γ scaled by 0.7."""
    alpha, beta, gamma, depth, loading, cluster = MICRO_PARAMS[MICRO_BEHAVIORS[j % len(MICRO_BEHAVIORS)]]
    if j >= len(MICRO_BEHAVIORS):
        beta, gamma = 0.7 * beta, 0.7 * gamma
    return alpha, beta, gamma, depth, loading, cluster


def draw_micro_behaviors(rng: np.random.Generator, n_micro: int, click: np.ndarray, purchase: np.ndarray,
                         p_cvr: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The micro-behaviour labels (0 where ``click`` is 0) and their truth ``p_node_<name>`` = P(behaviour |
    click, features), by the equations of the module docstring. Draws d, the cluster factors, then one uniform
    per row and behaviour in behaviour order, for every row (clicked or not) so the streams do not depend on
    the clicks."""
    n = len(click)
    logit = np.log(p_cvr) - np.log1p(-p_cvr)
    intent = (logit - logit.mean()) / logit.std()
    depth = rng.standard_normal(n)
    clusters = dict(zip(MICRO_CLUSTERS, rng.standard_normal((len(MICRO_CLUSTERS), n))))
    uniforms = rng.random((n_micro, n))
    clicked = np.asarray(click) == 1
    x, w = np.polynomial.hermite_e.hermegauss(QUADRATURE_POINTS)  # ∫ f(x) e^{-x²/2} dx ≈ Σ w_k f(x_k)
    w = w / np.sqrt(2 * np.pi)
    labels, truth = {}, {}
    for j, name in enumerate(micro_behavior_names(n_micro)):
        alpha, beta, gamma, lam, kappa, cluster = micro_params(j)
        base = alpha + beta * intent
        shared = lam * depth + (kappa * clusters[cluster] if cluster else 0.0)
        fired = clicked & (uniforms[j] < _sigmoid(base + gamma * purchase + shared))
        labels[name] = fired.astype(np.int64)
        tau = np.hypot(lam, kappa)
        buy = sum(wk * _sigmoid(base + gamma + tau * xk) for xk, wk in zip(x, w))
        no_buy = sum(wk * _sigmoid(base + tau * xk) for xk, wk in zip(x, w))
        truth[f"p_node_{name}"] = p_cvr * buy + (1 - p_cvr) * no_buy
    return labels, truth


def compose_truth(y1: np.ndarray, y2: np.ndarray, y3: np.ndarray, y4: np.ndarray) -> pd.DataFrame:
    """The ESM² sequential composition: p_ctr = y1 (eq. 1), p_ctavr = y1·y2 (eq. 2),
    p_cvr = y4(1 − y2) + y3·y2 (eq. 3), p_ctcvr = y1·p_cvr (eq. 4)."""
    p_cvr = y4 * (1 - y2) + y3 * y2
    return pd.DataFrame({"p_ctr": y1, "p_ctavr": y1 * y2, "p_cvr": p_cvr, "p_ctcvr": y1 * p_cvr})


def _draw_labels(rng: np.random.Generator, y1, y2, y3, y4) -> dict[str, np.ndarray]:
    """click ~ Bern(y1); after a click, DAction ~ Bern(y2) and purchase ~ Bern(y3 if DAction else y4)."""
    click = rng.random(len(y1)) < y1
    daction = click & (rng.random(len(y1)) < y2)
    purchase = click & (rng.random(len(y1)) < np.where(daction, y3, y4))
    return {"click": click.astype(np.int64), "daction": daction.astype(np.int64),
            "purchase": purchase.astype(np.int64)}


def _popular(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """``size`` draws from ``range(n)`` with a mild log-normal popularity skew."""
    weights = rng.lognormal(0.0, 0.5, n)
    return rng.choice(n, size=size, p=weights / weights.sum())


def _extras(rng: np.random.Generator, n: int, n_categorical: int, cardinality: int,
            n_numeric: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    categorical = rng.integers(0, cardinality, size=(n_categorical, n))
    numeric = rng.standard_normal((n_numeric, n))
    return ({f"cat_extra_{k}": column for k, column in enumerate(categorical)},
            {f"num_extra_{k}": column for k, column in enumerate(numeric)})


def _context(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Hour of day (busy evenings), slot on the page (0 = top) and device of each impression."""
    return {"hour": rng.choice(N_HOUR, n, p=(1.2 + EVENING) / (1.2 + EVENING).sum()),
            "position": rng.integers(0, N_POSITION, n),
            "device": rng.choice(N_DEVICE, n, p=[0.6, 0.3, 0.1])}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


class _World:
    """The latent population: user and item attributes and biases, and the segment-level effect tables."""

    def __init__(self, rng: np.random.Generator, n_users: int, n_items: int):
        self.age = rng.choice(N_AGE, n_users, p=[0.08, 0.22, 0.25, 0.18, 0.12, 0.09, 0.06])
        self.gender = rng.integers(0, N_GENDER, n_users)
        self.power = rng.choice(N_POWER, n_users, p=[0.15, 0.3, 0.3, 0.17, 0.08])
        self.activity = rng.standard_normal(n_users)
        self.activity_seen = np.round(self.activity + 0.2 * rng.standard_normal(n_users), 3)
        self.user_click = 0.15 * rng.standard_normal(n_users)
        self.user_intent = 0.15 * rng.standard_normal(n_users) + 0.3 * (self.power - 2)
        self.taste = 0.2 * rng.standard_normal((n_users, N_CATEGORY))
        self._items(rng, n_items)
        self.age_taste = 0.45 * rng.standard_normal((N_AGE, N_CATEGORY))
        self.gender_taste = 0.3 * rng.standard_normal((N_GENDER, N_CATEGORY))
        self.category_cart, self.category_direct = 0.3 * rng.standard_normal((2, N_CATEGORY))
        self.device_click, self.device_cart = np.array([[0.1, -0.15, 0.0], [0.15, -0.2, 0.0]])

    def _items(self, rng: np.random.Generator, n_items: int) -> None:
        """Category, brand (nested in category), price and its level, click and buy biases, historical rates."""
        self.category = rng.choice(N_CATEGORY, n_items, p=rng.dirichlet(np.full(N_CATEGORY, 4.0)))
        self.brand = self.category * BRANDS_PER_CATEGORY + rng.integers(0, BRANDS_PER_CATEGORY, n_items)
        log_price = rng.normal(3.0, 0.8, N_CATEGORY)[self.category] + 0.5 * rng.standard_normal(n_items)
        self.price = np.round(np.exp(log_price), 2)
        self.price_level = np.searchsorted(np.quantile(log_price, np.linspace(0, 1, N_PRICE_LEVEL + 1)[1:-1]),
                                           log_price)
        self.log_price_z = (log_price - log_price.mean()) / log_price.std()
        brand_click, brand_buy = 0.35 * rng.standard_normal((2, N_CATEGORY * BRANDS_PER_CATEGORY))
        self.item_click = 0.35 * rng.standard_normal(n_items) + brand_click[self.brand]
        self.item_buy = 0.2 * rng.standard_normal(n_items) + brand_buy[self.brand]
        self.hist_ctr = np.round(_sigmoid(-2.3 + self.item_click + 0.25 * rng.standard_normal(n_items)), 4)
        self.hist_cvr = np.round(_sigmoid(-3.0 + self.item_buy + 0.1 * rng.standard_normal(n_items)), 4)
        self.item_cart = 0.3 * rng.standard_normal(n_items)

    def impressions(self, rng: np.random.Generator, u: np.ndarray, i: np.ndarray, context: dict[str, np.ndarray]):
        """Features of the impressions (user ``u`` shown item ``i`` in ``context``) and their true y1..y4."""
        c = self.category[i]
        affinity = self.age_taste[self.age[u], c] + self.gender_taste[self.gender[u], c] + self.taste[u, c]
        features = {
            "categorical": {"user_id": u, "item_id": i, "user_age": self.age[u], "user_gender": self.gender[u],
                            "user_power": self.power[u], "item_category": c, "item_brand": self.brand[i],
                            "item_price_level": self.price_level[i], **context},
            "numeric": {"item_price": self.price[i], "item_hist_ctr": self.hist_ctr[i],
                        "item_hist_cvr": self.hist_cvr[i], "user_activity": self.activity_seen[u],
                        "user_item_pref": np.round(affinity + 0.2 * rng.standard_normal(len(u)), 3)},
        }
        logits = self._logits(rng, u, i, context, affinity)
        return features, tuple(_sigmoid(INTERCEPT[k] + z - z.mean()) for k, z in logits.items())

    def _logits(self, rng: np.random.Generator, u: np.ndarray, i: np.ndarray, context: dict[str, np.ndarray],
                affinity: np.ndarray) -> dict[str, np.ndarray]:
        """Centred logits of y1..y4. A purchase intent (user, item, taste and a per-impression draw) is shared
        by y2, y3, y4 and a little of y1; the fit of the price to the user's purchasing power weighs on
        purchase more than on DAction, and y2 and y4 have factors of their own."""
        n, c, device = len(u), self.category[i], context["device"]
        intent = self.user_intent[u] + self.item_buy[i] + 0.4 * affinity + 0.15 * rng.standard_normal(n)
        price_fit = -0.6 * np.abs(self.power[u] - self.price_level[i])
        click = (0.4 * self.activity[u] + self.user_click[u] + self.item_click[i] + affinity + 0.2 * intent
                 - 0.1 * context["position"] + 0.25 * EVENING[context["hour"]] + self.device_click[device]
                 + 0.15 * rng.standard_normal(n))
        cart = (intent + 0.3 * price_fit + self.item_cart[i] + self.category_cart[c] + self.device_cart[device]
                + 0.2 * rng.standard_normal(n))
        return {"y1": click, "y2": cart, "y3": 0.9 * (intent + price_fit) - 0.2 * self.log_price_z[i],
                "y4": 1.1 * (intent + price_fit) + self.category_direct[c] - 0.4 * self.log_price_z[i]}


def write_world(out: str | os.PathLike, n_users: int = 2000, n_items: int = 800, n_impressions: int = 300_000,
                seed: int = 0, truth: bool = False, n_micro: int = 0) -> tuple[ConversionWorld, Path | None]:
    """The world of :func:`make_world` written to ``out`` as a Parquet table (``truth``: with its true probabilities
    as columns ``true_p_*``) and, with ``n_micro`` micro-behaviours, a spec declaring them (labels, never features)
    beside it as ``OUT.spec.yaml``: the world and the spec's path (None without micro-behaviours)."""
    import yaml

    world = make_world(n_users=n_users, n_items=n_items, n_impressions=n_impressions, seed=seed, n_micro=n_micro)
    table = pd.concat([world.table, world.truth.add_prefix("true_")], axis=1) if truth else world.table
    write_parquet(table, out)
    if not world.micro_behaviors:
        return world, None
    spec_path = Path(out).with_suffix(".spec.yaml")
    spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id",
                       micro_behaviors=world.micro_behaviors)
    write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False), spec_path)
    return world, spec_path

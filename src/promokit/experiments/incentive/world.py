"""A synthetic incentive experiment on a customer–merchant payment graph whose true responses are known.

It is the world of the joint-incentive paper (Yu et al., AAAI 2021, sections 1, 3 and 4): every customer of the
randomized experiment is offered one coupon value r^c from the list R (uniformly at random) and redeems it or
not; every merchant is offered one commission r^m from R and shares a number of incentives. The generator
makes the paper's two claims testable, not guaranteed: the bipartite influence reaches a customer through
its merchants from two hops away, and the response curves have a change point that neither Cox's proportional
hazards nor a logistic curve in r can follow.

Graph. A share ``ISOLATED_SHARE`` (2 %) of customers and of merchants, chosen at random, has no edge. Every other customer pays at
d_u = min(1 + Poisson(mean_degree − 1), 10) merchants drawn by a log-normal popularity (σ = 1.3, so a few
merchants have hundreds of customers); every connected merchant gets at least one customer. The weight
w_uv is the number of payments, 1 + Poisson(exp(N(0.5, 0.7))) summed over repeated draws of a pair.

Homophily and influence. Merchants have a hidden type t_v ~ N(0, 1) and customers look like their
merchants: c_x0 = 0.6·z_u + 0.8·ε_u, with z_u the standardised payment-weighted mean type of u's
merchants (N(0, 1) for a customer without merchants). A merchant's enthusiasm is what its customers reveal,

    e_v = tanh(5·m_v),   m_v = Σ_u w_uv·c_x0_u / Σ_u w_uv   (0 without customers),

and a customer's influence is its merchants' mean enthusiasm ē_u = Σ_v w_uv·e_v / Σ_v w_uv (0, neutral,
without merchants). ē_u is a two-hop quantity — customer → merchants → their customers' c_x0 — that no
merchant feature holds, so a two-layer GNN can compute it while a one-hop aggregate of raw merchant features
cannot; the customer's own c_x0 only correlates with it. All latents are deterministic functions of the
observed features and the graph, so only the label draws are noise and a perfect model reaches the oracle.

Customers. Base propensity and sensitivity come from different features, so they vary independently:

    a_u = 0.9·tanh(1.2·c_x1) + 0.6·softplus(c_x2) + base[c_segment]
    s_u = 0.8·sin(1.2·c_x3) + 0.5·tanh(c_x4 + 0.5) + jump[c_segment]

(c_x5 is noise). The hazard per cent of coupon value is piecewise constant with a jump at ``CHANGE_POINT``
(80 cents: the hazard is higher on the piece from 80 to 100 and above, a change point between the levels 80
and 100 as in the paper's Figure 5; it sits on a level so that a hazard piecewise constant over R can show it),

    λ_u(τ) = α_u + β_u·[τ > 80],   α_u = BASE_HAZARD·exp(a_u + 0.8·ē_u),   β_u = JUMP_HAZARD·exp(s_u + 1.5·ē_u),

so Λ_u(r) = α_u·r + β_u·(r − 80)⁺ and the true response is f_c(u, r) = 1 − exp(−Λ_u(r)) (eq. 10); the label is
redeemed ~ Bernoulli(f_c(u, r^c)). As β_u/α_u varies across customers the curves are not proportional
hazards, and the kink at 80 is not a logistic curve in r.

Merchants. Activity ρ_v = exp(1.6 + 0.5·m_x0 + 0.3·tanh(2·m_x1) + activity[m_category] + 0.3·log(1 + n_v)),
with n_v its number of customers; prior_shares ~ Poisson(ρ_v). The response to the commission rises faster
for enthusiastic merchants and for merchants whose customers respond well,

    E[shares | r] = ρ_v·(0.4 + κ_v·r/100),   κ_v = 0.5·exp(0.6·e_v + 3·(q_v − 0.25) + 0.3·tanh(m_x2)),

with q_v the payment-weighted mean over its customers of their mean true response over R (0.25 without
customers); m_x3 is noise. The label shares ~ Poisson(E[shares | r^m]) is normalised as in the paper by the
previous window, and the truth is E[shares | r_j] / max(prior_shares, 1) given the drawn prior_shares.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import read_table, write_json, write_parquet

#: Coupon and commission values in cents, the treatment list R.
DEFAULT_LEVELS = (20, 40, 60, 80, 100, 120, 150, 200)
#: Coupon value (cents) at which the customers' hazard jumps; the levels must lie on both sides of it.
CHANGE_POINT = 80.0
#: Hazard per cent below the change point, and the extra hazard above it, for a_u = 0 and s_u = 0.
BASE_HAZARD, JUMP_HAZARD = 0.0012, 0.0035
#: Weight of the merchants' influence ē_u in log α_u and in log β_u.
INFLUENCE_BASE, INFLUENCE_JUMP = 0.8, 1.5
N_CUSTOMER_FEATURES, N_MERCHANT_FEATURES = 6, 4
ISOLATED_SHARE, MAX_DEGREE, POPULARITY_SIGMA = 0.02, 10, 1.3
#: c_x0 = HOMOPHILY·z_u + √(1 − HOMOPHILY²)·ε_u; e_v = tanh(ENTHUSIASM_SCALE·m_v).
HOMOPHILY, ENTHUSIASM_SCALE = 0.6, 5.0
SEGMENTS = ("young", "family", "senior", "student")
SEGMENT_SHARE = (0.35, 0.3, 0.2, 0.15)
SEGMENT_BASE = np.array([0.0, 0.3, -0.4, 0.2])
SEGMENT_JUMP = np.array([0.0, -0.3, 0.2, 0.6])
CATEGORIES = ("food", "grocery", "retail", "service", "transport", "leisure")
CATEGORY_SHARE = (0.3, 0.2, 0.2, 0.12, 0.1, 0.08)
CATEGORY_ACTIVITY = np.array([0.3, 0.2, 0.0, -0.2, 0.1, -0.3])
#: About the mean response of a customer over R: the q_v of a merchant with typical customers, and without any.
RESPONSE_REF = 0.25


@dataclass
class IncentiveWorld:
    """The three experiment tables, the value list and the true response curves (rows aligned with the tables)."""

    customers: pd.DataFrame        # customer_id, level, redeemed, c_x0..c_x5, c_segment
    merchants: pd.DataFrame        # merchant_id, level, shares, prior_shares, m_x0..m_x3, m_category
    edges: pd.DataFrame            # customer_id, merchant_id, weight (payments)
    levels: np.ndarray             # (K,) increasing
    customer_truth: np.ndarray     # (n_customers, K) P(redeem | offered r_j)
    merchant_truth: np.ndarray     # (n_merchants, K) E[shares | r_j] / max(prior_shares, 1)
    change_point: tuple[float, float]
    seed: int


def make_world(n_customers: int = 20_000, n_merchants: int = 2_000, mean_degree: float = 4.0,
               levels=DEFAULT_LEVELS, seed: int = 0) -> IncentiveWorld:
    """Draw the graph, the features, the true response curves and the labels of the experiment."""
    levels = _check_levels(levels)
    if n_customers < 1 or n_merchants < 1 or not 1.0 <= mean_degree <= MAX_DEGREE:
        raise DataError(f"need n_customers, n_merchants ≥ 1 and mean_degree in [1, {MAX_DEGREE}], got "
                        f"{n_customers}, {n_merchants}, {mean_degree}")
    rng = np.random.default_rng(seed)
    graph = _Graph(rng, n_customers, n_merchants, mean_degree)
    c_x, segment = _customer_features(rng, graph)
    m_x = np.round(rng.standard_normal((n_merchants, N_MERCHANT_FEATURES)), 4)
    category = rng.choice(len(CATEGORIES), n_merchants, p=CATEGORY_SHARE)

    enthusiasm = np.tanh(ENTHUSIASM_SCALE * graph.merchant_mean(c_x[:, 0], empty=0.0))
    influence = graph.customer_mean(enthusiasm, empty=0.0)
    customer_truth = customer_curves(c_x, segment, influence, levels)
    c_level = rng.integers(0, len(levels), n_customers)
    redeemed = rng.random(n_customers) < customer_truth[np.arange(n_customers), c_level]

    activity = np.exp(1.6 + 0.5 * m_x[:, 0] + 0.3 * np.tanh(2.0 * m_x[:, 1]) + CATEGORY_ACTIVITY[category]
                      + 0.3 * np.log1p(graph.merchant_degree))
    prior_shares = rng.poisson(activity)
    responsiveness = graph.merchant_mean(customer_truth.mean(axis=1), empty=RESPONSE_REF)
    slope = 0.5 * np.exp(0.6 * enthusiasm + 3.0 * (responsiveness - RESPONSE_REF) + 0.3 * np.tanh(m_x[:, 2]))
    expected_shares = activity[:, None] * (0.4 + np.outer(slope, levels / 100.0))
    m_level = rng.integers(0, len(levels), n_merchants)
    shares = rng.poisson(expected_shares[np.arange(n_merchants), m_level])

    customer_ids, merchant_ids = _ids("c", n_customers, 6), _ids("m", n_merchants, 5)
    customers = pd.DataFrame({"customer_id": customer_ids, "level": levels[c_level],
                              "redeemed": redeemed.astype(np.int64),
                              **{f"c_x{k}": c_x[:, k] for k in range(N_CUSTOMER_FEATURES)},
                              "c_segment": np.asarray(SEGMENTS)[segment]})
    merchants = pd.DataFrame({"merchant_id": merchant_ids, "level": levels[m_level], "shares": shares,
                              "prior_shares": prior_shares,
                              **{f"m_x{k}": m_x[:, k] for k in range(N_MERCHANT_FEATURES)},
                              "m_category": np.asarray(CATEGORIES)[category]})
    edges = pd.DataFrame({"customer_id": customer_ids[graph.customer], "merchant_id": merchant_ids[graph.merchant],
                          "weight": graph.weight})
    below = levels[levels <= CHANGE_POINT][-1]
    above = levels[levels > CHANGE_POINT][0]
    return IncentiveWorld(customers=customers, merchants=merchants, edges=edges, levels=levels,
                          customer_truth=customer_truth,
                          merchant_truth=expected_shares / np.maximum(prior_shares, 1)[:, None],
                          change_point=(float(below), float(above)), seed=seed)


def customer_curves(c_x: np.ndarray, segment: np.ndarray, influence: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """f_c(u, r_j) = 1 − exp(−Λ_u(r_j)) with Λ_u(r) = α_u·r + β_u·(r − CHANGE_POINT)⁺ (module docstring)."""
    base = 0.9 * np.tanh(1.2 * c_x[:, 1]) + 0.6 * np.logaddexp(0.0, c_x[:, 2]) + SEGMENT_BASE[segment]
    sensitivity = 0.8 * np.sin(1.2 * c_x[:, 3]) + 0.5 * np.tanh(c_x[:, 4] + 0.5) + SEGMENT_JUMP[segment]
    alpha = BASE_HAZARD * np.exp(base + INFLUENCE_BASE * influence)
    beta = JUMP_HAZARD * np.exp(sensitivity + INFLUENCE_JUMP * influence)
    cumulative = np.outer(alpha, levels) + np.outer(beta, np.maximum(levels - CHANGE_POINT, 0.0))
    return -np.expm1(-cumulative)


class _Graph:
    """The payment graph as aligned arrays (customer index, merchant index, weight), sorted by customer."""

    def __init__(self, rng: np.random.Generator, n_customers: int, n_merchants: int, mean_degree: float):
        self.n_customers, self.n_merchants = n_customers, n_merchants
        degree = np.minimum(1 + rng.poisson(mean_degree - 1.0, n_customers), MAX_DEGREE)
        degree[rng.permutation(n_customers)[:int(ISOLATED_SHARE * n_customers)]] = 0
        slot_customer = rng.permutation(np.repeat(np.arange(n_customers), degree))
        connected = rng.permutation(n_merchants)[int(ISOLATED_SHARE * n_merchants):]
        popularity = rng.lognormal(0.0, POPULARITY_SIGMA, len(connected))
        slot_merchant = connected[rng.choice(len(connected), len(slot_customer), p=popularity / popularity.sum())]
        n_anchor = min(len(connected), len(slot_customer))  # slots are shuffled: one random customer per merchant
        slot_merchant[:n_anchor] = connected[:n_anchor]
        payments = 1 + rng.poisson(rng.lognormal(0.5, 0.7, len(slot_customer)))
        pair, first = np.unique(slot_customer * np.int64(n_merchants) + slot_merchant, return_inverse=True)
        self.customer, self.merchant = pair // n_merchants, pair % n_merchants
        self.weight = np.bincount(first, weights=payments, minlength=len(pair))
        self.customer_weight = np.bincount(self.customer, weights=self.weight, minlength=n_customers)
        self.merchant_weight = np.bincount(self.merchant, weights=self.weight, minlength=n_merchants)
        self.merchant_degree = np.bincount(self.merchant, minlength=n_merchants)

    def customer_mean(self, merchant_values: np.ndarray, empty: float) -> np.ndarray:
        """Payment-weighted mean of a merchant quantity over each customer's merchants."""
        total = np.bincount(self.customer, weights=self.weight * merchant_values[self.merchant],
                            minlength=self.n_customers)
        return _ratio(total, self.customer_weight, empty)

    def merchant_mean(self, customer_values: np.ndarray, empty: float) -> np.ndarray:
        """Payment-weighted mean of a customer quantity over each merchant's customers."""
        total = np.bincount(self.merchant, weights=self.weight * customer_values[self.customer],
                            minlength=self.n_merchants)
        return _ratio(total, self.merchant_weight, empty)


def _ratio(total: np.ndarray, weight: np.ndarray, empty: float) -> np.ndarray:
    return np.where(weight > 0, total / np.maximum(weight, 1e-300), empty)


def _customer_features(rng: np.random.Generator, graph: _Graph) -> tuple[np.ndarray, np.ndarray]:
    """c_x1..c_x5 ~ N(0, 1) and a segment; c_x0 follows the hidden types of the customer's merchants."""
    n = graph.n_customers
    mean_type = graph.customer_mean(rng.standard_normal(graph.n_merchants), empty=np.nan)
    connected = np.isfinite(mean_type)
    centred = mean_type[connected] - mean_type[connected].mean()
    z = rng.standard_normal(n)
    z[connected] = centred / max(centred.std(), 1e-12)
    c_x = rng.standard_normal((n, N_CUSTOMER_FEATURES))
    c_x[:, 0] = HOMOPHILY * z + np.sqrt(1.0 - HOMOPHILY ** 2) * c_x[:, 0]
    return np.round(c_x, 4), rng.choice(len(SEGMENTS), n, p=SEGMENT_SHARE)


def _check_levels(levels) -> np.ndarray:
    levels = np.asarray(levels, dtype=np.float64)
    if (levels.ndim != 1 or not np.isfinite(levels).all() or (levels < 0).any() or (np.diff(levels) <= 0).any()
            or not levels.min() < CHANGE_POINT < levels.max()):
        raise DataError(f"levels must be non-negative, strictly increasing and lie on both sides of the change "
                        f"point {CHANGE_POINT:g}, got {np.atleast_1d(levels).tolist()}")
    return levels


def _ids(prefix: str, n: int, width: int) -> np.ndarray:
    """``prefix`` followed by the zero-padded row number, widened for large tables."""
    digits = np.arange(n).astype(str)
    return np.char.add(prefix, np.char.zfill(digits, max(width, len(str(n - 1)))))  # np.char: NumPy 1.26 has no np.strings


# ------------------------------------------------------------------------------------------------ files
def write_world(world: IncentiveWorld, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the three tables, the two truth tables (id, true_<level>…) and ``world.json`` into ``out_dir``."""
    out = Path(out_dir)
    columns = [f"true_{level:g}" for level in world.levels]
    truth = {
        "truth_customers": pd.DataFrame({"customer_id": world.customers["customer_id"],
                                         **dict(zip(columns, world.customer_truth.T))}),
        "truth_merchants": pd.DataFrame({"merchant_id": world.merchants["merchant_id"],
                                         **dict(zip(columns, world.merchant_truth.T))}),
    }
    tables = {"customers": world.customers, "merchants": world.merchants, "edges": world.edges, **truth}
    paths = {name: write_parquet(frame, out / f"{name}.parquet") for name, frame in tables.items()}
    paths["world"] = write_json(_facts(world), out / "world.json")
    return paths


def _facts(world: IncentiveWorld) -> dict:
    c, m = world.customers, world.merchants
    return {
        "customers": len(c), "merchants": len(m), "edges": len(world.edges),
        "levels": world.levels.tolist(), "change_point": list(world.change_point), "seed": world.seed,
        "isolated_customers": int((~c["customer_id"].isin(world.edges["customer_id"])).sum()),
        "isolated_merchants": int((~m["merchant_id"].isin(world.edges["merchant_id"])).sum()),
        "redemption_rate": float(c["redeemed"].mean()),
        "redemption_rate_by_level": c.groupby("level")["redeemed"].mean().reindex(world.levels).tolist(),
        "mean_true_response": float(world.customer_truth.mean()),
        "merchant_label_mean": float((m["shares"] / np.maximum(m["prior_shares"], 1)).mean()),
    }


def read_truth(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids, levels and the (rows, K) truth matrix of a ``truth_*.parquet`` written by :func:`write_world`."""
    frame = read_table(path)
    columns = [c for c in frame.columns[1:] if str(c).startswith("true_")]
    if len(columns) != frame.shape[1] - 1 or not columns:
        raise DataError(f"{path}: expected an id column then true_<level> columns, got {list(frame.columns)}")
    levels = np.array([float(c.removeprefix("true_")) for c in columns])
    return frame.iloc[:, 0].to_numpy(), levels, frame[columns].to_numpy(dtype=np.float64)


def customer_truth(path: str | os.PathLike, customers: pd.DataFrame) -> np.ndarray:
    """The true response curves in the ``truth_customers.parquet`` at ``path``, a row per row of ``customers``, whose
    ``customer_id`` column must match the file's row by row: what ``IncentiveModel.evaluate(truth=…)`` takes."""
    ids, _, curves = read_truth(path)
    if len(ids) != len(customers) or (ids != customers["customer_id"].to_numpy()).any():
        raise DataError(f"`truth` {path}: its customer_id column does not match the customers table row by row")
    return curves

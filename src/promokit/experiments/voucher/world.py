"""A synthetic voucher world whose true redemption probabilities are known (the oracle of the bench).

Users have a latent voucher sensitivity, a latent redemption habit, a category taste (Dirichlet) and a
preferred price level. Vouchers (marketing activities) run in one to four waves (collection windows) over
the horizon, so a voucher of the test period has often been collected before; they have a validity period, a
``min_spend`` and a ``discount``, and apply either to one category or to the whole platform. Items have a
category, a brand (nested in the category) and a price level; ``voucher_items`` lists the items each voucher applies
to.

Each session S(u, o, C) (DMBGN §3.1) has a current shopping intent (a category drawn from the user's taste).
Pre-collection add-to-cart and order events follow the intent and the taste. The redemption logit is

    0.7·sensitivity + 0.5·deal·(1 + 0.5·sensitivity) + 0.8·habit + 0.6·taste_match + 1.0·intent_match
    + 0.6·tanh(cart_reach) + 0.3·noise,

with ``deal`` the standardised log(1 + discount) − 0.35·log(1 + min_spend), ``taste_match`` the user's taste
for the voucher's category, ``intent_match`` whether the session's intent is the voucher's category, and
``cart_reach`` how far the pre-collection cart in the voucher's scope gets towards ``min_spend``. The logits
are centred and shifted so the mean rate is near ``BASE_RATE``. Sensitivity and habit show through the
user's history of redeemed sessions; taste, intent and cart through the pre-collection behaviour — the
target's post-collection behaviour is not needed. Post-collection events (volume raised by sensitivity ×
deal, and, for a redemption, the orders that redeem it at a price level raised by ``min_spend``) are drawn
for every session: a historical session's are legitimately known, the target's are the leak a model must
not read. A redeemed session's outcome is known at its redemption, an unredeemed one's at its expiry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import write_parquet
from promokit.data.errors import DataError
from promokit.voucher.contract import VoucherTables, check_tables, write_tables

N_CATEGORY, N_PRICE_LEVEL, BRANDS_PER_CATEGORY = 20, 5, 8
PRICE_OF_LEVEL = np.array([5.0, 12.0, 30.0, 75.0, 180.0])
MIN_SPEND_LEVELS = np.array([0.0, 20.0, 50.0, 100.0, 200.0])
VALIDITY_DAYS = np.array([3.0, 7.0, 14.0])
#: a voucher (marketing activity) is run in up to this many waves over the horizon, each with its window
MAX_WAVES = 4
HORIZON_DAYS = 180.0
START = pd.Timestamp("2024-01-01")
#: logit intercept after centring; the mean redemption rate lands near 0.18
BASE_LOGIT = -1.9
PROFILE_CATEGORICAL = ("user_age", "user_gender", "user_purchase_level", "voucher_category")
#: The sizes of the world of the demo and of the synthetic bench.
DEMO_WORLD = {"n_users": 3000, "n_vouchers": 120, "n_items": 1000, "n_sessions": 20_000}


@dataclass(frozen=True)
class VoucherWorld:
    """Validated tables and the true redemption probability of each session (rows of ``tables.sessions``)."""

    tables: VoucherTables
    truth: np.ndarray


def make_world(n_users: int = 3000, n_vouchers: int = 120, n_items: int = 1000, n_sessions: int = 20_000,
                       seed: int = 0) -> VoucherWorld:
    """Draw users, vouchers, items, sessions with their behaviour, true probabilities and labels.

    Sessions are distinct (user, voucher) pairs, so slightly fewer than ``n_sessions`` may come out when the
    pairs run short. ``n_items`` must be at least ``N_CATEGORY · N_PRICE_LEVEL`` (every category has every
    price level).
    """
    if n_items < N_CATEGORY * N_PRICE_LEVEL:
        raise DataError(f"n_items must be at least {N_CATEGORY * N_PRICE_LEVEL}, got {n_items}")
    rng = np.random.default_rng(seed)
    users = _users(rng, n_users)
    vouchers = _vouchers(rng, n_vouchers)
    catalogue = _Catalogue(rng, n_items)
    u, v, day = _sessions(rng, users, vouchers, n_sessions)
    intent = _draw_rows(rng, users["taste"][u])

    pre = _behaviour(rng, users, catalogue, u, intent, day, n_atc=2.0 + 3.0 * users["activity"][u],
                     n_ord=0.8 + 1.0 * users["activity"][u])
    scope = vouchers["category"][v]
    logit = _redemption_logit(rng, users, vouchers, u, v, intent, pre)
    truth = 1.0 / (1.0 + np.exp(-(BASE_LOGIT + logit - logit.mean())))
    redeemed = rng.random(len(u)) < truth

    validity = vouchers["validity"][v]
    outcome_day = day + np.where(redeemed, validity * rng.beta(1.0, 3.0, len(u)), validity)
    post = _post_behaviour(rng, users, vouchers, catalogue, u, v, intent, day, outcome_day, redeemed, scope)

    sessions = pd.DataFrame({
        "session_id": np.arange(len(u)), "user_id": u, "voucher_id": v,
        "min_spend": vouchers["min_spend"][v], "discount": vouchers["discount"][v],
        "collect_time": _timestamps(day), "outcome_time": _timestamps(outcome_day),
        "redeemed": redeemed.astype(np.int64),
        "user_age": users["age"][u], "user_gender": users["gender"][u],
        "user_purchase_level": users["purchase_level"][u], "voucher_category": scope,
    })
    events = pd.concat([pre.frame(), post.frame()], ignore_index=True)
    tables = check_tables(sessions, events, catalogue.items, categorical=PROFILE_CATEGORICAL,
                          voucher_items=_voucher_items(vouchers, catalogue.items))
    return VoucherWorld(tables=tables, truth=truth)


def write_world(world: VoucherWorld, folder, truth: bool = False) -> dict[str, Path]:
    """Write the world's tables as Parquet files into ``folder`` (:func:`~promokit.voucher.contract.write_tables`)
    and, with ``truth``, ``truth.parquet`` (``session_id, true_p_redeem``); returns the tables' files by name."""
    files = write_tables(world.tables, folder)
    if truth:
        write_parquet(pd.DataFrame({"session_id": world.tables.sessions["session_id"], "true_p_redeem": world.truth}),
                      Path(folder) / "truth.parquet")
    return files


# ------------------------------------------------------------------------------------------------ population
def _users(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    level = rng.choice(N_PRICE_LEVEL, n, p=[0.15, 0.3, 0.3, 0.17, 0.08])
    return {
        "sensitivity": rng.standard_normal(n),
        "habit": rng.standard_normal(n),
        "taste": rng.dirichlet(np.full(N_CATEGORY, 0.3), n),
        "level": level,
        "activity": rng.lognormal(0.0, 0.5, n),
        "age": rng.choice(7, n, p=[0.08, 0.22, 0.25, 0.18, 0.12, 0.09, 0.06]),
        "gender": rng.integers(0, 2, n),
        "purchase_level": np.clip(level + rng.integers(-1, 2, n), 0, N_PRICE_LEVEL - 1),
    }


def _vouchers(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    min_spend = rng.choice(MIN_SPEND_LEVELS, n, p=[0.2, 0.25, 0.25, 0.2, 0.1])
    discount = np.where(min_spend > 0, np.round(min_spend * rng.uniform(0.05, 0.3, n)), rng.integers(1, 6, n))
    deal = np.log1p(discount) - 0.35 * np.log1p(min_spend)
    return {
        "category": np.where(rng.random(n) < 0.3, -1, rng.integers(0, N_CATEGORY, n)),
        "min_spend": min_spend, "discount": discount.astype(np.float64),
        "deal": (deal - deal.mean()) / deal.std(),
        "start": rng.uniform(0.0, HORIZON_DAYS - 15.0, (n, MAX_WAVES)),
        "window": rng.uniform(3.0, 15.0, (n, MAX_WAVES)), "waves": rng.integers(1, MAX_WAVES + 1, n),
        "validity": rng.choice(VALIDITY_DAYS, n), "popularity": rng.lognormal(0.0, 0.7, n),
    }


def _voucher_items(vouchers, items: pd.DataFrame) -> pd.DataFrame:
    """The items each voucher applies to: those of its category, or every item for a platform voucher."""
    scope = vouchers["category"][:, None]
    voucher, item = np.nonzero((items["category"].to_numpy()[None, :] == scope) | (scope < 0))
    return pd.DataFrame({"voucher_id": voucher, "item_id": items["item_id"].to_numpy()[item]})


class _Catalogue:
    """Items laid out in (category, price level) cells, every cell non-empty, so a draw is a lookup."""

    def __init__(self, rng: np.random.Generator, n_items: int):
        n_cells = N_CATEGORY * N_PRICE_LEVEL
        cell = np.concatenate([np.arange(n_cells), rng.integers(0, n_cells, n_items - n_cells)])
        cell.sort()
        self.cell_start = np.searchsorted(cell, np.arange(n_cells))
        self.cell_count = np.bincount(cell, minlength=n_cells)
        self.category, self.level = cell // N_PRICE_LEVEL, cell % N_PRICE_LEVEL
        self.item_id = rng.permutation(n_items)
        brand = self.category * BRANDS_PER_CATEGORY + rng.integers(0, BRANDS_PER_CATEGORY, n_items)
        self.items = pd.DataFrame({"item_id": self.item_id, "category": self.category, "brand": brand,
                                   "price_level": self.level}).sort_values("item_id", ignore_index=True)

    def draw(self, rng: np.random.Generator, category: np.ndarray, level: np.ndarray) -> np.ndarray:
        """Positions (in cell order) of a random item of each (category, level)."""
        cell = category * N_PRICE_LEVEL + level
        return self.cell_start[cell] + (rng.random(len(cell)) * self.cell_count[cell]).astype(np.int64)


def _sessions(rng: np.random.Generator, users, vouchers, n_sessions: int):
    """Distinct (user, voucher) pairs drawn by activity and popularity; collection inside one of the voucher's
    waves (collection windows)."""
    n_draw = int(n_sessions * 1.3) + 10
    u = rng.choice(len(users["activity"]), n_draw, p=users["activity"] / users["activity"].sum())
    v = rng.choice(len(vouchers["popularity"]), n_draw, p=vouchers["popularity"] / vouchers["popularity"].sum())
    first = np.sort(np.unique(u * len(vouchers["popularity"]) + v, return_index=True)[1])[:n_sessions]
    u, v = u[first], v[first]
    wave = (rng.random(len(v)) * vouchers["waves"][v]).astype(np.int64)
    day = vouchers["start"][v, wave] + rng.random(len(v)) * vouchers["window"][v, wave]
    order = np.argsort(day, kind="stable")
    return u[order], v[order], day[order]


def _draw_rows(rng: np.random.Generator, probabilities: np.ndarray) -> np.ndarray:
    """One categorical draw per row of a (rows, k) probability matrix."""
    cumulative = probabilities.cumsum(axis=1)
    return np.minimum((cumulative < rng.random(len(probabilities))[:, None] * cumulative[:, -1:]).sum(axis=1),
                      probabilities.shape[1] - 1)


# ------------------------------------------------------------------------------------------------ behaviour
@dataclass
class _Events:
    session: np.ndarray
    item: np.ndarray          # catalogue position
    category: np.ndarray
    level: np.ndarray
    action: np.ndarray
    day: np.ndarray
    item_id: np.ndarray

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"session_id": self.session, "item_id": self.item_id, "action": self.action,
                             "action_time": _timestamps(self.day)})


def _draw_events(rng, users, catalogue: _Catalogue, u, counts: np.ndarray, action: str, focus: np.ndarray,
                 focus_share: float, level_shift: np.ndarray, start: np.ndarray, end: np.ndarray) -> _Events:
    """``counts[s]`` events of session s: category ``focus[s]`` with probability ``focus_share``, else from the
    taste; price level near the user's level plus ``level_shift[s]``; times uniform in [start[s], end[s])."""
    session = np.repeat(np.arange(len(counts)), counts)
    n = len(session)
    user = u[session]
    category = np.where(rng.random(n) < focus_share, focus[session], _draw_rows(rng, users["taste"][user]))
    level = np.clip(users["level"][user] + level_shift[session] + np.rint(rng.normal(0, 0.7, n)).astype(np.int64),
                    0, N_PRICE_LEVEL - 1)
    item = catalogue.draw(rng, category, level)
    day = start[session] + rng.random(n) * (end[session] - start[session])
    return _Events(session, item, category, level, np.full(n, action), day, catalogue.item_id[item])


def _concat(parts: list[_Events]) -> _Events:
    return _Events(*(np.concatenate([getattr(p, f) for p in parts]) for f in _Events.__dataclass_fields__))


def _behaviour(rng, users, catalogue, u, intent, day, n_atc, n_ord) -> _Events:
    """Pre-collection add-to-cart and order events of the last ~5 days, following the session's intent."""
    lookback = day - rng.uniform(1.0, 5.0, len(u))
    no_shift = np.zeros(len(u), dtype=np.int64)
    return _concat([_draw_events(rng, users, catalogue, u, rng.poisson(rate), action, intent, 0.6, no_shift,
                                 lookback, day) for action, rate in (("atc", n_atc), ("ord", n_ord))])


def _redemption_logit(rng, users, vouchers, u, v, intent, pre: _Events) -> np.ndarray:
    """The uncentred redemption logit of the module docstring."""
    scope = vouchers["category"][v]
    platform = scope < 0
    sensitivity = users["sensitivity"][u]
    taste = users["taste"][u, np.maximum(scope, 0)]
    taste_match = np.where(platform, 0.0, np.clip(np.log(N_CATEGORY * taste + 1e-3), -2.0, 2.0) / 2.0)
    intent_match = np.where(platform, 0.4, (intent == scope).astype(np.float64))
    in_scope = (pre.action == "atc") & (platform[pre.session] | (pre.category == scope[pre.session]))
    cart = np.bincount(pre.session[in_scope], weights=PRICE_OF_LEVEL[pre.level[in_scope]], minlength=len(u))
    reach = np.log1p(cart) - np.log1p(vouchers["min_spend"][v])
    deal = vouchers["deal"][v]
    return (0.7 * sensitivity + 0.5 * deal * (1.0 + 0.5 * sensitivity) + 0.8 * users["habit"][u]
            + 0.6 * taste_match + 1.0 * intent_match + 0.6 * np.tanh(reach) + 0.3 * rng.standard_normal(len(u)))


def _post_behaviour(rng, users, vouchers, catalogue, u, v, intent, day, outcome_day, redeemed, scope) -> _Events:
    """Post-collection events up to the outcome: browsing raised by sensitivity × deal, plus, for a redemption,
    orders in the voucher's scope at a price level raised by min_spend."""
    push = np.maximum(users["sensitivity"][u], 0.0) * np.maximum(vouchers["deal"][v], 0.0)
    no_shift = np.zeros(len(u), dtype=np.int64)
    target = np.where(scope < 0, intent, scope)
    spend_shift = (vouchers["min_spend"][v] >= 100).astype(np.int64)
    browse_atc = rng.poisson(0.5 + 0.5 * users["activity"][u] + 0.7 * push)
    browse_ord = rng.poisson(0.2 + 0.3 * push)
    redeem_ord = np.where(redeemed, 1 + rng.poisson(1.0, len(u)), 0)
    return _concat([
        _draw_events(rng, users, catalogue, u, browse_atc, "atc", intent, 0.4, no_shift, day, outcome_day),
        _draw_events(rng, users, catalogue, u, browse_ord, "ord", intent, 0.4, no_shift, day, outcome_day),
        _draw_events(rng, users, catalogue, u, redeem_ord, "ord", target, 1.0, spend_shift, day, outcome_day),
    ])


def _timestamps(days: np.ndarray) -> np.ndarray:
    return (np.datetime64(START, "s") + np.rint(days * 86400.0).astype("timedelta64[s]")).astype("datetime64[ns]")

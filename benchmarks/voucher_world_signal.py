"""Where the voucher world's signal is, and which models read it: ``lr`` on the session table, ``lr`` given one
column that states the world's strongest term outright, and DMBGN with its defaults and without each of the things
that let it read the signal, on the same split, each AUC with a paired bootstrap interval against ``lr``.

The world's redemption logit holds ``1.0·intent_match + 0.6·tanh(cart_reach) + 0.6·taste_match``
(:mod:`promokit.experiments.voucher.world`): how the session's pre-collection behaviour meets the voucher's scope.
The session table holds none of it; the behaviour log does. ``in_scope`` is that meeting written as two numeric
columns, from the same pre-collection events DMBGN reads: the share of the session's pre-collection events whose item
is in the voucher's category (every item, for a platform-wide voucher) and log(1 + their count). If ``lr`` with them
gains much, the signal is in the behaviour and a model of the behaviour can learn it; the DMBGN rows show how much of
it DMBGN learns: with its defaults (its item nodes marked in or out of the voucher's scope from ``voucher_items``, no
lazy L2 on the embedding rows, the floor's offset), without ``voucher_items`` (the paper's item nodes), with the other
domains' embedding decay (λ = 10) and without the offset.

``--label match`` asks whether a model can read the match at all: the world's labels are drawn again from the share
alone, redeemed with probability σ(6·(share − 0.3)) (the ``oracle`` row is that probability), so everything there is to
learn is how the behaviour meets the scope.

The world: ``--sessions`` sessions (default 40,000) of the demo's 3,000 users, 120 vouchers and 1,000 items; the latest
10 % by collection time are the test, the estimator's own validation rows are cut from the rest; every model with its
defaults, as selected (``refit=False``).

Usage::

    .venv/bin/python benchmarks/voucher_world_signal.py [--sessions 40000] [--seed 0]
    .venv/bin/python benchmarks/voucher_world_signal.py --label match --sessions 20000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import warnings

import numpy as np
import pandas as pd

from promokit.experiments.voucher.world import make_world
from promokit.metrics import auc
from promokit.metrics.bootstrap import paired_bootstrap, signed
from promokit.report import markdown_table
from promokit.voucher.estimator import VoucherModel


def in_scope(tables) -> pd.DataFrame:
    """The sessions with ``in_scope_share`` and ``in_scope_events`` (see the module's docstring)."""
    sessions = tables.sessions
    events = tables.events[tables.events["pre"]].merge(tables.items[["item_id", "category"]], on="item_id")
    events = events.merge(sessions[["session_id", "voucher_category"]], on="session_id")
    events["match"] = (events["voucher_category"] == -1) | (events["category"] == events["voucher_category"])
    per_session = events.groupby("session_id")["match"].agg(["mean", "sum"])
    out = sessions.copy()
    out["in_scope_share"] = out["session_id"].map(per_session["mean"]).fillna(0.0)
    out["in_scope_events"] = np.log1p(out["session_id"].map(per_session["sum"]).fillna(0.0))
    return out


def match_labels(tables, seed: int):
    """The tables with labels drawn again from the in-scope share alone, redeemed with probability
    σ(6·(share − 0.3)), and that probability (see the module's docstring)."""
    truth = 1.0 / (1.0 + np.exp(-6.0 * (in_scope(tables)["in_scope_share"].to_numpy() - 0.3)))
    drawn = (np.random.default_rng(seed).random(len(truth)) < truth).astype(float)
    return dataclasses.replace(tables, sessions=tables.sessions.assign(redeemed=drawn)), truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=40_000)
    p.add_argument("--seed", type=int, default=0, help="seed of the world and of the training")
    p.add_argument("--label", choices=("world", "match"), default="world",
                   help="the world's own labels, or labels drawn from the in-scope share alone")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}")
    world = make_world(n_sessions=args.sessions, seed=args.seed)
    tables, truth = match_labels(world.tables, args.seed) if args.label == "match" else (world.tables, world.truth)
    order = np.argsort(tables.sessions["collect_time"].to_numpy(), kind="stable")
    cut = int(len(order) * 0.9)
    train, test = np.sort(order[:cut]), np.sort(order[cut:])
    labelled = dataclasses.replace(tables, sessions=in_scope(tables),
                                   numeric=[*tables.numeric, "in_scope_share", "in_scope_events"])
    unscoped = dataclasses.replace(tables, voucher_items=None)
    runs = {"lr": ("lr", tables, None, {}), "lr + in_scope": ("lr", labelled, None, {}),
            "dmbgn": ("dmbgn", tables, None, {}), "dmbgn, no voucher_items": ("dmbgn", unscoped, None, {}),
            "dmbgn, embedding decay 10": ("dmbgn", tables, None, {"embedding_decay": 10.0}),
            "dmbgn, wide none": ("dmbgn", tables, {"wide": "none"}, {})}
    y = tables.sessions["redeemed"].to_numpy()[test]
    scores, seconds = {}, {}
    for name, (model, data, params, train_settings) in runs.items():
        began = time.perf_counter()
        fitted = VoucherModel(model, params=params, train={"progress": False, "seed": args.seed, **train_settings},
                              refit=False).fit(data, rows=train)
        seconds[name] = time.perf_counter() - began
        scores[name] = fitted.predict(data, rows=test)["p_redeem"].to_numpy()
        print(f"  {name}: AUC {auc(y, scores[name]):.4f} ({seconds[name]:.0f} s)", flush=True)
    scores["oracle"] = truth[test]
    rows = []
    for name, s in scores.items():
        diff = paired_bootstrap(auc, y, s, scores["lr"], seed=args.seed)
        rows.append({"model": name, "AUC": f"{auc(y, s):.4f}",
                     "vs lr [95%]": "—" if name == "lr" else
                     f"{signed(diff.observed)} [{signed(diff.low)}, {signed(diff.high)}]",
                     "fit s": f"{seconds[name]:.0f}" if name in seconds else "—"})
    print(f"\n{len(train):,} training sessions, {len(test):,} test sessions ({int(y.sum()):,} redeemed)")
    print(markdown_table(pd.DataFrame(rows)))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

"""Where DMBGN's graph encoder loses the match between a session's behaviour and the voucher's scope.

On the voucher world with the labels drawn from the in-scope share alone (``voucher_world_signal.py --label match``),
each encoder below is trained by itself for ``--epochs`` epochs (Adam, lr 0.001, batches of 512, the test the latest
10 % by collection time), its behaviour embedding scored against a learnt embedding of the voucher's scope by a dot
product, as eq. (5) scores e_b against e_o:

- ``category mix, linear``: a linear map of the session's pre-collection category histogram (what the match needs and
  nothing else);
- ``UVG, avg``: :class:`~promokit.voucher.models.dmbgn.UVGEncoder` with ``encoder="avg"`` (DMBGN-AvgPooling);
- ``UVG, gnn``: the same with the paper's GNN and top-k pooling (eqs. 1–3), DMBGN's default;
- ``UVG, gnn, item ids dropped``: the GNN encoder with 99 % of the item-id codes replaced by the unknown slot.

Then DMBGN itself (defaults and ``encoder="avg"``), fitted as the estimator fits it, and the R² of a ridge map from its
target e_b to the session's category histogram on the test sessions: how much of the behaviour's content the trained
network keeps. Test AUC of every row with the oracle (the drawing probability) for scale.

Usage::

    .venv/bin/python benchmarks/voucher_uvg_probe.py [--sessions 20000] [--epochs 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import pandas as pd
import torch
from sklearn.linear_model import Ridge
from voucher_world_signal import match_labels

from promokit.experiments.voucher.world import N_CATEGORY, make_world
from promokit.metrics import auc
from promokit.report import markdown_table
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.graph import UVGStore
from promokit.voucher.models.dmbgn import UVGEncoder


def category_mix(tables) -> np.ndarray:
    """(sessions, N_CATEGORY): the share of each session's pre-collection events in each item category."""
    events = tables.events[tables.events["pre"]].merge(tables.items[["item_id", "category"]], on="item_id")
    mix = np.zeros((len(tables.sessions), N_CATEGORY))
    np.add.at(mix, (events["session_id"].to_numpy(), events["category"].to_numpy()), 1.0)
    return mix / np.maximum(mix.sum(axis=1, keepdims=True), 1.0)


class ScopeDot(torch.nn.Module):
    """A behaviour encoder's output · a learnt embedding of the voucher's scope (eq. 5's product, as a logit)."""

    def __init__(self, encode, width: int, scopes: int):
        super().__init__()
        self.encode, self.scope = encode, torch.nn.Embedding(scopes, width)

    def forward(self, rows: torch.Tensor, scope: torch.Tensor) -> torch.Tensor:
        return (self.encode(rows) * self.scope(scope[rows])).sum(dim=1)


def train_alone(net: ScopeDot, scope, y, train, test, epochs: int, seed: int) -> float:
    """Test AUC after ``epochs`` epochs of the log loss on ``train``."""
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
    labels, generator = torch.as_tensor(y, dtype=torch.float32), torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        net.train()
        order = torch.as_tensor(train)[torch.randperm(len(train), generator=generator)]
        for start in range(0, len(order), 512):
            rows = order[start:start + 512]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(rows, scope), labels[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    net.eval()
    with torch.no_grad():
        return auc(y[test], net(torch.as_tensor(test), scope).numpy())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="seed of the world, the labels and the training")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}")
    tables, truth = match_labels(make_world(n_sessions=args.sessions, seed=args.seed).tables, args.seed)
    y = tables.sessions["redeemed"].to_numpy()
    order = np.argsort(tables.sessions["collect_time"].to_numpy(), kind="stable")
    cut = int(len(order) * 0.9)
    train, test = np.sort(order[:cut]), np.sort(order[cut:])
    mix = category_mix(tables)
    scope = torch.as_tensor(tables.sessions["voucher_category"].to_numpy() + 1)  # −1 (platform-wide) → 0
    store = UVGStore.build(tables, fit_rows=train)
    mix_tensor = torch.as_tensor(mix, dtype=torch.float32)

    def uvg(**options):
        encoder = UVGEncoder(store, sparse=False, **options)
        return encoder, lambda rows: encoder(store.batch(rows, store.target_zones)).behaviour

    rows, began = [], time.perf_counter()
    for name, options in (("category mix, linear", None), ("UVG, avg", {"encoder": "avg"}),
                          ("UVG, gnn", {}), ("UVG, gnn, item ids dropped", {"oov_dropout": 0.99})):
        torch.manual_seed(args.seed)
        if options is None:
            linear = torch.nn.Linear(N_CATEGORY, 32)
            net = ScopeDot(lambda r, linear=linear: linear(mix_tensor[r]), 32, N_CATEGORY + 1)
            net.add_module("linear", linear)
        else:
            encoder, encode = uvg(**options)
            net = ScopeDot(encode, encoder.dim, N_CATEGORY + 1)
            net.add_module("encoder", encoder)
        score = train_alone(net, scope, y, train, test, args.epochs, args.seed)
        rows.append({"what": f"{name} · scope (alone, {args.epochs} epochs)", "AUC": f"{score:.4f}", "R² of e_b": "—"})
        print(f"  {rows[-1]['what']}: {score:.4f} ({time.perf_counter() - began:.0f} s)", flush=True)
    for name, params in (("lr", None), ("dmbgn", None), ("dmbgn, encoder avg", {"encoder": "avg"})):
        model = "lr" if name == "lr" else "dmbgn"
        fitted = VoucherModel(model, params=params, train={"progress": False, "seed": args.seed},
                              refit=False).fit(tables, rows=train)
        score = auc(y[test], fitted.predict(tables, rows=test)["p_redeem"].to_numpy())
        kept = "—"
        if model == "dmbgn":
            with torch.no_grad():
                behaviour = fitted.net_._embed(torch.as_tensor(np.arange(len(y))), fitted.net_.store.target_zones)
            behaviour = behaviour.behaviour.numpy()
            kept = f"{Ridge(1e-3).fit(behaviour[train], mix[train]).score(behaviour[test], mix[test]):.3f}"
        rows.append({"what": f"{name} (estimator defaults{'' if params is None else ', ' + str(params)})",
                     "AUC": f"{score:.4f}", "R² of e_b": kept})
        print(f"  {rows[-1]['what']}: {score:.4f}", flush=True)
    rows.append({"what": "oracle (the drawing probability)", "AUC": f"{auc(y[test], truth[test]):.4f}",
                 "R² of e_b": "—"})
    print(f"\n{len(train):,} training sessions, {len(test):,} test sessions ({int(y[test].sum()):,} redeemed)")
    print(markdown_table(pd.DataFrame(rows)))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

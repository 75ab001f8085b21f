"""Where DMBGN's graph encoder loses the match between a session's behaviour and the voucher's scope.

On the voucher world (its own labels, or with ``--label match`` the labels drawn from the in-scope share alone, as
``voucher_world_signal.py --label match``), each behaviour encoder below is trained alone on top of the ``lr`` floor's
logit (solved on the training sessions, then fixed, as DMBGN's default ``offset`` wide term is), its embedding scored
against a learnt embedding of the voucher's scope by a dot product, as eq. (5) scores e_b against e_o; Adam at lr 0.001,
batches of 512, the test the latest 10 % by collection time, its AUC after 2, 4 and 8 epochs:

- ``category mix, linear``: a linear map of the session's pre-collection category histogram (what the match needs and
  nothing else);
- ``UVG, avg``: :class:`~promokit.voucher.models.dmbgn.UVGEncoder` with ``encoder="avg"`` (DMBGN-AvgPooling);
- ``UVG, gnn``: the same with the paper's GNN and top-k pooling (eqs. 1–3), DMBGN's default;
- ``UVG, gnn, item ids dropped``: the GNN encoder with 99 % of the item-id codes replaced by the unknown slot.

Then DMBGN itself (defaults, and ``encoder="avg"``), fitted as the estimator fits it (``refit=False``), and the R² of a
ridge map from its target e_b to the session's category histogram on the test sessions: how much of the behaviour's
content the trained network keeps. The floor alone and the oracle give the scale.

Usage::

    .venv/bin/python benchmarks/voucher_uvg_probe.py --label match [--sessions 20000] [--seed 0]
    .venv/bin/python benchmarks/voucher_uvg_probe.py --label world --sessions 40000
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
    """The floor's logit + a behaviour encoder's output · a learnt embedding of the voucher's scope (eq. 5's
    product)."""

    def __init__(self, encode, width: int, scopes: int, floor: torch.Tensor):
        super().__init__()
        self.encode, self.scope, self.floor = encode, torch.nn.Embedding(scopes, width), floor

    def forward(self, rows: torch.Tensor, scope: torch.Tensor) -> torch.Tensor:
        return self.floor[rows] + (self.encode(rows) * self.scope(scope[rows])).sum(dim=1)


def train_alone(net: ScopeDot, scope, y, train, test, checkpoints: tuple[int, ...], seed: int) -> list[float]:
    """Test AUC after each of ``checkpoints`` epochs of the log loss on ``train``."""
    optimiser = torch.optim.Adam(net.parameters(), lr=1e-3)
    labels, generator = torch.as_tensor(y, dtype=torch.float32), torch.Generator().manual_seed(seed)
    scores = []
    for epoch in range(1, max(checkpoints) + 1):
        net.train()
        order = torch.as_tensor(train)[torch.randperm(len(train), generator=generator)]
        for start in range(0, len(order), 512):
            rows = order[start:start + 512]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(rows, scope), labels[rows])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        if epoch in checkpoints:
            net.eval()
            with torch.no_grad():
                scores.append(auc(y[test], net(torch.as_tensor(test), scope).numpy()))
    return scores


def floor_logit(tables, train, seed: int) -> tuple[torch.Tensor, VoucherModel]:
    """The ``lr`` floor fitted on ``train`` (L2 chosen on its latest 10 %) and its logit on every session."""
    floor = VoucherModel("lr", train={"progress": False, "seed": seed}, test_fraction=0, refit=False)
    floor.fit(tables, rows=train)
    p = floor.predict(tables)["p_redeem"].to_numpy().clip(1e-7, 1 - 1e-7)
    return torch.as_tensor(np.log(p / (1 - p)), dtype=torch.float32), floor


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", choices=("world", "match"), default="match",
                   help="the world's own labels, or labels drawn from the in-scope share alone")
    p.add_argument("--sessions", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0, help="seed of the world, the labels and the training")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}")
    world = make_world(n_sessions=args.sessions, seed=args.seed)
    tables, truth = match_labels(world.tables, args.seed) if args.label == "match" else (world.tables, world.truth)
    y = tables.sessions["redeemed"].to_numpy()
    order = np.argsort(tables.sessions["collect_time"].to_numpy(), kind="stable")
    cut = int(len(order) * 0.9)
    train, test = np.sort(order[:cut]), np.sort(order[cut:])
    mix = category_mix(tables)
    mix_tensor = torch.as_tensor(mix, dtype=torch.float32)
    scope = torch.as_tensor(tables.sessions["voucher_category"].to_numpy() + 1)  # −1 (platform-wide) → 0
    store = UVGStore.build(tables, fit_rows=train)
    floor, _ = floor_logit(tables, train, args.seed)
    checkpoints = (2, 4, 8)
    column = f"AUC after {' / '.join(str(c) for c in checkpoints)} epochs"
    rows = [{"what": "`lr` floor", column: f"{auc(y[test], floor[test].numpy()):.4f}", "R² of e_b": "—"}]
    began = time.perf_counter()
    encoders = (("category mix, linear", None), ("UVG encoder, avg", {"encoder": "avg"}), ("UVG encoder, gnn", {}),
                ("UVG encoder, gnn, 99 % of item ids dropped", {"oov_dropout": 0.99}))
    for name, options in encoders:
        torch.manual_seed(args.seed)
        if options is None:
            encoder = torch.nn.Linear(N_CATEGORY, 32)
            encode, width = (lambda r, linear=encoder: linear(mix_tensor[r])), 32
        else:
            encoder = UVGEncoder(store, sparse=False, **options)
            encode = (lambda r, uvg=encoder: uvg(store.batch(r, store.target_zones)).behaviour)
            width = encoder.dim
        net = ScopeDot(encode, width, N_CATEGORY + 1, floor)
        net.add_module("encoder", encoder)
        scores = train_alone(net, scope, y, train, test, checkpoints, args.seed)
        rows.append({"what": f"floor + {name} · scope", column: " / ".join(f"{s:.4f}" for s in scores),
                     "R² of e_b": "—"})
        print(f"  {rows[-1]['what']}: {rows[-1][column]} ({time.perf_counter() - began:.0f} s)", flush=True)
    for name, params in (("DMBGN", None), ("DMBGN, `encoder=\"avg\"`", {"encoder": "avg"})):
        fitted = VoucherModel("dmbgn", params=params, train={"progress": False, "seed": args.seed},
                              refit=False).fit(tables, rows=train)
        score = auc(y[test], fitted.predict(tables, rows=test)["p_redeem"].to_numpy())
        with torch.no_grad():
            behaviour = fitted.net_._embed(torch.as_tensor(np.arange(len(y))), fitted.net_.store.target_zones)
        behaviour = behaviour.behaviour.numpy()
        kept = Ridge(1e-3).fit(behaviour[train], mix[train]).score(behaviour[test], mix[test])
        rows.append({"what": f"{name} (estimator defaults, epoch chosen on validation)",
                     column: f"{score:.4f}", "R² of e_b": f"{kept:.3f}"})
        print(f"  {rows[-1]['what']}: {score:.4f}", flush=True)
    rows.append({"what": "oracle", column: f"{auc(y[test], truth[test]):.4f}", "R² of e_b": "—"})
    print(f"\n{args.label} labels: {len(train):,} training sessions, {len(test):,} test sessions "
          f"({int(y[test].sum()):,} redeemed)")
    print(markdown_table(pd.DataFrame(rows)))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

"""Voucher-embedding pre-training, DMBGN section 3.4.3, eq. (6).

The UVG encoder (voucher and item node embeddings, Higher-order GNN, eq. 3 MLP) is trained so that the UVG
score s_UVG = σ(e_b · e_o) (eq. 5) predicts whether the session was redeemed:
L_pre-voucher = 1/N Σ_n BCE(y_n, s_n). The graphs use all four zones — these are past sessions whose outcome
is known — so pre-training must only see TRAINING sessions: the caller passes their rows and labels, nothing
else is read. The resulting state dict initialises :class:`promokit.voucher.models.dmbgn.DMBGN`
(``pretrained=``; fine-tuned by DMBGN, frozen by DMBGN-Pretrained).

Item embeddings (section 3.4.2: MetaPath2Vec pre-training or a user table, see
:mod:`promokit.voucher.item_embedding`) enter as ``item_embeddings`` (indexed by the store's item codes) and
initialise the encoder here as in DMBGN; with ``freeze_items`` eq. (6) leaves them unchanged, and the state dict
carries them on into DMBGN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from promokit.data import DataError
from promokit.nn import binary_log_loss
from promokit.training import make_optimizers, seed_everything
from promokit.training.device import net_device, resolve_device, running_on, to_device
from promokit.voucher.graph import UVGStore
from promokit.voucher.models.dmbgn import UVGEncoder


@dataclass
class PretrainedUVG:
    """``state``: the UVG encoder's state dict; ``params``: the encoder settings it was trained with, in DMBGN's
    parameter names (``DMBGN(layout, store, **params, pretrained=state)``); ``losses``: the mean eq. (6) loss
    of each epoch."""

    state: dict[str, Tensor]
    params: dict
    losses: list[float] = field(default_factory=list)


def pretrain_uvg(store: UVGStore, rows, redeemed, *, emb_dim: int = 16, uvg_dim: int = 32, gnn_layers: int = 2,
                 ratio: float = 0.9, encoder: str = "gnn", directed: bool = True,
                 item_embeddings: Tensor | None = None, freeze_items: bool = False, item_dim: int | None = None,
                 epochs: int = 3, batch_size: int = 1024, lr: float = 1e-3, seed: int = 0,
                 device: str = "auto") -> PretrainedUVG:
    """Train a UVG encoder on eq. (6) over the session ``rows`` (training sessions only) with their 0/1
    ``redeemed`` labels, Adam at ``lr`` (SparseAdam for the embeddings), seeded, on ``device`` (a
    :class:`~promokit.training.TrainConfig` ``device`` setting). ``item_embeddings``, ``freeze_items``,
    ``item_dim`` as in :class:`UVGEncoder`."""
    rows = torch.as_tensor(np.asarray(rows), dtype=torch.long)
    labels = torch.as_tensor(np.asarray(redeemed), dtype=torch.float32)
    if rows.shape != labels.shape:
        raise DataError(f"pretrain: {len(rows)} rows but {len(labels)} redeemed labels")
    not_binary = (labels != 0) & (labels != 1)
    if not_binary.any():
        raise DataError(f"redeemed: {int(not_binary.sum())} labels not 0/1, e.g. {labels[not_binary][0].item()}")
    seed_everything(seed)
    model = UVGEncoder(store, emb_dim, uvg_dim, gnn_layers, ratio, encoder, directed,
                       item_embeddings=item_embeddings, freeze_items=freeze_items, item_dim=item_dim)
    params = {"emb_dim": emb_dim, "uvg_dim": uvg_dim, "gnn_layers": gnn_layers, "ratio": ratio,
              "encoder": encoder, "directed": directed, "freeze_items": freeze_items,
              "item_dim": model.item.embedding_dim}
    with running_on(model, resolve_device(device)) as placed:
        losses = _epochs(model, store, rows, labels, epochs, batch_size, lr, seed, placed)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return PretrainedUVG(state=state, params=params, losses=losses)


def _epochs(model: UVGEncoder, store: UVGStore, rows: Tensor, labels: Tensor, epochs: int, batch_size: int,
            lr: float, seed: int, device: torch.device) -> list[float]:
    """The epochs of :func:`pretrain_uvg` with ``model`` on ``device``: each epoch's mean eq. (6) loss."""
    optimizers = make_optimizers(model, lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(rows), generator=generator, device=generator.device)
        total = 0.0
        for start in range(0, len(rows), batch_size):
            chunk = order[start:start + batch_size]
            graphs = to_device(store.batch(rows[chunk]), device)
            loss = binary_log_loss(model(graphs).score, labels[chunk].to(device))  # eq. (6)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in optimizers:
                opt.step()
            total += loss.item() * len(chunk)
        losses.append(total / max(len(rows), 1) if len(rows) else math.nan)
    model.eval()
    return losses


class UVGScoring(nn.Module):
    r"""Eq. (6) as a network the trainer's loop trains (training over parts, ``promokit.voucher.train_parts``): the UVG
    score s_UVG (eq. 5) of each ``batch["session"]``'s graph, all zones, read from ``store``, against its
    ``redeemed`` label. ``params``: :func:`pretrain_uvg`'s encoder settings; :attr:`state` is what it returns.

    Paper: the voucher-embedding pre-training of the DMBGN paper (``dmbgn-voucher-redemption.txt``, §3.4.3):

    .. math::
        L_{pre\text{-}voucher} = \frac{1}{N} \sum_{n=1}^{N} l(y^n_{UVG}, s^n_{UVG}) \quad (6), \qquad
        s_{UVG} = \sigma(e_{UVG,b} \cdot e_{UVG,o}) \quad (5)

    Args:
        store (UVGStore): the sessions' UVGs (:class:`UVGStore`), read by session row.
        params: :func:`pretrain_uvg`'s encoder settings in DMBGN's names (``emb_dim``, ``uvg_dim``, ``gnn_layers``,
            ``ratio``, ``encoder``, ``directed``, ``freeze_items``, ``item_dim``).
        item_embeddings: pre-trained item embeddings ``(n_item_codes, k)`` initialising the item-id table.

    Shapes:
        - **input:** ``batch["session"]`` ``(B,)`` session rows; for :meth:`loss` also ``batch["redeemed"]`` ``(B,)``
        - **output:** ``p_redeem`` ``(B,)``, the sessions' s_UVG
    """

    labels = ("redeemed",)
    outputs = ("p_redeem",)

    def __init__(self, store, params: dict, item_embeddings: Tensor | None = None):
        super().__init__()
        self.store = store
        self.uvg = UVGEncoder(store, **_encoder_args(params), item_embeddings=item_embeddings)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        graphs = to_device(self.store.batch(batch["session"]), net_device(self))
        return {"p_redeem": self.uvg(graphs).score}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        loss = binary_log_loss(out["p_redeem"], batch["redeemed"])  # eq. (6)
        return loss, {"pretrain": loss.detach()}

    @property
    def state(self) -> dict[str, Tensor]:
        return {k: v.detach().cpu().clone() for k, v in self.uvg.state_dict().items()}


def _encoder_args(params: dict) -> dict:
    """:func:`pretrain_uvg`'s encoder settings (DMBGN's names) as :class:`UVGEncoder`'s arguments."""
    names = {"uvg_dim": "dim", "gnn_layers": "layers"}
    return {names.get(k, k): v for k, v in params.items()}

"""DNN baseline of the DMBGN paper (section 4.2): embeddings of every feature into an MLP."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from promokit.nn import MLP, WIDE_L2, FeatureEmbedding
from promokit.voucher.models.base import FieldLayout, RedeemModel


class DNN(RedeemModel):
    r"""Embeddings (dimension 16) of the sparse id and profile fields, concatenated with the dense features,
    into an MLP (128, 64) with dropout 0.5 — the paper's section 4.4 settings.
    ``wide`` adds the ``lr`` floor's linear term to the logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: the DNN baseline of §4.2 of the DMBGN paper (``dmbgn-voucher-redemption.txt``), "taking both dense
    features and embedding of sparse id features into the model" (no equation of its own), trained with eq. (8):

    .. math::
        \hat y_{RR} = \sigma\big(\mathrm{MLP}([g_1 \,\|\, \dots \,\|\, g_F \,\|\, x_{num}])\big)

    Args:
        layout: where the id, profile and voucher columns sit in the batch (:class:`FieldLayout`).
        emb_dim: embedding size per categorical field (§4.4: 16).
        hidden: the MLP's hidden widths (§4.4: (128, 64)).
        dropout: dropout after each hidden layer (§4.4: 0.5).
        sparse: sparse embedding gradients.
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["redeemed"]`` ``(B,)``
        - **output:** ``p_redeem`` ``(B,)``
    """

    def __init__(self, layout: FieldLayout, emb_dim: int = 16, hidden: Sequence[int] = (128, 64),
                 dropout: float = 0.5, sparse: bool = True, oov_dropout: float = 0.0, wide: str = "none",
                 wide_l2: float = WIDE_L2):
        super().__init__()
        self.input = FeatureEmbedding(layout.cardinalities, layout.n_numeric, emb_dim, sparse=sparse,
                                      oov_dropout=oov_dropout)
        self.mlp = MLP(self.input.output_dim, hidden, dropout=dropout)
        self.with_wide(layout, wide, wide_l2)

    def logit(self, batch: dict[str, Tensor]) -> Tensor:
        return self.add_wide(self.mlp(self.input(batch)).squeeze(1), batch)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"p_redeem": torch.sigmoid(self.logit(batch))}

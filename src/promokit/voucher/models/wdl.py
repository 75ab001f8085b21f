"""Wide & Deep (Cheng et al., 2016), the WDL baseline of the DMBGN paper (section 4.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from promokit.nn import LinearLogit
from promokit.voucher.models.base import FieldLayout, RedeemModel
from promokit.voucher.models.dnn import DNN


class WDL(RedeemModel):
    r"""p = σ(wide + deep): a linear model over every sparse and dense feature (the wide term) plus the
    DNN (the deep part), trained jointly; the paper feeds all features to both sides.

    Paper: the WDL baseline of §4.2 of the DMBGN paper (``dmbgn-voucher-redemption.txt``): "Compared with DNN, it
    has an additional linear model besides the deep model" (no equation of its own), trained with eq. (8):

    .. math::
        \hat y_{RR} = \sigma\big(b + \textstyle\sum_j w_{j, x_j} + v^\top x_{num} + \mathrm{DNN}(x)\big)

    Args:
        layout: where the id, profile and voucher columns sit in the batch (:class:`FieldLayout`).
        emb_dim: the deep part's embedding size per categorical field (§4.4: 16).
        hidden: the deep part's hidden widths (§4.4: (128, 64)).
        dropout: dropout after each hidden layer of the deep part (§4.4: 0.5).
        sparse: sparse embedding gradients (both parts).
        oov_dropout: probability of replacing a training code by the OOV slot (both parts).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["redeemed"]`` ``(B,)``
        - **output:** ``p_redeem`` ``(B,)``
    """

    def __init__(self, layout: FieldLayout, emb_dim: int = 16, hidden: Sequence[int] = (128, 64),
                 dropout: float = 0.5, sparse: bool = True, oov_dropout: float = 0.0):
        super().__init__()
        self.wide = LinearLogit(layout.cardinalities, layout.n_numeric, sparse=sparse, oov_dropout=oov_dropout)
        self.deep = DNN(layout, emb_dim, hidden, dropout, sparse, oov_dropout)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"p_redeem": torch.sigmoid(self.wide(batch["cat"], batch["num"]) + self.deep.logit(batch))}

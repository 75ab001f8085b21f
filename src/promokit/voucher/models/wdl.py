"""Wide & Deep (Cheng et al., 2016), the WDL baseline of the DMBGN paper (section 4.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from promokit.nn import LinearLogit
from promokit.voucher.models.base import FieldLayout, RedeemModel
from promokit.voucher.models.dnn import DNN


class WDL(RedeemModel):
    """p = σ(wide + deep): a linear model over every sparse and dense feature (the wide term) plus the
    DNN (the deep part), trained jointly; the paper feeds all features to both sides."""

    def __init__(self, layout: FieldLayout, emb_dim: int = 16, hidden: Sequence[int] = (128, 64),
                 dropout: float = 0.5, sparse: bool = True, oov_dropout: float = 0.0):
        super().__init__()
        self.wide = LinearLogit(layout.cardinalities, layout.n_numeric, sparse=sparse, oov_dropout=oov_dropout)
        self.deep = DNN(layout, emb_dim, hidden, dropout, sparse, oov_dropout)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"p_redeem": torch.sigmoid(self.wide(batch["cat"], batch["num"]) + self.deep.logit(batch))}

"""LR baseline of the DMBGN paper (section 4.2)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from promokit.nn import FieldEmbedding
from promokit.voucher.models.base import FieldLayout, RedeemModel


class LR(RedeemModel):
    r"""Logistic regression :math:`p = \sigma(b + \sum_j w_{j, x_j} + v^T x_{num})`.

    Categorical fields are one-hot encoded, which is a field embedding of dimension 1. As in the paper
    only the dense features (profile and voucher columns) are used; ``ids=True`` adds the user_id and
    voucher_id one-hots (the sparse LR of CTR prediction, and WDL's wide part).
    """

    def __init__(self, layout: FieldLayout, ids: bool = False, sparse: bool = True, oov_dropout: float = 0.0):
        super().__init__()
        fields = list(range(len(layout.cardinalities))) if ids else list(layout.dense_fields)
        self.register_buffer("fields", torch.tensor(fields, dtype=torch.long), persistent=False)
        self.weights = FieldEmbedding([layout.cardinalities[j] for j in fields], 1, sparse=sparse,
                                      oov_dropout=oov_dropout)
        nn.init.zeros_(self.weights.table.weight)
        self.numeric = nn.Linear(layout.n_numeric, 1)

    def logit(self, batch: dict[str, Tensor]) -> Tensor:
        logit = self.numeric(batch["num"]).squeeze(1)
        if len(self.fields):
            logit = logit + self.weights(batch["cat"][:, self.fields]).sum(1)
        return logit

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"p_redeem": torch.sigmoid(self.logit(batch))}

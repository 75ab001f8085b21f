"""The shared embedding module (SEM) that turns a batch into one dense vector."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.nn.embedding import FieldEmbedding


class FeatureEmbedding(nn.Module):
    """ESM²'s shared embedding module: field embeddings of the categorical codes (eq. 5) concatenated with
    the numeric block, which arrives already normalised and tanh-squashed (eq. 17, done once by
    ``promokit.data.NumericEncoder`` rather than in every batch).

    Reads ``batch["cat"]`` ``(B, F)`` and ``batch["num"]`` ``(B, D)``; returns ``(B, F * dim + D)``.
    ``oov_dropout`` is :class:`FieldEmbedding`'s (trains the out-of-vocabulary rows for unseen ids).
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, dim: int, sparse: bool = True,
                 oov_dropout: float = 0.0):
        super().__init__()
        self.fields = FieldEmbedding(cardinalities, dim, sparse=sparse, oov_dropout=oov_dropout)
        self.n_numeric = n_numeric

    @property
    def output_dim(self) -> int:
        return self.fields.output_dim + self.n_numeric

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        parts = [self.fields(batch["cat"])]
        if self.n_numeric:
            parts.append(batch["num"])
        return torch.cat(parts, dim=1)

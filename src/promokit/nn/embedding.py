"""Embedding of many categorical fields through one table."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class FieldEmbedding(nn.Module):
    r"""Embeds F categorical fields with one shared table, ESM² eq. (5): :math:`g_{ij} = P_{\theta_j}^T f_{ij}`.

    Field j owns rows ``offsets[j] .. offsets[j] + cardinalities[j]`` of the table, so one lookup embeds
    every field. ``sparse=True`` makes the gradient sparse (train it with ``torch.optim.SparseAdam``):
    only the rows a batch touches are updated, several times faster for large vocabularies.

    Args:
        cardinalities: rows per field (code 0 of every field is its out-of-vocabulary slot).
        dim: embedding size per field.
        sparse: sparse gradients.

    Shapes:
        input ``(batch, F)`` int64 codes → output ``(batch, F * dim)``.
    """

    def __init__(self, cardinalities: Sequence[int], dim: int, sparse: bool = True):
        super().__init__()
        self.cardinalities = list(cardinalities)
        self.dim = dim
        offsets = torch.tensor([0, *self.cardinalities[:-1]], dtype=torch.long).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)
        self.table = nn.Embedding(max(sum(self.cardinalities), 1), dim, sparse=sparse)
        self.reset_parameters()

    @property
    def output_dim(self) -> int:
        return len(self.cardinalities) * self.dim

    def reset_parameters(self) -> None:
        nn.init.normal_(self.table.weight, std=0.05)

    def forward(self, codes: Tensor) -> Tensor:
        return self.table(codes + self.offsets).flatten(1)

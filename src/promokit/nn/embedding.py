"""Embedding of many categorical fields through one table."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.data import DataError


class FieldEmbedding(nn.Module):
    r"""Embeds F categorical fields with one shared table, ESM² eq. (5): :math:`g_{ij} = P_{\theta_j}^T f_{ij}`.

    Field j owns rows ``offsets[j] .. offsets[j] + cardinalities[j]`` of the table, so one lookup embeds
    every field. ``sparse=True`` makes the gradient sparse (train it with ``torch.optim.SparseAdam``):
    only the rows a batch touches are updated, several times faster for large vocabularies.

    OOV dropout: in training every row has a known id, so the out-of-vocabulary rows (code 0) would never
    be trained and an unseen id (a cold-start coupon, campaign or user) would get a random vector at
    prediction time. With ``oov_dropout=p`` each code of a training batch is replaced by 0 with
    probability p, independently per row and field, which trains the OOV row as the "unknown id"
    embedding — the cold-start id dropout of recommenders (DropoutNet, Volkovs et al., 2017). Eval mode is
    unchanged.

    Paper: ESM² ([Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443)), eq. (5) of its shared
    embedding module (§3.3): the one-hot f_ij times the embedding matrix P_θj is a row lookup.

    Args:
        cardinalities: rows per field (code 0 of every field is its out-of-vocabulary slot).
        dim: embedding size per field.
        sparse: sparse gradients.
        oov_dropout: probability of replacing a code by the OOV slot in training.

    Shapes:
        - **input:** codes ``(batch, F)`` int64
        - **output:** ``(batch, F * dim)`` (:attr:`output_dim`)
    """

    def __init__(self, cardinalities: Sequence[int], dim: int, sparse: bool = True, oov_dropout: float = 0.0):
        super().__init__()
        if not 0.0 <= oov_dropout < 1.0:
            raise DataError(f"oov_dropout must be in [0, 1), got {oov_dropout}")
        self.oov_dropout = oov_dropout
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
        if self.training:
            codes = drop_to_oov(codes, self.oov_dropout)
        return self.table(codes + self.offsets).flatten(1)


def drop_to_oov(codes: Tensor, p: float) -> Tensor:
    """``codes`` with each replaced by the out-of-vocabulary code 0 with probability ``p`` (OOV dropout, see
    :class:`FieldEmbedding`); apply in training only."""
    if p <= 0:
        return codes
    return codes.masked_fill(torch.rand(codes.shape, device=codes.device) < p, 0)

"""The shared embedding module (SEM) that turns a batch into one dense vector."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.nn.embedding import FieldEmbedding


class FeatureEmbedding(nn.Module):
    r"""ESM²'s shared embedding module: field embeddings of the categorical codes (eq. 5) concatenated with
    the numeric block, which arrives already normalised and tanh-squashed (eq. 17, done once by
    ``promokit.data.NumericEncoder`` rather than in every batch). From the ESM² paper
    ([Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443), §3.3 SEM and §4.3.2):

    .. math::
        g_{ij} = P_{\theta_j}^T f_{ij} \quad (5), \qquad
        g_{ij} = \tanh\big((f_{ij} - \mu_{f_j}) / \sigma_{f_j}\big) \quad (17), \qquad
        g_i = [g_{i1} \,\|\, \dots \,\|\, g_{iF} \,\|\, \text{numeric}]

    Reads ``batch["cat"]`` ``(B, F)`` and ``batch["num"]`` ``(B, D)``; returns ``(B, F * dim + D)``.
    ``oov_dropout`` is :class:`FieldEmbedding`'s (trains the out-of-vocabulary rows for unseen ids).

    Args:
        cardinalities: rows per categorical field (code 0 of each is its out-of-vocabulary slot).
        n_numeric: width D of the numeric block (0: ``batch["num"]`` is not read).
        dim: embedding size per field.
        sparse: sparse embedding gradients (train with ``torch.optim.SparseAdam``).
        oov_dropout: probability of replacing a training code by the OOV slot (:class:`FieldEmbedding`).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64 codes, ``batch["num"]`` ``(B, D)`` float
        - **output:** ``(B, F * dim + D)`` (:attr:`output_dim`)
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

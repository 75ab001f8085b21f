"""The linear logit of logistic regression over categorical fields and a numeric block."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from promokit.nn.embedding import FieldEmbedding


class LinearLogit(nn.Module):
    r"""Logistic regression's logit :math:`b + \sum_j w_{j, x_j} + v^\top x_{num}`.

    A categorical field one-hot encoded and weighted is a field embedding of dimension 1, so the weights of
    every category sit in one :class:`FieldEmbedding` (sparse gradients, OOV row per field); the numeric
    block has a linear layer with the bias. Weights start at zero. It is trained either by gradient steps
    inside a larger model (the wide term of Wide & Deep) or to the optimum by
    :func:`promokit.training.fit_logistic`.

    A building block, not from the papers: the logit of every domain's linear floor. The DMBGN paper's LR
    baseline (``dmbgn-voucher-redemption.txt``, §4.2) is this logit over the dense features only.

    Args:
        cardinalities: rows per categorical field (code 0 of each is its out-of-vocabulary slot).
        n_numeric: width D of the numeric block.
        sparse: sparse gradients for the categorical weights.
        oov_dropout: probability of replacing a training code by the OOV slot (:class:`FieldEmbedding`).

    Shapes:
        - **input:** ``cat`` ``(B, F)`` int64 codes, ``num`` ``(B, D)``
        - **output:** logits ``(B,)``
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, sparse: bool = True,
                 oov_dropout: float = 0.0):
        super().__init__()
        self.weights = FieldEmbedding(cardinalities, 1, sparse=sparse, oov_dropout=oov_dropout)
        self.numeric = nn.Linear(n_numeric, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weights.table.weight)
        nn.init.zeros_(self.numeric.weight)
        nn.init.zeros_(self.numeric.bias)

    def forward(self, cat: Tensor, num: Tensor) -> Tensor:
        logit = self.numeric(num).squeeze(1)
        if cat.shape[1]:
            logit = logit + self.weights(cat).sum(1)
        return logit

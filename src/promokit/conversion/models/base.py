"""Base: the co-trained CTR and CVR networks of the GMCM paper's comparison (its section 5.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.contract import wide_targets
from promokit.nn import MLP, WIDE_L2, FeatureEmbedding, WideTerm, binary_log_loss


class Base(nn.Module):
    r"""CTR and CVR towers over one shared embedding; the CTR tower is trained on all impressions, the CVR tower
    on clicked impressions only (the conventional, sample-selection-biased CVR model), so

        L = L_ctr(all rows) + L_cvr(clicked rows),

    each a mean logloss (L_cvr is 0 for a batch without clicks), and p_ctcvr = p_ctr · p_cvr.

    The GMCM paper's section 5.4.1 gives every baseline towers (512, 256, 128, 64) with batch normalisation,
    the defaults here. :class:`~promokit.conversion.models.ResNet` and :class:`~promokit.conversion.models.DCN`
    are this model with other towers (:meth:`_tower`); :class:`~promokit.conversion.models.Division` has a
    CTCVR tower in place of the CVR one (:attr:`tasks`).
    ``wide`` adds the ``lr`` floor's linear term to every logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: "GMCM: Graph-based Micro-behavior Conversion Model for Post-click Conversion Rate Estimation"
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)), the baseline "Base" of §5.2 ("a co-trained
    CTR and CVR networks", no equation of its own). Each tower is an MLP on the shared embedding (eqs. 9–10,
    13) with a sigmoid output (eq. 11), and each loss the mean cross entropy of eq. (12):

    .. math::
        \hat r^{CTR} = \mathrm{sigmoid}(\mathrm{MLP}_{ctr}(x)), \quad
        \hat r^{CVR} = \mathrm{sigmoid}(\mathrm{MLP}_{cvr}(x)), \quad
        L = \frac{1}{B}\sum_i l(y^{CTR}_i, \hat r^{CTR}_i) + \frac{1}{|C|}\sum_{i \in C} l(y^{CVR}_i, \hat r^{CVR}_i)

    with C the batch's clicked rows.

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        emb_dim: embedding size per categorical field.
        hidden: hidden widths of each tower.
        dropout: dropout after each hidden layer.
        batch_norm: batch normalisation in the towers.
        activation: the towers' activation, ``"relu"`` or ``"leaky_relu"``.
        sparse: sparse embedding gradients.
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]`` and ``batch["purchase"]`` ``(B,)``
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each
    """

    labels = ("click", "purchase")
    outputs = ("p_ctr", "p_cvr", "p_ctcvr")
    #: what each tower predicts, one tower per task
    tasks = ("ctr", "cvr")

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, emb_dim: int = 16,
                 hidden: Sequence[int] = (512, 256, 128, 64), dropout: float = 0.0, batch_norm: bool = True,
                 activation: str = "relu", sparse: bool = True, oov_dropout: float = 0.0, wide: str = "none",
                 wide_l2: float = WIDE_L2):
        super().__init__()
        self.hidden, self.dropout, self.batch_norm, self.activation = tuple(hidden), dropout, batch_norm, activation
        self.embedding = FeatureEmbedding(cardinalities, n_numeric, emb_dim, sparse=sparse,
                                          oov_dropout=oov_dropout)
        self.towers = nn.ModuleDict({task: self._tower(self.embedding.output_dim) for task in self.tasks})
        self.wide = WideTerm(cardinalities, n_numeric, wide_targets(*self.tasks), wide, wide_l2)

    def _tower(self, in_dim: int) -> nn.Module:
        """One task's network, ``(B, in_dim)`` → ``(B, 1)`` logits."""
        return MLP(in_dim, self.hidden, dropout=self.dropout, activation=self.activation,
                   batch_norm=self.batch_norm)

    def tower_probabilities(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Each tower's probability by task, ``(B,)`` each."""
        g = self.embedding(batch)
        z = self.wide({task: tower(g).squeeze(1) for task, tower in self.towers.items()}, batch)
        return {task: torch.sigmoid(logit) for task, logit in z.items()}

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        p = self.tower_probabilities(batch)
        return {"p_ctr": p["ctr"], "p_cvr": p["cvr"], "p_ctcvr": p["ctr"] * p["cvr"]}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        click = batch["click"]
        parts = {"ctr": binary_log_loss(out["p_ctr"], click),
                 "cvr": binary_log_loss(out["p_cvr"], batch["purchase"], weight=click)}
        return parts["ctr"] + parts["cvr"], {k: v.detach() for k, v in parts.items()}

"""Base: the co-trained CTR and CVR networks of the GMCM paper's comparison (its section 5.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.contract import wide_targets
from promokit.nn import MLP, WIDE_L2, FeatureEmbedding, WideTerm, binary_log_loss


class Base(nn.Module):
    """CTR and CVR towers over one shared embedding; the CTR tower is trained on all impressions, the CVR tower
    on clicked impressions only (the conventional, sample-selection-biased CVR model), so

        L = L_ctr(all rows) + L_cvr(clicked rows),

    each a mean logloss (L_cvr is 0 for a batch without clicks), and p_ctcvr = p_ctr · p_cvr.

    The GMCM paper's section 5.4.1 gives every baseline towers (512, 256, 128, 64) with batch normalisation,
    the defaults here. :class:`~promokit.conversion.models.ResNet` and :class:`~promokit.conversion.models.DCN`
    are this model with other towers (:meth:`_tower`); :class:`~promokit.conversion.models.Division` has a
    CTCVR tower in place of the CVR one (:attr:`tasks`).
    ``wide`` adds the ``lr`` floor's linear term to every logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).
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

"""DNN and DNN-OS baselines of the ESM² paper (section 4.1.3)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.contract import wide_targets
from promokit.nn import MLP, WIDE_L2, FeatureEmbedding, WideTerm, binary_log_loss


class DNN(nn.Module):
    r"""Two independent networks (own embedding and MLP each): CTR trained on all impressions,
    CVR trained on clicked impressions only (the conventional, sample-selection-biased CVR model);
    p_ctcvr = p_ctr · p_cvr.

    ``oversample = k > 1`` gives DNN-OS: every positive counts k times in its task's loss, which has the
    same expected gradient as replicating the positive rows k times (over-sampling, Pan et al. 2008).
    ``wide`` adds the ``lr`` floor's linear term to every logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: the DNN and DNN-OS baselines of §4.1.3 of "Entire Space Multi-Task Modeling via Post-Click Behavior
    Decomposition for Conversion Rate Prediction" (ESM²,
    [Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443)): "the same structure and hyper-parameters
    with the single branch in ESM²", so each network is eqs. (5)–(6),

    .. math::
        p^{ctr} = \sigma\big(\phi^{ctr}(g^{ctr})\big), \quad p^{cvr} = \sigma\big(\phi^{cvr}(g^{cvr})\big), \quad
        p^{ctcvr} = p^{ctr}\, p^{cvr}

    each trained with the logloss of eq. (8) on its own path: impression → click, click → purchase.

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        emb_dim: embedding size per categorical field.
        hidden: hidden widths of each MLP (Table 2: (512, 256, 128, 32)).
        dropout: dropout after each hidden layer (Table 2: 0.5).
        sparse: sparse embedding gradients.
        oversample: weight k of a positive in its task's loss (DNN-OS: k > 1).
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

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, emb_dim: int = 16,
                 hidden: Sequence[int] = (512, 256, 128, 32), dropout: float = 0.5, sparse: bool = True,
                 oversample: float = 1.0, oov_dropout: float = 0.0, wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        self.ctr_input = FeatureEmbedding(cardinalities, n_numeric, emb_dim, sparse=sparse,
                                          oov_dropout=oov_dropout)
        self.cvr_input = FeatureEmbedding(cardinalities, n_numeric, emb_dim, sparse=sparse,
                                          oov_dropout=oov_dropout)
        self.ctr = MLP(self.ctr_input.output_dim, hidden, dropout=dropout)
        self.cvr = MLP(self.cvr_input.output_dim, hidden, dropout=dropout)
        self.oversample = oversample
        self.wide = WideTerm(cardinalities, n_numeric, wide_targets("ctr", "cvr"), wide, wide_l2)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        z = self.wide({"ctr": self.ctr(self.ctr_input(batch)).squeeze(1),
                       "cvr": self.cvr(self.cvr_input(batch)).squeeze(1)}, batch)
        p_ctr, p_cvr = torch.sigmoid(z["ctr"]), torch.sigmoid(z["cvr"])
        return {"p_ctr": p_ctr, "p_cvr": p_cvr, "p_ctcvr": p_ctr * p_cvr}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        click, purchase = batch["click"], batch["purchase"]
        extra = self.oversample - 1.0
        parts = {"ctr": binary_log_loss(out["p_ctr"], click, 1.0 + extra * click),
                 "cvr": binary_log_loss(out["p_cvr"], purchase, click * (1.0 + extra * purchase))}
        total = parts["ctr"] + parts["cvr"]
        return total, {k: v.detach() for k, v in parts.items()}

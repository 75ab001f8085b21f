"""ESMM: Entire Space Multi-task Model (Ma et al., SIGIR 2018), as the ESM² paper's baseline."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.contract import wide_targets
from promokit.nn import MLP, WIDE_L2, FeatureEmbedding, WideTerm, binary_log_loss


class ESMM(nn.Module):
    r"""CTR and CVR towers over one shared embedding, on the path impression → click → purchase.

    p_ctcvr = p_ctr · p_cvr (ESM² eq. 4 without the DAction node). Both supervised terms are over all
    impressions: L = w_ctr·L_ctr + w_ctcvr·L_ctcvr; p_cvr itself has no direct label, so it carries no
    sample-selection bias.
    ``wide`` adds the ``lr`` floor's linear term to every logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: the ESMM baseline of §4.1.3 of "Entire Space Multi-Task Modeling via Post-Click Behavior Decomposition
    for Conversion Rate Prediction" (ESM², [Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443)),
    "the same backbone structure as the above deep models" (eqs. 5–6); ESM²'s eq. (4) with y_2 ≡ 1 and its
    eq. (11) without the L_ctavr term:

    .. math::
        p^{ctcvr} = p^{ctr}\, p^{cvr}, \qquad L = w_{ctr} L_{ctr} + w_{ctcvr} L_{ctcvr}

    with L_ctr and L_ctcvr the loglosses of eqs. (8) and (10).

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        emb_dim: embedding size per categorical field.
        hidden: hidden widths of each tower (ESM² Table 2: (512, 256, 128, 32)).
        dropout: dropout after each hidden layer (Table 2: 0.5).
        sparse: sparse embedding gradients.
        w_ctr: weight of L_ctr.
        w_ctcvr: weight of L_ctcvr.
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
                 w_ctr: float = 1.0, w_ctcvr: float = 1.0, oov_dropout: float = 0.0,
                 wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        self.sem = FeatureEmbedding(cardinalities, n_numeric, emb_dim, sparse=sparse,
                                    oov_dropout=oov_dropout)
        self.ctr = MLP(self.sem.output_dim, hidden, dropout=dropout)
        self.cvr = MLP(self.sem.output_dim, hidden, dropout=dropout)
        self.weights = {"ctr": w_ctr, "ctcvr": w_ctcvr}
        self.wide = WideTerm(cardinalities, n_numeric, wide_targets("ctr", "cvr"), wide, wide_l2)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        g = self.sem(batch)
        z = self.wide({"ctr": self.ctr(g).squeeze(1), "cvr": self.cvr(g).squeeze(1)}, batch)
        p_ctr, p_cvr = torch.sigmoid(z["ctr"]), torch.sigmoid(z["cvr"])
        return {"p_ctr": p_ctr, "p_cvr": p_cvr, "p_ctcvr": p_ctr * p_cvr}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        parts = {"ctr": binary_log_loss(out["p_ctr"], batch["click"]),
                 "ctcvr": binary_log_loss(out["p_ctcvr"], batch["purchase"])}
        total = sum(self.weights[k] * v for k, v in parts.items())
        return total, {k: v.detach() for k, v in parts.items()}

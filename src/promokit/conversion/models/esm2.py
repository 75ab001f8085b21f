"""ESM²: Elaborated Entire Space Supervised Multi-task Model (Wen et al., SIGIR 2020)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.contract import wide_targets
from promokit.nn import MLP, WIDE_L2, FeatureEmbedding, WideTerm, binary_log_loss

#: The DPM's towers in the order of y1..y4; y1 is the CTR.
TOWERS = ("ctr", "y2", "y3", "y4")


def sequential_composition(y1: Tensor, y2: Tensor, y3: Tensor, y4: Tensor) -> dict[str, Tensor]:
    """The parameter-free sequential composition module (SCM), ESM² eqs. (1)–(4).

    y1 = P(click | impression), y2 = P(DAction | click), y3 = P(purchase | DAction),
    y4 = P(purchase | OAction). Returns p_ctr = y1 (1), p_ctavr = y1·y2 (2),
    p_cvr = y4·(1 − y2) + y3·y2 (3) and p_ctcvr = y1·p_cvr (4).
    """
    p_cvr = y4 * (1 - y2) + y3 * y2
    return {"p_ctr": y1, "p_ctavr": y1 * y2, "p_cvr": p_cvr, "p_ctcvr": y1 * p_cvr}


class ESM2(nn.Module):
    r"""ESM² over the graph impression → click → DAction/OAction → purchase.

    - SEM: one shared embedding of all features (eq. 5, numeric features by eq. 17);
    - DPM: four MLP towers predicting y1..y4 (eq. 6);
    - SCM: :func:`sequential_composition` (eqs. 1–4).

    Trained on all impressions with L = w_ctr·L_ctr + w_ctavr·L_ctavr + w_ctcvr·L_ctcvr (eqs. 8–11),
    each term a mean logloss.
    ``wide`` adds the ``lr`` floor's linear term to each tower's logit, y1–y4 (:class:`~promokit.nn.WideTerm`:
    ``"none"``, ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: "Entire Space Multi-Task Modeling via Post-Click Behavior Decomposition for Conversion Rate Prediction"
    (Wen, Zhang, Wang, Lv, Bao, Lin, Yang; SIGIR 2020; https://doi.org/10.1145/3397271.3401443), §3:

    .. math::
        y_{ki} = \sigma\big(\phi^k_{\theta_k}(g_i)\big) \quad (6), \qquad
        p^{ctavr} = y_1 y_2 \quad (2), \qquad
        p^{cvr} = y_4 (1 - y_2) + y_2 y_3 \quad (3), \qquad
        p^{ctcvr} = y_1 \big(y_4 (1 - y_2) + y_3 y_2\big) \quad (4)

    .. math::
        L(\Theta) = w_{ctr} L_{ctr} + w_{ctavr} L_{ctavr} + w_{ctcvr} L_{ctcvr} \quad (11)

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]`` (normalised and tanh-squashed, eq. 17).
        emb_dim: embedding size per categorical field.
        hidden: hidden widths of each DPM tower (Table 2: (512, 256, 128, 32)).
        dropout: dropout after each hidden layer (Table 2: 0.5).
        sparse: sparse embedding gradients.
        w_ctr: loss weight w_ctr of eq. (11) (1 in the paper).
        w_ctavr: loss weight w_ctavr of eq. (11) (1 in the paper).
        w_ctcvr: loss weight w_ctcvr of eq. (11) (1 in the paper).
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]``, ``batch["daction"]`` and ``batch["purchase"]`` ``(B,)``
        - **output:** ``p_ctr``, ``p_ctavr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each
    """

    labels = ("click", "daction", "purchase")
    outputs = ("p_ctr", "p_ctavr", "p_cvr", "p_ctcvr")

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, emb_dim: int = 16,
                 hidden: Sequence[int] = (512, 256, 128, 32), dropout: float = 0.5, sparse: bool = True,
                 w_ctr: float = 1.0, w_ctavr: float = 1.0, w_ctcvr: float = 1.0,
                 oov_dropout: float = 0.0, wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        self.sem = FeatureEmbedding(cardinalities, n_numeric, emb_dim, sparse=sparse,
                                    oov_dropout=oov_dropout)
        self.dpm = nn.ModuleList(MLP(self.sem.output_dim, hidden, dropout=dropout) for _ in range(4))
        self.weights = {"ctr": w_ctr, "ctavr": w_ctavr, "ctcvr": w_ctcvr}
        self.wide = WideTerm(cardinalities, n_numeric, wide_targets(*TOWERS), wide, wide_l2)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        g = self.sem(batch)
        z = self.wide({name: tower(g).squeeze(1) for name, tower in zip(TOWERS, self.dpm)}, batch)
        return sequential_composition(*(torch.sigmoid(z[name]) for name in TOWERS))

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        parts = {"ctr": binary_log_loss(out["p_ctr"], batch["click"]),
                 "ctavr": binary_log_loss(out["p_ctavr"], batch["daction"]),
                 "ctcvr": binary_log_loss(out["p_ctcvr"], batch["purchase"])}
        total = sum(self.weights[k] * v for k, v in parts.items())
        return total, {k: v.detach() for k, v in parts.items()}

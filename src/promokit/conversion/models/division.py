"""Division baseline of the GMCM paper (section 5.2), after ESMM's DIVISION competitor."""

from __future__ import annotations

from torch import Tensor

from promokit.conversion.models.base import Base
from promokit.nn import binary_log_loss
from promokit.nn.losses import EPS


class Division(Base):
    """CTR and CTCVR towers over one shared embedding, both trained on all impressions,
    L = L_ctr + L_ctcvr (mean loglosses), and CVR read off CTCVR = CTR × CVR by division:

        p_cvr = clip(p_ctcvr / max(p_ctr, EPS), 0, 1).

    The two towers are fitted separately, so the ratio can exceed 1 (clipped to 1) and is unstable where
    p_ctr is small; the EPS = 1e-7 floor only keeps it finite when p_ctr underflows. ESMM (Ma et al., SIGIR
    2018) trains the two networks separately; the GMCM paper co-trains them over a shared embedding, as here.
    Same parameters as :class:`~promokit.conversion.models.Base`.

    Paper: the Division baseline of §5.2 of "GMCM: Graph-based Micro-behavior Conversion Model for Post-click
    Conversion Rate Estimation" ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)), which
    "estimates CVR by CTCVR = CTR × CVR" (no equation number). Each loss is the mean cross entropy of its eq. (12).

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

    tasks = ("ctr", "ctcvr")

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        p = self.tower_probabilities(batch)
        p_cvr = (p["ctcvr"] / p["ctr"].clamp_min(EPS)).clamp(0.0, 1.0)
        return {"p_ctr": p["ctr"], "p_cvr": p_cvr, "p_ctcvr": p["ctcvr"]}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        parts = {"ctr": binary_log_loss(out["p_ctr"], batch["click"]),
                 "ctcvr": binary_log_loss(out["p_ctcvr"], batch["purchase"])}
        return parts["ctr"] + parts["ctcvr"], {k: v.detach() for k, v in parts.items()}

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

"""What the customer response heads share: the value list as model inputs, and the censored likelihood."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

#: Exponents of hazards are clipped here: exp(30) ≈ 1e13 already means "certain to redeem".
MAX_LOG_HAZARD = 30.0


class ValueList(nn.Module):
    r"""The ordered values R = (r_1 < … < r_K) as buffers: ``scaled`` r_j / r_K, and the piece widths
    ``width`` δ_j = (r_j − r_{j−1}) / r_K with r_0 = 0 that integrate a hazard over value (eq. 9's ∫_0^r).

    A lowest level of 0 (a control arm without incentive) would make the first piece empty and force a zero
    response there; it takes the width of the next piece instead, so its response is learned like the
    others. Widths only rescale each piece's hazard (exp(b_j)·δ_j), so the choice does not restrict the model.

    Paper: the ordered incentive set R = (r_1 < … < r_|R|) of the joint-incentive paper ("Joint Incentive
    Optimization of Customer and Merchant in Mobile Payment Marketing", Yu et al., AAAI 2021,
    ``joint-incentive-hazard-allocation.txt``); with a piecewise-constant hazard the integral of eqs. (9)–(10) is

    .. math::
        \int_0^{r_k} \lambda(u, \tau)\, d\tau = \sum_{j \le k} \lambda(u, r_j)\, \delta_j

    Args:
        levels (Sequence[float]): the values r_1 < … < r_K, in increasing order.

    Shapes:
        - **input:** none (buffers only, no :meth:`forward`)
        - **output:** buffers ``levels``, ``scaled`` and ``width``, ``(K,)`` each
    """

    def __init__(self, levels):
        super().__init__()
        levels = np.asarray(levels, dtype=np.float64)
        top = levels[-1] if levels[-1] > 0 else 1.0
        width = np.diff(levels, prepend=0.0)
        if width[0] <= 0:
            width[0] = width[1]
        self.register_buffer("levels", torch.tensor(levels, dtype=torch.float32), persistent=False)
        self.register_buffer("scaled", torch.tensor(levels / top, dtype=torch.float32), persistent=False)
        self.register_buffer("width", torch.tensor(width / top, dtype=torch.float32), persistent=False)

    def __len__(self) -> int:
        return len(self.levels)


class GradientIntercept(nn.Module):
    r"""Eq. 21's two linear maps of a representation h, evaluated over the value list: the "gradient"
    softplus(w_g·h) ≥ 0 times r_j / r_K, and the "intercept" w_i·h + b. Returns both ``(B, K)`` and ``(B, 1)``.

    Paper: the "gradient" and "intercept" of eq. (21) of the joint-incentive paper (Yu et al., AAAI 2021,
    ``joint-incentive-hazard-allocation.txt``; after Liu et al. 2019b), before the sigmoid, each map here with a
    bias (w_g^T h + c_g inside the softplus):

    .. math::
        \underbrace{\mathrm{softplus}(w_g^\top h)}_{\text{gradient}} \cdot \tilde r_j, \qquad
        \underbrace{w_i^\top h + b}_{\text{intercept}}, \qquad \tilde r_j = r_j / r_K

    Args:
        in_dim: width D of the representation h.
        levels (Sequence[float]): the values r_1 < … < r_K, in increasing order.

    Shapes:
        - **input:** h ``(B, D)``
        - **output:** the gradient term ``(B, K)`` and the intercept ``(B, 1)``
    """

    def __init__(self, in_dim: int, levels):
        super().__init__()
        self.values = ValueList(levels)
        self.gradient = nn.Linear(in_dim, 1)
        self.intercept = nn.Linear(in_dim, 1)

    def reset_parameters(self) -> None:
        self.gradient.reset_parameters()
        self.intercept.reset_parameters()

    def forward(self, h: Tensor) -> tuple[Tensor, Tensor]:
        return nn.functional.softplus(self.gradient(h)) * self.values.scaled, self.intercept(h)


def from_cumulative(cumulative: Tensor) -> dict[str, Tensor]:
    """A response curve from its cumulative hazard Λ (eq. 10: f = 1 − exp(−Λ)), with log f and log(1 − f) = −Λ
    computed stably for the censored likelihood of eq. 9."""
    at_least = cumulative.clamp_min(1e-12)
    return {"response": -torch.expm1(-cumulative), "log_response": torch.log(-torch.expm1(-at_least)),
            "log_no_response": -cumulative}


def from_logits(logits: Tensor) -> dict[str, Tensor]:
    """A response curve given as logits at every value, with its log-probabilities."""
    return {"response": torch.sigmoid(logits), "log_response": nn.functional.logsigmoid(logits),
            "log_no_response": nn.functional.logsigmoid(-logits)}


def response_nll(out: dict[str, Tensor], level: Tensor, label: Tensor) -> Tensor:
    """The negative log-likelihood of each row's outcome at its offered value (index ``level``): eq. 9 for the
    hazard heads, −log(1 − F) for a redemption and −log F = Λ for a non-redemption; the binary log-loss for
    the sigmoid heads."""
    index = level.unsqueeze(1)
    log_yes = out["log_response"].gather(1, index).squeeze(1)
    log_no = out["log_no_response"].gather(1, index).squeeze(1)
    return -torch.where(label > 0.5, log_yes, log_no)

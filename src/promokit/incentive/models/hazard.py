"""The paper's customer response model: a piecewise non-linear hazard over the value (eqs. 8–10)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from promokit.incentive.models._curve import MAX_LOG_HAZARD, ValueList, from_cumulative


class HazardResponse(nn.Module):
    r"""Hazard regression with one hazard per piece of the value list (eq. 8):

    .. math::
        \lambda(u, r_j) = \exp(w_j^\top h_u + b_j), \qquad
        \Lambda(u, r_k) = \sum_{j \le k} \lambda(u, r_j)\,\delta_j, \qquad
        f_c(h_u, r_k) = 1 - \exp(-\Lambda(u, r_k))  \quad (10)

    trained by the censored likelihood of eq. 9 on the offered value, with the fused-lasso penalty
    :math:`\zeta \sum_j \lVert w_{j+1} - w_j \rVert_1` (eq. 8's constraint in Lagrangian form) that keeps
    neighbouring pieces alike unless the data shows a change point. f_c is non-decreasing in the value for
    any weights, since every hazard is positive.

    Paper: the response model of "Joint Incentive Optimization of Customer and Merchant in Mobile Payment Marketing"
    (Li Yu, Zhengwei Wu, Tianchi Cai, Ziqi Liu, Zhiqiang Zhang, Lihong Gu, Xiaodong Zeng, Jinjie Gu; Ant Group;
    AAAI 2021; the text, ``joint-incentive-hazard-allocation.txt``, gives no link), its "Response Models" section:

    .. math::
        \lambda(u_i, r_j) = \exp(w_j^\top h_{u_i} + b_j), \quad
        \text{s.t.} \sum_{j=1}^{|\mathcal R|-1} |w_{j+1} - w_j| < \zeta \quad (8), \qquad
        f_c(h_{u_i}, r_j) = 1 - \exp\Big(-\int_0^{r_j} \lambda(u_i, \tau)\, d\tau\Big) \quad (10)

    Args:
        in_dim: width D of the representation h_u.
        levels (Sequence[float]): the values r_1 < … < r_K, in increasing order.
        fused_lasso: the penalty's strength ζ (the Lagrangian form of eq. 8's constraint).

    Shapes:
        - **input:** h ``(B, D)``
        - **output:** ``response``, ``log_response``, ``log_no_response``, ``hazard`` (per unit of r / r_K),
          ``(B, K)`` each
    """

    def __init__(self, in_dim: int, levels, fused_lasso: float = 1e-3):
        super().__init__()
        self.values = ValueList(levels)
        self.weight = nn.Parameter(torch.empty(len(self.values), in_dim))
        self.bias = nn.Parameter(torch.empty(len(self.values)))
        self.fused_lasso = fused_lasso
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.01)
        nn.init.zeros_(self.bias)

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        hazard = torch.exp((h @ self.weight.T + self.bias).clamp(max=MAX_LOG_HAZARD))
        cumulative = torch.cumsum(hazard * self.values.width, dim=1)
        return {**from_cumulative(cumulative), "hazard": hazard}

    def penalty(self) -> Tensor:
        """ζ Σ_j ‖w_{j+1} − w_j‖₁ (eq. 8)."""
        return self.fused_lasso * (self.weight[1:] - self.weight[:-1]).abs().sum()

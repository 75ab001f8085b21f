"""Cox proportional hazards over the value list: the Table 3 baseline with one shared baseline hazard."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from promokit.incentive.models._curve import MAX_LOG_HAZARD, ValueList, from_cumulative


class CoxResponse(nn.Module):
    r"""Cox (1972): :math:`\lambda(u, r_j) = \lambda_0(r_j) \exp(w^\top h_u)` with a free baseline
    :math:`\lambda_0(r_j) = \exp(b_j)` per piece and one weight vector for all pieces (the form eq. 8
    generalises), so every customer's cumulative hazard is the baseline's times a customer factor:
    :math:`\Lambda(u, r_k) = \exp(w^\top h_u) \sum_{j \le k} \exp(b_j)\,\delta_j`; f_c by eq. 10, loss eq. 9.

    Paper: the Cox baseline of Table 3 of the joint-incentive paper
    ("Joint Incentive Optimization of Customer and Merchant in Mobile Payment Marketing", Yu et al., AAAI 2021,
    ``joint-incentive-hazard-allocation.txt``),
    whose "Background" section writes Cox's model as λ(t | x) = λ_0(t) exp(wᵀx) and whose eq. (8) starts from it;
    the response is eq. (10) and the loss eq. (9).

    Args:
        in_dim: width D of the representation h_u.
        levels (Sequence[float]): the values r_1 < … < r_K, in increasing order.

    Shapes:
        - **input:** h ``(B, D)``
        - **output:** ``response``, ``log_response``, ``log_no_response``, ``hazard``, ``(B, K)`` each
    """

    def __init__(self, in_dim: int, levels):
        super().__init__()
        self.values = ValueList(levels)
        self.weight = nn.Linear(in_dim, 1, bias=False)
        self.baseline = nn.Parameter(torch.empty(len(self.values)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight.weight, std=0.01)
        nn.init.zeros_(self.baseline)

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        hazard = torch.exp((self.weight(h) + self.baseline).clamp(max=MAX_LOG_HAZARD))
        cumulative = torch.cumsum(hazard * self.values.width, dim=1)
        return {**from_cumulative(cumulative), "hazard": hazard}

    def penalty(self) -> Tensor:
        return self.baseline.new_zeros(())

"""The merchant response: the linear mapping layer of Liu et al. (2019b) in eq. 21's gradient/intercept form."""

from __future__ import annotations

from torch import Tensor, nn

from promokit.incentive.models._curve import ValueList


class MerchantResponse(nn.Module):
    r"""Normalised incentive shares of merchant v at commission r_j, linear in the value:

    .. math::
        f_m(h_v, r_j) = \mathrm{softplus}(w_g^\top h_v)\,\tilde r_j + \mathrm{softplus}(w_i^\top h_v + b),
        \qquad \tilde r_j = r_j / r_K,

    non-negative and non-decreasing in the value (eq. 21's "gradient" and "intercept" without the sigmoid,
    since the label, shares / prior shares, is a count ratio, not a probability). Loss l_m of eq. 7: the
    squared error at the offered commission.

    Shapes: ``h`` ``(B, D)`` → ``response`` ``(B, K)``.
    """

    def __init__(self, in_dim: int, levels):
        super().__init__()
        self.values = ValueList(levels)
        self.gradient = nn.Linear(in_dim, 1)
        self.intercept = nn.Linear(in_dim, 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.gradient.reset_parameters()
        self.intercept.reset_parameters()

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        gradient = nn.functional.softplus(self.gradient(h))
        return {"response": gradient * self.values.scaled + nn.functional.softplus(self.intercept(h))}

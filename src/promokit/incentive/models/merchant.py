"""The merchant response: the linear mapping layer of Liu et al. (2019b) in eq. 21's gradient/intercept form."""

from __future__ import annotations

from torch import Tensor, nn

from promokit.incentive.models._curve import GradientIntercept


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
        self.curve = GradientIntercept(in_dim, levels)

    def reset_parameters(self) -> None:
        self.curve.reset_parameters()

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        slope, intercept = self.curve(h)
        return {"response": slope + nn.functional.softplus(intercept)}

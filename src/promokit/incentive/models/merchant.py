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

    Paper: the merchants' response of the joint-incentive paper
    ("Joint Incentive Optimization of Customer and Merchant in Mobile Payment Marketing", Yu et al., AAAI 2021,
    ``joint-incentive-hazard-allocation.txt``):
    "For merchants, we use the same response models as in (Liu et al. 2019b)", the "linear mapping layer" of its
    Experiment section, written in the gradient/intercept form of its eq. (21); the loss is l_m of eq. (7).

    Args:
        in_dim: width D of the representation h_v.
        levels (Sequence[float]): the commissions r_1 < … < r_K, in increasing order.

    Shapes:
        - **input:** h ``(B, D)``
        - **output:** ``response`` ``(B, K)``
    """

    def __init__(self, in_dim: int, levels):
        super().__init__()
        self.curve = GradientIntercept(in_dim, levels)

    def reset_parameters(self) -> None:
        self.curve.reset_parameters()

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        slope, intercept = self.curve(h)
        return {"response": slope + nn.functional.softplus(intercept)}

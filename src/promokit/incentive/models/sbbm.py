"""SBBM: the semi-black-box logit demand curve of Zhao et al. (2019), the Table 3 baseline of eq. 21's form."""

from __future__ import annotations

from torch import Tensor, nn

from promokit.incentive.models._curve import GradientIntercept, from_logits


class SemiBlackBoxResponse(nn.Module):
    r"""A logit demand curve whose slope and intercept come from the representation (eq. 21):

    .. math::
        f_c(h_u, r_j) = \mathrm{sigmoid}\big(\underbrace{\mathrm{softplus}(w_g^\top h_u)}_{\text{gradient}}
        \cdot \tilde r_j + \underbrace{w_i^\top h_u + b}_{\text{intercept}}\big), \qquad \tilde r_j = r_j / r_K,

    non-decreasing in the value because the gradient is positive, smooth (no change points), and trained by
    the binary log-loss at the offered value, ignoring the censoring (section 1).

    Paper: the SBBM baseline of Table 3 of the joint-incentive paper
    ("Joint Incentive Optimization of Customer and Merchant in Mobile Payment Marketing", Yu et al., AAAI 2021,
    ``joint-incentive-hazard-allocation.txt``):
    "Semi-black-box model extends logit demand curves with the capability of neural networks (Zhao et al. 2019)",
    in the form of its eq. (21).

    Args:
        in_dim: width D of the representation h_u.
        levels (Sequence[float]): the values r_1 < … < r_K, in increasing order.

    Shapes:
        - **input:** h ``(B, D)``
        - **output:** ``response``, ``log_response``, ``log_no_response``, ``(B, K)`` each
    """

    def __init__(self, in_dim: int, levels):
        super().__init__()
        self.curve = GradientIntercept(in_dim, levels)

    def reset_parameters(self) -> None:
        self.curve.reset_parameters()

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        slope, intercept = self.curve(h)
        return from_logits(slope + intercept)

    def penalty(self) -> Tensor:
        return self.curve.intercept.bias.new_zeros(())

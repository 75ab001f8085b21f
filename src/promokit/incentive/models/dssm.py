"""DSSM-c: a two-tower match between the customer and each incentive value, with a monotone cost term."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from promokit.incentive.models._curve import ValueList, from_logits


class DSSMCostResponse(nn.Module):
    r"""Our reading of the paper's DSSM-c baseline (Huang et al. 2013 with a cost constraint; the paper gives
    no formula). The customer tower q(h_u) and a learned embedding e_j of each value are matched by cosine
    similarity, as DSSM matches a query and a document; the cost term adds the value itself with a
    customer-specific positive slope:

    .. math::
        f_c(h_u, r_j) = \mathrm{sigmoid}\big(\gamma \cos(q(h_u), e_j)
        + \mathrm{softplus}(w_c^\top h_u)\,\tilde r_j + b\big), \qquad \tilde r_j = r_j / r_K.

    Only the cost term is monotone: the similarity may rank a lower value above a higher one, so f_c is not
    monotone by construction (``promokit incentive evaluate`` counts the customers whose curve decreases).
    Trained by the binary log-loss at the offered value.

    Paper: the DSSM-c baseline of Table 3 of the joint-incentive paper
    ("Joint Incentive Optimization of Customer and Merchant in Mobile Payment Marketing", Yu et al., AAAI 2021,
    ``joint-incentive-hazard-allocation.txt``):
    "Deep structured semantic models with cost constraint (Huang et al. 2013)", no equation in the paper, so the
    formula above is this library's.

    Args:
        in_dim: width D of the representation h_u.
        levels (Sequence[float]): the values r_1 < … < r_K, in increasing order.
        dim: width of the customer tower q and of the value embeddings e_j.
        scale: the similarity's scale γ.

    Shapes:
        - **input:** h ``(B, D)``
        - **output:** ``response``, ``log_response``, ``log_no_response``, ``(B, K)`` each
    """

    def __init__(self, in_dim: int, levels, dim: int = 32, scale: float = 5.0):
        super().__init__()
        self.values = ValueList(levels)
        self.query = nn.Linear(in_dim, dim)
        self.value_embedding = nn.Parameter(torch.empty(len(self.values), dim))
        self.cost = nn.Linear(in_dim, 1)
        self.scale = scale
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.query.reset_parameters()
        nn.init.normal_(self.value_embedding)
        self.cost.reset_parameters()

    def forward(self, h: Tensor) -> dict[str, Tensor]:
        q = nn.functional.normalize(self.query(h), dim=1)
        e = nn.functional.normalize(self.value_embedding, dim=1)
        logits = self.scale * q @ e.T + nn.functional.softplus(self.cost(h)) * self.values.scaled
        return from_logits(logits)

    def penalty(self) -> Tensor:
        return self.value_embedding.new_zeros(())

"""DCN baseline of the GMCM paper (section 5.2): Base with Deep & Cross towers."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.conversion.models.base import Base
from promokit.nn import MLP
from promokit.nn.cross import CrossNetwork


class DeepCross(nn.Module):
    r"""Deep & Cross Network (Wang et al., ADKDD 2017, fig. 1): a :class:`~promokit.nn.cross.CrossNetwork` and a
    deep :class:`~promokit.nn.MLP` side by side on the same input, joined by the combination layer (eq. 5)

    .. math::
        \mathrm{logit} = w^\top [x_{L_1} \,\|\, h_{L_2}] + b

    Shapes:
        ``(B, in_dim)`` → ``(B, 1)`` logits.
    """

    def __init__(self, in_dim: int, hidden: Sequence[int], cross_layers: int = 5, dropout: float = 0.0,
                 batch_norm: bool = False, activation: str = "relu"):
        super().__init__()
        self.cross = CrossNetwork(in_dim, cross_layers)
        self.deep = MLP(in_dim, hidden, out_dim=None, dropout=dropout, activation=activation, batch_norm=batch_norm)
        self.combine = nn.Linear(self.cross.out_dim + self.deep.out_dim, 1)

    def reset_parameters(self) -> None:
        for module in (self.cross, self.deep, self.combine):
            module.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.combine(torch.cat([self.cross(x), self.deep(x)], dim=1))


class DCN(Base):
    """:class:`~promokit.conversion.models.Base` (co-trained CTR and CVR tasks, shared embedding, CVR on clicked
    rows) whose towers are :class:`DeepCross`, with ``cross_layers`` cross layers besides the MLP (5 in the GMCM
    paper's section 5.4.2); ``params`` are Base's.
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, cross_layers: int = 5, **params):
        self.cross_layers = cross_layers  # read by _tower while Base builds the towers
        super().__init__(cardinalities, n_numeric, **params)

    def _tower(self, in_dim: int) -> nn.Module:
        return DeepCross(in_dim, self.hidden, self.cross_layers, dropout=self.dropout, batch_norm=self.batch_norm,
                         activation=self.activation)

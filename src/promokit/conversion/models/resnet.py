"""ResNet baseline of the GMCM paper (section 5.2): Base with residual towers."""

from __future__ import annotations

from torch import nn

from promokit.conversion.models.base import Base
from promokit.nn.residual import ResidualMLP


class ResNet(Base):
    """:class:`~promokit.conversion.models.Base` (co-trained CTR and CVR tasks, shared embedding, CVR on clicked
    rows) whose towers are :class:`~promokit.nn.residual.ResidualMLP` (He et al., CVPR 2016): identity shortcuts
    let the gradient skip layers. Same parameters as Base.
    """

    def _tower(self, in_dim: int) -> nn.Module:
        return ResidualMLP(in_dim, self.hidden, dropout=self.dropout, batch_norm=self.batch_norm,
                           activation=self.activation)

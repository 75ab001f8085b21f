"""ResNet baseline of the GMCM paper (section 5.2): Base with residual towers."""

from __future__ import annotations

from torch import nn

from promokit.conversion.models.base import Base
from promokit.nn.residual import ResidualMLP


class ResNet(Base):
    r""":class:`~promokit.conversion.models.Base` (co-trained CTR and CVR tasks, shared embedding, CVR on clicked
    rows) whose towers are :class:`~promokit.nn.residual.ResidualMLP` (He et al., CVPR 2016): identity shortcuts
    let the gradient skip layers. Same parameters as Base.

    Paper: the ResNet baseline of §5.2 of "GMCM: Graph-based Micro-behavior Conversion Model for Post-click
    Conversion Rate Estimation" ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)), "co-training
    CTR and CVR tasks with ResNet" (no equation of its own): eq. (11)'s sigmoid on residual towers,

    .. math::
        \hat r^{t} = \mathrm{sigmoid}\big(\mathrm{ResidualMLP}_t(x)\big), \quad t \in \{CTR, CVR\}, \qquad
        \hat r^{CTCVR} = \hat r^{CTR}\, \hat r^{CVR}

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        emb_dim: embedding size per categorical field.
        hidden: the widths of each tower's residual blocks.
        dropout: dropout inside each block.
        batch_norm: batch normalisation in the towers.
        activation: the towers' activation, ``"relu"`` or ``"leaky_relu"``.
        sparse: sparse embedding gradients.
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]`` and ``batch["purchase"]`` ``(B,)``
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each
    """

    def _tower(self, in_dim: int) -> nn.Module:
        return ResidualMLP(in_dim, self.hidden, dropout=self.dropout, batch_norm=self.batch_norm,
                           activation=self.activation)

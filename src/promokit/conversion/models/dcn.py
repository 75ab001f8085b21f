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

    It is one tower of the DCN baseline of the GMCM paper
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425), §5.2, "five cross layers are used besides
    the MLP", §5.4.2); eq. 5 is the DCN paper's.

    Args:
        in_dim: width of the input x_0.
        hidden: hidden widths of the deep side (its last hidden layer is h_{L_2}).
        cross_layers: number L_1 of cross layers.
        dropout: dropout after each hidden layer of the deep side.
        batch_norm: batch normalisation in the deep side.
        activation: the deep side's activation, ``"relu"`` or ``"leaky_relu"``.

    Shapes:
        - **input:** x_0 ``(B, in_dim)``
        - **output:** logits ``(B, 1)``
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
    r""":class:`~promokit.conversion.models.Base` (co-trained CTR and CVR tasks, shared embedding, CVR on clicked
    rows) whose towers are :class:`DeepCross`, with ``cross_layers`` cross layers besides the MLP (5 in the GMCM
    paper's section 5.4.2); ``params`` are Base's.

    Paper: the DCN baseline of §5.2 of "GMCM: Graph-based Micro-behavior Conversion Model for Post-click
    Conversion Rate Estimation" ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)), which gives
    no equation for it: each task's probability is the sigmoid of its tower (eq. 11's form),

    .. math::
        \hat r^{t} = \mathrm{sigmoid}\big(w_t^\top [\mathrm{Cross}_t(x) \,\|\, \mathrm{MLP}_t(x)] + b_t\big),
        \quad t \in \{CTR, CVR\}, \qquad \hat r^{CTCVR} = \hat r^{CTR}\, \hat r^{CVR}

    trained as :class:`~promokit.conversion.models.Base`.

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        cross_layers: cross layers per tower.
        **params (Any): the other parameters of :class:`~promokit.conversion.models.Base` (``emb_dim``, ``hidden``,
            ``dropout``, ``batch_norm``, ``activation``, ``sparse``, ``oov_dropout``, ``wide``, ``wide_l2``).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]`` and ``batch["purchase"]`` ``(B,)``
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, cross_layers: int = 5, **params):
        self.cross_layers = cross_layers  # read by _tower while Base builds the towers
        super().__init__(cardinalities, n_numeric, **params)

    def _tower(self, in_dim: int) -> nn.Module:
        return DeepCross(in_dim, self.hidden, self.cross_layers, dropout=self.dropout, batch_norm=self.batch_norm,
                         activation=self.activation)

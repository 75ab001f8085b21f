"""Residual multi-layer perceptron: the ResNet block on dense vectors."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from promokit.nn.mlp import ACTIVATIONS


def _norm(width: int, batch_norm: bool) -> nn.Module:
    return nn.BatchNorm1d(width) if batch_norm else nn.Identity()


def _reset(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, (nn.Linear, nn.BatchNorm1d)):
            layer.reset_parameters()


class ResidualBlock(nn.Module):
    r"""ResNet's building block (He et al., CVPR 2016, eqs. 1–2) with linear layers:

    .. math::
        y = \sigma\big(F(x) + W_s x\big), \qquad F = \mathrm{Linear} \to \mathrm{BN} \to \sigma \to
        \mathrm{Linear} \to \mathrm{BN}

    The shortcut :math:`W_s` is the identity when the width is kept (eq. 1) and a linear projection without
    bias when it changes (eq. 2). The activation σ comes after the sum; dropout, if any, after the inner σ.

    Shapes:
        ``(B, in_dim)`` → ``(B, out_dim)``.
    """

    def __init__(self, in_dim: int, out_dim: int, dropout: float = 0.0, batch_norm: bool = False,
                 activation: str = "relu"):
        super().__init__()
        self.residual = nn.Sequential(nn.Linear(in_dim, out_dim), _norm(out_dim, batch_norm),
                                      ACTIVATIONS[activation](), nn.Dropout(dropout),
                                      nn.Linear(out_dim, out_dim), _norm(out_dim, batch_norm))
        self.shortcut = nn.Identity() if in_dim == out_dim else nn.Linear(in_dim, out_dim, bias=False)
        self.activation = ACTIVATIONS[activation]()

    def reset_parameters(self) -> None:
        _reset(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.shortcut(x) + self.residual(x))


class ResidualMLP(nn.Module):
    """An input projection ``Linear → [BN] → activation`` to ``hidden[0]``, one :class:`ResidualBlock` per entry
    of ``hidden`` (identity shortcut where the width stays, projection where it changes), then a linear
    output layer: logits, no activation. A drop-in for :class:`~promokit.nn.MLP` with the same arguments.

    Shapes:
        ``(B, in_dim)`` → ``(B, out_dim)``.
    """

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int = 1, dropout: float = 0.0,
                 batch_norm: bool = False, activation: str = "relu"):
        super().__init__()
        widths = [hidden[0], *hidden]
        self.stem = nn.Sequential(nn.Linear(in_dim, widths[0]), _norm(widths[0], batch_norm),
                                  ACTIVATIONS[activation]())
        self.blocks = nn.Sequential(*(ResidualBlock(a, b, dropout, batch_norm, activation)
                                      for a, b in zip(widths[:-1], widths[1:])))
        self.head = nn.Linear(widths[-1], out_dim)
        self.out_dim = out_dim

    def reset_parameters(self) -> None:
        _reset(self)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(self.stem(x)))

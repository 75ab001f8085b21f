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

    It is the block of the ResNet baseline of the GMCM paper
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425), §5.2), which does not write it out:
    eqs. 1–2 are the ResNet paper's.

    Args:
        in_dim: width of the input x.
        out_dim: width of the output y.
        dropout: dropout after the inner activation (0: none).
        batch_norm: batch normalisation after each linear layer of F (else the identity).
        activation: ``"relu"`` or ``"leaky_relu"``.

    Shapes:
        - **input:** x ``(B, in_dim)``
        - **output:** y ``(B, out_dim)``
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
    r"""An input projection ``Linear → [BN] → activation`` to ``hidden[0]``, one :class:`ResidualBlock` per entry
    of ``hidden`` (identity shortcut where the width stays, projection where it changes), then a linear
    output layer: logits, no activation. A drop-in for :class:`~promokit.nn.MLP` with the same arguments.

    The towers of the ResNet baseline of the GMCM paper
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425), §5.2: "identity shortcut connection that
    allows one or more layers being skipped"); with :class:`ResidualBlock` y_k = σ(F_k(y_{k−1}) + W_s y_{k−1}),

    .. math::
        y_0 = \sigma(\mathrm{BN}(W_0 x + b_0)), \qquad y_k = \mathrm{ResidualBlock}_k(y_{k-1}), \qquad
        \mathrm{logit} = w^\top y_K + b

    Args:
        in_dim: width of the input.
        hidden: widths of the blocks' outputs, in order (``hidden[0]`` also the stem's).
        out_dim: width of the output layer (1: one logit).
        dropout: dropout inside each block.
        batch_norm: batch normalisation in the stem and the blocks.
        activation: ``"relu"`` or ``"leaky_relu"``.

    Shapes:
        - **input:** ``(B, in_dim)``
        - **output:** ``(B, out_dim)``
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

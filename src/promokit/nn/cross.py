"""The cross network of Deep & Cross Network (DCN)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class CrossNetwork(nn.Module):
    r"""DCN's cross network (Wang et al., ADKDD 2017, eq. 3): ``layers`` cross layers, each

    .. math::
        x_{l+1} = x_0 \, (x_l^\top w_l) + b_l + x_l, \qquad w_l, b_l \in \mathbb{R}^d

    Layer l adds the feature crosses of degree l + 2 with only 2d parameters, and the residual term keeps the
    lower degrees. Weights start Glorot-normal (as a d × 1 matrix, the reference implementation's
    initialisation), biases at zero.

    It is the cross side of the DCN baseline of the GMCM paper
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425), §5.2; five cross layers, §5.4.2),
    which does not write the equation out: eq. 3 is the DCN paper's.

    Args:
        in_dim: width d of the input x_0 (and of every x_l).
        layers: number of cross layers.

    Shapes:
        - **input:** x_0 ``(B, d)``
        - **output:** ``(B, d)``; ``out_dim`` is d
    """

    def __init__(self, in_dim: int, layers: int = 5):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(layers, in_dim))
        self.bias = nn.Parameter(torch.empty(layers, in_dim))
        self.out_dim = in_dim
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=math.sqrt(2.0 / (self.out_dim + 1)))
        nn.init.zeros_(self.bias)

    def extra_repr(self) -> str:
        return f"{self.out_dim}, layers={len(self.weight)}"

    def forward(self, x0: Tensor) -> Tensor:
        x = x0
        for w, b in zip(self.weight, self.bias):
            x = x0 * (x @ w).unsqueeze(1) + b + x
        return x

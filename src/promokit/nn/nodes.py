"""One linear map per node of a small graph (GMCM's node embedding layer, eq. 14, and node logits, eq. 16)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class PerNodeLinear(nn.Module):
    r"""``N`` independent linear maps: :math:`y_{b,i} = x_{b(,i)} W_i + c_i`, the per-node layers of the GMCM paper
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)):

    .. math::
        \mathbf e_i = \sigma(\mathbf H^{MLP} \Theta_i^{node\text{-}MLP}) \quad (14), \qquad
        \hat r_i^{node} = \mathrm{sigmoid}(h_i^{GCN} \Theta_i^{GCN\text{-}logit}) \quad (16)

    without the activation, which the caller applies. The input is either one representation per row ``(B, C)``,
    mapped by every node's own weights (eq. 14: each micro-behaviour's embedding from the CVR tower's output), or
    one per row and node ``(B, N, C)``, each node mapped by its own weights (eq. 16: each node's logit). Output
    ``(B, N, out_dim)``.

    Args:
        in_dim: width C of the input representation.
        n_nodes: number N of nodes, one weight matrix and bias each.
        out_dim: width of each node's output (eq. 14: d_node; eq. 16: 1).

    Shapes:
        - **input:** ``(B, C)`` (eq. 14) or ``(B, N, C)`` (eq. 16)
        - **output:** ``(B, N, out_dim)``
    """

    def __init__(self, in_dim: int, n_nodes: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_nodes, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(n_nodes, out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])  # nn.Linear's initialisation, per node
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:
            return torch.einsum("bc,nco->bno", x, self.weight) + self.bias
        return torch.einsum("bnc,nco->bno", x, self.weight) + self.bias

"""Dense graph convolution over a small graph shared by every row of a batch (GMCM's PMG, eq. 15)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn


def normalized_adjacency(adjacency: Tensor) -> Tensor:
    r""":math:`\tilde D^{-1/2} \tilde A \tilde D^{-1/2}` with :math:`\tilde A = A + I` (Kipf & Welling; GMCM eq. 2).

    Degrees are clamped at a small positive value so a node whose edges learned weights summing below −1 does not
    produce an infinite or NaN scale."""
    a = adjacency + torch.eye(adjacency.shape[-1], dtype=adjacency.dtype, device=adjacency.device)
    scale = a.sum(-1).clamp_min(1e-6).rsqrt()
    return scale[:, None] * a * scale[None, :]


class LearnableAdjacency(nn.Module):
    r"""A fixed prior graph ``P`` plus a learnable edge bias ``B``: :math:`A = P + B` (GMCM section 3), returned
    normalised by :func:`normalized_adjacency`, recomputed at every call so ``B`` trains.

    ``P`` is a buffer, saved with the weights; ``B`` starts at zero, so training starts from the prior graph.
    From the GMCM paper ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)): the PMG's adjacency
    :math:`A = P + B` of its section 3 (no equation number; repeated in §4.3.3), normalised as in eqs. (2) and (15):

    .. math::
        \hat A = \tilde D^{-1/2} \tilde A \tilde D^{-1/2}, \qquad \tilde A = P + B + I_N

    Args:
        prior (numpy.ndarray): the concurrence probability matrix P, ``(N, N)`` array-like (p_ij = c_ij / Σ_j c_ij).

    Shapes:
        - **input:** none (:meth:`forward` takes no argument)
        - **output:** the normalised adjacency Â ``(N, N)``
    """

    def __init__(self, prior):
        super().__init__()
        prior = torch.as_tensor(np.asarray(prior, dtype=np.float32))
        if prior.ndim != 2 or prior.shape[0] != prior.shape[1]:
            raise ValueError(f"the prior graph must be a square matrix, got shape {tuple(prior.shape)}")
        self.register_buffer("prior", prior)
        self.bias = nn.Parameter(torch.zeros_like(prior))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias)

    def forward(self) -> Tensor:
        return normalized_adjacency(self.prior + self.bias)


class DenseGCN(nn.Module):
    r"""One graph convolution on node features ``(B, N, C)`` with a normalised adjacency ``(N, N)`` shared by the
    batch (GMCM eq. 15 before the activation, [Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)):

    .. math::
        H_l = \hat A\, H_{l-1}\, \Theta_l, \qquad \hat A = \tilde D^{-1/2} \tilde A \tilde D^{-1/2}

    One batched product, no loop over rows or nodes. Θ_l has no bias, as in eq. (15).

    Args:
        in_dim: width h_{l-1} of the input node features.
        out_dim: width h_l of the output node features.

    Shapes:
        - **input:** node features H_{l-1} ``(B, N, in_dim)``, normalised adjacency Â ``(N, N)``
        - **output:** ``(B, N, out_dim)``
    """

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.linear = nn.Linear(in_dim, out_dim, bias=False)

    def reset_parameters(self) -> None:
        self.linear.reset_parameters()

    def forward(self, h: Tensor, adjacency: Tensor) -> Tensor:
        return torch.einsum("ij,bjc->bic", adjacency, self.linear(h))

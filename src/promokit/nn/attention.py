"""The DIN attention unit: a small feed-forward network that weighs each history entry by the target."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class AttentionUnit(nn.Module):
    r"""DIN's local activation unit (Zhou et al., KDD 2018), as eq. (7) of the DMBGN paper (voucher redemption,
    ``dmbgn-voucher-redemption.txt``) uses it to pool a user's historical UVG embeddings by the target UVG:

    .. math::
        w_r = \mathrm{MLP}_\phi\big(e_r \,\|\, e_T \,\|\, e_r - e_T \,\|\, e_r \odot e_T\big), \qquad
        h_T = \sum_{r=1}^{R} w_r \, e_r

    with a PReLU hidden layer of ``hidden`` units (64 in both papers) and a scalar output. As in DIN the
    weights are not softmax-normalised, so ``h_T`` keeps the intensity of the history; padded entries
    (``mask`` False) get weight 0, and a user with no history gets ``h_T = 0``.

    Args:
        dim: width d of each history entry e_r and of the target e_T.
        hidden: PReLU units of the scoring network φ's one hidden layer.

    Shapes:
        - **input:** history ``(B, R, d)``, target ``(B, d)``, mask ``(B, R)`` bool (True: a real entry)
        - **output:** h_T ``(B, d)``; :meth:`weights` gives w_r ``(B, R)``
    """

    def __init__(self, dim: int, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4 * dim, hidden), nn.PReLU(hidden), nn.Linear(hidden, 1))

    def reset_parameters(self) -> None:
        for layer in self.net:
            layer.reset_parameters()

    def weights(self, history: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        target = target.unsqueeze(1).expand_as(history)
        features = torch.cat([history, target, history - target, history * target], dim=-1)
        flat = features.reshape(-1, features.shape[-1])  # PReLU's per-unit slopes act on dim 1
        return self.net(flat).reshape(mask.shape) * mask

    def forward(self, history: Tensor, target: Tensor, mask: Tensor) -> Tensor:
        return (self.weights(history, target, mask).unsqueeze(-1) * history).sum(dim=1)

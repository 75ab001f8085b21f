"""Multi-layer perceptron tower."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn


class MLP(nn.Module):
    """Linear → ReLU → Dropout blocks, then a linear output layer (no activation: it returns logits).

    ESM² eq. (6) is ``sigmoid(MLP(g))`` with hidden sizes (512, 256, 128, 32) and a 2-way softmax output
    (Table 2); a single logit with a sigmoid is the same model with one parameter set fewer.
    """

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int = 1, dropout: float = 0.0):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = size
        layers.append(nn.Linear(width, out_dim))
        self.layers = nn.Sequential(*layers)

    def reset_parameters(self) -> None:
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)

"""Multi-layer perceptron tower."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

ACTIVATIONS = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU}


class MLP(nn.Module):
    r"""Linear → [BatchNorm] → activation → [Dropout] blocks, then a linear output layer (logits, no activation).

    ESM² eq. (6) is ``sigmoid(MLP(g))`` with hidden sizes (512, 256, 128, 32) and a 2-way softmax output
    (Table 2); a single logit with a sigmoid is the same model with one parameter set fewer. GMCM's towers use
    leaky ReLU (eqs. 11–13) and batch normalisation (its section 5.4). ``out_dim=None`` drops the output layer
    and returns the last hidden layer (GMCM's eq. 13 representation). Each hidden layer is GMCM's eq. (13),

    .. math::
        H_k = \sigma(H_{k-1} \Theta_k) \quad (13), \qquad
        y_k = \sigma\big(\phi^k_{\theta_k}(g)\big) \quad \text{(ESM² eq. 6, the sigmoid applied by the caller)}

    with biases. Papers: ESM² ([Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443)) and GMCM
    ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)); every other model uses it as a
    building block.

    Args:
        in_dim: width of the input.
        hidden: widths of the hidden layers, in order (empty: one linear layer).
        out_dim: width of the output layer (1: one logit); ``None`` returns the last hidden layer.
        dropout: dropout after each hidden activation (0: none).
        activation: ``"relu"`` or ``"leaky_relu"``.
        batch_norm: batch normalisation after each hidden linear layer.

    Shapes:
        - **input:** ``(B, in_dim)``
        - **output:** ``(B, out_dim)``, or ``(B, hidden[-1])`` with ``out_dim=None`` (:attr:`out_dim`)
    """

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int | None = 1, dropout: float = 0.0,
                 activation: str = "relu", batch_norm: bool = False):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for size in hidden:
            layers.append(nn.Linear(width, size))
            if batch_norm:
                layers.append(nn.BatchNorm1d(size))
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = size
        if out_dim is not None:
            layers.append(nn.Linear(width, out_dim))
        self.out_dim = width if out_dim is None else out_dim
        self.layers = nn.Sequential(*layers)

    def reset_parameters(self) -> None:
        for layer in self.layers:
            if isinstance(layer, (nn.Linear, nn.BatchNorm1d)):
                layer.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x)

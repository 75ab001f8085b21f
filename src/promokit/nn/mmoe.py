"""Multi-gate mixture-of-experts bottom (MMoE)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.nn.mlp import MLP


class MMoE(nn.Module):
    r"""Multi-gate mixture-of-experts (Ma et al., KDD 2018, eq. 5): ``n_experts`` expert networks shared by all
    tasks and one softmax gate per task,

    .. math::
        f^k(x) = \sum_{i=1}^{n} g^k(x)_i\, f_i(x), \qquad g^k(x) = \mathrm{softmax}(W_{g^k} x)

    Each expert is an :class:`MLP` whose last layer is followed by a ReLU (its output is a representation, not
    a logit). :meth:`forward` returns one ``(B, expert_dim)`` tensor per task, in task order.

    It is the multi-task bottom of ESDPM in the EOCA paper ("Expected Transaction Value Optimization for Precise
    Marketing in FinTech Platforms", Weng et al., ``eoca-expected-transaction-value.txt``, §4.1.2: "we adapt the
    structure of MMoE [25]") and its MMoE baseline (§5.1); eq. 5 above is the MMoE paper's, not EOCA's.

    Args:
        in_dim: width of the input x (EOCA: the delivery vector e of eq. 14).
        n_tasks: number of tasks k, one gate each.
        n_experts: number n of experts.
        expert_hidden: hidden widths of each expert's :class:`MLP`.
        expert_dim: width of each expert's output, and of every task's mixture.
        dropout: dropout after each hidden layer of the experts.

    Shapes:
        - **input:** x ``(B, in_dim)``
        - **output:** a list of ``n_tasks`` tensors f^k(x) ``(B, expert_dim)``
    """

    def __init__(self, in_dim: int, n_tasks: int, n_experts: int = 4, expert_hidden: Sequence[int] = (256,),
                 expert_dim: int = 128, dropout: float = 0.0):
        super().__init__()
        self.experts = nn.ModuleList(MLP(in_dim, expert_hidden, out_dim=expert_dim, dropout=dropout)
                                     for _ in range(n_experts))
        self.gates = nn.ModuleList(nn.Linear(in_dim, n_experts) for _ in range(n_tasks))
        self.output_dim = expert_dim

    def reset_parameters(self) -> None:
        for module in (*self.experts, *self.gates):
            module.reset_parameters()

    def forward(self, x: Tensor) -> list[Tensor]:
        experts = torch.stack([expert(x).relu() for expert in self.experts], dim=1)  # (B, n, d)
        return [(gate(x).softmax(dim=1).unsqueeze(2) * experts).sum(dim=1) for gate in self.gates]

"""Self-attention encoder of a user's behaviour sequence."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class BehaviourEncoder(nn.Module):
    r"""A behaviour sequence → one vector: token embeddings, one Transformer encoder layer (multi-head
    self-attention and a feed-forward block, Vaswani et al. 2017), mean-pooled over the real events and
    projected to ``out_dim`` (the EOCA paper's §4.1.2 and §5.1: the same self-attention behaviour embedding of
    size 128 for every model).

    A token is the sum of one embedding per field (e.g. the fund and the action of the event) and a learned
    embedding of its recency rank (0 = most recent). ``tokens`` is ``(B, L, F)`` int64 codes with -1 for
    padding after a row's events; a row without events gets the zero vector. A batch is cut to its longest row
    (histories are mostly shorter than L), which changes nothing but the time it takes.

    Paper: "Expected Transaction Value Optimization for Precise Marketing in FinTech Platforms" (Weng et al.,
    ``eoca-expected-transaction-value.txt``), whose §4.1.2 gives no formula for the self-attention layer: its
    output is the behaviour embedding e_b of eq. (14),

    .. math::
        \mathbf e_b = W_{out}\, \frac{1}{|S|} \sum_{t \in S} \mathrm{TransformerLayer}(x)_t + b_{out}, \qquad
        x_t = \sum_{j} E_j[\text{token}_{t,j}] + P[t]

    with S the row's real events.

    Args:
        cardinalities: codes per token field (e.g. funds, then actions).
        max_len: the longest sequence L (rows of the recency embedding P).
        dim: width of the token embeddings and of the Transformer layer.
        heads: attention heads (``dim`` must be divisible by it).
        out_dim: width of the output e_b.
        dropout: the Transformer layer's dropout.

    Shapes:
        - **input:** tokens ``(B, L, F)`` int64 codes, -1 for padding after a row's events, L ≤ ``max_len``
        - **output:** e_b ``(B, out_dim)`` (zeros for a row without events)
    """

    def __init__(self, cardinalities: Sequence[int], max_len: int, dim: int = 32, heads: int = 2,
                 out_dim: int = 128, dropout: float = 0.0):
        super().__init__()
        self.fields = nn.ModuleList(nn.Embedding(n, dim) for n in cardinalities)
        self.position = nn.Embedding(max_len, dim)
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=dropout,
                                                batch_first=True)
        self.out = nn.Linear(dim, out_dim)
        self.output_dim = out_dim

    def reset_parameters(self) -> None:
        for module in (*self.fields, self.position, self.out):
            module.reset_parameters()
        self.layer.self_attn._reset_parameters()
        for module in (self.layer.linear1, self.layer.linear2, self.layer.norm1, self.layer.norm2):
            module.reset_parameters()

    def forward(self, tokens: Tensor) -> Tensor:
        lengths = (tokens[..., 0] >= 0).sum(dim=1)
        tokens = tokens[:, :max(1, int(lengths.max())) if len(lengths) else 1]
        real = tokens[..., 0] >= 0                                    # (B, L)
        codes = tokens.clamp_min(0)
        x = sum(embedding(codes[..., i]) for i, embedding in enumerate(self.fields))
        x = x + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        empty = ~real.any(dim=1)
        # a row whose every key is masked would attend to nothing (NaN): let it see its padding, then drop it
        attend = real | (empty.unsqueeze(1) & (torch.arange(real.shape[1], device=real.device) == 0))
        x = self.layer(x, src_key_padding_mask=~attend)
        weight = real.unsqueeze(2).to(x.dtype)
        pooled = (x * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1.0)
        return self.out(pooled) * (~empty).unsqueeze(1).to(x.dtype)

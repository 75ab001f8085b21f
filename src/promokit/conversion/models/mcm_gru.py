"""MCM-GRU: micro-behaviours as a sequence, the ablation that GMCM's Figure 5 compares graph and sequence with."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from promokit.conversion.models.gmcm import GMCM


class MCMGRU(GMCM):
    """GMCM with the GCN replaced by a GRU over the node embeddings in the declared order of the micro-behaviours
    (section 5.6): each node's logit comes from the GRU's output at its step, the CVR from the hidden state after
    the last step. Everything else (towers, node embeddings, eqs. 16 and 18–19) is GMCM's.

    The order is the spec's, the same for every row: the table holds whether each behaviour happened, not when,
    so a per-row order is not available to any model here.
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, nodes: Sequence[str], pmg,
                 gru_hidden: int = 64, **params):
        self.gru_hidden = gru_hidden
        super().__init__(cardinalities, n_numeric, nodes, pmg, output="concat", **params)
        self.cvr_logit = nn.Linear(gru_hidden, 1)

    def _build_mixer(self, node_dim: int, hidden: Sequence[int], pmg) -> int:
        self.gru = nn.GRU(node_dim, self.gru_hidden, batch_first=True)
        return self.gru_hidden

    def mix(self, e: Tensor) -> Tensor:
        return self.gru(e)[0]

    def pool(self, h: Tensor) -> Tensor:
        return h[:, -1]

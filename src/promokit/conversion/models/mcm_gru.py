"""MCM-GRU: micro-behaviours as a sequence, the ablation that GMCM's Figure 5 compares graph and sequence with."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from promokit.conversion.models.gmcm import GMCM


class MCMGRU(GMCM):
    r"""GMCM with the GCN replaced by a GRU over the node embeddings (section 5.6): each node's logit comes from the
    GRU's output at its step, the CVR from the hidden state after the last step. Everything else (towers, node
    embeddings, eqs. 16 and 18–19) is GMCM's.

    The steps follow ``order`` (the micro-behaviours' names, e.g. the funnel review → qa → cart → buy_button),
    by default the declared order of the spec. The order is the same for every row: a row's own order of
    behaviours would be post-click information, unknown when an impression is scored, so no model can read it.

    Paper: the MCM-GRU ablation of §5.6 and Figure 5 of "GMCM: Graph-based Micro-behavior Conversion Model for
    Post-click Conversion Rate Estimation" ([Bao et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401425)),
    which "replaces GCN with a sequence model" (no equation of its own): eq. (15) becomes a GRU over the node
    embeddings of eq. (14) taken in ``order``, eq. (17) reads its last hidden state,

    .. math::
        h_t = \mathrm{GRU}(\mathbf e_{o_t}, h_{t-1}), \qquad
        \hat r^{CVR} = \mathrm{sigmoid}(h_N \Theta_{CVR}), \qquad
        \hat r_{o_t}^{node} = \mathrm{sigmoid}(h_t \Theta_{o_t})

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        nodes: the declared micro-behaviours, in the order of ``batch["micro"]``.
        pmg (numpy.ndarray): the ``(N, N)`` prior P (unused: there is no graph; kept for GMCM's signature).
        gru_hidden: width of the GRU's hidden state.
        order: the nodes' names in step order (default: ``nodes``).
        **params (Any): GMCM's other parameters (``output`` is always ``"concat"``; ``gcn_hidden`` is unused).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]``, ``batch["purchase"]`` ``(B,)`` and ``batch["micro"]`` ``(B, N)``
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each and ``p_node`` ``(B, N)``
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, nodes: Sequence[str], pmg,
                 gru_hidden: int = 64, order: Sequence[str] | None = None, **params):
        nodes = list(nodes)
        order = nodes if order is None else list(order)
        if sorted(order) != sorted(nodes):
            raise ValueError(f"order must list each declared micro-behaviour {nodes} once, got {order}")
        self.gru_hidden, self.steps = gru_hidden, [nodes.index(name) for name in order]
        super().__init__(cardinalities, n_numeric, nodes, pmg, output="concat", **params)
        self.cvr_logit = nn.Linear(gru_hidden, 1)
        self.unsort = [self.steps.index(j) for j in range(len(nodes))]  # node j's step

    def _build_mixer(self, node_dim: int, hidden: Sequence[int], pmg) -> int:
        self.gru = nn.GRU(node_dim, self.gru_hidden, batch_first=True)
        return self.gru_hidden

    def mix(self, e: Tensor) -> Tensor:
        """The GRU's output at each node's step, ``(B, N, gru_hidden)``, back in the nodes' order."""
        return self.gru(e[:, self.steps])[0][:, self.unsort]

    def pool(self, h: Tensor) -> Tensor:
        """The hidden state after the last step: the output of the node that comes last in ``order``."""
        return h[:, self.steps[-1]]

"""The input vector every value model shares: e = [e_u ‖ e_f ‖ e_x ‖ e_b ‖ e_c] (EOCA eq. 14)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.nn import FeatureEmbedding
from promokit.nn.bipartite import BipartiteGNN, NodeStates, sample_neighbours
from promokit.nn.sequence import BehaviourEncoder
from promokit.value.inputs import GraphBatch, NodeInputs


class DeliveryEncoder(nn.Module):
    r"""One delivery (user u shown fund f in context x) → the vector of eq. 14,

    .. math:: \mathbf e = [\mathbf e_u \,\|\, \mathbf e_f \,\|\, \mathbf e_x \,\|\, \mathbf e_b \,\|\, \mathbf e_c]

    - e_u, e_f, e_x: the user's, the fund's and the delivery context's feature embeddings, concatenated
      (:class:`FeatureEmbedding`; the context is this library's addition: the paper's deliveries have none);
    - e_b: the behaviour sequence through self-attention (:class:`BehaviourEncoder`, 128 wide as §5.1); none
      when ``max_len`` is 0 (the training tables had no behaviours);
    - e_c (``graph=True``): a 2-layer graph attention network on the user–merchant–user consumption graph
      (:class:`BipartiteGNN` with GAT convolutions, §4.1.2): the user's state after merchants → user, where the
      merchants first gathered from their own customers. Users enter with their feature embedding and payment
      structure, merchants with an id embedding and their structure. Training samples ``fanouts`` neighbours per
      hop; evaluation runs every user's full neighbourhood once per evaluation (cached until training resumes).
      A batch trained over parts carries its users' sampled neighbourhoods instead (``graph``, a
      :class:`~promokit.value.inputs.GraphBatch` of records, :mod:`promokit.value.graph_training`).

    The node tensors (users, funds, merchants, graph) are attached with :meth:`attach`: they are data. A batch
    names its deliveries' users and funds by row of those tensors (``user``, ``fund``), or carries their features
    itself (``user_cat``, ``user_num``, ``fund_cat``, ``fund_num``: deliveries streamed from the parts of a dataset,
    whose batches mix users of several parts), which needs nothing attached unless the model reads the graph.

    Paper: "Expected Transaction Value Optimization for Precise Marketing in FinTech Platforms" (Weng, Tang, Chen,
    Liu, He; FiT, Tencent; the text, ``eoca-expected-transaction-value.txt``, has the ACM template's placeholder
    for venue and DOI), §4.1.2, eq. (14) above.

    Args:
        user_cardinalities: rows per categorical field of the users' features.
        user_numeric: width of the users' numeric features.
        fund_cardinalities: rows per categorical field of the funds' features.
        fund_numeric: width of the funds' numeric features.
        context_cardinalities: rows per categorical field of the delivery context.
        context_numeric: width of the delivery context's numeric features.
        sequence_cardinalities: codes per behaviour-token field (fund, action).
        max_len: the behaviour sequence's length (0: no e_b).
        emb_dim: embedding size per categorical field (and of a merchant id).
        sequence_dim: width of the behaviour encoder's tokens.
        behaviour_dim: width of e_b.
        graph: read the consumption graph (e_c).
        merchant_cardinality: merchant id codes.
        structure: width of a node's payment-structure features.
        width: width of e_c (the GNN's).
        conv: the GNN's aggregation, ``"gat"`` (the paper's), ``"sage"`` or ``"graph"``.
        fanouts: neighbours sampled per hop in training, one per GNN layer.
        dropout: dropout between the GNN's layers.

    Shapes:
        - **input:** a batch of B deliveries: ``user`` and ``fund`` ``(B,)`` rows of the attached nodes (or
          ``user_cat`` ``(B, F_u)``, ``user_num`` ``(B, D_u)``, ``fund_cat`` ``(B, F_f)``, ``fund_num``
          ``(B, D_f)``), ``ctx_cat`` ``(B, F_x)``, ``ctx_num`` ``(B, D_x)``, ``seq`` ``(B, L, 2)`` int64 tokens
          (−1 = padding)
        - **output:** e ``(B, output_dim)``
    """

    def __init__(self, user_cardinalities: Sequence[int], user_numeric: int, fund_cardinalities: Sequence[int],
                 fund_numeric: int, context_cardinalities: Sequence[int], context_numeric: int,
                 sequence_cardinalities: Sequence[int], max_len: int, emb_dim: int = 16, sequence_dim: int = 32,
                 behaviour_dim: int = 128, graph: bool = True, merchant_cardinality: int = 1, structure: int = 0,
                 width: int = 64, conv: str = "gat", fanouts: Sequence[int] = (10, 10), dropout: float = 0.0):
        super().__init__()
        self.user = FeatureEmbedding(user_cardinalities, user_numeric, emb_dim)
        self.fund = FeatureEmbedding(fund_cardinalities, fund_numeric, emb_dim)
        self.context = FeatureEmbedding(context_cardinalities, context_numeric, emb_dim)
        self.behaviour = BehaviourEncoder(sequence_cardinalities, max_len, sequence_dim, out_dim=behaviour_dim) \
            if max_len else None
        self.output_dim = (self.user.output_dim + self.fund.output_dim + self.context.output_dim
                           + (self.behaviour.output_dim if self.behaviour is not None else 0))
        self.graph, self.fanouts = graph, list(fanouts)
        if graph:
            self.merchant = nn.Embedding(merchant_cardinality, emb_dim)
            self.gnn = BipartiteGNN(self.user.output_dim + structure, emb_dim + structure, width=width,
                                    depth=len(fanouts), conv=conv, dropout=dropout)
            # the last layer's user → merchant convolution feeds no user's state: frozen (it never has a gradient),
            # so that data-parallel training, whose DDP expects one for every trainable weight, takes the network
            self.gnn.to_merchant[-1].requires_grad_(False)
            self.output_dim += width
        self.inputs: NodeInputs | None = None
        self._states: NodeStates | None = None
        self._given: Tensor | None = None  # users' e_c computed elsewhere (use_states)

    def attach(self, inputs: NodeInputs) -> DeliveryEncoder:
        """Use these node inputs (the users, funds and graph of the tables being trained on or scored)."""
        if self.graph and inputs.graph is None:
            raise ValueError("this model reads the consumption graph; give the consumption table")
        self.inputs, self._states, self._given = inputs, None, None
        return self

    def use_states(self, users: Tensor) -> None:
        """Take the attached users' e_c as given (one row each, in the attached users' order), computed over a
        graph no part holds whole (:mod:`promokit.value.parts`), instead of from the attached graph."""
        self._given = users

    def train(self, mode: bool = True) -> DeliveryEncoder:
        self._states = None  # evaluation states are stale once the weights move
        return super().train(mode)

    def node_features(self, node: str, rows: Tensor) -> dict[str, Tensor]:
        """The attached features (``cat``, ``num``) of the users or funds (``node``) at ``rows``."""
        if self.inputs is None:
            raise RuntimeError("attach the node inputs (attach) before calling the model")
        return {"cat": getattr(self.inputs, f"{node}_cat")[rows], "num": getattr(self.inputs, f"{node}_num")[rows]}

    def _batch_features(self, batch: dict[str, Tensor], node: str) -> dict[str, Tensor]:
        if f"{node}_cat" in batch:
            return {"cat": batch[f"{node}_cat"], "num": batch[f"{node}_num"]}
        return self.node_features(node, batch[node])

    def _node_features(self, users: Tensor, merchants: Tensor) -> tuple[Tensor, Tensor]:
        return (self.graph_input("user", self.node_features("user", users), self.inputs.user_structure[users]),
                self.graph_input("merchant", self.inputs.merchant_code[merchants],
                                 self.inputs.merchant_structure[merchants]))

    def graph_input(self, side: str, features, structure: Tensor) -> Tensor:
        """x of nodes entering the GNN: users' feature embedding (``features``: ``cat``, ``num``), or merchants'
        id embedding (``features``: their codes), with their payment structure."""
        embedded = self.user(features) if side == "user" else self.merchant(features)
        return torch.cat([embedded, structure], dim=1)

    def _consumption(self, users: Tensor, graph: GraphBatch | None = None) -> Tensor:
        if graph is not None:  # the batch carries its users' records (training over parts), in either mode
            x = (self.graph_input("user", {"cat": graph.user_cat, "num": graph.user_num}, graph.user_structure),
                 self.graph_input("merchant", graph.merchant_code, graph.merchant_structure))
            return self.gnn(*x, graph.sub).customers[graph.seed]
        if not self.training:
            if self._given is not None:
                return self._given[users]
            if self._states is None:
                with torch.no_grad():
                    graph = self.inputs.graph
                    x = self._node_features(torch.arange(graph.n_customers), torch.arange(graph.n_merchants))
                    self._states = self.gnn.inference(*x, graph)
            return self._states.customers[users]
        seeds, inverse = torch.unique(users, return_inverse=True)
        sub = sample_neighbours(self.inputs.graph, seeds, torch.empty(0, dtype=torch.long), self.fanouts)
        return self.gnn(*self._node_features(sub.customers, sub.merchants), sub).customers[inverse]

    def user_part(self, features: dict[str, Tensor], seq: Tensor, user: Tensor | None = None,
                  graph: GraphBatch | None = None) -> Tensor:
        """[e_u ‖ e_b ‖ e_c] of deliveries to users of ``features`` with behaviour tokens ``seq``: what does not
        depend on the fund; e_c reads the graph at the users' rows ``user``, or the users' records ``graph``."""
        parts = [self.user(features)] + ([self.behaviour(seq)] if self.behaviour is not None else [])
        if self.graph:
            parts.append(self._consumption(user, graph))
        return torch.cat(parts, dim=1)

    def item_part(self, features: dict[str, Tensor], ctx_cat: Tensor, ctx_num: Tensor) -> Tensor:
        """[e_f ‖ e_x]: the embeddings of the funds of ``features`` and of the context."""
        return torch.cat([self.fund(features), self.context({"cat": ctx_cat, "num": ctx_num})], dim=1)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """e of each delivery, its parts in the order user, behaviour, graph, fund, context (the dense layers that
        follow do not care about the order of eq. 14)."""
        return torch.cat([self.user_part(self._batch_features(batch, "user"), batch["seq"], batch.get("user"),
                                         batch.get("graph")),
                          self.item_part(self._batch_features(batch, "fund"), batch["ctx_cat"], batch["ctx_num"])],
                         dim=1)

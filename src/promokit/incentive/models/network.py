"""The joint customer–merchant response network: a representation, a customer head and a merchant head."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
from torch import Tensor, nn

from promokit.incentive.inputs import GraphInputs, NodeInputs
from promokit.incentive.models._curve import response_nll
from promokit.incentive.models.cox import CoxResponse
from promokit.incentive.models.dssm import DSSMCostResponse
from promokit.incentive.models.hazard import HazardResponse
from promokit.incentive.models.linear import OneHotFeatures
from promokit.incentive.models.merchant import MerchantResponse
from promokit.incentive.models.sbbm import SemiBlackBoxResponse
from promokit.nn import MLP, FeatureEmbedding
from promokit.nn.bipartite import BipartiteGNN, NodeStates, sample_neighbours

REPRESENTATIONS = ("gnn", "dnn", "dnn-h", "linear")
#: representations that read the 1-hop interaction history as inputs
WITH_HISTORY = ("dnn-h", "linear")
CUSTOMER_HEADS = {"hazard": HazardResponse, "cox": CoxResponse, "sbbm": SemiBlackBoxResponse,
                  "dssm-c": DSSMCostResponse}


class IncentiveNet(nn.Module):
    """Customers' and merchants' response to every value of the list, trained jointly (eq. 7):

    .. math::
        \\mathcal{L} = \\sum_{i \\in S_c} l_c(y^c_i, f_c(h_{u_i}, r^c_i))
                     + \\sum_{i \\in S_m} l_m(y^m_i, f_m(h_{v_i}, r^m_i)) + \\text{penalty}

    with l_c the censored likelihood of eq. 9 (or the binary log-loss of the sigmoid heads), l_m the squared
    error of the normalised shares, both averaged over the batch's rows.

    Representations h:

    - ``gnn``: the paper's model: each node's features and interaction structure, projected and passed through
      a :class:`BipartiteGNN` (depth 2, width 64, the Experiment section) shared by customers and merchants, on
      neighbour-sampled subgraphs in training and full neighbourhoods (layer by layer) in evaluation;
    - ``dnn``: the node's own features only (the paper's DNN);
    - ``dnn-h``: own features, interaction structure and the mean of the neighbours' features (DNN-H);
    - ``linear``: DNN-H's inputs, categories one-hot instead of embedded, fed to the heads without a tower:
      per-piece log-linear hazards, the linear floor every deep model has to beat (solved by
      :func:`~promokit.incentive.models.linear.solve_floor`, not trained by gradient steps).

    Each node type then has a tower (``hidden``, ReLU) feeding its head: the customer head is one of
    :data:`CUSTOMER_HEADS`, the merchant head :class:`MerchantResponse`.

    A batch holds rows of both kinds: ``node`` (index in its node table), ``customer`` (1 for a customer row),
    ``level`` (index of the offered value) and ``label`` (redeemed, or the normalised shares). Outputs per row:
    ``response`` ``(B, K)`` and, for customer rows, ``log_response`` / ``log_no_response`` (and ``hazard`` for
    the hazard heads); merchant rows hold zeros there. The node inputs are attached with :meth:`attach`; they
    are data, not weights, so a saved model scores any graph with the same feature columns. A batch of training
    records (:mod:`promokit.incentive.record_training`) holds customer rows alone and, as ``record``, their
    neighbourhoods and inputs: the GNN runs on those, with no inputs attached.

    The "merchant" side is the other end of the customers' edges: merchants, items (which have no labels, so no
    merchant row ever trains or is scored), or, with ``merchant_cardinalities`` None, the customers themselves on a
    customer–customer graph: one feature embedding and a homogeneous :class:`BipartiteGNN` for both sides (the
    merchant widths are then the customers').

    Paper: "Joint Incentive Optimization of Customer and Merchant in Mobile Payment Marketing" (Li Yu, Zhengwei Wu,
    Tianchi Cai, Ziqi Liu, Zhiqiang Zhang, Lihong Gu, Xiaodong Zeng, Jinjie Gu; Ant Group; AAAI 2021; the text,
    ``joint-incentive-hazard-allocation.txt``, gives no link): the joint representation h = GNN(· | A, X) of its
    "Jointly Learning Representations" section (eq. 1's form), the customer response of eqs. (8)–(10), the
    merchant response of eq. (21)'s form, and the joint loss of eq. (7) above, with the Experiment section's
    settings (two fully-connected layers of 256 and 128 units, ReLU; graph embedding 64; depth 2) as defaults.
    DNN and DNN-H are its Table 2 baselines, Cox, SBBM and DSSM-c (``head``) its Table 3 baselines.

    Args:
        customer_cardinalities: rows per categorical field of the customers' features.
        customer_numeric: width of the customers' numeric features.
        customer_structure: width of the customers' interaction-structure features.
        merchant_cardinalities: rows per categorical field of the merchants' features; ``None``: a
            customer–customer graph (the merchant side is the customers).
        merchant_numeric: width of the merchants' numeric features.
        merchant_structure: width of the merchants' interaction-structure features.
        levels: the values r_1 < … < r_K, in increasing order.
        representation: ``"gnn"``, ``"dnn"``, ``"dnn-h"`` or ``"linear"``.
        head: the customer head, a key of :data:`CUSTOMER_HEADS` (``"hazard"``, ``"cox"``, ``"sbbm"``,
            ``"dssm-c"``).
        emb_dim: embedding size per categorical field.
        width: the GNN's width.
        depth: the GNN's number of layers.
        conv: the GNN's aggregation, ``"sage"``, ``"gat"`` or ``"graph"``.
        fanouts: neighbours sampled per hop in training, one per layer.
        hidden: the towers' widths (the last is the heads' input width).
        dropout: dropout in the GNN and the towers.
        fused_lasso: the hazard head's fused-lasso strength ζ (eq. 8).
        merchant_weight: the merchant loss's weight in the total.

    Shapes:
        - **input:** ``batch["node"]``, ``batch["customer"]``, ``batch["level"]``, ``batch["label"]`` ``(B,)``
          each (or, training over records, ``batch["record"]``: the customer seeds' sampled neighbourhoods), with
          the node inputs attached (:meth:`attach`)
        - **output:** ``response`` ``(B, K)`` for every row; ``log_response``, ``log_no_response`` (and ``hazard``
          for the hazard heads) ``(B, K)``, zeros on merchant rows
    """

    def __init__(self, customer_cardinalities: Sequence[int], customer_numeric: int, customer_structure: int,
                 merchant_cardinalities: Sequence[int] | None, merchant_numeric: int, merchant_structure: int,
                 levels: Sequence[float], representation: str = "gnn", head: str = "hazard", emb_dim: int = 8,
                 width: int = 64, depth: int = 2, conv: str = "graph", fanouts: Sequence[int] = (10, 25),
                 hidden: Sequence[int] = (256, 128), dropout: float = 0.1, fused_lasso: float = 1e-3,
                 merchant_weight: float = 1.0):
        super().__init__()
        if representation not in REPRESENTATIONS:
            raise ValueError(f"representation must be one of {REPRESENTATIONS}, got {representation!r}")
        if head not in CUSTOMER_HEADS:
            raise ValueError(f"head must be one of {sorted(CUSTOMER_HEADS)}, got {head!r}")
        if len(fanouts) != depth:
            raise ValueError(f"fanouts {list(fanouts)} need one entry per GNN layer (depth {depth})")
        self.representation, self.fanouts, self.merchant_weight = representation, list(fanouts), merchant_weight
        #: what validation chose that is a model parameter (the floor's L2 strengths, set by ``solve_floor``): what
        #: a refit on every row fixes (:mod:`promokit.training.refit`); none for a network trained by epochs
        self.chosen_params: dict = {}
        self.n_levels = len(levels)
        features = OneHotFeatures if representation == "linear" else partial(FeatureEmbedding, dim=emb_dim)
        homogeneous = merchant_cardinalities is None
        self.customer_features = features(customer_cardinalities, customer_numeric)
        if homogeneous:  # an alias, not a submodule: the state dict holds each weight once
            object.__setattr__(self, "merchant_features", self.customer_features)
            merchant_numeric, merchant_structure = customer_numeric, customer_structure
        else:
            self.merchant_features = features(merchant_cardinalities, merchant_numeric)
        c_dim = self.customer_features.output_dim + self._extra(customer_structure, merchant_numeric, merchant_structure)
        m_dim = self.merchant_features.output_dim + self._extra(merchant_structure, customer_numeric, customer_structure)
        if representation == "gnn":
            self.gnn = BipartiteGNN(c_dim, m_dim, width=width, depth=depth, conv=conv, dropout=dropout,
                                    homogeneous=homogeneous)
            c_dim = m_dim = width
        if representation == "linear":  # the heads read the inputs directly: log-linear hazards, the linear floor
            self.customer_tower, self.merchant_tower = nn.Identity(), nn.Identity()
        else:
            self.customer_tower = nn.Sequential(MLP(c_dim, hidden[:-1], out_dim=hidden[-1], dropout=dropout), nn.ReLU())
            self.merchant_tower = nn.Sequential(MLP(m_dim, hidden[:-1], out_dim=hidden[-1], dropout=dropout), nn.ReLU())
            c_dim = m_dim = hidden[-1]
        head_args = {"fused_lasso": fused_lasso} if head == "hazard" else {}
        self.customer_head = CUSTOMER_HEADS[head](c_dim, levels, **head_args)
        self.merchant_head = MerchantResponse(m_dim, levels)
        self.inputs: GraphInputs | None = None
        self._states: NodeStates | None = None

    def _extra(self, structure: int, neighbour_numeric: int, neighbour_structure: int) -> int:
        """Width of what the representation adds to a node's own features."""
        if self.representation == "dnn":
            return 0
        history = neighbour_numeric + neighbour_structure if self.representation in WITH_HISTORY else 0
        return structure + history

    def attach(self, inputs: GraphInputs) -> IncentiveNet:
        """Use these node inputs (the graph and features of the tables being trained on or scored)."""
        self.inputs, self._states = inputs, None
        return self

    def train(self, mode: bool = True) -> IncentiveNet:
        self._states = None  # evaluation states are stale once the weights move
        return super().train(mode)

    def _node_features(self, nodes: NodeInputs, index: Tensor, embedding: FeatureEmbedding) -> Tensor:
        parts = [embedding({"cat": nodes.cat[index], "num": nodes.num[index]})]
        if self.representation != "dnn":
            parts.append(nodes.structure[index])
        if self.representation in WITH_HISTORY:
            parts.append(nodes.history[index])
        return torch.cat(parts, dim=1)

    def _represent(self, customers: Tensor, merchants: Tensor) -> NodeStates:
        inputs = self.inputs
        if inputs is None:
            raise RuntimeError("attach the node inputs (IncentiveNet.attach) before calling the model")
        if self.representation != "gnn":
            return NodeStates(self._node_features(inputs.customers, customers, self.customer_features),
                              self._node_features(inputs.merchants, merchants, self.merchant_features))
        if not self.training:
            states = self._all_states()
            return NodeStates(states.customers[customers], states.merchants[merchants])
        sub = sample_neighbours(inputs.graph, customers, merchants, self.fanouts)
        x_c = self._node_features(inputs.customers, sub.customers, self.customer_features)
        x_m = self._node_features(inputs.merchants, sub.merchants, self.merchant_features)
        return self.gnn(x_c, x_m, sub)

    def _record_states(self, record, merchant_record=None) -> NodeStates:
        """GNN states of a :class:`~promokit.incentive.record_batches.RecordBatch`'s seeds, on the sampled
        neighbourhoods the records hold (training or not); with ``merchant_record`` (a batch of merchant seeds'
        records), the merchants' states are its seeds'."""
        states = self.gnn(self.node_features("customer", record.customers),
                          self.node_features("merchant", record.merchants), record.sub)
        if merchant_record is None:
            return states
        merchants = self.gnn(self.node_features("customer", merchant_record.customers),
                             self.node_features("merchant", merchant_record.merchants), merchant_record.sub)
        return NodeStates(states.customers, merchants.merchants)

    @torch.no_grad()
    def _all_states(self) -> NodeStates:
        """GNN states of every node, full neighbourhoods, computed once per evaluation."""
        if self._states is None:
            inputs = self.inputs
            self._states = self.gnn.inference(self.node_features("customer", inputs.customers),
                                              self.node_features("merchant", inputs.merchants), inputs.graph)
        return self._states

    # The three steps of scoring, exposed for a graph in shards (promokit.incentive.parts): a node's inputs x, the
    # state the representation starts from, then (after the GNN's layers) the heads.
    def node_features(self, side: str, nodes: NodeInputs) -> Tensor:
        """x of every row of ``nodes`` (``side``: ``"customer"`` or ``"merchant"``)."""
        embedding = self.customer_features if side == "customer" else self.merchant_features
        return self._node_features(nodes, torch.arange(len(nodes)), embedding)

    def first_states(self, side: str, x: Tensor) -> Tensor:
        """The representation of x before any graph layer: the GNN's projection, or x itself."""
        if self.representation != "gnn":
            return x
        return (self.gnn.customer_in if side == "customer" else self.gnn.merchant_in)(x)

    def heads(self, side: str, states: Tensor) -> dict[str, Tensor]:
        """The tower and head of ``side`` on final states: ``response`` (and the customer head's other outputs)."""
        if side == "customer":
            return self.customer_head(self.customer_tower(states))
        return self.merchant_head(self.merchant_tower(states))

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        is_customer = batch["customer"].bool()
        nodes = batch["node"]
        if "record" in batch:  # seeds with their neighbourhoods read from training records
            states = self._record_states(batch["record"], batch.get("merchant_record"))
        else:
            states = self._represent(nodes[is_customer], nodes[~is_customer])
        customer = self.heads("customer", states.customers)
        merchant = self.heads("merchant", states.merchants)
        rows, k = len(nodes), self.n_levels
        out = {}
        for name, value in customer.items():
            out[name] = value.new_zeros((rows, k)).index_put((is_customer.nonzero().squeeze(1),), value)
        out["response"] = out["response"].index_put(((~is_customer).nonzero().squeeze(1),), merchant["response"])
        return out

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        is_customer = batch["customer"].bool()
        level, label = batch["level"], batch["label"]
        nll = response_nll(out, level, label)
        at = out["response"].gather(1, level.unsqueeze(1)).squeeze(1)
        squared = (at - label) ** 2
        rows = max(len(level), 1)
        customer = torch.where(is_customer, nll, torch.zeros_like(nll)).sum() / rows
        merchant = torch.where(is_customer, torch.zeros_like(squared), squared).sum() / rows
        penalty = self.customer_head.penalty()
        total = customer + self.merchant_weight * merchant + penalty
        return total, {"customer_nll": customer.detach(), "merchant_mse": merchant.detach(),
                       "penalty": penalty.detach()}

"""Node inputs of the incentive models: encoded features, graph structure and 1-hop interaction history.

Built once per table set (the whole graph, labelled or not), then indexed by node: the models see customers
and merchants by their row in the node tables. The "merchant" side of the inputs is the other end of the customers'
edges: the merchants, the items of a customer–item graph, or the customers themselves on a customer–customer graph
(one encoder and the same inputs for both sides).

- ``cat`` / ``num``: the node's own features (``TableEncoder``: vocabularies with an OOV slot, scaled numbers);
- ``structure``: log(1 + degree), log(1 + total edge weight) and the mean of each edge feature over the node's
  edges — what a node knows of its own interactions — and, for merchants, log(1 + prior_shares), the activity
  of the window before the experiment (known before it starts); used by the GNN and DNN-H;
- ``history``: DNN-H's aggregated interactions (the paper's "historical customer-merchant interactions as
  additional features"): the payment-weighted mean of the neighbours' numeric features and structure, without
  a GNN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from promokit.data.encoders import TableEncoder
from promokit.data.spec import FeatureSpec
from promokit.incentive.contract import IncentiveTables
from promokit.nn.bipartite import BipartiteGraph


@dataclass
class NodeInputs:
    cat: Tensor        # (N, F) int64 codes
    num: Tensor        # (N, D) float32
    structure: Tensor  # (N, S) float32
    history: Tensor    # (N, H) float32

    def __len__(self) -> int:
        return len(self.cat)

    @property
    def aggregated(self) -> Tensor:
        """What a neighbour's history averages of this node: its numeric features and structure."""
        return torch.cat([self.num, self.structure], dim=1)


@dataclass
class GraphInputs:
    """The customers, the other end of their edges (``merchants``: merchants, items, or ``customers`` itself on a
    customer–customer graph) and the graph between them."""

    customers: NodeInputs
    merchants: NodeInputs
    graph: BipartiteGraph


@dataclass
class InputEncoders:
    """What turns tables into :class:`GraphInputs`, fitted on the training tables and saved with the model."""

    customers: TableEncoder
    merchants: TableEncoder
    customer_structure: TableEncoder
    merchant_structure: TableEncoder

    @classmethod
    def fit(cls, tables: IncentiveTables) -> InputEncoders:
        c_struct, m_struct = _structure_frames(tables)
        customers = TableEncoder.fit(tables.customers, tables.customer_spec)
        customer_structure = _numeric_encoder(c_struct)
        if tables.graph == "customers":
            return cls(customers, customers, customer_structure, customer_structure)
        return cls(customers, TableEncoder.fit(*tables.partners()), customer_structure, _numeric_encoder(m_struct))

    def transform(self, tables: IncentiveTables) -> GraphInputs:
        edges, partners = tables.edges, tables.partners()[0]
        customer_index = torch.from_numpy(edges["customer"].to_numpy(dtype=np.int64, copy=True))
        merchant_index = torch.from_numpy(edges[tables.partner_column].to_numpy(dtype=np.int64, copy=True))
        weight = torch.from_numpy(edges["weight"].to_numpy(dtype=np.float32, copy=True))
        graph = BipartiteGraph.from_edges(customer_index, merchant_index, len(tables.customers), len(partners),
                                          weight=weight)
        c_struct, m_struct = _structure_frames(tables)
        customers = own_inputs(self.customers, tables.customers, self.customer_structure, c_struct)
        if tables.graph == "customers":
            customers.history = neighbour_mean(customers.aggregated, merchant_index, customer_index, weight,
                                               len(customers))
            return GraphInputs(customers, customers, graph)
        merchants = own_inputs(self.merchants, partners, self.merchant_structure, m_struct)
        customers.history = neighbour_mean(merchants.aggregated, merchant_index, customer_index, weight, len(customers))
        merchants.history = neighbour_mean(customers.aggregated, customer_index, merchant_index, weight, len(merchants))
        return GraphInputs(customers, merchants, graph)

    def edge_features(self) -> list[str]:
        """The edge feature columns the model was trained with (each node's structure holds their means)."""
        return [name.removeprefix("edge_") for name in self.customer_structure.numeric if name.startswith("edge_")]

    def to_dict(self) -> dict:
        return {name: getattr(self, name).to_dict() for name in
                ("customers", "merchants", "customer_structure", "merchant_structure")}

    @classmethod
    def from_dict(cls, data: dict) -> InputEncoders:
        return cls(**{name: TableEncoder.from_dict(value) for name, value in data.items()})


def _structure_frames(tables: IncentiveTables) -> tuple[pd.DataFrame, pd.DataFrame]:
    if tables.customers_only:  # no interactions to describe: DNN-H and the floor read the own features alone
        return pd.DataFrame(index=range(len(tables.customers))), pd.DataFrame(index=range(0))
    customers = structure_frame(tables.edges, "customer", len(tables.customers), tables.edge_features)
    if tables.graph == "customers":
        return customers, customers
    merchants = structure_frame(tables.edges, tables.partner_column, len(tables.partners()[0]), tables.edge_features,
                                tables.prior_shares if tables.graph == "merchants" else None)
    return customers, merchants


def structure_frame(edges: pd.DataFrame, key: str, n: int, edge_features, prior_shares: np.ndarray | None = None
                    ) -> pd.DataFrame:
    """What nodes ``0 … n − 1`` know of their own interactions, from the ``edges`` whose column ``key`` names the
    node: log(1 + degree), log(1 + total weight), each edge feature's mean and, for merchants, log(1 +
    prior_shares)."""
    grouped = edges.groupby(key)
    frame = pd.DataFrame({"log_degree": np.log1p(grouped.size()), "log_weight": np.log1p(grouped["weight"].sum())})
    for name in edge_features:
        frame[f"edge_{name}"] = grouped[name].mean()
    frame = frame.reindex(range(n)).fillna({"log_degree": 0.0, "log_weight": 0.0})
    if prior_shares is not None:
        frame["log_prior_shares"] = np.log1p(prior_shares)
    return frame


def _numeric_encoder(frame: pd.DataFrame) -> TableEncoder:
    # standardised, not tanh-squashed: counts on a log scale carry their information in the tails (a merchant's
    # prior shares set the scale of its normalised label)
    return TableEncoder.fit(frame, FeatureSpec(numeric=list(frame.columns), group_key=None), squash_numeric=False)


def own_inputs(encoder: TableEncoder, table: pd.DataFrame, structure_encoder: TableEncoder,
               structure: pd.DataFrame) -> NodeInputs:
    """A node table's encoded features and structure (its history comes from the neighbours, later)."""
    encoded = encoder.transform(table)
    return NodeInputs(torch.from_numpy(encoded.categorical), torch.from_numpy(encoded.numeric),
                      torch.from_numpy(structure_encoder.transform(structure).numeric), torch.empty(0))


def neighbour_mean(values: Tensor, source: Tensor, target: Tensor, weight: Tensor, n_target: int) -> Tensor:
    """Per target node, the payment-weighted mean over its edges of the neighbours' ``values`` (their
    :attr:`NodeInputs.aggregated`; 0 without edges, or when its edges weigh nothing)."""
    total = torch.zeros(n_target, values.shape[1]).index_add_(0, target, values[source] * weight.unsqueeze(1))
    mass = torch.zeros(n_target).index_add_(0, target, weight)
    return total / mass.clamp_min(1e-12).unsqueeze(1)

"""Mini-batches from training records (:mod:`promokit.incentive.records`): rows of records back into the
:class:`~promokit.nn.bipartite.Subgraph`, node inputs and seed labels that the in-memory GNN path trains on, so
that a trainer streaming records runs the same layers and losses."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from promokit.incentive.contract import LEVEL, REDEEMED
from promokit.incentive.inputs import NodeInputs
from promokit.incentive.records import FEATURES, META
from promokit.nn.bipartite import Subgraph
from promokit.nn.keyed_sampling import Edges, Neighbourhoods, Nodes, to_subgraph


@dataclass
class RecordBatch:
    """``sub`` (the records' disjoint union, seeds first), the inputs of its ``customers`` and ``merchants`` (rows
    aligned with ``sub.customers`` / ``sub.merchants``; no history), the seeds' ``level`` and ``redeemed``, and the
    edge features (weight first) aligned with ``sub``'s edges."""

    sub: Subgraph
    customers: NodeInputs
    merchants: NodeInputs
    level: torch.Tensor
    redeemed: torch.Tensor
    into_customer_edge: torch.Tensor
    into_merchant_edge: torch.Tensor

    def labels(self) -> dict[str, torch.Tensor]:
        """The seeds as the rows of :meth:`~promokit.incentive.models.network.IncentiveNet.loss` (customers)."""
        n = len(self.level)
        return {"node": torch.arange(n), "customer": torch.ones(n), "level": self.level, "label": self.redeemed}


def record_widths(table) -> dict:
    """The metadata a records part carries (fanouts, seed, draws, edge features, feature widths)."""
    return json.loads(table.schema.metadata[META])


def read_batch(table) -> RecordBatch:
    """The records of a :class:`pyarrow.Table` (rows of records parts, e.g. a row group) as one batch."""
    meta = record_widths(table)
    n, depth = table.num_rows, len(meta["fanouts"])

    def flat(name: str, width: int = 1) -> tuple[np.ndarray, np.ndarray]:
        column = table.column(name).combine_chunks()
        offsets = np.asarray(column.offsets)
        values = np.asarray(column.values.to_numpy(zero_copy_only=False))
        counts = np.diff(offsets) // width
        return values.reshape(-1, width) if width > 1 else values, np.repeat(np.arange(n), counts)

    def nodes(side: str) -> tuple[Nodes, dict]:
        gid, rec = flat(f"{side}_gid")
        hop, _ = flat(f"{side}_hop")
        features = {f: flat(f"{side}_{f}", max(meta[f"{side}_{f}"], 1))[0] for f in FEATURES}
        zero = np.zeros(len(gid), np.int64)
        return Nodes(rec, hop, gid, zero, zero), features

    def edges(name: str) -> tuple[Edges, np.ndarray]:
        src, rec = flat(f"{name}_src")
        dst, _ = flat(f"{name}_dst")
        hop, _ = flat(f"{name}_hop")
        width = 1 + len(meta["edge_features"])
        edge, _ = flat(f"{name}_edge", width)
        zero = np.zeros(len(src), np.int64)
        return Edges(rec, hop, src.astype(np.int64), dst.astype(np.int64), zero, zero), edge.reshape(len(src), width)

    (customers, c_features), (merchants, m_features) = nodes("customer"), nodes("merchant")
    (into_c, c_edge), (into_m, m_edge) = edges("into_customer"), edges("into_merchant")
    collated = to_subgraph(Neighbourhoods(n, depth, customers, merchants, into_c, into_m), c_edge[:, 0], m_edge[:, 0])

    def inputs(features: dict, rows: np.ndarray, side: str) -> NodeInputs:
        def take(f: str) -> torch.Tensor:
            width = meta[f"{side}_{f}"]
            values = features[f].reshape(-1, width) if width else features[f].reshape(len(rows), 0)
            return torch.from_numpy(np.ascontiguousarray(values[rows]))
        return NodeInputs(take("cat"), take("num"), take("structure"), torch.empty(0))

    return RecordBatch(collated.sub, inputs(c_features, collated.customer_rows, "customer"),
                       inputs(m_features, collated.merchant_rows, "merchant"),
                       torch.from_numpy(table.column(LEVEL).to_numpy().astype(np.int64)),
                       torch.from_numpy(table.column(REDEEMED).to_numpy().astype(np.float32)),
                       torch.from_numpy(c_edge[collated.into_customer_rows]),
                       torch.from_numpy(m_edge[collated.into_merchant_rows]))

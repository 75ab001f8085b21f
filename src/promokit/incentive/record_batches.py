"""Mini-batches from training records (:mod:`promokit.incentive.records`): rows of records back into the
:class:`~promokit.nn.bipartite.Subgraph`, node inputs and seed labels that the in-memory GNN path trains on, so
that a trainer streaming records runs the same layers and losses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from promokit.incentive.contract import LEVEL, REDEEMED
from promokit.incentive.inputs import NodeInputs
from promokit.nn.bipartite import Subgraph
from promokit.nn.graph_records import FEATURES, read_records, record_meta


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
    return record_meta(table.schema)


def read_batch(table) -> RecordBatch:
    """The records of a :class:`pyarrow.Table` (rows of records parts, e.g. a row group) as one batch."""
    records = read_records(table)

    def inputs(side: str) -> NodeInputs:
        return NodeInputs(*(torch.from_numpy(records.inputs[side][f]) for f in FEATURES), torch.empty(0))

    return RecordBatch(records.collated.sub, inputs("customer"), inputs("merchant"),
                       torch.from_numpy(table.column(LEVEL).to_numpy().astype(np.int64)),
                       torch.from_numpy(table.column(REDEEMED).to_numpy().astype(np.float32)),
                       *(torch.from_numpy(records.edges[name]) for name in ("into_customer", "into_merchant")))

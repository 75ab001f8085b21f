"""Mini-batches from training records (:mod:`promokit.incentive.records`): rows of records (of customer seeds or of
merchant seeds) back into the :class:`~promokit.nn.bipartite.Subgraph`, node inputs and seed labels that the
in-memory GNN path trains on, so that a trainer streaming records runs the same layers and losses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from promokit.incentive.contract import LEVEL, REDEEMED
from promokit.incentive.inputs import NodeInputs
from promokit.incentive.records import TARGET
from promokit.nn.bipartite import Subgraph
from promokit.nn.graph_records import FEATURES, read_records, record_meta


@dataclass
class RecordBatch:
    """``sub`` (the records' disjoint union, seeds first), the inputs of its ``customers`` and ``merchants`` (rows
    aligned with ``sub.customers`` / ``sub.merchants``; no history), the seeds' ``level`` and ``label`` (a customer's
    redemption, a merchant's y^m), whether the seeds are ``customers`` (else merchants), and the edge features
    (weight first) aligned with ``sub``'s edges."""

    sub: Subgraph
    customers: NodeInputs
    merchants: NodeInputs
    level: torch.Tensor
    label: torch.Tensor
    seeds_are_customers: bool
    into_customer_edge: torch.Tensor
    into_merchant_edge: torch.Tensor

    def labels(self) -> dict[str, torch.Tensor]:
        """The seeds as the rows of :meth:`~promokit.incentive.models.network.IncentiveNet.loss`."""
        n = len(self.level)
        return {"node": torch.arange(n), "customer": torch.full((n,), float(self.seeds_are_customers)),
                "level": self.level, "label": self.label}


def record_widths(table) -> dict:
    """The metadata a records part carries (fanouts, seed, draws, edge features, feature widths)."""
    return record_meta(table.schema)


def read_batch(table) -> RecordBatch:
    """The records of a :class:`pyarrow.Table` (rows of records parts, e.g. a row group) as one batch."""
    records = read_records(table)

    def inputs(side: str) -> NodeInputs:
        return NodeInputs(*(torch.from_numpy(records.inputs[side][f]) for f in FEATURES), torch.empty(0))

    customers = REDEEMED in table.column_names  # a part holds customers' records or merchants' (TARGET)
    label = table.column(REDEEMED if customers else TARGET).to_numpy().astype(np.float32)
    return RecordBatch(records.collated.sub, inputs("customer"), inputs("merchant"),
                       torch.from_numpy(table.column(LEVEL).to_numpy().astype(np.int64)), torch.from_numpy(label),
                       customers, *(torch.from_numpy(records.edges[n]) for n in ("into_customer", "into_merchant")))

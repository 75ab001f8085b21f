"""Model inputs of the value domain: encoded users, funds and delivery contexts, leak-free behaviour sequences
and the user–merchant consumption graph.

- users, funds and merchants are node tables indexed by row (:class:`NodeInputs`, attached to the network as
  data, not weights, so a saved model scores any population with the same feature columns);
- a delivery is a row of :meth:`InputEncoders.rows`: its user and fund rows, its context features and its
  behaviour sequence — the user's last ``max_len`` events strictly before the delivery's time
  (:func:`promokit.data.history.last_events_before`), each a (fund, action) token;
- the consumption graph joins users to the merchants they paid; a user's structure is log(1 + payments),
  log(1 + total amount) and the mean of log(1 + amount) over its payments (robust to a few large ones), a
  merchant's the same over its customers, plus the merchant's
  id (merchants seen fewer than twice in training share the unknown row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from promokit.data.encoders import CategoryEncoder, TableEncoder
from promokit.data.history import last_events_before
from promokit.data.spec import FeatureSpec
from promokit.nn.bipartite import BipartiteGraph, Subgraph
from promokit.value.contract import ACTION, AMOUNT, FUND, MERCHANT, TIME, ValueTables

STRUCTURE = ("log_payments", "log_total_amount", "mean_log_amount")
MERCHANT_MIN_COUNT = 2


@dataclass
class NodeInputs:
    """Per-row tensors of the users, funds and (with a consumption graph) merchants, and the graph itself."""

    user_cat: Tensor
    user_num: Tensor
    fund_cat: Tensor
    fund_num: Tensor
    user_structure: Tensor | None = None
    merchant_code: Tensor | None = None
    merchant_structure: Tensor | None = None
    graph: BipartiteGraph | None = None


@dataclass
class GraphBatch:
    """The consumption graph of a batch of deliveries trained over parts (:mod:`promokit.value.graph_training`):
    the :class:`~promokit.nn.bipartite.Subgraph` of its users' records (seeds first), the inputs of its users
    (features and structure) and merchants (id codes and structure), and each delivery's ``seed``."""

    sub: Subgraph
    user_cat: Tensor
    user_num: Tensor
    user_structure: Tensor
    merchant_code: Tensor
    merchant_structure: Tensor
    seed: Tensor


@dataclass
class InputEncoders:
    """What turns :class:`ValueTables` into tensors, fitted on the training tables and saved with the model."""

    context: TableEncoder
    users: TableEncoder
    funds: TableEncoder
    actions: CategoryEncoder
    max_len: int  # behaviour events a delivery reads; 0 when training saw none (the network has no sequence encoder)
    merchants: CategoryEncoder | None = None
    user_structure: TableEncoder | None = None
    merchant_structure: TableEncoder | None = None

    @classmethod
    def fit(cls, tables: ValueTables, max_len: int = 50, rows: np.ndarray | None = None,
            graph: bool = True) -> InputEncoders:
        """Fit on ``tables``; the context vocabulary and scaling only on the delivery ``rows`` (training rows); the
        consumption graph's encoders with ``graph`` (a model that reads it) when the tables have one."""
        deliveries = tables.deliveries if rows is None else tables.deliveries.iloc[rows]
        actions = CategoryEncoder.fit(_actions(tables))
        encoders = cls(TableEncoder.fit(deliveries, tables.context_spec), TableEncoder.fit(tables.users, tables.user_spec),
                       TableEncoder.fit(tables.funds, tables.fund_spec), actions, _sequence_length(actions, max_len))
        if graph and tables.consumption is not None:
            users, merchants, _ = _graph_frames(tables)
            encoders.merchants = CategoryEncoder.fit(tables.consumption[MERCHANT], MERCHANT_MIN_COUNT)
            encoders.user_structure = _numeric_encoder(users)
            encoders.merchant_structure = _numeric_encoder(merchants)
        return encoders

    @staticmethod
    def count(tables: ValueTables, rows: np.ndarray) -> dict:
        """One part's share of the encoders :meth:`fit` (without the graph) builds on a dataset in parts: the counts
        and moments of the context features on its training ``rows``, of its users' features and of its behaviours'
        actions (:meth:`TableEncoder.count`). :meth:`from_counts` adds them up."""
        return {"context": TableEncoder.count(tables.deliveries.iloc[rows], tables.context_spec),
                "users": TableEncoder.count(tables.users, tables.user_spec),
                "actions": CategoryEncoder.count(_actions(tables))}

    @classmethod
    def from_counts(cls, shares: list[dict], specs: dict[str, FeatureSpec], funds: pd.DataFrame,
                    max_len: int) -> InputEncoders:
        """The encoders :meth:`fit` (without the graph) builds on the concatenation of a dataset's parts, from each
        part's :meth:`count`; ``specs`` are the ``context``, ``users`` and ``funds`` feature specs, ``funds`` the
        table every part shares."""
        actions = CategoryEncoder.from_counts([s["actions"] for s in shares])
        return cls(TableEncoder.from_counts([s["context"] for s in shares], specs["context"]),
                   TableEncoder.from_counts([s["users"] for s in shares], specs["users"]),
                   TableEncoder.fit(funds, specs["funds"]), actions, _sequence_length(actions, max_len))

    def fit_graph_counts(self, merchants: list, user_structure: list[dict], merchant_structure: list[dict]) -> None:
        """Add the consumption graph's encoders :meth:`fit` builds on a dataset's concatenation, from the shares of
        its shards (a graph in shards, :mod:`promokit.value.graph_records`): each merchant shard's
        :meth:`CategoryEncoder.count` of its payments' merchants and every shard's :func:`structure_count`."""
        self.merchants = CategoryEncoder.from_counts(merchants, MERCHANT_MIN_COUNT)
        self.user_structure = TableEncoder.from_counts(user_structure, _structure_spec(), squash_numeric=False)
        self.merchant_structure = TableEncoder.from_counts(merchant_structure, _structure_spec(), squash_numeric=False)

    @property
    def has_graph(self) -> bool:
        return self.merchants is not None

    def sizes(self) -> dict:
        """The input widths a network is built with."""
        sizes = {"user_cardinalities": self.users.cardinalities, "user_numeric": self.users.numeric_width,
                 "fund_cardinalities": self.funds.cardinalities, "fund_numeric": self.funds.numeric_width,
                 "context_cardinalities": self.context.cardinalities, "context_numeric": self.context.numeric_width,
                 "sequence_cardinalities": [self.funds.categorical[FUND].cardinality, self.actions.cardinality],
                 "max_len": self.max_len}
        if self.has_graph:
            sizes.update(merchant_cardinality=self.merchants.cardinality, structure=len(STRUCTURE))
        return sizes

    def nodes(self, tables: ValueTables) -> NodeInputs:
        users, funds = self.users.transform(tables.users), self.funds.transform(tables.funds)
        inputs = NodeInputs(torch.from_numpy(users.categorical), torch.from_numpy(users.numeric),
                            torch.from_numpy(funds.categorical), torch.from_numpy(funds.numeric))
        if self.has_graph and tables.consumption is not None:
            user_frame, merchant_frame, merchant_names = _graph_frames(tables)
            edges = tables.consumption
            merchant_index = pd.Index(merchant_names).get_indexer(edges[MERCHANT])
            inputs.graph = BipartiteGraph.from_edges(edges["user"].to_numpy(copy=True), merchant_index, len(tables.users),
                                                     len(merchant_names))
            inputs.user_structure = torch.from_numpy(self.user_structure.transform(user_frame).numeric)
            inputs.merchant_structure = torch.from_numpy(self.merchant_structure.transform(merchant_frame).numeric)
            inputs.merchant_code = torch.from_numpy(self.merchants.transform(pd.Series(merchant_names)))
        return inputs

    def rows(self, tables: ValueTables, rows: np.ndarray | None = None, carry_nodes: bool = False
             ) -> dict[str, Tensor]:
        """The per-delivery tensors (a Trainer batch source) of ``rows`` (all deliveries by default), with the
        labels ``click``, ``convert`` and ``v`` = log(1 + amount) when the tables have them. A delivery names its
        user's and fund's rows of ``tables`` (``user``, ``fund``), or with ``carry_nodes`` carries their encoded
        features (``user_cat``, ``user_num``, ``fund_cat``, ``fund_num``): the deliveries of one part of a dataset,
        which a training batch mixes with other parts'."""
        rows = np.arange(len(tables.deliveries)) if rows is None else np.asarray(rows)
        context = self.context.transform(tables.deliveries.iloc[rows])
        batch = {}
        for node, encoder, frame, index in (("user", self.users, tables.users, tables.user[rows]),
                                            ("fund", self.funds, tables.funds, tables.fund[rows])):
            if carry_nodes:
                encoded = encoder.transform(frame)
                batch.update({f"{node}_cat": torch.from_numpy(encoded.categorical[index]),
                              f"{node}_num": torch.from_numpy(encoded.numeric[index])})
            else:
                batch[node] = torch.from_numpy(index)
        batch.update(ctx_cat=torch.from_numpy(context.categorical), ctx_num=torch.from_numpy(context.numeric),
                     seq=torch.from_numpy(self.sequences(tables, rows)))
        if tables.has_labels:
            batch.update(click=torch.from_numpy(tables.click[rows]), convert=torch.from_numpy(tables.convert[rows]),
                         v=torch.from_numpy(tables.log_amount[rows].astype(np.float32)))
        return batch

    def sequences(self, tables: ValueTables, rows: np.ndarray) -> np.ndarray:
        """``(len(rows), max_len, 2)`` int64 (fund, action) codes of the events strictly before each delivery,
        most recent first; -1 pads."""
        out = np.full((len(rows), self.max_len, 2), -1, dtype=np.int64)
        behaviors = tables.behaviors
        if behaviors is None or len(behaviors) == 0 or not self.max_len:
            return out
        position = last_events_before(behaviors["user"].to_numpy(), behaviors[TIME].to_numpy(),
                                      tables.user[rows], tables.time[rows], self.max_len)
        real = position >= 0
        fund_codes = self.funds.categorical[FUND].transform(behaviors[FUND])
        action_codes = self.actions.transform(behaviors[ACTION])
        out[real, 0] = fund_codes[position[real]]
        out[real, 1] = action_codes[position[real]]
        return out

    def to_dict(self) -> dict:
        data = {"context": self.context.to_dict(), "users": self.users.to_dict(), "funds": self.funds.to_dict(),
                "actions": self.actions.to_dict(), "max_len": self.max_len}
        if self.has_graph:
            data.update(merchants=self.merchants.to_dict(), user_structure=self.user_structure.to_dict(),
                        merchant_structure=self.merchant_structure.to_dict())
        return data

    @classmethod
    def from_dict(cls, data: dict) -> InputEncoders:
        graph = "merchants" in data
        return cls(TableEncoder.from_dict(data["context"]), TableEncoder.from_dict(data["users"]),
                   TableEncoder.from_dict(data["funds"]), CategoryEncoder.from_dict(data["actions"]), data["max_len"],
                   CategoryEncoder.from_dict(data["merchants"]) if graph else None,
                   TableEncoder.from_dict(data["user_structure"]) if graph else None,
                   TableEncoder.from_dict(data["merchant_structure"]) if graph else None)


def _sequence_length(actions: CategoryEncoder, max_len: int) -> int:
    """The behaviour events a delivery reads: ``max_len``, or 0 when training saw no behaviour (no action to
    learn): the network then has no sequence encoder, which would only run over padding."""
    return max_len if actions.vocabulary else 0


def _actions(tables: ValueTables) -> pd.Series:
    return tables.behaviors[ACTION] if tables.behaviors is not None else pd.Series([], dtype="string")


def _graph_frames(tables: ValueTables) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Structure of every user (row order of ``users``) and of every merchant (sorted ids), and those ids."""
    edges = tables.consumption
    merchant_names, merchant = np.unique(edges[MERCHANT].to_numpy(dtype=str), return_inverse=True)
    amount = edges[AMOUNT].to_numpy(dtype=np.float64)
    return (payment_structure(edges["user"].to_numpy(), amount, len(tables.users)),
            payment_structure(merchant, amount, len(merchant_names)), merchant_names)


def payment_structure(node: np.ndarray, amount: np.ndarray, n: int) -> pd.DataFrame:
    """Of nodes ``0 … n − 1`` paying or paid ``amount`` on the edges naming them ``node``: log(1 + payments),
    log(1 + total amount) and the mean log(1 + amount)."""
    payments = np.bincount(node, minlength=n).astype(np.float64)
    total = np.bincount(node, weights=amount, minlength=n)
    log_sum = np.bincount(node, weights=np.log1p(amount), minlength=n)
    mean_log = np.divide(log_sum, payments, out=np.zeros(n), where=payments > 0)
    return pd.DataFrame(dict(zip(STRUCTURE, (np.log1p(payments), np.log1p(total), mean_log))))


def _structure_spec() -> FeatureSpec:
    return FeatureSpec(numeric=list(STRUCTURE), group_key=None)


def _numeric_encoder(frame: pd.DataFrame) -> TableEncoder:
    return TableEncoder.fit(frame, _structure_spec(), squash_numeric=False)


def structure_count(frame: pd.DataFrame) -> dict:
    """One shard's share of a structure encoder (its nodes' :func:`payment_structure`), for
    :meth:`InputEncoders.fit_graph_counts`."""
    return TableEncoder.count(frame, _structure_spec())

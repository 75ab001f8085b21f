"""Per-seed neighbourhoods with keyed draws: the sampler of AGL-style training records (Zhang et al., VLDB 2020),
the same whether the graph is in one process or in parts.

:func:`~promokit.nn.bipartite.sample_neighbours` draws from one generator over a whole batch: a node reached from
two seeds is expanded once, and its draw depends on the batches drawn before. A record must be a function of its seed
alone, so here every seed gets its own neighbourhood (a node reached from two seeds appears in both), with the
semantics of ``sample_neighbours`` on that one seed: hop k = 1 … L expands the nodes first reached at hop k − 1 with
``fanouts[k − 1]`` neighbours, drawn uniformly without replacement (all if fewer, or if the fanout is -1). The draw
of node v's neighbours is Floyd's algorithm fed by a hash of (seed, epoch, hop, side, key of v, step) instead of
a generator, so it depends neither on the batch nor on how the graph is partitioned (the key is a hash of the node's
id, :func:`node_keys`; the neighbour order is the edges' input order, the same in both).

The sampler reads a side's adjacency through an :class:`Adjacency` (the CSR of the edges into that side's nodes,
nodes named by (shard, row, global index)): :class:`WholeAdjacency` over a
:class:`~promokit.nn.bipartite.BipartiteGraph`, or one that reads the shards of a graph in parts. :func:`grow` returns
the neighbourhoods as flat arrays (:class:`Neighbourhoods`), record by record; :func:`to_subgraph` turns them into
the :class:`~promokit.nn.bipartite.Subgraph` a :class:`~promokit.nn.bipartite.BipartiteGNN` trains on: the disjoint
union of the records, nodes and edges in hop order, so that its layers trim as on a batch of ``sample_neighbours``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd
import torch

from promokit.data.part_keys import canonical
from promokit.nn.bipartite import BipartiteGraph, Subgraph

CUSTOMER, MERCHANT = 0, 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def node_keys(ids: pd.Series) -> np.ndarray:
    """The uint64 key of each node id (a hash of the id as :func:`~promokit.data.part_keys.canonical` writes it)."""
    return pd.util.hash_pandas_object(canonical(ids.reset_index(drop=True)), index=False).to_numpy()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def keyed_offsets(keys: np.ndarray, degree: np.ndarray, fanout: int, seed: int, epoch: np.ndarray, hop: int,
                  side: int) -> np.ndarray:
    """``(len(keys), fanout)`` distinct offsets, row i a uniform ``fanout``-subset of ``0 … degree[i] − 1`` (needs
    ``degree >= fanout``), a function of (seed, epoch[i], hop, side, keys[i]) alone. Floyd's algorithm as in
    :func:`~promokit.nn.bipartite.sample_neighbours`, each step's uniform a hash instead of a generator's draw."""
    stream = _mix(_mix(np.full(len(keys), seed, dtype=np.uint64) ^ epoch.astype(np.uint64))
                  ^ np.uint64(4 * hop + side))
    base = _mix(keys.astype(np.uint64) ^ stream)
    chosen = np.empty((len(keys), fanout), dtype=np.int64)
    for step in range(fanout):
        top = degree - fanout + step
        with np.errstate(over="ignore"):
            uniform = (_mix(base + np.uint64(step) * _GOLDEN) >> np.uint64(11)) * 2.0 ** -53
        draw = (uniform * (top + 1)).astype(np.int64)
        taken = (chosen[:, :step] == draw[:, None]).any(1)
        chosen[:, step] = np.where(taken, top, draw)
    return chosen


class Adjacency(Protocol):
    """One side's nodes and the CSR of the edges into them; nodes are named by (shard, row) with a global index
    ``gid`` (their row in the one-table graph), edges by (shard, position in that shard's CSR)."""

    size: int  # nodes of this side (gids are 0 … size − 1)

    def nodes(self, shard: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR start, degree and key of each node."""

    def neighbours(self, shard: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shard, row, gid) on the other side of each edge."""


class WholeAdjacency:
    """An :class:`Adjacency` of one side of a :class:`BipartiteGraph` in this process (one shard, rows = gids)."""

    def __init__(self, ptr: torch.Tensor, neighbour: torch.Tensor, keys: np.ndarray):
        self.ptr, self.neighbour, self.keys, self.size = ptr.numpy(), neighbour.numpy(), keys, len(keys)

    @classmethod
    def of(cls, graph: BipartiteGraph, side: int, keys: np.ndarray) -> WholeAdjacency:
        if side == CUSTOMER:
            return cls(graph.customer_ptr, graph.merchant_of, keys)
        return cls(graph.merchant_ptr, graph.customer_of, keys)

    def nodes(self, shard, row):
        start = self.ptr[row]
        return start, self.ptr[row + 1] - start, self.keys[row]

    def neighbours(self, shard, position):
        row = self.neighbour[position]
        return np.zeros_like(row), row, row


@dataclass
class Nodes:
    """One side's nodes of every record, record by record, each record's in its local order (seeds, then hop by
    hop, each hop's new nodes by gid)."""

    rec: np.ndarray
    hop: np.ndarray
    gid: np.ndarray
    shard: np.ndarray
    row: np.ndarray


@dataclass
class Edges:
    """The edges drawn into one side's nodes, record by record (each record's by hop, destination and neighbour
    order): ``src`` / ``dst`` are record-local indices (source on the other side), (``shard``, ``position``) the
    edge in the destination side's CSR."""

    rec: np.ndarray
    hop: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    shard: np.ndarray
    position: np.ndarray


@dataclass
class Neighbourhoods:
    """The records' nodes and edges: ``customers`` / ``merchants``, ``into_customers`` (merchant → customer) and
    ``into_merchants`` (customer → merchant); ``records`` of them, ``depth`` hops each."""

    records: int
    depth: int
    customers: Nodes
    merchants: Nodes
    into_customers: Edges
    into_merchants: Edges


def grow(customers: Adjacency, merchants: Adjacency, seed_shard: np.ndarray, seed_row: np.ndarray,
         seed_gid: np.ndarray, fanouts: Sequence[int], seed: int = 0, epoch: np.ndarray | int = 0,
         seed_side: int = CUSTOMER) -> Neighbourhoods:
    """The neighbourhood of each seed (record r: seed r, drawn at ``epoch[r]``), see the module docstring; the seeds
    are customers, or merchants with ``seed_side`` :data:`MERCHANT` (hop 1 then reaches customers). A seed may repeat
    (two epochs of one customer are two records)."""
    n = len(seed_gid)
    epoch = np.broadcast_to(np.asarray(epoch, dtype=np.int64), (n,))
    sides = [_Side(customers, n), _Side(merchants, n)]
    sides[seed_side].add(np.arange(n), seed_gid, seed_shard, seed_row, 0)
    edges: list[list[tuple]] = [[], []]
    for hop, fanout in enumerate(fanouts, start=1):
        drawn = [sides[s].draw(fanout, seed, epoch, hop, s) for s in (CUSTOMER, MERCHANT)]
        for s, (rec, dst, position, shard, offset) in zip((CUSTOMER, MERCHANT), drawn):
            other = sides[1 - s]
            nb_shard, nb_row, nb_gid = sides[s].adjacency.neighbours(shard, position) if len(position) else \
                (position, position, position)
            other.add(rec, nb_gid, nb_shard, nb_row, hop)
            src = other.local_of(rec, nb_gid)
            order = np.lexsort((offset, dst, rec))
            edges[s].append((rec[order], np.full(len(order), hop, np.int8), src[order], dst[order], shard[order],
                             position[order]))
    nodes = [side.finish() for side in sides]
    return Neighbourhoods(n, len(fanouts), *nodes, *(_by_record(parts) for parts in edges))


class _Side:
    """The growing node sets of one side over all records: gids per record, their local indices, the frontier."""

    def __init__(self, adjacency: Adjacency, records: int):
        self.adjacency, self.count = adjacency, np.zeros(records, dtype=np.int64)
        self.codes, self.locals = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.added: list[tuple] = []
        self.front = tuple(np.zeros(0, np.int64) for _ in range(4))  # rec, local, shard, row

    def add(self, rec: np.ndarray, gid: np.ndarray, shard: np.ndarray, row: np.ndarray, hop: int) -> None:
        """Append the (record, node) pairs not yet in their record, by record then gid, as the new frontier."""
        code = rec * self.adjacency.size + gid
        seen = np.zeros(len(code), dtype=bool)
        if len(self.codes):
            at = np.minimum(np.searchsorted(self.codes, code), len(self.codes) - 1)
            seen = self.codes[at] == code
        code, first = np.unique(code[~seen], return_index=True)
        rec, gid, shard, row = (a[~seen][first] for a in (rec, gid, shard, row))
        start = np.searchsorted(rec, rec)  # rec is sorted: the first row of each record's run
        local = self.count[rec] + np.arange(len(rec)) - start
        np.add.at(self.count, rec, 1)
        merged = np.concatenate([self.codes, code])
        order = np.argsort(merged, kind="stable")
        self.codes, self.locals = merged[order], np.concatenate([self.locals, local])[order]
        self.added.append((rec, np.full(len(rec), hop, np.int8), gid, shard, row, local))
        self.front = (rec, local, shard, row)

    def local_of(self, rec: np.ndarray, gid: np.ndarray) -> np.ndarray:
        return self.locals[np.searchsorted(self.codes, rec * self.adjacency.size + gid)]

    def draw(self, fanout: int, seed: int, epoch: np.ndarray, hop: int, side: int) -> tuple:
        """The frontier's drawn edges: record, destination (local), CSR position, shard, neighbour offset."""
        rec, local, shard, row = self.front
        self.front = tuple(np.zeros(0, np.int64) for _ in range(4))
        start, degree, keys = self.adjacency.nodes(shard, row) if len(row) else (row, row, row.astype(np.uint64))
        if fanout < 0:
            fanout = int(degree.max()) if len(degree) else 0
        whole = np.flatnonzero(degree <= fanout)
        owner_whole = np.repeat(whole, degree[whole])
        offset_whole = np.arange(len(owner_whole)) - np.repeat(np.cumsum(degree[whole]) - degree[whole],
                                                               degree[whole])
        cut = np.flatnonzero(degree > fanout)
        offsets = keyed_offsets(keys[cut], degree[cut], fanout, seed, epoch[rec[cut]], hop, side)
        owner = np.concatenate([owner_whole, np.repeat(cut, fanout)])
        offset = np.concatenate([offset_whole, offsets.reshape(-1)])
        return rec[owner], local[owner], start[owner] + offset, shard[owner], offset

    def finish(self) -> Nodes:
        rec, hop, gid, shard, row, local = (np.concatenate(a) for a in zip(*self.added))
        order = np.lexsort((local, rec))
        return Nodes(rec[order], hop[order], gid[order], shard[order], row[order])


def _by_record(parts: list[tuple]) -> Edges:
    if not parts:
        return Edges(*(np.zeros(0, np.int64) for _ in range(6)))
    rec, hop, src, dst, shard, position = (np.concatenate(a) for a in zip(*parts))
    order = np.argsort(rec, kind="stable")  # within a record: by hop, then as drawn (destination, offset)
    return Edges(rec[order], hop[order], src[order], dst[order], shard[order], position[order])


@dataclass
class Collated:
    """A :class:`Subgraph` of records and, for each of its nodes and edges, the row of the flat
    :class:`Neighbourhoods` arrays it comes from (to gather features in the same order)."""

    sub: Subgraph
    customer_rows: np.ndarray
    merchant_rows: np.ndarray
    into_customer_rows: np.ndarray
    into_merchant_rows: np.ndarray


def to_subgraph(hoods: Neighbourhoods, weight_into_customers: np.ndarray | None = None,
                weight_into_merchants: np.ndarray | None = None) -> Collated:
    """The records as one :class:`Subgraph`: the disjoint union, nodes by (hop, record, local order), edges by (hop,
    record, drawn order), seeds first (the records' customer seeds, then on the merchant side their merchant seeds);
    the weights are aligned with the flat edges."""
    hops = hoods.depth + 1
    customer_rows, customer_batch, customers_per_hop = _hop_major(hoods.customers.rec, hoods.customers.hop, hops)
    merchant_rows, merchant_batch, merchants_per_hop = _hop_major(hoods.merchants.rec, hoods.merchants.hop, hops)
    c_start = _starts(hoods.customers.rec, hoods.records)
    m_start = _starts(hoods.merchants.rec, hoods.records)

    def edges(e: Edges, src_start, src_batch, dst_start, dst_batch, weight):
        order = np.lexsort((np.arange(len(e.rec)), e.rec, e.hop))
        index = torch.from_numpy(np.stack([src_batch[src_start[e.rec] + e.src], dst_batch[dst_start[e.rec] + e.dst]])
                                 [:, order].astype(np.int64))
        counts = tuple(np.bincount(e.hop.astype(np.int64), minlength=hops)[1:].tolist())
        return order, index, None if weight is None else torch.from_numpy(weight[order].astype(np.float32)), counts

    m2c = edges(hoods.into_customers, m_start, merchant_batch, c_start, customer_batch, weight_into_customers)
    c2m = edges(hoods.into_merchants, c_start, customer_batch, m_start, merchant_batch, weight_into_merchants)
    sub = Subgraph(torch.from_numpy(hoods.customers.gid[customer_rows]), torch.from_numpy(hoods.merchants.gid[merchant_rows]),
                   m2c[1], c2m[1], m2c[2], c2m[2], customers_per_hop[0], merchants_per_hop[0], customers_per_hop,
                   merchants_per_hop, m2c[3], c2m[3])
    return Collated(sub, customer_rows, merchant_rows, m2c[0], c2m[0])


def _hop_major(rec: np.ndarray, hop: np.ndarray, hops: int) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The flat rows in (hop, record, local) order, each flat row's position in it, and the nodes per hop."""
    rows = np.lexsort((np.arange(len(rec)), rec, hop))
    batch = np.empty(len(rows), dtype=np.int64)
    batch[rows] = np.arange(len(rows))
    return rows, batch, tuple(np.bincount(hop.astype(np.int64), minlength=hops).tolist())


def _starts(rec: np.ndarray, records: int) -> np.ndarray:
    return np.searchsorted(rec, np.arange(records))


def sample_keyed(graph: BipartiteGraph, customer_keys: np.ndarray, merchant_keys: np.ndarray,
                 seeds: torch.Tensor | np.ndarray, fanouts: Sequence[int], seed: int = 0,
                 epoch: int | np.ndarray = 0, seed_side: int = CUSTOMER) -> Subgraph:
    """The in-memory batch of the records of ``seeds`` (customers, or merchants with ``seed_side`` :data:`MERCHANT`;
    :func:`grow` on the whole graph, then :func:`to_subgraph`) at ``epoch`` (one, or one per seed): what the records
    of these seeds give, read back."""
    seeds = np.asarray(seeds, dtype=np.int64)
    hoods = grow(WholeAdjacency.of(graph, CUSTOMER, customer_keys), WholeAdjacency.of(graph, MERCHANT, merchant_keys),
                 np.zeros_like(seeds), seeds, seeds, fanouts, seed, epoch, seed_side)
    weights = [None if w is None else w.numpy()[e.position]
               for w, e in ((graph.merchant_of_weight, hoods.into_customers),
                            (graph.customer_of_weight, hoods.into_merchants))]
    return to_subgraph(hoods, *weights).sub

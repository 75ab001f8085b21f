"""Training records of a bipartite graph in shards (:mod:`promokit.data.graph_shards`): for each seed of a left
shard (a customer or user part), its sampled k-hop neighbourhood with the node and edge inputs joined, one Parquet
row per (seed, draw) — AGL's "GraphFlat" (Zhang et al., VLDB 2020). The domains (``promokit.incentive.records``,
``promokit.value.graph_records``) say which nodes are seeds, what their inputs are and which seed columns a record
carries; this module writes and reads the rest.

Writing: each shard exports its nodes' CSR (neighbours as (shard, row)), edge inputs, node keys, rows in the
one-table graph and encoded inputs as ``.npy`` files (:func:`export_shard`); then each left part grows its seeds'
neighbourhoods (:func:`~promokit.nn.keyed_sampling.grow`, reading the other shards' files memory-mapped through
:class:`ShardAdjacency`) and writes them in row groups of :data:`SEEDS_PER_GROUP` seeds (:func:`write_part`). Each
draw is keyed by (seed, epoch, hop, node id), so a record is the in-memory
:func:`~promokit.nn.keyed_sampling.sample_keyed` neighbourhood whatever the partitioning.

Layout of a records part, after the domain's seed columns (one row per seed and draw; ``c`` customers, ``m``
merchants of the neighbourhood):

- ``customer_gid`` / ``merchant_gid`` (list, c / m): the nodes' rows in the one-table graph, the seed first, then hop
  by hop; ``customer_hop`` / ``merchant_hop`` (list): the hop that first reached each;
- ``customer_cat`` (list, c × F, row-major), ``customer_num`` (c × D), ``customer_structure`` (c × S), and the same
  for merchants: the encoded inputs, widths in the file's metadata (:data:`META`, with the fanouts, seed and draws);
- ``into_customer_src`` / ``_dst`` / ``_hop`` (list): merchant → customer edges in record-local indices;
  ``into_customer_edge`` (list, edges × (1 + E)): weight then the edge inputs; the same for ``into_merchant_*``.

:func:`read_records` turns rows back into the :class:`~promokit.nn.bipartite.Subgraph` a
:class:`~promokit.nn.bipartite.BipartiteGNN` trains on, with the inputs of its nodes and edges.
"""

from __future__ import annotations

import json
import mmap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from promokit.data import graph_shards
from promokit.data.graph_shards import LEFT, RIGHT, GraphLayout, Shard
from promokit.data.io import atomic_path, write_npy
from promokit.nn.keyed_sampling import CUSTOMER, MERCHANT, Collated, Edges, Neighbourhoods, Nodes, grow, to_subgraph

SEEDS_PER_GROUP = 4096  # seeds grown and written at a time: bounds a part's memory whatever its size
FEATURES = ("cat", "num", "structure")
META = b"promokit.records"
SIDES = (("customer", LEFT), ("merchant", RIGHT))
EDGE_SIDES = (("into_customer", LEFT), ("into_merchant", RIGHT))


def export_shard(layout: GraphLayout, shard: Shard, key: np.ndarray, gid: np.ndarray, inputs: dict[str, np.ndarray],
                 edge: np.ndarray) -> None:
    """Write the files a shard's nodes are grown and read from: the CSR of the edges into them (``ptr``, the
    neighbours' ``nb_shard`` / ``nb_row``), ``edge`` (per edge in CSR order: weight, then the edge inputs), the
    nodes' ``key`` (:func:`~promokit.nn.keyed_sampling.node_keys`), ``gid`` (row in the one-table graph) and their
    encoded ``inputs`` (one 2-d array per name of :data:`FEATURES`)."""
    graph = graph_shards.shard_graph(layout, shard)
    pulls = graph.pulls
    source_shard = np.repeat([j for j, _ in pulls], [len(r) for _, r in pulls]).astype(np.int32)
    source_row = np.concatenate([r for _, r in pulls]) if pulls else np.zeros(0, np.int64)
    arrays = {"ptr": graph.ptr, "nb_shard": source_shard[graph.neighbour], "nb_row": source_row[graph.neighbour],
              "edge": edge.astype(np.float32), "key": key, "gid": gid.astype(np.int64),
              **{name: inputs[name] for name in FEATURES}}
    for name, values in arrays.items():
        write_npy(values, layout.folder(shard) / f"{name}.npy")


class ShardAdjacency:
    """An :class:`~promokit.nn.keyed_sampling.Adjacency` over one side's shard files, memory-mapped on demand; a
    gather unmaps the pages it read of a shard before the next (:func:`_drop_pages`)."""

    def __init__(self, layout: GraphLayout, side: str, size: int):
        self.layout, self.side, self.size = layout, side, size
        self._open: dict = {}

    def array(self, side: str, j: int, name: str) -> np.ndarray:
        if (side, j, name) not in self._open:
            self._open[side, j, name] = np.load(self.layout.folder(Shard(side, j)) / f"{name}.npy", mmap_mode="r")
        return self._open[side, j, name]

    def gather(self, shard: np.ndarray, index: np.ndarray, side: str, names: tuple[str, ...]) -> list[np.ndarray]:
        """``names`` of ``side``'s shards at ``index`` (element i in shard ``shard[i]``), read shard by shard in file
        order."""
        out = [np.empty((len(shard), *self.array(side, 0, name).shape[1:]), self.array(side, 0, name).dtype)
               for name in names]
        order = np.lexsort((index, shard))
        bounds = np.flatnonzero(np.diff(shard[order])) + 1
        for at in np.split(order, bounds) if len(order) else []:
            for i, name in enumerate(names):
                values = self.array(side, int(shard[at[0]]), name)
                out[i][at] = values[index[at]]
                _drop_pages(values)
        return out

    def nodes(self, shard, row):
        start, key = self.gather(shard, row, self.side, ("ptr", "key"))
        end = self.gather(shard, row + 1, self.side, ("ptr",))[0]
        return start, end - start, key

    def neighbours(self, shard, position):
        nb_shard, nb_row = self.gather(shard, position, self.side, ("nb_shard", "nb_row"))
        other = RIGHT if self.side == LEFT else LEFT
        gid = self.gather(nb_shard, nb_row, other, ("gid",))[0]
        return nb_shard.astype(np.int64), nb_row, gid


def _drop_pages(values: np.ndarray) -> None:
    """Unmap the file pages of memory-mapped ``values`` from this process (``MADV_DONTNEED``; they stay in the page
    cache and map in again when read): what a process holds mapped is then one shard's reads, not every page it has
    read of every shard, whatever the graph's size."""
    if isinstance(values.base, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):  # not on Windows
        values.base.madvise(mmap.MADV_DONTNEED)


def write_part(layout: GraphLayout, k: int, path: Path, seed_rows: np.ndarray, seed_columns: Callable,
               sizes: tuple[int, int], fanouts: Sequence[int], seed: int, draws: Sequence[int], meta: dict,
               side: str = LEFT) -> dict:
    """The records of ``side``'s shard ``k``'s seeds (its rows ``seed_rows``; a left part, or a right shard: then the
    seed of each record is on the right, first of its right nodes) at each epoch of ``draws``, seed-major, in
    ``path``: each row group's ``seed_columns(index, epoch)`` (``index``: positions in ``seed_rows``; a dict of Arrow
    arrays) then the graph's; ``meta`` joins the fanouts, seed, draws and input widths in the file's metadata
    (``sizes``: the left and right nodes of the graph). Returns the part's records, bytes, seconds, its process's
    peak RSS and the largest anonymous and file-backed resident memory after a row group (:func:`resident_mb`)."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    customers, merchants = ShardAdjacency(layout, LEFT, sizes[0]), ShardAdjacency(layout, RIGHT, sizes[1])
    draws = np.asarray(draws, dtype=np.int64)
    index = np.repeat(np.arange(len(seed_rows)), len(draws))
    epoch = np.tile(draws, len(seed_rows))
    writer, resident = None, {}
    with atomic_path(path) as tmp:
        for lo in range(0, max(len(index), 1), SEEDS_PER_GROUP):
            at, at_epoch = index[lo:lo + SEEDS_PER_GROUP], epoch[lo:lo + SEEDS_PER_GROUP]
            rows = np.asarray(seed_rows)[at]
            gid = customers.array(side, k, "gid")[rows] if len(rows) else rows
            hoods = grow(customers, merchants, np.full(len(rows), k), rows, gid, fanouts, seed, at_epoch,
                         CUSTOMER if side == LEFT else MERCHANT)
            table = _table({**seed_columns(at, at_epoch), **graph_columns(customers, merchants, hoods)})
            if writer is None:
                widths = {f"{name}_{f}": int(customers.array(side, 0, f).shape[1]) for name, side in SIDES
                          for f in FEATURES}
                full = {"fanouts": list(fanouts), "seed": seed, "draws": draws.tolist(), **meta, **widths}
                writer = pq.ParquetWriter(tmp, table.schema.with_metadata({META: json.dumps(full).encode()}))
            writer.write_table(table)
            resident = {name: max(resident.get(name, mb), mb) for name, mb in resident_mb().items()}
        writer.close()
    return {"part": k, "records": len(index), "bytes": path.stat().st_size,
            "seconds": round(time.perf_counter() - started, 3), "peak_rss_mb": peak_rss_mb(), **resident}


def _table(columns: dict):
    import pyarrow as pa

    return pa.table(columns)


def peak_rss_mb() -> float:
    """The peak resident memory of this process so far (the worker's, on Ray), in MiB; NaN where unknown."""
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def resident_mb() -> dict[str, float]:
    """This process's resident memory now, in MiB: ``rss_anon_mb`` (anonymous: the heap, what it must keep) and
    ``rss_file_mb`` (file pages mapped in, e.g. the memory-mapped shard files: page cache the kernel may drop), as
    ``RssAnon`` / ``RssFile`` of ``/proc/self/status``; NaN where that file is absent."""
    fields = {"RssAnon:": "rss_anon_mb", "RssFile:": "rss_file_mb"}
    found = dict.fromkeys(fields.values(), float("nan"))
    try:
        with open("/proc/self/status") as status:
            lines = status.read().splitlines()
    except OSError:  # not Linux
        lines = []
    for name, *value in map(str.split, lines):
        if name in fields:
            found[fields[name]] = round(int(value[0]) / 1024, 1)  # kB
    return found


def _lists(values: np.ndarray, rec: np.ndarray, records: int):
    """One list per record of the rows of ``values`` (rows of a record contiguous), 2-d rows flattened."""
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum(np.bincount(rec, minlength=records))]).astype(np.int64)
    width = int(np.prod(values.shape[1:])) if values.ndim > 1 else 1
    return pa.LargeListArray.from_arrays(pa.array(offsets * width), pa.array(np.ascontiguousarray(values).reshape(-1)))


def graph_columns(customers: ShardAdjacency, merchants: ShardAdjacency, hoods: Neighbourhoods) -> dict:
    """The graph's columns of the records ``hoods`` (module docstring), their inputs read from the shard files."""
    n, columns = hoods.records, {}
    for (name, side), nodes, adjacency in zip(SIDES, (hoods.customers, hoods.merchants), (customers, merchants)):
        columns[f"{name}_gid"] = _lists(nodes.gid, nodes.rec, n)
        columns[f"{name}_hop"] = _lists(nodes.hop.astype(np.int8), nodes.rec, n)
        features = adjacency.gather(nodes.shard, nodes.row, side, FEATURES)
        for feature, values in zip(FEATURES, features):
            columns[f"{name}_{feature}"] = _lists(values, nodes.rec, n)
    for (name, side), e, adjacency in zip(EDGE_SIDES, (hoods.into_customers, hoods.into_merchants),
                                          (customers, merchants)):
        for part in ("src", "dst"):
            columns[f"{name}_{part}"] = _lists(getattr(e, part).astype(np.int32), e.rec, n)
        columns[f"{name}_hop"] = _lists(e.hop.astype(np.int8), e.rec, n)
        columns[f"{name}_edge"] = _lists(adjacency.gather(e.shard, e.position, side, ("edge",))[0], e.rec, n)
    return columns


def record_meta(schema) -> dict:
    """What a records part's metadata says (fanouts, seed, draws, input widths and the domain's entries)."""
    return json.loads(schema.metadata[META])


@dataclass
class Records:
    """Rows of records read back: ``collated`` (their :class:`~promokit.nn.bipartite.Subgraph`, seeds first, and
    the flat rows of its nodes and edges), each side's inputs (``inputs[side][feature]``, a 2-d array aligned with
    ``collated.sub``'s nodes of that side) and each direction's edge inputs (``edges["into_customer"]``: weight then
    the edge inputs, aligned with the sub's edges), and the part's metadata."""

    collated: Collated
    inputs: dict[str, dict[str, np.ndarray]]
    edges: dict[str, np.ndarray]
    meta: dict


def read_records(table) -> Records:
    """The records of a :class:`pyarrow.Table` (rows of records parts, e.g. a row group) as one batch."""
    meta = record_meta(table.schema)
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

    width = 1 + len(meta.get("edge_features", []))

    def edges(name: str) -> tuple[Edges, np.ndarray]:
        src, rec = flat(f"{name}_src")
        dst, _ = flat(f"{name}_dst")
        hop, _ = flat(f"{name}_hop")
        edge, _ = flat(f"{name}_edge", width)
        zero = np.zeros(len(src), np.int64)
        return Edges(rec, hop, src.astype(np.int64), dst.astype(np.int64), zero, zero), edge.reshape(len(src), width)

    (customers, c_features), (merchants, m_features) = nodes("customer"), nodes("merchant")
    (into_c, c_edge), (into_m, m_edge) = edges("into_customer"), edges("into_merchant")
    collated = to_subgraph(Neighbourhoods(n, depth, customers, merchants, into_c, into_m), c_edge[:, 0], m_edge[:, 0])

    def inputs(features: dict, rows: np.ndarray, side: str) -> dict[str, np.ndarray]:
        def take(f: str) -> np.ndarray:
            w = meta[f"{side}_{f}"]
            values = features[f].reshape(-1, w) if w else features[f].reshape(len(rows), 0)
            return np.ascontiguousarray(values[rows])
        return {f: take(f) for f in FEATURES}

    return Records(collated, {"customer": inputs(c_features, collated.customer_rows, "customer"),
                              "merchant": inputs(m_features, collated.merchant_rows, "merchant")},
                   {"into_customer": c_edge[collated.into_customer_rows],
                    "into_merchant": m_edge[collated.into_merchant_rows]}, meta)

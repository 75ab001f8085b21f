"""Training records of the incentive GNN over a graph in parts: for every labelled customer, its sampled k-hop
neighbourhood with the node and edge features joined, one Parquet row per (customer, draw) — AGL's "GraphFlat"
(Zhang et al., VLDB 2020), the system the joint-incentive paper trained on.

Input layout: as ``incentive predict`` over parts (:mod:`promokit.incentive.parts`): customer parts, edge parts
co-partitioned with them, merchants in one table or parts. The pass, on an executor (local or Ray), never holds the
graph in one process:

1. the graph in shards (:func:`promokit.data.graph_shards.prepare`: customer parts and merchant buckets, a dangling
   edge or a merchant in two parts is an error naming the file and row);
2. one map over the shards: each writes its nodes' CSR (neighbours as (shard, row)), edge weights and features,
   the keys of its node ids, their row in the one-table graph, and their inputs encoded with ``encoders``
   (features and structure, :func:`~promokit.incentive.inputs.own_inputs`) as ``.npy`` files;
3. one map over the customer parts: each grows its labelled customers' neighbourhoods
   (:func:`promokit.nn.keyed_sampling.grow`, reading the other shards' files memory-mapped, as the layer-wise
   inference pulls states), gathers the features and writes ``OUT/part-k.parquet`` in row groups of
   :data:`SEEDS_PER_GROUP` seeds.

Each draw is keyed by (seed, epoch, hop, node id), so the records are the in-memory
:func:`~promokit.nn.keyed_sampling.sample_keyed` neighbourhoods whatever the partitioning, and
:func:`promokit.incentive.record_batches.read_batch` turns rows back into that :class:`~promokit.nn.bipartite.Subgraph`.

**Resample per epoch or a fixed draw.** ``draws`` are the epochs whose neighbourhoods are written: ``(e,)`` for a
fresh draw each epoch (the pass runs again before epoch e: one set of records on disk, generation every epoch);
``range(S)`` for S draws written once and cycled by the trainer (epoch e reads draw e mod S: generation once, S times
the records). ``benchmarks/graph_records.py`` measures both.

Layout of a records part (one row per seed and draw; ``c`` customers, ``m`` merchants of the neighbourhood):

- ``customer_id``, ``draw``, ``level`` (index in the value list), ``redeemed``: the seed and its label;
- ``customer_gid`` / ``merchant_gid`` (list, c / m): the nodes' rows in the one-table graph, the seed first, then hop
  by hop; ``customer_hop`` / ``merchant_hop`` (list): the hop that first reached each;
- ``customer_cat`` (list, c × F, row-major), ``customer_num`` (c × D), ``customer_structure`` (c × S), and the same
  for merchants: the encoded inputs, widths in the file's metadata (``promokit.records``);
- ``into_customer_src`` / ``_dst`` / ``_hop`` (list): merchant → customer edges in record-local indices;
  ``into_customer_edge`` (list, edges × (1 + E)): weight then the edge features; the same for ``into_merchant_*``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import graph_shards
from promokit.data.errors import DataError
from promokit.data.graph_shards import LEFT, NODE, PART, RIGHT, ROW, GraphLayout, Shard
from promokit.data.io import atomic_path, write_npy, write_parquet
from promokit.data.part_keys import check_unique_keys
from promokit.data.parts import part_name
from promokit.data.spec import FeatureSpec
from promokit.incentive.contract import CUSTOMER, LEVEL, MERCHANT, REDEEMED, prior_shares
from promokit.incentive.inputs import InputEncoders, own_inputs, structure_frame
from promokit.incentive.parts import PartReader, _layout, _rows
from promokit.nn.keyed_sampling import Neighbourhoods, grow, node_keys

SEEDS_PER_GROUP = 4096  # seeds grown and written at a time: bounds a part's memory whatever its size
FEATURES = ("cat", "num", "structure")
META = b"promokit.records"


@dataclass(frozen=True)
class RecordSpec:
    """What the records hold: the value list, the feature columns, the fanouts (one per GNN layer), the sampler's
    seed and the epochs drawn (module docstring)."""

    levels: tuple[float, ...]
    customer_spec: FeatureSpec
    merchant_spec: FeatureSpec
    fanouts: tuple[int, ...] = (10, 25)
    seed: int = 0
    draws: tuple[int, ...] = (0,)

    def __post_init__(self):
        if not self.fanouts or any(int(f) != f or (f < 1 and f != -1) for f in self.fanouts):
            raise DataError(f"fanouts must be one positive number (or -1: every neighbour) per GNN layer, got "
                            f"{list(self.fanouts)}")
        if not self.draws or len(set(self.draws)) != len(self.draws) or min(self.draws) < 0:
            raise DataError(f"draws must be distinct epochs ≥ 0, at least one, got {list(self.draws)}")


def write_records(customers: Path, merchants: Path, edges: Path, out: Path, encoders: InputEncoders,
                  spec: RecordSpec, executor) -> dict:
    """The records of the graph in parts (module docstring) in ``out/part-k.parquet`` (k: the customer part), on
    ``executor``; returns the counts and, per part, its records, bytes, seconds and its process's peak RSS."""
    out = Path(out)
    layout = _layout(customers, merchants, edges, out)
    edge_features = tuple(encoders.edge_features())
    reader = PartReader(layout, spec.levels, spec.customer_spec, spec.merchant_spec, edge_features,
                        encoders.merchants)
    offsets = {LEFT: _offsets(layout.left), RIGHT: _offsets(layout.right)}
    try:
        check_unique_keys(list(layout.left), CUSTOMER, Path(layout.scratch) / "keys", map_parts=executor.map)
        counts = graph_shards.prepare(executor, reader.customers, reader.merchants, layout)
        executor.map(partial(_export, reader, encoders, offsets), layout.shards(), label="exporting shards")
        parts = executor.map(partial(_grow_part, layout, spec, (counts["left"], counts["right"]), encoders),
                             range(len(layout.left)),
                             label="growing neighbourhoods")
    finally:
        executor.release()
        graph_shards.remove(layout)
    return {"customers": counts["left"], "merchants": counts["right"], "edges": counts["edges"],
            "records": sum(p["records"] for p in parts), "bytes": sum(p["bytes"] for p in parts),
            "parts": parts}


def _offsets(paths: tuple[str, ...]) -> list[int]:
    """Each part's first row in the one-table graph (the parts concatenated in order)."""
    return np.concatenate([[0], np.cumsum([_rows(Path(p)) for p in paths])]).astype(int).tolist()


def _folder(layout: GraphLayout, side: str, index: int) -> Path:
    return layout.folder(Shard(side, index))


def _export(reader: PartReader, encoders: InputEncoders, offsets: dict, shard: Shard) -> None:
    """The shard's files of step 2 (module docstring)."""
    layout, folder = reader.layout, reader.layout.folder(shard)
    graph = graph_shards.shard_graph(layout, shard)
    edges = graph_shards.shard_edges(layout, shard)
    if shard.side == LEFT:
        nodes, key, side = reader.customer_nodes(shard.index), CUSTOMER, "customer"
        gid = offsets[LEFT][shard.index] + np.arange(len(nodes))
        redeemed = pd.to_numeric(nodes[REDEEMED]).to_numpy(np.float32) if REDEEMED in nodes else \
            np.full(len(nodes), np.nan, np.float32)
        labelled = ~np.isnan(redeemed)
        level = nodes[LEVEL].to_numpy(dtype=float)[labelled] if labelled.any() else np.zeros(0)
        seeds = pd.DataFrame({"row": np.flatnonzero(labelled), CUSTOMER: nodes[CUSTOMER].to_numpy()[labelled],
                              LEVEL: np.searchsorted(reader.levels, level), REDEEMED: redeemed[labelled]})
        write_parquet(seeds, folder / "seeds.parquet")
    else:
        nodes, key, side = graph_shards.right_nodes(layout, shard.index), MERCHANT, "merchant"
        gid = np.asarray(offsets[RIGHT], dtype=np.int64)[nodes[PART].to_numpy()] + nodes[ROW].to_numpy()
    structure = structure_frame(edges, NODE, len(nodes), reader.edge_features,
                                prior_shares(nodes) if side == "merchant" else None)
    own = own_inputs(getattr(encoders, f"{side}s"), nodes, getattr(encoders, f"{side}_structure"), structure)
    pulls = graph.pulls
    source_shard = np.repeat([j for j, _ in pulls], [len(r) for _, r in pulls]).astype(np.int32)
    source_row = np.concatenate([r for _, r in pulls]) if pulls else np.zeros(0, np.int64)
    edge = np.column_stack([edges["weight"].to_numpy(np.float32)]
                           + [edges[c].to_numpy(np.float32) for c in reader.edge_features]).astype(np.float32)
    arrays = {"ptr": graph.ptr, "nb_shard": source_shard[graph.neighbour], "nb_row": source_row[graph.neighbour],
              "edge": edge, "key": node_keys(nodes[key]), "gid": gid.astype(np.int64),
              **{name: getattr(own, name).numpy() for name in FEATURES}}
    for name, values in arrays.items():
        write_npy(values, folder / f"{name}.npy")


class ShardAdjacency:
    """An :class:`~promokit.nn.keyed_sampling.Adjacency` over one side's shard files, memory-mapped on demand."""

    def __init__(self, layout: GraphLayout, side: str, size: int):
        self.layout, self.side, self.size = layout, side, size
        self._open: dict = {}

    def array(self, side: str, j: int, name: str) -> np.ndarray:
        if (side, j, name) not in self._open:
            self._open[side, j, name] = np.load(_folder(self.layout, side, j) / f"{name}.npy", mmap_mode="r")
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
                out[i][at] = self.array(side, int(shard[at[0]]), name)[index[at]]
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


def _grow_part(layout: GraphLayout, spec: RecordSpec, sizes: tuple[int, int], encoders: InputEncoders, k: int) -> dict:
    """Step 3 for customer part ``k`` (``sizes``: the customers and merchants of the graph): its records, written in
    row groups; what :func:`write_records` reports of the part."""
    started = time.perf_counter()
    customers, merchants = ShardAdjacency(layout, LEFT, sizes[0]), ShardAdjacency(layout, RIGHT, sizes[1])
    seeds = pd.read_parquet(_folder(layout, LEFT, k) / "seeds.parquet")
    draws = np.asarray(spec.draws, dtype=np.int64)
    # one record per (seed, draw), seed-major
    seed_rows = np.repeat(np.arange(len(seeds)), len(draws))
    epoch = np.tile(draws, len(seeds))
    path = Path(layout.scratch).parent / part_name(k)
    import pyarrow.parquet as pq

    id_type = _id_type(layout.left, k)
    writer = None
    with atomic_path(path) as tmp:
        for lo in range(0, max(len(seed_rows), 1), SEEDS_PER_GROUP):
            rows = seed_rows[lo:lo + SEEDS_PER_GROUP]
            gid = customers.array(LEFT, k, "gid")[seeds["row"].to_numpy()[rows]] if len(rows) else rows
            hoods = grow(customers, merchants, np.full(len(rows), k), seeds["row"].to_numpy()[rows], gid,
                         spec.fanouts, spec.seed, epoch[lo:lo + SEEDS_PER_GROUP])
            table = _record_table(customers, merchants, hoods, seeds.iloc[rows], epoch[lo:lo + SEEDS_PER_GROUP],
                                  id_type)
            if writer is None:
                meta = {"fanouts": list(spec.fanouts), "seed": spec.seed, "draws": list(spec.draws),
                        "edge_features": encoders.edge_features(),
                        **{f"{side}_{name}": int(customers.array(s, 0, name).shape[1])
                           for side, s in (("customer", LEFT), ("merchant", RIGHT)) for name in FEATURES}}
                writer = pq.ParquetWriter(tmp, table.schema.with_metadata({META: json.dumps(meta).encode()}))
            writer.write_table(table)
        writer.close()
    return {"part": k, "records": len(seed_rows), "bytes": path.stat().st_size,
            "seconds": round(time.perf_counter() - started, 3), "peak_rss_mb": _peak_rss_mb()}


def _peak_rss_mb() -> float:
    """The peak resident memory of this process so far (the worker's, on Ray), in MiB; NaN where unknown."""
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _id_type(paths: list[str], k: int):
    """The customer id's Arrow type in the Parquet parts ``paths``, part ``k``'s unless it has none (an empty part
    that pandas wrote has a null column): then the first other part's; None for CSV."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in [paths[k], *paths[:k], *paths[k + 1:]]:
        try:
            kind = pq.read_schema(path).field(CUSTOMER).type
        except (OSError, KeyError, ValueError):
            return None
        if kind != pa.null():
            return kind
    return None


def _lists(values: np.ndarray, rec: np.ndarray, records: int):
    """One list per record of the rows of ``values`` (rows of a record contiguous), 2-d rows flattened."""
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum(np.bincount(rec, minlength=records))]).astype(np.int64)
    width = int(np.prod(values.shape[1:])) if values.ndim > 1 else 1
    return pa.LargeListArray.from_arrays(pa.array(offsets * width), pa.array(np.ascontiguousarray(values).reshape(-1)))


def _record_table(customers: ShardAdjacency, merchants: ShardAdjacency, hoods: Neighbourhoods, seeds: pd.DataFrame,
                  epoch: np.ndarray, id_type):
    import pyarrow as pa

    n = hoods.records
    columns = {CUSTOMER: pa.array(seeds[CUSTOMER].to_numpy(), type=id_type), "draw": pa.array(epoch.astype(np.int32)),
               LEVEL: pa.array(seeds[LEVEL].to_numpy(np.int64)), REDEEMED: pa.array(seeds[REDEEMED].to_numpy(np.float32))}
    for name, nodes, adjacency, side in (("customer", hoods.customers, customers, LEFT),
                                         ("merchant", hoods.merchants, merchants, RIGHT)):
        columns[f"{name}_gid"] = _lists(nodes.gid, nodes.rec, n)
        columns[f"{name}_hop"] = _lists(nodes.hop.astype(np.int8), nodes.rec, n)
        features = adjacency.gather(nodes.shard, nodes.row, side, FEATURES)
        for feature, values in zip(FEATURES, features):
            columns[f"{name}_{feature}"] = _lists(values, nodes.rec, n)
    for name, e, adjacency, side in (("into_customer", hoods.into_customers, customers, LEFT),
                                     ("into_merchant", hoods.into_merchants, merchants, RIGHT)):
        for part in ("src", "dst"):
            columns[f"{name}_{part}"] = _lists(getattr(e, part).astype(np.int32), e.rec, n)
        columns[f"{name}_hop"] = _lists(e.hop.astype(np.int8), e.rec, n)
        columns[f"{name}_edge"] = _lists(adjacency.gather(e.shard, e.position, side, ("edge",))[0], e.rec, n)
    return pa.table(columns)

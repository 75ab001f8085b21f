"""A bipartite graph in shards: layer-wise inference of a graph network on a graph no process holds whole.

Input layout. The left nodes (customers) come in parts with their edges in as many parts, co-partitioned: part k
of the edges holds the edges of part k's left nodes, each naming its right node (a merchant) by key. The right
nodes come as one table or in parts, in any order.

:func:`prepare` runs four maps:

1. each left part routes its edges to buckets by a hash of the right key (:func:`~promokit.data.part_keys.bucket_of`);
2. each right part routes its nodes to the same buckets;
3. each bucket joins its edges to its right nodes (an edge whose right key no table holds, or a right key held
   twice, is an error naming the files and rows) and writes its graph: its right nodes' complete neighbourhoods in
   CSR, in the edges' input order, and which rows of which left parts it reads;
4. each left part writes its graph the same way, reading from every bucket where its edges' right nodes are.

A **shard** is a left part or a bucket. Every shard then has its nodes, its edges (:func:`shard_edges`) and a
:class:`ShardGraph`, so a node state of every node at layer l, written per shard (:func:`save_state`), gives layer
l + 1 shard by shard: the shard pulls its neighbours' rows from the other side's state files, memory-mapped
(:func:`pull`), and runs the layer on its own nodes (:meth:`promokit.nn.bipartite.BipartiteGNN.layer`). A network
of depth L costs L maps after the inputs, each shard holding its nodes, its edges and its neighbours' states;
nothing is gathered on the driver. AGL, the graph system the joint-incentive paper ran on (Zhang et al., VLDB 2020),
infers the same way with MapReduce; here the exchange between shards is a read of the other side's files, which
every worker must reach (a local disk for one machine, shared storage for a cluster).

Right outputs go back to the right table's parts in their row order with :func:`write_right_output` and
:func:`collect_right`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import atomic_path, write_npy, write_parquet, write_part
from promokit.data.part_keys import bucket_of, canonical
from promokit.data.parts import part_name
from promokit.data.uris import as_path, begin_parts, finish_parts

LEFT, RIGHT = "left", "right"
#: right-node columns the routing adds: the right table's part and the row in it
PART, ROW = "_part", "_row"
#: edge columns every shard's edges hold (besides the domain's edge features)
NODE, WEIGHT = "node", "weight"
#: a bucket holds about this many right nodes and edges at most: the edges bound what it pulls per layer (a state
#: of each distinct neighbour, 256 bytes at width 64)
RIGHT_ROWS_PER_BUCKET, EDGES_PER_BUCKET = 500_000, 1_000_000


@dataclass(frozen=True)
class Shard:
    side: str  # LEFT (a left part) or RIGHT (a bucket)
    index: int

    @property
    def other(self) -> str:
        return RIGHT if self.side == LEFT else LEFT


@dataclass(frozen=True)
class GraphLayout:
    """Where the shards of a graph live: ``scratch`` (a folder every worker reaches), the left parts, the edge
    parts, the right parts and the number of buckets."""

    scratch: str
    left: tuple[str, ...]
    edges: tuple[str, ...]
    right: tuple[str, ...]
    buckets: int
    right_key: str
    right_name: str

    def shards(self) -> list[Shard]:
        return [Shard(LEFT, k) for k in range(len(self.left))] + [Shard(RIGHT, b) for b in range(self.buckets)]

    def folder(self, shard: Shard) -> Path:
        return Path(self.scratch) / shard.side / f"{shard.index:05d}"

    def state_path(self, shard: Shard, name: str) -> Path:
        return self.folder(shard) / f"{name}.npy"


@dataclass
class ShardGraph:
    """A shard's nodes' complete neighbourhoods: CSR ``ptr`` over its ``n`` nodes, ``neighbour`` (per edge, the row
    of the pulled source array) and ``weight``; ``pulls`` says which rows of which shards of the other side the
    source array holds, in that order."""

    n: int
    ptr: np.ndarray
    neighbour: np.ndarray
    weight: np.ndarray
    pulls: list[tuple[int, np.ndarray]]

    @property
    def target(self) -> np.ndarray:
        """The node (row in the shard) of each edge, in CSR order."""
        return np.repeat(np.arange(self.n), np.diff(self.ptr))

    def save(self, path: Path) -> None:
        shards = np.array([j for j, _ in self.pulls], dtype=np.int64)
        sizes = np.array([len(rows) for _, rows in self.pulls], dtype=np.int64)
        rows = np.concatenate([rows for _, rows in self.pulls]) if self.pulls else np.zeros(0, np.int64)
        with atomic_path(path) as tmp, open(tmp, "wb") as file:
            np.savez(file, n=self.n, ptr=self.ptr, neighbour=self.neighbour, weight=self.weight, shards=shards,
                     sizes=sizes, rows=rows)

    @classmethod
    def load(cls, path: Path) -> ShardGraph:
        with np.load(path) as data:
            rows = np.split(data["rows"], np.cumsum(data["sizes"])[:-1]) if len(data["sizes"]) else []
            return cls(int(data["n"]), data["ptr"], data["neighbour"], data["weight"],
                       list(zip(data["shards"].tolist(), rows)))


def prepare(executor, read_left: Callable, read_right: Callable | None, layout: GraphLayout) -> dict:
    """The four maps of the module docstring on ``executor``. ``read_left(k)`` returns part k's left nodes and its
    edges (columns ``node``: the left node's row in the part, ``right_key``, ``weight`` and edge features, validated
    by the domain); ``read_right(q)`` returns part q's right nodes (with the ``layout.right_key`` column). Without
    right parts (``layout.right`` empty, ``read_right`` None) the right nodes are the keys the edges name, as when a
    payment log is the only table of merchants. Returns the node and edge counts and the nodes without edges, per
    side."""
    Path(layout.scratch).mkdir(parents=True, exist_ok=True)
    left = executor.map(partial(_route_left, read_left, layout), range(len(layout.left)), label="routing edges")
    if not sum(n for n, _ in left):
        raise DataError(f"{Path(layout.left[0]).parent}: the table has no rows in its {len(layout.left)} parts")
    if layout.right:
        right = executor.map(partial(_route_right, read_right, layout), range(len(layout.right)),
                           label="routing right nodes")
        if not sum(right):
            raise DataError(f"{Path(layout.right[0]).parent}: the table has no rows in its {len(layout.right)} parts")
    joined = executor.map(partial(_join_bucket, layout), range(layout.buckets), label="joining edges")
    isolated = executor.map(partial(_link_left, layout, [n for n, _ in left]), range(len(layout.left)),
                          label="linking left parts")
    return {"left": sum(n for n, _ in left), "right": sum(n for n, _ in joined), "edges": sum(e for _, e in left),
            "isolated_left": sum(isolated), "isolated_right": sum(i for _, i in joined)}


def bucket_count(right_rows: int, edges: int) -> int:
    """Buckets for ``right_rows`` right nodes and ``edges`` edges (:data:`RIGHT_ROWS_PER_BUCKET`,
    :data:`EDGES_PER_BUCKET`)."""
    return max(1, -(-right_rows // RIGHT_ROWS_PER_BUCKET), -(-edges // EDGES_PER_BUCKET))


def _route(layout: GraphLayout, kind: str, bucket: int, source: int) -> Path:
    return Path(layout.scratch) / "route" / kind / f"{bucket:05d}" / part_name(source)


def _route_left(read_left: Callable, layout: GraphLayout, k: int) -> tuple[int, int]:
    nodes, edges = read_left(k)
    edges = edges.reset_index(drop=True).assign(row=np.arange(len(edges)), bucket=bucket_of(edges["right_key"],
                                                                                           layout.buckets))
    _scatter(edges.drop(columns="bucket"), edges["bucket"].to_numpy(), layout, "edges", k)
    folder = layout.folder(Shard(LEFT, k))
    write_parquet(edges.drop(columns="right_key"), folder / "edges-in.parquet")
    return len(nodes), len(edges)


def _route_right(read_right: Callable, layout: GraphLayout, q: int) -> int:
    nodes = read_right(q).reset_index(drop=True)
    nodes = nodes.assign(**{PART: q, ROW: np.arange(len(nodes))})
    _scatter(nodes, bucket_of(nodes[layout.right_key], layout.buckets), layout, "nodes", q)
    return len(nodes)


def _scatter(frame: pd.DataFrame, bucket: np.ndarray, layout: GraphLayout, kind: str, source: int) -> None:
    """Write the rows of ``frame`` of each bucket, in order, as that bucket's piece from ``source`` (every bucket
    gets one, maybe empty, so that every bucket knows the columns)."""
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange(layout.buckets + 1))
    for b in range(layout.buckets):
        piece = frame.iloc[order[bounds[b]:bounds[b + 1]]].reset_index(drop=True)
        write_parquet(piece, _route(layout, kind, b, source))


def _pieces(layout: GraphLayout, kind: str, b: int, sources: int) -> pd.DataFrame:
    """Bucket ``b``'s pieces from every source, in source order, with the source as ``_source``."""
    frames = [pd.read_parquet(_route(layout, kind, b, source)).assign(_source=source) for source in range(sources)]
    filled = [frame for frame in frames if len(frame)]  # empty pieces add no rows (nor their dtypes)
    return pd.concat(filled, ignore_index=True) if filled else frames[0]


def _join_bucket(layout: GraphLayout, b: int) -> tuple[int, int]:
    """Bucket ``b``: its right nodes, its edges joined to them, its graph and each left part's links; returns its
    right nodes, and those without edges."""
    key = layout.right_key
    edges = _pieces(layout, "edges", b, len(layout.left))
    if layout.right:
        nodes = _pieces(layout, "nodes", b, len(layout.right))
    else:  # the keys the edges name, sorted
        nodes = pd.DataFrame({key: np.unique(canonical(edges["right_key"]).to_numpy())})
    keys = canonical(nodes[key])
    twice = keys.duplicated(keep=False).to_numpy()
    if twice.any():
        first, second = np.flatnonzero(keys == keys[twice].iloc[0])[:2]
        raise DataError(f"{key} {nodes[key].iloc[first]!r} is in {layout.right[nodes[PART].iloc[first]]} (row "
                        f"{nodes[ROW].iloc[first]}) and {layout.right[nodes[PART].iloc[second]]} (row "
                        f"{nodes[ROW].iloc[second]}): each {key} must be in one row")
    folder = layout.folder(Shard(RIGHT, b))
    position = pd.Index(keys).get_indexer(canonical(edges["right_key"]))
    unknown = position < 0
    if unknown.any():
        first = int(np.flatnonzero(unknown)[0])
        raise DataError(f"{layout.edges[int(edges['_source'].iloc[first])]}: column {key!r} has values that are not "
                        f"in the {layout.right_name} table, e.g. row {int(edges['row'].iloc[first])} "
                        f"{{{key}={edges['right_key'].iloc[first]!r}}}")
    for k, rows in edges.groupby("_source", sort=True).indices.items():
        write_npy(position[rows], Path(layout.scratch) / "links" / f"{int(k):05d}" / f"{b:05d}.npy")
    order = np.argsort(position, kind="stable")  # edges stay in input order (left part, row) within a node
    in_csr = edges.iloc[order].reset_index(drop=True)
    graph = _graph(len(nodes), position[order], in_csr["_source"].to_numpy(), in_csr[NODE].to_numpy(),
                   in_csr[WEIGHT].to_numpy())
    graph.save(folder / "graph.npz")
    features = [c for c in in_csr.columns if c not in ("right_key", NODE, "row", WEIGHT, "_source")]
    write_parquet(pd.DataFrame({NODE: position[order], WEIGHT: in_csr[WEIGHT].to_numpy(),
                                **{c: in_csr[c].to_numpy() for c in features}}), folder / "edges.parquet")
    write_parquet(nodes.drop(columns="_source", errors="ignore"), folder / "nodes.parquet")
    return len(nodes), int((np.diff(graph.ptr) == 0).sum())


def _link_left(layout: GraphLayout, sizes: list[int], k: int) -> int:
    """Left part ``k``'s graph from the right rows the buckets found for its edges; returns its left nodes
    without edges."""
    folder = layout.folder(Shard(LEFT, k))
    edges = pd.read_parquet(folder / "edges-in.parquet")
    buckets = edges["bucket"].to_numpy()
    right_row = np.zeros(len(edges), dtype=np.int64)
    for b in np.unique(buckets):
        right_row[buckets == b] = np.load(Path(layout.scratch) / "links" / f"{k:05d}" / f"{int(b):05d}.npy")
    node = edges[NODE].to_numpy()
    order = np.argsort(node, kind="stable")
    graph = _graph(sizes[k], node[order], buckets[order], right_row[order], edges[WEIGHT].to_numpy()[order])
    graph.save(folder / "graph.npz")
    features = [c for c in edges.columns if c not in (NODE, "row", "bucket", WEIGHT)]
    write_parquet(pd.DataFrame({NODE: node[order], WEIGHT: edges[WEIGHT].to_numpy()[order],
                                **{c: edges[c].to_numpy()[order] for c in features}}), folder / "edges.parquet")
    return int((np.diff(graph.ptr) == 0).sum())


def _graph(n: int, target: np.ndarray, source_shard: np.ndarray, source_row: np.ndarray,
           weight: np.ndarray) -> ShardGraph:
    """The CSR of edges sorted by ``target`` (0 … n − 1) whose sources are rows of the other side's shards."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(target, minlength=n), out=ptr[1:])
    neighbour = np.zeros(len(target), dtype=np.int64)
    pulls, offset = [], 0
    for j in np.unique(source_shard):
        at = source_shard == j
        rows, inverse = np.unique(source_row[at], return_inverse=True)
        neighbour[at] = offset + inverse
        pulls.append((int(j), rows.astype(np.int64)))
        offset += len(rows)
    return ShardGraph(n, ptr, neighbour, weight.astype(np.float32), pulls)


# ------------------------------------------------------------------------------------------------ per shard


def shard_graph(layout: GraphLayout, shard: Shard) -> ShardGraph:
    return ShardGraph.load(layout.folder(shard) / "graph.npz")


def shard_edges(layout: GraphLayout, shard: Shard) -> pd.DataFrame:
    """The shard's edges in CSR order: ``node`` (row in the shard), ``weight`` and the edge features."""
    return pd.read_parquet(layout.folder(shard) / "edges.parquet")


def right_nodes(layout: GraphLayout, b: int) -> pd.DataFrame:
    """Bucket ``b``'s right nodes, with the right table's part (``_part``) and row (``_row``) of each."""
    return pd.read_parquet(layout.folder(Shard(RIGHT, b)) / "nodes.parquet")


def save_state(layout: GraphLayout, shard: Shard, name: str, values: np.ndarray) -> None:
    write_npy(values, layout.state_path(shard, name))


def load_state(layout: GraphLayout, shard: Shard, name: str) -> np.ndarray:
    return np.load(layout.state_path(shard, name))


def pull(layout: GraphLayout, shard: Shard, graph: ShardGraph, name: str, width: int) -> np.ndarray:
    """The source array of ``graph``: the rows it pulls of state ``name`` from the other side's shards."""
    pieces = [np.load(layout.state_path(Shard(shard.other, j), name), mmap_mode="r")[rows] for j, rows in graph.pulls]
    return np.concatenate(pieces) if pieces else np.zeros((0, width), dtype=np.float32)


def write_right_output(layout: GraphLayout, b: int, nodes: pd.DataFrame, frame: pd.DataFrame) -> None:
    """Bucket ``b``'s rows of an output over the right nodes (``frame``, aligned with :func:`right_nodes`), split
    by the right part each node came from."""
    frame = frame.reset_index(drop=True).assign(**{ROW: nodes[ROW].to_numpy()})
    for q, rows in nodes.groupby(PART, sort=True).indices.items():
        write_parquet(frame.iloc[rows].reset_index(drop=True),
                      Path(layout.scratch) / "out" / f"{int(q):05d}" / f"{b:05d}.parquet")


def collect_right(executor, layout: GraphLayout, out: str | os.PathLike, empty: pd.DataFrame) -> None:
    """Write ``out/part-q.parquet``: right part q's output rows in its row order (``empty``: the columns of a part
    with no rows); ``out`` may be a URI (marked as :func:`~promokit.data.uris.begin_parts` says)."""
    as_path(out).mkdir(parents=True, exist_ok=True)
    begin_parts(out)
    rows = executor.map(partial(_collect, layout, str(out), empty), range(len(layout.right)),
                        label="writing right parts")
    finish_parts(out, [part_name(q) for q in range(len(layout.right))], rows)


def _collect(layout: GraphLayout, out: str, empty: pd.DataFrame, q: int) -> int:
    folder = Path(layout.scratch) / "out" / f"{q:05d}"
    pieces = [pd.read_parquet(p) for p in sorted(folder.glob("*.parquet"))] if folder.exists() else []
    frame = pd.concat(pieces, ignore_index=True).sort_values(ROW).drop(columns=ROW) if pieces else empty
    write_part(frame, out, q)
    return len(frame)


def remove(layout: GraphLayout) -> None:
    shutil.rmtree(layout.scratch, ignore_errors=True)

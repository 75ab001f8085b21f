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
3. one map over the shards: each customer part grows its labelled customers' neighbourhoods and each merchant
   bucket its labelled merchants' (merchant seeds: hop 1 reaches customers; the merchant term of eq. 7)
   (:func:`promokit.nn.keyed_sampling.grow`, reading the other shards' files memory-mapped, as the layer-wise
   inference pulls states), gathers the features and writes ``OUT/part-k.parquet`` (``OUT/merchants/part-q.parquet``)
   in row groups of :data:`~promokit.nn.graph_records.SEEDS_PER_GROUP` seeds (:mod:`promokit.nn.graph_records`,
   which value's consumption-graph records share).

Each draw is keyed by (seed, epoch, hop, node id), so the records are the in-memory
:func:`~promokit.nn.keyed_sampling.sample_keyed` neighbourhoods whatever the partitioning, and
:func:`promokit.incentive.record_batches.read_batch` turns rows back into that :class:`~promokit.nn.bipartite.Subgraph`.

**Resample per epoch or a fixed draw.** ``draws`` are the epochs whose neighbourhoods are written: ``(e,)`` for a
fresh draw each epoch (the pass runs again before epoch e: one set of records on disk, generation every epoch);
``range(S)`` for S draws written once and cycled by the trainer (epoch e reads draw e mod S: generation once, S times
the records). ``benchmarks/graph_records.py`` measures both.

Layout of a records part (one row per seed and draw): ``customer_id``, ``draw``, ``level`` (index in the value
list), ``redeemed`` — the seed and its label; a merchants' part ``merchant_id``, ``draw``, ``level`` and ``target``
(y^m = shares / max(prior_shares, 1), section 4) — then the neighbourhood's columns of
:mod:`promokit.nn.graph_records` (the edge inputs: the weight, then the edge features).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import graph_shards
from promokit.data.encoders import TableEncoder
from promokit.data.errors import DataError
from promokit.data.graph_shards import LEFT, NODE, PART, RIGHT, ROW, GraphLayout, Shard
from promokit.data.io import write_parquet
from promokit.data.part_keys import check_unique_keys
from promokit.data.parts import part_name
from promokit.data.spec import FeatureSpec
from promokit.data.uris import local_dir
from promokit.incentive.contract import CUSTOMER, LEVEL, MERCHANT, PRIOR_SHARES, REDEEMED, SHARES, prior_shares
from promokit.incentive.estimator import TEST, TRAIN, VALID, hashed_roles
from promokit.incentive.inputs import InputEncoders, own_inputs, structure_frame
from promokit.incentive.parts import PartReader, _layout, _rows

# META: record_training reads it from here
from promokit.nn.graph_records import FEATURES, META, export_shard, peak_rss_mb, resident_mb, write_part  # noqa: F401
from promokit.nn.keyed_sampling import node_keys

ROLES = ("train", "valid", "test")
TARGET = "target"  # a merchant record's label: y^m = shares / max(prior_shares, 1) (section 4)
MERCHANT_RECORDS = "merchants"  # the folder of the merchants' records, beside the customers' parts


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
    #: (test, validation) fractions: with either above 0, each labelled customer's role is drawn from its id
    #: (:func:`~promokit.incentive.estimator.hashed_roles`): training records in ``OUT/train``, validation records
    #: (the first draw) in ``OUT/valid``, none for the test customers; else every one's in ``OUT``
    holdout: tuple[float, float] = (0.0, 0.0)
    #: with a ``holdout``, also the records a refit on every labelled node trains from
    #: (:mod:`promokit.training.refit`): every draw of the validation customers, and the test customers' in
    #: ``OUT/test``
    refit: bool = False

    def __post_init__(self):
        if not self.fanouts or any(int(f) != f or (f < 1 and f != -1) for f in self.fanouts):
            raise DataError(f"fanouts must be one positive number (or -1: every neighbour) per GNN layer, got "
                            f"{list(self.fanouts)}")
        if not self.draws or len(set(self.draws)) != len(self.draws) or min(self.draws) < 0:
            raise DataError(f"draws must be distinct epochs ≥ 0, at least one, got {list(self.draws)}")


def write_records(customers: Path, merchants: Path, edges: Path, out: Path, encoders: InputEncoders | None,
                  spec: RecordSpec, executor, edge_features: tuple[str, ...] = ()) -> dict:
    """The records of the graph in parts (module docstring) in ``out/part-k.parquet`` (k: the customer part) and
    ``out/merchants/part-q.parquet`` (q: the merchant bucket; with ``spec.holdout``, both in ``out/train`` and
    ``out/valid``, and in ``out/test`` with ``spec.refit``), on ``executor``, the inputs encoded by ``encoders``
    (None: fitted over the shards as :meth:`InputEncoders.fit` fits them on the one-folder graph,
    :func:`fit_encoders`, with the ``edge_features`` columns). Returns the counts (of the customer seeds and their
    redemptions per role, ``merchant_seeds``), the encoders, the seconds of each step and this process's peak RSS
    and anonymous and file-backed resident memory after it (``phases``,
    :func:`~promokit.nn.graph_records.resident_mb`) and, per part, its records, bytes, seconds, its process's peak
    RSS and largest anonymous and file-backed resident memory while growing it."""
    out = local_dir(out, "out")
    clock, phases = time.perf_counter(), {}

    def lap(name: str) -> None:
        nonlocal clock
        phases[name], clock = round(time.perf_counter() - clock, 3), time.perf_counter()
        phases[f"{name}_peak_rss_mb"] = peak_rss_mb()  # this process's, so far
        phases.update({f"{name}_{key}": mb for key, mb in resident_mb().items()})  # now

    layout = _layout(customers, merchants, edges, out)
    if encoders is not None:
        edge_features = tuple(encoders.edge_features())
    reader = PartReader(layout, spec.levels, spec.customer_spec, spec.merchant_spec, tuple(edge_features),
                        encoders.merchants if encoders is not None else None)
    offsets = {LEFT: _offsets(layout.left), RIGHT: _offsets(layout.right)}
    try:
        check_unique_keys(list(layout.left), CUSTOMER, Path(layout.scratch) / "keys", map_parts=executor.map)
        counts = graph_shards.prepare(executor, reader.customers, reader.merchants, layout)
        lap("shard")
        if encoders is None:
            encoders = fit_encoders(executor, reader)
            lap("encoders")
        executor.map(partial(_export, reader, encoders, offsets), layout.shards(), label="exporting shards")
        lap("export")
        grown = executor.map(partial(_grow, layout, spec, (counts["left"], counts["right"]), encoders),
                             layout.shards(), label="growing neighbourhoods")
        parts, buckets = [g for g in grown if g["side"] == LEFT], [g for g in grown if g["side"] == RIGHT]
        lap("grow")
    finally:
        executor.release()
        graph_shards.remove(layout)
    return {"customers": counts["left"], "merchants": counts["right"], "edges": counts["edges"],
            "records": sum(p["records"] for p in grown), "bytes": sum(p["bytes"] for p in grown),
            "seeds": {role: sum(p["seeds"][role] for p in parts) for role in ROLES},
            "redeemed": {role: sum(p["redeemed"][role] for p in parts) for role in ROLES},
            "merchant_seeds": {role: sum(b["seeds"][role] for b in buckets) for role in ROLES}, "encoders": encoders,
            "phases": phases, "parts": parts, "buckets": buckets}


def fit_encoders(executor, reader: PartReader) -> InputEncoders:
    """The encoders :meth:`InputEncoders.fit` fits on the one-folder graph, from each shard's counts of its nodes'
    features and structure (:meth:`~promokit.data.encoders.TableEncoder.count`): the same vocabularies, the same
    means and deviations to rounding."""
    shards = reader.layout.shards()
    shares = executor.map(partial(_count, reader), shards, label="counting inputs")
    by_side = {side: [share for shard, share in zip(shards, shares) if shard.side == side] for side in (LEFT, RIGHT)}

    def fitted(side: str, key: str, spec: FeatureSpec, squash: bool = True) -> TableEncoder:
        return TableEncoder.from_counts([share[key] for share in by_side[side]], spec, squash_numeric=squash)

    def structure(side: str) -> FeatureSpec:
        return FeatureSpec(numeric=by_side[side][0]["columns"], group_key=None)

    return InputEncoders(fitted(LEFT, "features", reader.customer_spec), fitted(RIGHT, "features", reader.merchant_spec),
                         fitted(LEFT, "structure", structure(LEFT), False),
                         fitted(RIGHT, "structure", structure(RIGHT), False))


def _nodes_and_structure(reader: PartReader, shard: Shard, edges: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A shard's nodes and their structure frame (:func:`~promokit.incentive.inputs.structure_frame`) from its
    ``edges``."""
    if shard.side == LEFT:
        nodes = reader.customer_nodes(shard.index)
        return nodes, structure_frame(edges, NODE, len(nodes), reader.edge_features)
    nodes = graph_shards.right_nodes(reader.layout, shard.index)
    return nodes, structure_frame(edges, NODE, len(nodes), reader.edge_features, prior_shares(nodes))


def _count(reader: PartReader, shard: Shard) -> dict:
    """A shard's share of :func:`fit_encoders`."""
    nodes, structure = _nodes_and_structure(reader, shard, graph_shards.shard_edges(reader.layout, shard))
    spec = reader.customer_spec if shard.side == LEFT else reader.merchant_spec
    return {"features": TableEncoder.count(nodes, spec), "columns": list(structure.columns),
            "structure": TableEncoder.count(structure, FeatureSpec(numeric=list(structure.columns), group_key=None))}


def _offsets(paths: tuple[str, ...]) -> list[int]:
    """Each part's first row in the one-table graph (the parts concatenated in order)."""
    return np.concatenate([[0], np.cumsum([_rows(Path(p)) for p in paths])]).astype(int).tolist()


def _export(reader: PartReader, encoders: InputEncoders, offsets: dict, shard: Shard) -> None:
    """The shard's files of step 2 (module docstring)."""
    layout = reader.layout
    edges = graph_shards.shard_edges(layout, shard)
    nodes, structure = _nodes_and_structure(reader, shard, edges)
    if shard.side == LEFT:
        key, side = CUSTOMER, "customer"
        gid = offsets[LEFT][shard.index] + np.arange(len(nodes))
        redeemed = pd.to_numeric(nodes[REDEEMED]).to_numpy(np.float32) if REDEEMED in nodes else \
            np.full(len(nodes), np.nan, np.float32)
        labelled = ~np.isnan(redeemed)
        level = nodes[LEVEL].to_numpy(dtype=float)[labelled] if labelled.any() else np.zeros(0)
        seeds = pd.DataFrame({"row": np.flatnonzero(labelled), CUSTOMER: nodes[CUSTOMER].to_numpy()[labelled],
                              LEVEL: np.searchsorted(reader.levels, level), REDEEMED: redeemed[labelled]})
        write_parquet(seeds, layout.folder(shard) / "seeds.parquet")
    else:
        key, side = MERCHANT, "merchant"
        gid = np.asarray(offsets[RIGHT], dtype=np.int64)[nodes[PART].to_numpy()] + nodes[ROW].to_numpy()
        labels = [pd.to_numeric(nodes[c]).to_numpy(np.float64) if c in nodes else np.full(len(nodes), np.nan)
                  for c in (LEVEL, SHARES, PRIOR_SHARES)]
        labelled = ~np.isnan(np.column_stack(labels)).any(axis=1)
        level, shares, prior = (values[labelled] for values in labels)
        seeds = pd.DataFrame({"row": np.flatnonzero(labelled), MERCHANT: nodes[MERCHANT].to_numpy()[labelled],
                              LEVEL: np.searchsorted(reader.levels, level),
                              TARGET: (shares / np.maximum(prior, 1.0)).astype(np.float32)})  # y^m, section 4
        write_parquet(seeds, layout.folder(shard) / "seeds.parquet")
    own = own_inputs(getattr(encoders, f"{side}s"), nodes, getattr(encoders, f"{side}_structure"), structure)
    edge = np.column_stack([edges["weight"].to_numpy(np.float32)]
                           + [edges[c].to_numpy(np.float32) for c in reader.edge_features])
    export_shard(layout, shard, node_keys(nodes[key]), gid, {name: getattr(own, name).numpy() for name in FEATURES},
                 edge)


def _grow(layout: GraphLayout, spec: RecordSpec, sizes: tuple[int, int], encoders: InputEncoders,
          shard: Shard) -> dict:
    """Step 3 for a shard: the records of a customer part's labelled customers, or of a merchant bucket's labelled
    merchants (in ``merchants/``, beside the customers' parts), written in row groups (by role, with
    ``spec.holdout``; ``sizes``: the customers and merchants of the graph); what :func:`write_records` reports of
    it."""
    seeds = pd.read_parquet(layout.folder(shard) / "seeds.parquet")
    key, label = (CUSTOMER, REDEEMED) if shard.side == LEFT else (MERCHANT, TARGET)
    id_type = _id_type(layout.left, shard.index) if shard.side == LEFT else None
    out = Path(layout.scratch).parent
    roles = hashed_roles(seeds[key].to_numpy(), *spec.holdout, spec.seed) if any(spec.holdout) else \
        np.full(len(seeds), TRAIN)
    written = {"side": shard.side, "part": shard.index, "records": 0, "bytes": 0, "seconds": 0.0, "seeds": {},
               "redeemed": {}, "rss_anon_mb": float("nan"), "rss_file_mb": float("nan")}
    held = spec.draws if spec.refit else ()  # the held-out nodes' draws: the validation's first, unless refit
    for role, name, draws in ((TRAIN, "train", spec.draws), (VALID, "valid", held or spec.draws[:1]),
                              (TEST, "test", held)):
        mine = seeds[roles == role]
        written["seeds"][name], written["redeemed"][name] = len(mine), float(mine[label].sum())
        if not draws or role != TRAIN and not any(spec.holdout) or (shard.side == RIGHT and not len(mine)):
            continue

        def seed_columns(index: np.ndarray, epoch: np.ndarray, mine=mine) -> dict:
            import pyarrow as pa

            chosen = mine.iloc[index]
            return {key: pa.array(chosen[key].to_numpy(), type=id_type),
                    "draw": pa.array(epoch.astype(np.int32)), LEVEL: pa.array(chosen[LEVEL].to_numpy(np.int64)),
                    label: pa.array(chosen[label].to_numpy(np.float32))}

        folder = out / name if any(spec.holdout) else out
        path = (folder if shard.side == LEFT else folder / MERCHANT_RECORDS) / part_name(shard.index)
        path.parent.mkdir(parents=True, exist_ok=True)
        part = write_part(layout, shard.index, path, mine["row"].to_numpy(), seed_columns, sizes, spec.fanouts,
                          spec.seed, draws, {"edge_features": encoders.edge_features()}, side=shard.side)
        written.update({field: written[field] + part[field] for field in ("records", "bytes", "seconds")},
                       peak_rss_mb=part["peak_rss_mb"],
                       **{field: float(np.fmax(written[field], part[field]))
                          for field in ("rss_anon_mb", "rss_file_mb")})
    return written


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

"""Training records of ESDPM's consumption graph (EOCA §4.1.2, eq. 14) over a value dataset in parts: for every user
with deliveries, its sampled neighbourhood of the user–merchant–user payment graph with the GNN's inputs joined,
co-partitioned with the users parts — AGL's "GraphFlat" (Zhang et al., VLDB 2020), as the incentive GNN's records
(:mod:`promokit.nn.graph_records` writes and reads both).

The pass, on an executor (local or Ray), never holds the graph in one process:

1. the payments in shards (:func:`promokit.value.consumption.payment_layout`: users parts on the left, merchants
   hashed into buckets; a payment of a user not in its part is an error naming the file and row);
2. one map over the shards counts the graph's encoders — the merchants' payments (their id vocabulary, seen at
   least twice) and the users' and merchants' payment structure — which the driver adds up into the encoders
   :meth:`InputEncoders.fit` builds on the whole dataset (:meth:`InputEncoders.fit_graph_counts`);
3. one map over the shards exports their CSR and GNN inputs (:func:`~promokit.nn.graph_records.export_shard`):
   users their encoded features (``cat``, ``num``) and structure, merchants their id code (``cat``, one column) and
   structure;
4. one map over the users parts grows its users' neighbourhoods (the encoder's ``fanouts``, keyed by (seed, epoch,
   hop, node id), so independent of the partitioning) and writes ``OUT/part-k.parquet``: per (user, draw)
   ``user_row`` (the user's row in users part k), ``draw`` and the neighbourhood's columns.

A records part's users are part k's users that have deliveries; :class:`~promokit.value.graph_training.GraphJob`
reads part k's deliveries with part k's records.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import graph_shards
from promokit.data.encoders import CategoryEncoder
from promokit.data.graph_shards import LEFT, NODE, GraphLayout, Shard
from promokit.data.part_keys import canonical
from promokit.data.parts import parquet, part_name
from promokit.nn.graph_records import FEATURES, export_shard, write_part
from promokit.nn.keyed_sampling import node_keys
from promokit.value.consumption import payment_layout, read_payments
from promokit.value.contract import AMOUNT, MERCHANT, USER
from promokit.value.inputs import InputEncoders, payment_structure, structure_count
from promokit.value.part_tables import ValuePart, read_part_tables


def write_records(parts: list[ValuePart], specs: dict, encoders: InputEncoders, out: Path, fanouts, seed: int,
                  draws, executor) -> dict:
    """The records of the dataset's ``parts`` in ``out/part-k.parquet`` (module docstring), on ``executor``; the
    graph's encoders are added to ``encoders`` (fitted on the parts' counts, the model's feature ``specs``). Returns
    the graph's counts and, per part, its records, bytes, seconds and its process's peak RSS."""
    out = Path(out)
    layout = payment_layout(parts, out / ".graph")
    try:
        counts = graph_shards.prepare(executor, partial(read_payments, parts, specs), None, layout)
        shares = executor.map(partial(_count, layout), layout.shards(), label="counting graph inputs")
        left, right = shares[:len(parts)], shares[len(parts):]
        encoders.fit_graph_counts([s["merchants"] for s in right], [s["structure"] for s in left],
                                  [s["structure"] for s in right])
        offsets = {side: np.concatenate([[0], np.cumsum([s["n"] for s in group])]).astype(int).tolist()
                   for side, group in (("left", left), ("right", right))}
        executor.map(partial(_export, layout, parts, specs, encoders, offsets), layout.shards(),
                     label="exporting graph shards")
        sizes = (offsets["left"][-1], offsets["right"][-1])
        reports = executor.map(partial(_grow_part, layout, parts, out, sizes, tuple(fanouts), seed, tuple(draws)),
                               range(len(parts)), label="growing neighbourhoods")
    finally:
        executor.release()
        graph_shards.remove(layout)
    return {"users": counts["left"], "merchants": counts["right"], "payments": counts["edges"],
            "records": sum(r["records"] for r in reports), "bytes": sum(r["bytes"] for r in reports),
            "parts": reports}


def _structure(layout: GraphLayout, shard: Shard, n: int) -> pd.DataFrame:
    edges = graph_shards.shard_edges(layout, shard)
    return payment_structure(edges[NODE].to_numpy(), edges[AMOUNT].to_numpy(dtype=np.float64), n)


def _size(layout: GraphLayout, shard: Shard) -> int:
    return graph_shards.shard_graph(layout, shard).n


def _count(layout: GraphLayout, shard: Shard) -> dict:
    """A shard's nodes and its shares of the graph's encoders (step 2)."""
    n = _size(layout, shard)
    share = {"n": n, "structure": structure_count(_structure(layout, shard, n))}
    if shard.side != LEFT:
        names = graph_shards.right_nodes(layout, shard.index)[MERCHANT]
        paid = graph_shards.shard_edges(layout, shard)[NODE].to_numpy()
        share["merchants"] = CategoryEncoder.count(names.iloc[paid].reset_index(drop=True))
    return share


def _export(layout: GraphLayout, parts: list[ValuePart], specs: dict, encoders: InputEncoders, offsets: dict,
            shard: Shard) -> None:
    """A shard's CSR and GNN inputs (step 3)."""
    n = _size(layout, shard)
    structure = encoders.user_structure if shard.side == LEFT else encoders.merchant_structure
    inputs = {"structure": structure.transform(_structure(layout, shard, n)).numeric}
    if shard.side == LEFT:
        users = read_part_tables(parts[shard.index], specs).users
        encoded = encoders.users.transform(users)
        inputs.update(cat=encoded.categorical, num=encoded.numeric)
        keys = node_keys(users[USER])
    else:
        names = graph_shards.right_nodes(layout, shard.index)[MERCHANT]
        inputs.update(cat=encoders.merchants.transform(pd.Series(names.to_numpy()))[:, None],
                      num=np.zeros((n, 0), np.float32))
        keys = node_keys(names)
    edges = graph_shards.shard_edges(layout, shard)
    export_shard(layout, shard, keys, offsets[shard.side][shard.index] + np.arange(n),
                 {f: inputs[f] for f in FEATURES}, edges[["weight"]].to_numpy(np.float32))


def _grow_part(layout: GraphLayout, parts: list[ValuePart], out: Path, sizes: tuple[int, int], fanouts: tuple,
               seed: int, draws: tuple, k: int) -> dict:
    """Users part ``k``'s records (step 4): its users with deliveries, in row order."""
    import pyarrow as pa

    users = parquet(parts[k].files["users"], columns=[USER])[USER]
    delivered = parquet(parts[k].files["deliveries"], columns=[USER])[USER]
    rows = pd.Index(canonical(users)).get_indexer(canonical(delivered))
    seeds = np.unique(rows[rows >= 0])

    def seed_columns(index: np.ndarray, epoch: np.ndarray) -> dict:
        return {"user_row": pa.array(seeds[index].astype(np.int64)), "draw": pa.array(epoch.astype(np.int32))}

    return write_part(layout, k, out / part_name(k), seeds, seed_columns, sizes, fanouts, seed, draws,
                      {"edge_features": []})

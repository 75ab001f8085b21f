"""The consumption graph of a value dataset in parts: every user's e_c — the GNN over the user–merchant–user payment
graph (EOCA §4.1.2, eq. 14) — computed shard by shard, so that a model that reads the graph (``esdpm``) scores each
part alone afterwards (:func:`promokit.value.parts.predict_parts`).

The users' parts with their payments (``consumption``, co-partitioned by user) are the left parts of a graph in
shards (:mod:`promokit.data.graph_shards`); the merchants are the ids the payments name, hashed into buckets. One map
gives each shard its GNN inputs — users: their feature embedding and payment structure; merchants: their id
embedding and payment structure, from their payments in every part — and one map per layer runs it
(:meth:`~promokit.nn.bipartite.BipartiteGNN.layer`), the last one for the users alone: their states are e_c. A
model with a separate network per task (``bottom="separate"``) has a GNN in each; each runs on the same shards.
The states equal those the one-folder model computes on the whole graph (the tests compare the scores).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.data import graph_shards
from promokit.data.encoders import TableEncoder
from promokit.data.graph_shards import LEFT, NODE, GraphLayout, Shard
from promokit.data.parts import naming, parquet_rows, read_part
from promokit.training.device import run_on
from promokit.value.contract import AMOUNT, MERCHANT
from promokit.value.estimator import ValueModel
from promokit.value.part_tables import read_part_tables
from promokit.value.inputs import payment_structure

SIDE = {"left": "user", "right": "merchant"}


def consumption_states(parts: list, specs: dict, depth: int, scratch: Path, executor, load) -> GraphLayout:
    """Every user's e_c for each GNN (of ``depth`` layers) of the model ``load()`` returns, written per users part
    into the layout's folder ``scratch`` (local, which the caller removes with :func:`promokit.data.graph_shards.remove`);
    read a part's with :func:`part_states`. ``specs`` are the model's feature specs, which the parts are checked
    against."""
    layout = payment_layout(parts, scratch)
    graph_shards.prepare(executor, partial(read_payments, parts, specs), None, layout)
    shards = layout.shards()
    executor.map(partial(_inputs, layout), shards, setup=load, label="graph inputs")
    for layer in range(depth):
        todo = shards if layer < depth - 1 else [s for s in shards if s.side == LEFT]  # e_c is the users' states
        executor.map(partial(_layer, layout, layer), todo, setup=load, label=f"graph layer {layer + 1} of {depth}")
    return layout


def payment_layout(parts: list, scratch: Path) -> GraphLayout:
    """The graph in shards of the parts' payments: users parts on the left, merchants (the ids the payments name)
    hashed into buckets on the right, in the folder ``scratch``."""
    payments = [p.files["consumption"] for p in parts]
    return GraphLayout(str(scratch), tuple(p.files["users"] for p in parts), tuple(payments), (),
                       graph_shards.bucket_count(0, sum(parquet_rows(path) or 0 for path in payments)), MERCHANT,
                       "merchants")


def part_states(layout: GraphLayout, model: ValueModel, k: int) -> list[torch.Tensor]:
    """Users part k's e_c, one tensor per GNN of ``model``, in the part's user order."""
    depth = len(model.model_params_["fanouts"])
    return [torch.from_numpy(graph_shards.load_state(layout, Shard(LEFT, k), f"e{e}h{depth}"))
            for e, _ in enumerate(_gnn_encoders(model))]


def _gnn_encoders(model: ValueModel) -> list:
    return [encoder for encoder in model.net_.encoders if encoder.graph]


def read_payments(parts: list, specs: dict, k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Users part k and its payments as edges (``node``: the user's row in the part, ``right_key``: the merchant),
    checked as the part is checked for scoring."""
    tables = read_part_tables(parts[k], specs)
    payments = tables.consumption
    return tables.users, pd.DataFrame({NODE: payments["user"].to_numpy(), "right_key": payments[MERCHANT].to_numpy(),
                                       "weight": np.ones(len(payments)), AMOUNT: payments[AMOUNT].to_numpy()})


@torch.no_grad()
def _inputs(layout: GraphLayout, model: ValueModel, shard: Shard) -> None:
    """The shard's GNN inputs and first states, for every GNN of the model."""
    side = SIDE[shard.side]
    edges = graph_shards.shard_edges(layout, shard)
    encoders = model.encoders_
    if side == "user":
        with naming(layout.left[shard.index]):
            users = read_part(layout.left[shard.index])
        encoded = encoders.users.transform(users)
        features = {"cat": torch.from_numpy(encoded.categorical), "num": torch.from_numpy(encoded.numeric)}
        n, structure_encoder = len(users), encoders.user_structure
    else:
        names = graph_shards.right_nodes(layout, shard.index)[MERCHANT]
        features = torch.from_numpy(encoders.merchants.transform(pd.Series(names.to_numpy())))
        n, structure_encoder = len(names), encoders.merchant_structure
    structure = _structure(structure_encoder, edges, n)
    for e, encoder in enumerate(_gnn_encoders(model)):
        first = encoder.gnn.customer_in if side == "user" else encoder.gnn.merchant_in
        states = run_on(model.net_, model.train_config.device,
                        lambda own, edges: first(encoder.graph_input(side, own, edges)), features, structure)  # noqa: B023
        graph_shards.save_state(layout, shard, f"e{e}h0", states.numpy())


def _structure(encoder: TableEncoder, edges: pd.DataFrame, n: int) -> torch.Tensor:
    frame = payment_structure(edges[NODE].to_numpy(), edges[AMOUNT].to_numpy(dtype=np.float64), n)
    return torch.from_numpy(encoder.transform(frame).numeric)


@torch.no_grad()
def _layer(layout: GraphLayout, layer: int, model: ValueModel, shard: Shard) -> None:
    """Layer ``layer`` of every GNN on the shard's nodes, from its neighbours' states."""
    shard_graph = graph_shards.shard_graph(layout, shard)
    ptr, neighbour, weight = (torch.from_numpy(a) for a in (shard_graph.ptr, shard_graph.neighbour, shard_graph.weight))
    into = "customer" if shard.side == LEFT else "merchant"  # the GNN's name for users
    for e, encoder in enumerate(_gnn_encoders(model)):
        own = torch.from_numpy(graph_shards.load_state(layout, shard, f"e{e}h{layer}"))
        source = torch.from_numpy(graph_shards.pull(layout, shard, shard_graph, f"e{e}h{layer}", own.shape[1]))
        states = run_on(model.net_, model.train_config.device, encoder.gnn.layer, layer, into, source, own, ptr,
                        neighbour, weight)
        graph_shards.save_state(layout, shard, f"e{e}h{layer + 1}", states.numpy())

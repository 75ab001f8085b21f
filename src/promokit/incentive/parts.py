"""An incentive graph in parts, scored shard by shard on an executor (``incentive predict --customers DIR --edges DIR
--merchants FILE|DIR --executor local|ray``).

Layout: ``customers`` is a directory (or glob) of Parquet parts; ``edges`` has as many parts, co-partitioned with
them (paired in sorted path order: part k of the edges holds the edges of part k's customers); ``merchants`` is one
table or parts. The graph means the one-folder graph whose tables are the parts concatenated in order, and its
scores are that graph's, written part by part:

1. customer ids unique across parts (:func:`promokit.data.part_keys.check_unique_keys`);
2. the graph in shards (:func:`promokit.data.graph_shards.prepare`): customer parts and merchant buckets, each with its
   nodes' complete neighbourhoods;
3. inputs: each shard encodes its nodes' features and their structure (degree, weight, edge-feature means, from its
   own edges) with the model's encoders;
4. for DNN-H and the linear floor, the history (the payment-weighted mean of the neighbours' features) pulled from
   the other side's shards;
5. the GNN's layers, one map each (:meth:`~promokit.nn.bipartite.BipartiteGNN.layer` on each shard, its neighbours'
   states pulled from the other side); the last map applies the heads and writes the scores: customers part k to
   ``OUT/customers/part-k``, merchants back into their table's parts, ``OUT/merchants/part-q``, in row order.

Each node's state reads exactly its own edges, in the same order, and its neighbours' states, so the scores are
the one-folder predict's (the tests compare them to 1e-6). The model is loaded once per worker in every map that
needs it. The shards' files live in ``OUT/.graph`` (removed at the end, also on failure): with ``--executor ray`` on
several machines, ``OUT`` must be on storage every worker reaches. For an ``OUT`` URI they live in a local temporary
folder (so its workers share this machine's disk), and the output parts go to ``OUT`` marked as
:func:`~promokit.data.uris.begin_parts` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.data import graph_shards
from promokit.data.encoders import TableEncoder, check_numeric_columns
from promokit.data.errors import DataError
from promokit.data.graph_shards import LEFT, NODE, RIGHT, GraphLayout, Shard
from promokit.data.io import write_parquet, write_part
from promokit.data.part_keys import check_unique_keys
from promokit.data.parts import list_parts, naming, parquet_rows, part_name, read_file, read_part
from promokit.data.spec import FeatureSpec
from promokit.data.uris import begin_parts, finish_parts, scratch_dir
from promokit.incentive.contract import CUSTOMER, MERCHANT, check_customer_part, check_merchant_part, \
    prior_shares
from promokit.incentive.estimator import IncentiveModel, wide_scores
from promokit.incentive.inputs import InputEncoders, NodeInputs, neighbour_mean, own_inputs, structure_frame
from promokit.incentive.models.network import WITH_HISTORY
from promokit.training import read_json, read_model_config
from promokit.training.device import run_on

SIDE = {LEFT: "customer", RIGHT: "merchant"}
HEAD_ROWS = 65_536  # rows through the towers and heads at a time


@dataclass(frozen=True)
class PartReader:
    """Reads and checks part k of the customers with its edges, or part q of the merchants, against the model's
    value list, feature columns and merchant encoder (None: encoders not fitted yet, training over parts)."""

    layout: GraphLayout
    levels: tuple[float, ...]
    customer_spec: FeatureSpec
    merchant_spec: FeatureSpec
    edge_features: tuple[str, ...]
    merchant_encoder: TableEncoder | None

    def customers(self, k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Part k's customers and its edges, checked together."""
        customers, edges = self.layout.left[k], self.layout.edges[k]
        with naming(customers):
            table = read_part(customers)
            check_numeric_columns(table, [c for c in self.customer_spec.numeric if c in table])
        with naming(edges):
            edge_table = read_part(edges)
        with naming(f"{customers} with {edges}"):
            return check_customer_part(table, edge_table, levels=self.levels, customer_features=self.customer_spec,
                                       edge_features=self.edge_features)

    def customer_nodes(self, k: int) -> pd.DataFrame:
        """Part k's customers alone, once :meth:`customers` has checked them with their edges."""
        with naming(self.layout.left[k]):
            return read_part(self.layout.left[k]).reset_index(drop=True)

    def merchants(self, q: int) -> pd.DataFrame:
        path = self.layout.right[q]
        with naming(path):
            merchants = check_merchant_part(read_part(path), levels=self.levels, merchant_features=self.merchant_spec)
            check_numeric_columns(merchants, self.merchant_spec.numeric)
            if self.merchant_encoder is not None:
                self.merchant_encoder.transform(merchants)  # its errors name this part's row; a bucket mixes parts
            return merchants


@dataclass(frozen=True)
class ShardScores:
    """What a scored shard reports: its side, its rows and the sum of its responses at each level."""

    side: str
    rows: int
    sums: tuple[float, ...]


def predict_parts(model: Path, customers: Path, merchants: Path, edges: Path, out: Path, executor) -> dict:
    """Score the graph in parts (module docstring) with the model directory ``model`` on ``executor`` into ``out``;
    return the summary ``incentive predict`` writes."""
    config = read_model_config(model, "incentive")
    if config.get("graph") in ("items", "customers"):
        kind = config["graph"].removesuffix("s")
        raise DataError(f"the model {model} was fit on a customer–{kind} graph; scoring in parts serves "
                        "customer–merchant graphs: score its customers as one table")
    with scratch_dir(out, ".graph") as scratch:
        layout = _layout(customers, merchants, edges, scratch.parent)  # scratch: out/.graph, or a local one
        encoders = InputEncoders.from_dict(read_json(model, "encoder.json"))
        reader = PartReader(layout, tuple(config["levels"]), FeatureSpec.from_dict(config["customer_spec"]),
                            FeatureSpec.from_dict(config["merchant_spec"]), tuple(encoders.edge_features()),
                            encoders.merchants)
        try:
            check_unique_keys(list(layout.left), CUSTOMER, Path(layout.scratch) / "keys", map_parts=executor.map)
            counts = graph_shards.prepare(executor, reader.customers, reader.merchants, layout)
            load = partial(IncentiveModel.load, model)
            shards = layout.shards()
            begin_parts(out / "customers")
            scored = executor.map(partial(_inputs, reader, out), shards, setup=load, label="encoding shards")
            params = config["params"]
            if params["representation"] in WITH_HISTORY:
                scored = executor.map(partial(_history, layout, out), shards, setup=load, label="neighbour history")
            if params["representation"] == "gnn":
                for layer in range(params["depth"]):
                    scored = executor.map(partial(_layer, layout, out, layer), shards, setup=load,
                                          label=f"graph layer {layer + 1} of {params['depth']}")
            finish_parts(out / "customers", [part_name(k) for k in range(len(layout.left))],
                         [s.rows for s in scored if s.side == LEFT])
            empty = wide_scores(pd.Series([], dtype=object), np.zeros((0, len(reader.levels))),
                                np.array(reader.levels))
            graph_shards.collect_right(executor, layout, out / "merchants", empty)
        finally:
            executor.release()
            graph_shards.remove(layout)
    return {"model": config["model"], "levels": list(reader.levels), "customers": counts["left"],
            "merchants": counts["right"], "isolated_customers": counts["isolated_left"],
            "isolated_merchants": counts["isolated_right"], "edges": counts["edges"],
            "customer_parts": len(layout.left), "merchant_parts": len(layout.right), "merchant_buckets": layout.buckets,
            "mean_customer_response": _means(scored, LEFT), "mean_merchant_response": _means(scored, RIGHT)}


def _layout(customers: Path, merchants: Path, edges: Path, out: Path) -> GraphLayout:
    left, edge_parts, right = list_parts(customers), list_parts(edges), list_parts(merchants)
    check_paired(customers, edges, left, edge_parts)
    buckets = graph_shards.bucket_count(sum(map(_rows, right)), sum(map(_rows, edge_parts)))
    return GraphLayout(str(out / ".graph"), tuple(map(str, left)), tuple(map(str, edge_parts)),
                       tuple(map(str, right)), buckets, MERCHANT, "merchants")


def check_paired(customers, edges, left: list, edge_parts: list) -> None:
    """A one-line error unless the ``edges`` have as many parts (``edge_parts``) as the ``customers`` (``left``)."""
    if len(edge_parts) != len(left):
        raise DataError(f"{edges}: {len(edge_parts)} parts, but {customers} has {len(left)}: in parts, the edges are "
                        "co-partitioned with the customers (part k of the edges holds the edges of part k's customers)")


def _rows(path: Path) -> int:
    """A table's rows: a Parquet part's from its footer; a CSV (a table of one part) read."""
    rows = parquet_rows(path)
    return len(read_file(path)) if rows is None else rows


def _means(scored: list[ShardScores], side: str) -> list[float]:
    mine = [s for s in scored if s.side == side]
    rows = sum(s.rows for s in mine)
    return [round(sum(s.sums[j] for s in mine) / rows, 6) if rows else float("nan")
            for j in range(len(mine[0].sums))]


# ------------------------------------------------------------------------------------------------ per shard


def _nodes(reader: PartReader, shard: Shard) -> pd.DataFrame:
    if shard.side == LEFT:
        return reader.customer_nodes(shard.index)
    return graph_shards.right_nodes(reader.layout, shard.index)


def _inputs(reader: PartReader, out: Path, model: IncentiveModel, shard: Shard) -> ShardScores | None:
    """The shard's encoded features and structure; without a history to pull, on to the representation."""
    layout, side = reader.layout, SIDE[shard.side]
    nodes = _nodes(reader, shard)
    edges = graph_shards.shard_edges(layout, shard)
    prior = prior_shares(nodes) if side == "merchant" else None
    structure = structure_frame(edges, NODE, len(nodes), reader.edge_features, prior)
    encoders = model.encoders_
    with naming(layout.left[shard.index] if shard.side == LEFT else layout.scratch):
        own = own_inputs(getattr(encoders, f"{side}s"), nodes, getattr(encoders, f"{side}_structure"), structure)
    key = CUSTOMER if side == "customer" else MERCHANT
    write_parquet(pd.DataFrame({key: nodes[key].to_numpy()}), layout.folder(shard) / "keys.parquet")
    for name in ("cat", "num", "structure"):
        graph_shards.save_state(layout, shard, name, getattr(own, name).numpy())
    if model.net_.representation in WITH_HISTORY:
        graph_shards.save_state(layout, shard, "aggregated", own.aggregated.numpy())
        return None
    return _advance(layout, out, model, shard, _on_device(model, model.net_.node_features, side, own))


def _on_device(model: IncentiveModel, fn, *args):
    """``fn(*args)``, a step of the model's network, on the model's device (the result on the CPU)."""
    return run_on(model.net_, model.train_config.device, fn, *args)


def _history(layout: GraphLayout, out: Path, model: IncentiveModel, shard: Shard) -> ShardScores | None:
    """DNN-H's and the linear floor's inputs: the payment-weighted mean of the neighbours' features and structure."""
    own = _own(layout, shard)
    shard_graph = graph_shards.shard_graph(layout, shard)
    width = int(np.load(layout.state_path(shard, "aggregated"), mmap_mode="r").shape[1])
    source = torch.from_numpy(graph_shards.pull(layout, shard, shard_graph, "aggregated", width))
    own.history = neighbour_mean(source, torch.from_numpy(shard_graph.neighbour), torch.from_numpy(shard_graph.target),
                                 torch.from_numpy(shard_graph.weight), len(own))
    return _advance(layout, out, model, shard, model.net_.node_features(SIDE[shard.side], own))


def _own(layout: GraphLayout, shard: Shard) -> NodeInputs:
    cat, num, structure = (torch.from_numpy(graph_shards.load_state(layout, shard, n)) for n in ("cat", "num", "structure"))
    return NodeInputs(cat, num, structure, torch.empty(0))


@torch.no_grad()
def _advance(layout: GraphLayout, out: Path, model: IncentiveModel, shard: Shard, x: torch.Tensor
             ) -> ShardScores | None:
    """From x: the GNN's first states, kept for its layers; or, without a GNN, the scores."""
    states = _on_device(model, model.net_.first_states, SIDE[shard.side], x)
    if model.net_.representation != "gnn":
        return _score(layout, out, model, shard, states)
    graph_shards.save_state(layout, shard, "h0", states.numpy())
    return None


@torch.no_grad()
def _layer(layout: GraphLayout, out: Path, layer: int, model: IncentiveModel, shard: Shard) -> ShardScores | None:
    """GNN layer ``layer`` on the shard's nodes from its neighbours' states; the scores after the last layer."""
    own = torch.from_numpy(graph_shards.load_state(layout, shard, f"h{layer}"))
    shard_graph = graph_shards.shard_graph(layout, shard)
    source = torch.from_numpy(graph_shards.pull(layout, shard, shard_graph, f"h{layer}", own.shape[1]))
    states = _on_device(model, model.net_.gnn.layer, layer, SIDE[shard.side], source, own,
                        torch.from_numpy(shard_graph.ptr), torch.from_numpy(shard_graph.neighbour),
                        torch.from_numpy(shard_graph.weight))
    if layer == len(model.net_.gnn.to_customer) - 1:
        return _score(layout, out, model, shard, states)
    graph_shards.save_state(layout, shard, f"h{layer + 1}", states.numpy())
    return None


@torch.no_grad()
def _score(layout: GraphLayout, out: Path, model: IncentiveModel, shard: Shard, states: torch.Tensor) -> ShardScores:
    """The heads on the shard's final states, written as score rows of the wide layout."""
    side = SIDE[shard.side]

    def responses(states: torch.Tensor) -> list[torch.Tensor]:
        return [model.net_.heads(side, states[i:i + HEAD_ROWS])["response"] for i in range(0, len(states), HEAD_ROWS)]

    pieces = _on_device(model, responses, states)
    response = (torch.cat(pieces) if pieces else states.new_zeros(0, len(model.levels_))).numpy().astype(np.float64)
    if shard.side == LEFT and model.recalibration_ is not None:  # as IncentiveModel.responses applies it
        response = model.recalibrated(response)
    if shard.side == RIGHT and not model.merchants_trained:
        response[:] = np.nan
    keys = pd.read_parquet(layout.folder(shard) / "keys.parquet").iloc[:, 0]
    scores = wide_scores(keys, response, model.levels_)
    if shard.side == LEFT:
        write_part(scores, out / "customers", shard.index)
    else:
        graph_shards.write_right_output(layout, shard.index, graph_shards.right_nodes(layout, shard.index), scores)
    return ShardScores(shard.side, len(scores), tuple(response.sum(axis=0).tolist()))

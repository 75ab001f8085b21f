"""A bipartite graph in shards (``promokit.data.graph_shards``): each shard's complete neighbourhoods and the rows it
pulls from the other side, against a hand-made graph."""

import numpy as np
import pandas as pd
import pytest

from promokit.data import graph_shards
from promokit.data.graph_shards import LEFT, RIGHT, GraphLayout, Shard
from promokit.scale.executor import LocalExecutor

# left parts: [a, b] and [c]; right nodes: x, y, z (in two parts); edges in input order
LEFT_PARTS = [pd.DataFrame({"id": ["a", "b"]}), pd.DataFrame({"id": ["c"]})]
EDGE_PARTS = [pd.DataFrame({"id": ["a", "b", "a"], "right_key": ["y", "x", "x"], "weight": [1.0, 2.0, 3.0]}),
              pd.DataFrame({"id": ["c"], "right_key": ["y"], "weight": [4.0]})]
RIGHT_PARTS = [pd.DataFrame({"rid": ["z", "x"]}), pd.DataFrame({"rid": ["y"]})]


def _left(k):
    nodes, edges = LEFT_PARTS[k], EDGE_PARTS[k]
    return nodes, edges.assign(node=pd.Index(nodes.id).get_indexer(edges.id)).drop(columns="id")


def _right(q):
    return RIGHT_PARTS[q]


@pytest.fixture(params=[1, 3])
def layout(request, tmp_path):
    layout = GraphLayout(str(tmp_path / "g"), ("l0", "l1"), ("e0", "e1"), ("r0", "r1"), request.param, "rid",
                         "right")
    counts = graph_shards.prepare(LocalExecutor(), _left, _right, layout)
    assert counts == {"left": 3, "right": 3, "edges": 4, "isolated_left": 0, "isolated_right": 1}
    return layout


def _neighbour_sums(layout, shard, states):
    """Σ weight · state of the neighbours, per node of ``shard``, through the shard's graph and pull."""
    for other in layout.shards():
        if other.side != shard.side:
            graph_shards.save_state(layout, other, "s", states[other])
    g = graph_shards.shard_graph(layout, shard)
    source = graph_shards.pull(layout, shard, g, "s", 1)
    sums = np.zeros(g.n)
    np.add.at(sums, g.target, g.weight * source[g.neighbour, 0])
    return sums


def test_left_parts_see_their_complete_neighbourhoods(layout):
    value = {"x": 10.0, "y": 100.0, "z": 1000.0}
    states = {}
    for b in range(layout.buckets):
        nodes = graph_shards.right_nodes(layout, b)
        states[Shard(RIGHT, b)] = np.array([[value[r]] for r in nodes.rid], dtype=np.float32).reshape(-1, 1)
    assert _neighbour_sums(layout, Shard(LEFT, 0), states).tolist() == [1 * 100 + 3 * 10, 2 * 10]  # a, b
    assert _neighbour_sums(layout, Shard(LEFT, 1), states).tolist() == [4 * 100]  # c


def test_buckets_see_their_complete_neighbourhoods(layout):
    states = {Shard(LEFT, 0): np.array([[1.0], [10.0]], np.float32), Shard(LEFT, 1): np.array([[100.0]], np.float32)}
    found = {}
    for b in range(layout.buckets):
        nodes = graph_shards.right_nodes(layout, b)
        sums = _neighbour_sums(layout, Shard(RIGHT, b), states)
        found.update(zip(nodes.rid, sums))
        edges = graph_shards.shard_edges(layout, Shard(RIGHT, b))
        assert edges.node.is_monotonic_increasing
    assert found == {"x": 2 * 10 + 3 * 1, "y": 1 * 1 + 4 * 100, "z": 0.0}


def test_right_outputs_go_back_to_their_parts_in_order(layout, tmp_path):
    for b in range(layout.buckets):
        nodes = graph_shards.right_nodes(layout, b)
        graph_shards.write_right_output(layout, b, nodes, pd.DataFrame({"rid": nodes.rid, "score": nodes.rid.str.upper()}))
    graph_shards.collect_right(LocalExecutor(), layout, tmp_path / "out", pd.DataFrame({"rid": [], "score": []}))
    for q, part in enumerate(RIGHT_PARTS):
        written = pd.read_parquet(tmp_path / "out" / f"part-{q:05d}.parquet")
        assert written.rid.tolist() == part.rid.tolist() and written.score.tolist() == part.rid.str.upper().tolist()

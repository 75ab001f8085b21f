"""The GNN models without merchants: on a customer–customer graph (homogeneous message passing over the customers) and
on a customer–item graph (items in the merchants' place in message passing, with no merchant semantics)."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from torch_geometric.nn import GraphConv
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.incentive.parts import predict_parts
from promokit.incentive.workflows import predict
from promokit.nn.bipartite import BipartiteGNN, BipartiteGraph, sample_neighbours
from promokit.training import TrainConfig

FAST = TrainConfig(epochs=10, batch_size=256, lr=3e-3, patience=3, progress=False)
NET = {"hidden": [32, 16], "emb_dim": 4, "width": 32, "fanouts": [5, 5]}
GRAPH_TABLE = {"customers": "customer_edges", "items": "item_edges"}


def neighbour_world(kind: str, n: int = 2000, degree: int = 5, n_items: int = 150, seed: int = 0):
    """Customers whose redemption depends on their neighbours' features, not on their own: on ``customers``, the
    mean feature ``s`` of the customers each one links to (undirected); on ``items``, the mean feature ``q`` of the
    items each one bought. Without the graph only the weak own feature ``x`` and the level are left to learn from."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"c{i}" for i in range(n)])
    x, s = rng.normal(size=n), rng.normal(size=n)
    source = np.repeat(np.arange(n), degree)
    tables = {}
    if kind == "customers":
        target = (source + rng.integers(1, n, len(source))) % n  # never the customer itself
        both_from, both_to = np.concatenate([source, target]), np.concatenate([target, source])
        signal = np.bincount(both_to, weights=s[both_from], minlength=n) / np.bincount(both_to, minlength=n)
        tables["customer_edges"] = pd.DataFrame({"customer_id": ids[source], "neighbour_id": ids[target]})
    else:
        q = rng.normal(size=n_items)
        items = np.array([f"i{k}" for k in range(n_items)])
        bought = rng.integers(0, n_items, len(source))
        signal = np.bincount(source, weights=q[bought], minlength=n) / degree
        tables["item_edges"] = pd.DataFrame({"customer_id": ids[source], "item_id": items[bought]})
        tables["items"] = pd.DataFrame({"item_id": items, "q": q})
    level = rng.choice([1.0, 2.0, 3.0], n)
    logit = -1.0 + 0.8 * (level - 2) + 1.8 * signal / signal.std() + 0.3 * x
    redeemed = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    tables["customers"] = pd.DataFrame({"customer_id": ids, "level": level, "redeemed": redeemed, "x": x, "s": s})
    return tables


@pytest.fixture(scope="module", params=["customers", "items"])
def fitted(request):
    """The world of one graph kind, gnn-hazard on its graph and dnn-h on its customers alone, a quarter held out."""
    tables = neighbour_world(request.param)
    gnn = IncentiveModel("gnn-hazard", NET, FAST, test_fraction=0.25).fit(tables)
    graphless = IncentiveModel("dnn-h", NET, FAST, test_fraction=0.25).fit({"customers": tables["customers"]})
    return request.param, tables, gnn, graphless


def test_customer_edges_go_both_ways_and_items_default_to_the_ids_of_their_edges():
    customers = pd.DataFrame({"customer_id": ["a", "b", "c"], "level": [1, 2, 1], "redeemed": [0, 1, 1]})
    tables = check_tables(customers, customer_edges=pd.DataFrame({"customer_id": ["a", "b"], "neighbour_id": ["b", "c"],
                                                                  "weight": [1.0, 3.0]}))
    assert tables.graph == "customers" and not tables.customers_only and len(tables.merchants) == 0
    assert tables.edges[["customer", "neighbour", "weight"]].values.tolist() == [[0, 1, 1], [1, 2, 3], [1, 0, 1],
                                                                                [2, 1, 3]]
    assert tables.counts["edges"] == 2 and tables.counts["isolated_customers"] == 0
    tables = check_tables(customers, item_edges=pd.DataFrame({"customer_id": ["a", "c", "a"],
                                                              "item_id": ["x", "y", "y"]}))
    assert tables.graph == "items" and tables.items["item_id"].tolist() == ["x", "y"] and len(tables.merchants) == 0
    assert tables.edges[["customer", "item"]].values.tolist() == [[0, 0], [2, 1], [0, 1]]
    assert tables.counts["isolated_customers"] == 1 and tables.item_spec.features == []


def test_the_homogeneous_block_is_graphconv_on_the_customer_graph_in_training_and_scoring():
    torch.manual_seed(0)
    edge_from, edge_to, weight = torch.tensor([0, 1, 1, 3]), torch.tensor([1, 2, 3, 2]), torch.tensor([1., 2., 1., 3.])
    both = (torch.cat([edge_from, edge_to]), torch.cat([edge_to, edge_from]), torch.cat([weight, weight]))
    graph = BipartiteGraph.from_edges(both[0], both[1], 5, 5, weight=both[2])   # node 4 has no edges
    block = BipartiteGNN(3, 3, width=4, depth=1, conv="graph", homogeneous=True)
    x = torch.randn(5, 3)
    h = block.customer_in(x)
    # eq. 1 on the homogeneous graph: h_i W_root + sum_j w_ij / sum_k w_ik h_j W, by PyG's GraphConv
    reference = GraphConv(4, 4, aggr="add")
    reference.load_state_dict(block.to_customer[0].state_dict())
    norm = both[2] / torch.zeros(5).index_add_(0, both[0], both[2])[both[0]]   # per destination both[0]
    expected = reference(h, torch.stack([both[1], both[0]]), edge_weight=norm)
    states = block.inference(x, x, graph)
    torch.testing.assert_close(states.customers, expected)
    torch.testing.assert_close(states.merchants, expected)
    assert not any(key.startswith(("merchant_in", "to_merchant")) for key in block.state_dict())
    deep = BipartiteGNN(3, 3, width=4, depth=2, conv="graph", homogeneous=True).eval()
    seeds = torch.tensor([2, 4, 0])
    sub = sample_neighbours(graph, seeds, torch.empty(0, dtype=torch.long), (-1, -1))
    trained = deep(x[sub.customers], x[sub.merchants], sub).customers
    torch.testing.assert_close(trained, deep.inference(x, x, graph).customers[seeds])


def test_the_gnn_on_the_graph_beats_dnn_h_without_it_on_held_out_customers(fitted):
    kind, tables, gnn, graphless = fitted
    # each selected model's, scored before the refit learnt the held-out customers
    metrics = gnn.held_out_evaluation(tables).metrics
    own_auc = graphless.held_out_evaluation({"customers": tables["customers"]}).metrics["auc_c"]
    # measured: customers 0.779 vs 0.627, items 0.837 vs 0.624 (the true curves: 0.841, 0.862)
    assert metrics["auc_c"] > own_auc + 0.08, (kind, metrics["auc_c"], own_auc)
    assert "mae_m" not in metrics and "merchants" not in metrics


def test_a_saved_model_scores_the_customers_of_its_graph_and_asks_for_it(fitted, tmp_path):
    kind, tables, gnn, _ = fitted
    gnn.save(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["graph"] == kind and config["customers_only"] is False
    loaded = IncentiveModel.load(tmp_path / "model")
    scores = loaded.predict(tables)
    pd.testing.assert_frame_equal(scores, gnn.predict(tables))
    assert len(scores) == len(tables["customers"]) and np.isfinite(scores.iloc[:, 1:].to_numpy()).all()
    customers, merchants = loaded.score_tables(tables)
    assert len(customers) == len(tables["customers"]) and len(merchants) == 0   # items are no merchants
    with pytest.raises(DataError, match=f"^the model was fit on a customer–{kind[:-1]} graph: give its "
                                        f"{GRAPH_TABLE[kind]}"):
        loaded.predict({"customers": tables["customers"]})
    with pytest.raises(DataError, match=f"was fit on a customer–{kind[:-1]} graph; scoring in parts serves "
                                        "customer–merchant graphs"):
        predict_parts(tmp_path / "model", tmp_path, tmp_path, tmp_path, tmp_path / "scores", executor=None)
    with pytest.raises(DataError, match=f"^`customers` {tmp_path} is in parts: scoring in parts serves a "
                                        f"customer–merchant graph; score a graph of {GRAPH_TABLE[kind]} as one table"):
        predict(tmp_path / "model", tmp_path, None, None, tmp_path / "scores", graph={GRAPH_TABLE[kind]: tmp_path})


def test_a_shuffled_graph_is_scored_by_its_ids(fitted):
    _, tables, gnn, _ = fitted
    shuffled = dict(tables, customers=tables["customers"].iloc[::-1])
    scores = gnn.predict(shuffled).set_index("customer_id").loc[tables["customers"]["customer_id"]]
    np.testing.assert_allclose(scores.to_numpy(), gnn.predict(tables).iloc[:, 1:].to_numpy(), atol=1e-5)


CUSTOMERS = pd.DataFrame({"customer_id": ["a", "b", "c"], "level": [1, 2, 1], "redeemed": [0, 1, 1]})


@pytest.mark.parametrize("tables, message", [
    ({"customer_edges": pd.DataFrame({"customer_id": ["a", "b"], "neighbour_id": ["b", "z"]})},
     (r"^customer_edges: column 'neighbour_id' has 1 values in 2 rows that are not in the customers table, e\.g\. "
      r"row 1 \{customer_id='b', neighbour_id='z'\}$")),
    ({"customer_edges": pd.DataFrame({"customer_id": ["a", "b"], "neighbour_id": ["b", "b"]})},
     r"^customer_edges: 1 of 2 rows link a customer to itself, e\.g\. row 1 \{customer_id='b', neighbour_id='b'\}"),
    ({"customer_edges": pd.DataFrame({"customer_id": ["a"], "friend_id": ["b"]})},
     r"^customer_edges: column 'neighbour_id' .*is missing"),
    ({"item_edges": pd.DataFrame({"customer_id": ["a", "q"], "item_id": ["x", "y"]})},
     r"^item_edges: column 'customer_id' has 1 values in 2 rows that are not in the customers table, e\.g\. row 1"),
    ({"item_edges": pd.DataFrame({"customer_id": ["a", "b"], "item_id": ["x", "w"]}),
      "items": pd.DataFrame({"item_id": ["x", "y"]})},
     r"^item_edges: column 'item_id' has 1 values in 2 rows that are not in the items table, e\.g\. row 1 "),
    ({"item_edges": pd.DataFrame({"customer_id": ["a"], "item_id": [None]})},
     r"^item_edges: column 'item_id' has 1 missing values in 1 rows"),
    ({"items": pd.DataFrame({"item_id": ["x"]})},
     r"^the items table needs the item_edges table linking them to the customers$"),
    ({"item_edges": pd.DataFrame({"customer_id": ["a"], "item_id": ["x"]}),
      "customer_edges": pd.DataFrame({"customer_id": ["a"], "neighbour_id": ["b"]})},
     r"^give one graph for the customers, not both item_edges and customer_edges$"),
    ({"customer_edges": pd.DataFrame({"customer_id": ["a"], "neighbour_id": ["b"], "weight": ["heavy"]})},
     r"^customer_edges: column 'weight' has 1 missing, non-numeric or infinite values in 1 rows"),
])
def test_a_broken_graph_is_one_line_naming_the_table_and_row(tables, message):
    with pytest.raises(DataError, match=message):
        check_tables(CUSTOMERS, **tables)


def test_the_command_line_trains_on_each_graph_and_names_a_dangling_id(tmp_path):
    runner = CliRunner()
    params = ["--params", json.dumps({"hidden": [8, 4], "width": 8, "fanouts": [3, 3]}), "--epochs", "1"]
    for kind in ("customers", "items"):
        tables = neighbour_world(kind, n=300)
        paths = {name: tmp_path / f"{kind}_{name}.csv" for name in tables}
        for name, frame in tables.items():
            frame.to_csv(paths[name], index=False)
        graph = (["--customer-edges", str(paths["customer_edges"])] if kind == "customers" else
                 ["--item-edges", str(paths["item_edges"]), "--items", str(paths["items"])])
        result = runner.invoke(app, ["incentive", "train", "--customers", str(paths["customers"]), *graph,
                                     "--out", str(tmp_path / kind), *params])
        assert result.exit_code == 0, result.output
        assert f"graph: 1,500 customer–{kind[:-1]} edges" in " ".join(result.output.split()), result.output
        result = runner.invoke(app, ["incentive", "predict", "--model", str(tmp_path / kind), "--customers",
                                     str(paths["customers"]), *graph, "--out", str(tmp_path / f"{kind}_scores")])
        assert result.exit_code == 0 and "--merchants" not in result.output, result.output
        assert sorted(p.name for p in (tmp_path / f"{kind}_scores").iterdir()) == ["customers.parquet", "summary.json"]
    edges = pd.DataFrame({"customer_id": ["c1", "c2"], "neighbour_id": ["c3", "nobody"]})
    edges.to_csv(tmp_path / "dangling.csv", index=False)
    result = runner.invoke(app, ["incentive", "train", "--customers", str(tmp_path / "customers_customers.csv"),
                                 "--customer-edges", str(tmp_path / "dangling.csv"), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert " ".join(result.output.split()) == (
        "error: customer_edges: column 'neighbour_id' has 1 values in 2 rows that are not in the customers table, "
        "e.g. row 1 {customer_id='c2', neighbour_id='nobody'}")

"""``incentive predict`` over a graph in parts (customers and their edges co-partitioned, merchants in parts): the
one-folder scores shard by shard, layer by layer, on the local executor and on Ray, into ``allocate budget``; bad
layouts as one-line errors naming the file."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from conftest import spoil
from promokit.cli import app
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.training import TrainConfig

torch.set_num_threads(1)
runner = CliRunner()
PART_CUSTOMERS = [250, 0, 200, 150]  # customers per part; part 1 is empty
MERCHANT_PARTS = [30, 0, 30]
SMALL = {"width": 8, "hidden": [8, 8], "emb_dim": 4}
MODELS = {"gnn-graph": ("gnn-hazard", {}), "gnn-gat": ("gnn-hazard", {"conv": "gat"}),
          "gnn-sage-3": ("gnn-hazard", {"conv": "sage", "depth": 3, "fanouts": [4, 4, 4]}),
          "dnn-h": ("dnn-h", {}), "lr": ("lr", {})}


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def world():
    return make_world(600, 60, seed=5)


@pytest.fixture(scope="module")
def models(world, tmp_path_factory):
    tables = check_tables(world.customers, world.merchants, world.edges)
    root = tmp_path_factory.mktemp("models")
    for name, (model, params) in MODELS.items():
        settings = {} if model == "lr" else {**SMALL, **params}
        IncentiveModel(model, settings, TrainConfig(epochs=1, batch_size=256, progress=False)).fit(tables).save(
            root / name)
    return root


@pytest.fixture(scope="module")
def data(world, tmp_path_factory):
    """The world's customers shuffled into the parts of PART_CUSTOMERS with their edges (``parts/``), the
    merchants shuffled into MERCHANT_PARTS, and ``whole/``: each table the concatenation of its parts."""
    root = tmp_path_factory.mktemp("incentive-parts")
    owner = np.repeat(np.arange(len(PART_CUSTOMERS)), PART_CUSTOMERS)[
        np.random.default_rng(0).permutation(len(world.customers))]
    part_of = dict(zip(world.customers.customer_id, owner))
    (root / "whole").mkdir()
    for name, table in (("customers", world.customers), ("edges", world.edges)):
        pieces = [table[table.customer_id.map(part_of) == k] for k in range(len(PART_CUSTOMERS))]
        _write(pieces, root / "parts" / name, root / "whole" / f"{name}.parquet")
    merchants = world.merchants.sample(frac=1.0, random_state=2)
    bounds = np.cumsum([0, *MERCHANT_PARTS])
    _write([merchants.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])], root / "parts" / "merchants",
           root / "whole" / "merchants.parquet")
    return root


def _write(pieces, folder, whole):
    folder.mkdir(parents=True)
    for k, piece in enumerate(pieces):
        piece.to_parquet(folder / f"part-{k:05d}.parquet", index=False)
    pd.concat(pieces, ignore_index=True).to_parquet(whole, index=False)


def _predict(model, folder, out, *extra, layout="parts"):
    tables = ("customers", "merchants", "edges")
    paths = [folder / name if layout == "parts" else folder / f"{name}.parquet" for name in tables]
    return _invoke("incentive", "predict", "--model", model, "--customers", paths[0], "--merchants", paths[1],
                   "--edges", paths[2], "--out", out, *extra)


@pytest.fixture(scope="module")
def predicted(data, models):
    """Each model's predict of the whole tables and, on the local executor, of the parts."""
    for name in MODELS:
        for layout in ("whole", "parts"):
            result = _predict(models / name, data / layout, data / f"out-{name}-{layout}", layout=layout)
            assert result.exit_code == 0, result.output
    return data


def _largest_difference(parts: pd.DataFrame, whole: pd.DataFrame) -> float:
    aligned = whole.set_index("user_id").loc[parts.user_id]
    return float(np.abs(aligned.to_numpy() - parts.drop(columns="user_id").to_numpy()).max())


@pytest.mark.parametrize("name", list(MODELS))
def test_parts_score_as_the_whole_graph(predicted, name):
    """Every part's scores are the one-folder scores of its nodes, in the part's row order, for the GNN with each
    convolution (GraphConv, GAT, a 3-layer SAGE), DNN-H's neighbour history and the linear floor."""
    data = predicted
    for table, key, sizes in (("customers", "customer_id", PART_CUSTOMERS), ("merchants", "merchant_id", MERCHANT_PARTS)):
        whole = pd.read_parquet(data / f"out-{name}-whole" / f"{table}.parquet")
        for k, size in enumerate(sizes):
            part = pd.read_parquet(data / f"out-{name}-parts" / table / f"part-{k:05d}.parquet")
            source = pd.read_parquet(data / "parts" / table / f"part-{k:05d}.parquet")
            assert part.user_id.tolist() == source[key].tolist()
            assert list(part.columns) == list(whole.columns)
            if size:
                assert _largest_difference(part, whole) <= 1e-6
    summary = json.loads((data / f"out-{name}-parts" / "summary.json").read_text())
    assert (summary["customers"], summary["merchants"]) == (600, 60)
    assert summary["customer_parts"] == len(PART_CUSTOMERS) and summary["merchant_parts"] == len(MERCHANT_PARTS)
    whole_summary = json.loads((data / f"out-{name}-whole" / "summary.json").read_text())
    for field in ("isolated_customers", "isolated_merchants"):
        assert summary[field] == whole_summary[field]
    assert np.allclose(summary["mean_customer_response"], whole_summary["mean_customer_response"], atol=2e-6)
    assert not (data / f"out-{name}-parts" / ".graph").exists()  # the shards' scratch is removed


def test_ray_predict_equals_local(ray_cluster, predicted, models):
    data = predicted
    out = data / "out-ray"
    result = _predict(models / "gnn-gat", data / "parts", out, "--executor", "ray", "--address", ray_cluster.address,
                      "--workers", 2)
    assert result.exit_code == 0, result.output
    for table, sizes in (("customers", PART_CUSTOMERS), ("merchants", MERCHANT_PARTS)):
        for k in range(len(sizes)):
            ray_part, local_part = (pd.read_parquet(o / table / f"part-{k:05d}.parquet")
                                    for o in (out, data / "out-gnn-gat-parts"))
            pd.testing.assert_frame_equal(ray_part, local_part)


def test_parts_scores_allocate_like_the_whole(predicted, tmp_path):
    """The scores in parts go straight into allocate budget (with merchants) and give the one-folder λ*."""
    data = predicted
    lam = {}
    for layout in ("whole", "parts"):
        scores = data / f"out-gnn-graph-{layout}"
        suffix = ".parquet" if layout == "whole" else ""
        result = _invoke("allocate", "budget", "--scores", scores / f"customers{suffix}", "--merchants",
                         scores / f"merchants{suffix}", "--ratio", 100, "--out", tmp_path / layout)
        assert result.exit_code == 0, result.output
        lam[layout] = json.loads((tmp_path / layout / "report.json").read_text())["lam"]
    assert lam["parts"] == pytest.approx(lam["whole"], rel=1e-5)


def _copy_parts(data, tmp_path):
    import shutil

    shutil.copytree(data / "parts", tmp_path / "parts")
    return tmp_path / "parts"


def _edit(path, edit):
    edit(pd.read_parquet(path)).to_parquet(path, index=False)


def _text(column, row):
    """A numeric column stored as text, with a word at ``row``."""
    return lambda t: t.assign(**{column: t[column].astype(str).where(t.index != row, "abc")})


def _move_edge(parts):
    """Part 0's edges gain an edge of part 2's customers."""
    moved = pd.read_parquet(parts / "edges" / "part-00002.parquet").iloc[:1]
    _edit(parts / "edges" / "part-00000.parquet", lambda t: pd.concat([t, moved], ignore_index=True))


def _repeat_merchant(parts):
    first = pd.read_parquet(parts / "merchants" / "part-00000.parquet").iloc[3:4]
    _edit(parts / "merchants" / "part-00002.parquet", lambda t: pd.concat([t, first], ignore_index=True))


@pytest.mark.parametrize("break_it, message", [
    (lambda p: (p / "edges" / "part-00003.parquet").unlink(), "edges: 3 parts, but .*customers has 4: in parts, "
                                                             "the edges are co-partitioned with the customers"),
    (_move_edge, r"customers/part-00000.parquet with .*edges/part-00000.parquet: edges: column 'customer_id' has 1 "
                 r"values .* not in this part's customers"),
    (lambda p: _edit(p / "edges" / "part-00002.parquet", spoil("merchant_id", 4, "m-unknown")),
     r"edges/part-00002.parquet: column 'merchant_id' has values that are not in the merchants table, e.g. row 4 "
     r"\{merchant_id='m-unknown'\}"),
    (_repeat_merchant, r"merchant_id '\w+' is in .*merchants/part-00000.parquet \(row 3\) and "
                       r".*merchants/part-00002.parquet \(row 30\)"),
    (lambda p: _edit(p / "customers" / "part-00002.parquet", _text("c_x0", 3)),
     r"customers/part-00002.parquet: numeric column 'c_x0' has 1 non-numeric values in 200 rows, e.g. row 3"),
    (lambda p: _edit(p / "merchants" / "part-00002.parquet", _text("m_x1", 5)),
     r"merchants/part-00002.parquet: numeric column 'm_x1' has 1 non-numeric values in 30 rows, e.g. row 5"),
    (lambda p: _edit(p / "edges" / "part-00000.parquet", spoil("weight", 2, np.inf)),
     r"edges/part-00000.parquet: edges: column 'weight' has 1 missing, non-numeric or infinite values"),
    (lambda p: _edit(p / "customers" / "part-00003.parquet", lambda t: t.drop(columns="c_x1")),
     r"customers/part-00003.parquet .*: customers: column 'c_x1' \(customers column\) is missing"),
    (lambda p: [_edit(f, lambda t: t.iloc[:0]) for name in ("customers", "edges")
                for f in (p / name).glob("*.parquet")], r"customers: the table has no rows in its 4 parts"),
])
def test_bad_parts_are_one_line_errors(predicted, models, tmp_path, break_it, message):
    parts = _copy_parts(predicted, tmp_path)
    break_it(parts)
    result = _predict(models / "gnn-graph", parts, tmp_path / "out")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert text.startswith("error: ") and "Traceback" not in text
    assert re.search(message, text), text
    assert not (tmp_path / "out" / ".graph").exists()


def test_merchants_in_several_buckets(predicted, models, monkeypatch, tmp_path):
    """With 16 merchants a bucket, the 60 merchants spread over 4 buckets: the same scores."""
    from promokit.data import graph_shards

    monkeypatch.setattr(graph_shards, "RIGHT_ROWS_PER_BUCKET", 16)
    result = _predict(models / "gnn-sage-3", predicted / "parts", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["merchant_buckets"] == 4
    for table, sizes in (("customers", PART_CUSTOMERS), ("merchants", MERCHANT_PARTS)):
        for k in range(len(sizes)):
            pd.testing.assert_frame_equal(
                pd.read_parquet(tmp_path / "out" / table / f"part-{k:05d}.parquet"),
                pd.read_parquet(predicted / "out-gnn-sage-3-parts" / table / f"part-{k:05d}.parquet"))


def test_predict_needs_an_executor_for_a_graph_in_parts(models, data, tmp_path):
    from promokit.data import DataError
    from promokit.incentive.workflows import predict

    parts = data / "parts"
    with pytest.raises(DataError, match=r"^`customers` .* is a graph in parts: give the `executor` that scores it$"):
        predict(models / "lr", parts / "customers", parts / "merchants", parts / "edges", tmp_path / "s")

"""Training records of the incentive GNN over a graph in parts (AGL-style neighbourhoods): generated over 3 parts
they are the in-memory keyed sampler's neighbourhoods, node and edge features joined; read back, a BipartiteGNN
computes the same seed states; a dangling edge names its file and row; Ray gives the local records."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from promokit.data.errors import DataError
from promokit.data.graph_shards import LEFT
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.inputs import InputEncoders
from promokit.incentive.models.network import IncentiveNet
from promokit.incentive.record_batches import read_batch
from promokit.incentive.records import RecordSpec, write_records
from promokit.nn.bipartite import BipartiteGNN, sample_neighbours
from promokit.nn.graph_records import ShardAdjacency, resident_mb
from promokit.nn.keyed_sampling import MERCHANT, keyed_offsets, node_keys, sample_keyed
from promokit.scale.executor import LocalExecutor, make_executor

torch.set_num_threads(1)
PART_CUSTOMERS = [120, 100, 80]
FANOUTS = (3, 4)
DRAWS = (0, 1)


def _recency(edges: pd.DataFrame) -> np.ndarray:
    """An edge feature that is a function of the edge's ends, so that a drawn edge's value can be checked."""
    c = edges.customer_id.str[1:].astype(int).to_numpy()
    m = edges.merchant_id.str[1:].astype(int).to_numpy()
    return ((c * 31 + m) % 97).astype(float)


@pytest.fixture(scope="module")
def world():
    world = make_world(300, 30, seed=5)
    unlabelled = np.random.default_rng(1).random(300) < 0.3  # message passers only
    world.customers.loc[unlabelled, ["redeemed", "level"]] = np.nan
    world.edges["recency"] = _recency(world.edges)
    return world


def _write(pieces, folder, whole):
    folder.mkdir(parents=True)
    for k, piece in enumerate(pieces):
        piece.to_parquet(folder / f"part-{k:05d}.parquet", index=False)
    pd.concat(pieces, ignore_index=True).to_parquet(whole, index=False)


@pytest.fixture(scope="module")
def data(world, tmp_path_factory):
    """The customers shuffled into PART_CUSTOMERS with their edges, the merchants into 2 parts, and the whole tables."""
    root = tmp_path_factory.mktemp("records")
    owner = np.repeat(np.arange(3), PART_CUSTOMERS)[np.random.default_rng(0).permutation(300)]
    part_of = dict(zip(world.customers.customer_id, owner))
    (root / "whole").mkdir()
    for name, table in (("customers", world.customers), ("edges", world.edges)):
        _write([table[table.customer_id.map(part_of) == k] for k in range(3)], root / "parts" / name,
               root / "whole" / f"{name}.parquet")
    merchants = world.merchants.sample(frac=1.0, random_state=2)
    _write([merchants.iloc[:12], merchants.iloc[12:]], root / "parts" / "merchants", root / "whole" / "merchants.parquet")
    return root


@pytest.fixture(scope="module")
def whole(data):
    tables = check_tables(*(pd.read_parquet(data / "whole" / f"{n}.parquet") for n in ("customers", "merchants",
                                                                                      "edges")))
    encoders = InputEncoders.fit(tables)
    return tables, encoders, encoders.transform(tables)


def _generate(data, whole, out, executor=None, draws=DRAWS):
    tables, encoders, _ = whole
    spec = RecordSpec(tuple(tables.levels), tables.customer_spec, tables.merchant_spec, FANOUTS, seed=7, draws=draws)
    parts = data / "parts"
    summary = write_records(parts / "customers", parts / "merchants", parts / "edges", out, encoders, spec,
                            executor or LocalExecutor())
    return summary, pa.concat_tables([pq.read_table(out / f"part-{k:05d}.parquet") for k in range(3)])


@pytest.fixture(scope="module")
def records(data, whole, tmp_path_factory):
    return _generate(data, whole, tmp_path_factory.mktemp("out"))


def _in_memory(whole, table):
    """The keyed in-memory batch of the records' seeds and draws, on the one-table graph."""
    tables, _, inputs = whole
    row = pd.Index(tables.customers.customer_id).get_indexer(table.column("customer_id").to_pylist())
    return sample_keyed(inputs.graph, node_keys(tables.customers.customer_id), node_keys(tables.merchants.merchant_id),
                        row, FANOUTS, seed=7, epoch=np.asarray(table.column("draw")))


def test_records_equal_the_in_memory_neighbourhoods(whole, records):
    tables, _, inputs = whole
    summary, table = records
    labelled = tables.labelled_customers
    assert table.num_rows == len(labelled) * len(DRAWS)
    assert summary["records"] == table.num_rows + len(tables.merchants) * len(DRAWS)  # every merchant is labelled
    assert sorted(set(table.column("customer_id").to_pylist())) == sorted(tables.customers.customer_id[labelled])
    batch, expected = read_batch(table), _in_memory(whole, table)
    for name in expected._fields:
        got, want = getattr(batch.sub, name), getattr(expected, name)
        assert torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want, name
    sub = batch.sub
    assert sub.customers_per_hop[0] == table.num_rows and sum(sub.merchants_per_hop) > 0
    # unlabelled customers are reached as neighbours (message passers), though no record is theirs
    unlabelled = np.isnan(tables.redeemed)
    assert unlabelled[sub.customers[sub.n_seed_customers:].numpy()].any()
    for got, nodes, index in ((batch.customers, inputs.customers, sub.customers),
                              (batch.merchants, inputs.merchants, sub.merchants)):
        for name in ("cat", "num", "structure"):
            assert torch.equal(getattr(got, name), getattr(nodes, name)[index]), name
    customer_ids = tables.customers.customer_id.to_numpy()
    merchant_ids = tables.merchants.merchant_id.to_numpy()
    for edge_index, edge, src_ids, dst_ids, src_nodes, dst_nodes in (
            (sub.merchant_to_customer, batch.into_customer_edge, merchant_ids, customer_ids, sub.merchants,
             sub.customers),
            (sub.customer_to_merchant, batch.into_merchant_edge, customer_ids, merchant_ids, sub.customers,
             sub.merchants)):
        src, dst = src_ids[src_nodes[edge_index[0]].numpy()], dst_ids[dst_nodes[edge_index[1]].numpy()]
        pairs = pd.DataFrame({"customer_id": src if src_ids is customer_ids else dst,
                              "merchant_id": dst if src_ids is customer_ids else src})
        np.testing.assert_array_equal(edge[:, 1].numpy(), _recency(pairs))
    torch.testing.assert_close(batch.into_customer_edge[:, 0], sub.merchant_to_customer_weight)
    np.testing.assert_array_equal(batch.level.numpy(), tables.customer_level[
        pd.Index(customer_ids).get_indexer(table.column("customer_id").to_pylist())])


def test_merchant_records_equal_the_in_memory_neighbourhoods_of_merchant_seeds(data, whole, tmp_path):
    """The labelled merchants' records (``merchants/`` beside the customers' parts): each its merchant seed's keyed
    neighbourhood (hop 1 reaches customers), with y^m = shares / max(prior_shares, 1) as its label."""
    tables, _, inputs = whole
    summary, _ = _generate(data, whole, tmp_path / "out")
    assert summary["merchant_seeds"] == {"train": len(tables.merchants), "valid": 0, "test": 0}
    table = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out" / "merchants").glob("part-*"))])
    assert table.num_rows == len(tables.merchants) * len(DRAWS)
    row = pd.Index(tables.merchants.merchant_id).get_indexer(table.column("merchant_id").to_pylist())
    want = sample_keyed(inputs.graph, node_keys(tables.customers.customer_id), node_keys(tables.merchants.merchant_id),
                        row, FANOUTS, seed=7, epoch=np.asarray(table.column("draw")), seed_side=MERCHANT)
    batch = read_batch(table)
    for name in want._fields:
        got, expected = getattr(batch.sub, name), getattr(want, name)
        assert torch.equal(got, expected) if isinstance(expected, torch.Tensor) else got == expected, name
    assert batch.sub.n_seed_customers == 0 and batch.sub.n_seed_merchants == table.num_rows
    assert batch.sub.customers_per_hop[1] > 0  # hop 1 reaches the merchants' customers
    assert not batch.seeds_are_customers and batch.labels()["customer"].sum() == 0
    np.testing.assert_allclose(batch.label.numpy(), tables.merchant_target()[row], rtol=1e-6)
    np.testing.assert_array_equal(batch.level.numpy(), tables.merchant_level[row])
    for got, nodes, index in ((batch.customers, inputs.customers, batch.sub.customers),
                              (batch.merchants, inputs.merchants, batch.sub.merchants)):
        for name in ("cat", "num", "structure"):
            assert torch.equal(getattr(got, name), getattr(nodes, name)[index]), name


def test_draws_differ_by_epoch_and_respect_fanouts(records):
    table = records[1]
    batch = read_batch(table)
    sub = batch.sub
    hop1 = sub.customer_to_merchant_per_hop[0]  # nothing reaches merchants at hop 1 from customer seeds
    assert hop1 == 0 and sub.merchant_to_customer_per_hop[1] == 0
    per_seed = np.bincount(sub.merchant_to_customer[1, :sub.merchant_to_customer_per_hop[0]].numpy(),
                           minlength=sub.n_seed_customers)
    assert per_seed.max() <= FANOUTS[0]
    first, second = (read_batch(table.filter(pa.compute.equal(table.column("draw"), d))) for d in DRAWS)
    assert not torch.equal(first.sub.merchants, second.sub.merchants)  # a fresh draw per epoch


def test_one_seed_with_every_neighbour_is_sample_neighbours(whole):
    """With fanouts of -1 nothing is drawn: a record is exactly sample_neighbours' neighbourhood of its seed."""
    tables, _, inputs = whole
    keys = node_keys(tables.customers.customer_id), node_keys(tables.merchants.merchant_id)
    for seed in (0, 17, 123):
        ours = sample_keyed(inputs.graph, *keys, [seed], (-1, -1))
        theirs = sample_neighbours(inputs.graph, torch.tensor([seed]), torch.empty(0, dtype=torch.long), (-1, -1))
        assert torch.equal(ours.customers, theirs.customers) and torch.equal(ours.merchants, theirs.merchants)
        assert ours.customers_per_hop == theirs.customers_per_hop
        for a, b in ((ours.merchant_to_customer, theirs.merchant_to_customer),
                     (ours.customer_to_merchant, theirs.customer_to_merchant)):
            assert sorted(map(tuple, a.T.tolist())) == sorted(map(tuple, b.T.tolist()))


def test_keyed_draw_is_a_uniform_subset():
    keys = np.arange(20_000, dtype=np.uint64)
    offsets = keyed_offsets(keys, np.full(20_000, 10), 3, seed=1, epoch=np.zeros(20_000, np.int64), hop=1, side=0)
    assert all(len(set(row)) == 3 for row in offsets[:200].tolist())
    share = np.bincount(offsets.ravel(), minlength=10) / offsets.size
    np.testing.assert_allclose(share, 0.1, atol=0.01)
    again = keyed_offsets(keys[::-1], np.full(20_000, 10), 3, 1, np.zeros(20_000, np.int64), 1, 0)[::-1]
    np.testing.assert_array_equal(offsets, again)  # a node's draw does not depend on the others drawn with it


@pytest.mark.parametrize("conv", ["graph", "sage", "gat"])
def test_gnn_on_records_equals_the_in_memory_subgraph(whole, records, conv):
    _, _, inputs = whole
    table = records[1]
    batch, sub = read_batch(table), _in_memory(whole, table)
    torch.manual_seed(0)
    c_dim = inputs.customers.num.shape[1] + inputs.customers.structure.shape[1]
    m_dim = inputs.merchants.num.shape[1] + inputs.merchants.structure.shape[1]
    gnn = BipartiteGNN(c_dim, m_dim, width=8, depth=len(FANOUTS), conv=conv).eval()

    def x(nodes, index=None):
        num, structure = (nodes.num, nodes.structure) if index is None else (nodes.num[index], nodes.structure[index])
        return torch.cat([num, structure], 1)

    ours = gnn(x(batch.customers), x(batch.merchants), batch.sub)
    theirs = gnn(x(inputs.customers, sub.customers), x(inputs.merchants, sub.merchants), sub)
    torch.testing.assert_close(ours.customers, theirs.customers)
    assert ours.customers.shape == (table.num_rows, 8)


def test_incentive_net_loss_on_records_equals_the_in_memory_loss(whole, records):
    """The paper's network (GNN, towers, hazard head, eq. 7's customer term) on a record batch, as a trainer streaming
    records would run it, gives the loss of the in-memory keyed batch."""
    tables, encoders, inputs = whole
    table = records[1]
    batch, sub = read_batch(table), _in_memory(whole, table)
    torch.manual_seed(0)
    net = IncentiveNet(encoders.customers.cardinalities, inputs.customers.num.shape[1],
                       inputs.customers.structure.shape[1], encoders.merchants.cardinalities,
                       inputs.merchants.num.shape[1], inputs.merchants.structure.shape[1], tables.levels.tolist(),
                       width=8, hidden=(8, 8), emb_dim=4, fanouts=FANOUTS).eval()

    def loss(x_customers, x_merchants, subgraph):
        states = net.gnn(x_customers, x_merchants, subgraph)
        return net.loss(net.heads("customer", states.customers), batch.labels())[0]

    ours = loss(net.node_features("customer", batch.customers), net.node_features("merchant", batch.merchants),
                batch.sub)
    theirs = loss(net._node_features(inputs.customers, sub.customers, net.customer_features),
                  net._node_features(inputs.merchants, sub.merchants, net.merchant_features), sub)
    torch.testing.assert_close(ours, theirs)
    assert torch.isfinite(ours) and ours > 0


def test_a_dangling_edge_names_its_file_and_row(data, whole, tmp_path):
    parts = tmp_path / "parts"
    for name in ("customers", "merchants", "edges"):
        (parts / name).mkdir(parents=True)
        for path in sorted((data / "parts" / name).glob("*.parquet")):
            (parts / name / path.name).write_bytes(path.read_bytes())
    edges = pd.read_parquet(parts / "edges" / "part-00002.parquet")
    edges.loc[4, "merchant_id"] = "m99999"
    edges.to_parquet(parts / "edges" / "part-00002.parquet", index=False)
    tables, encoders, _ = whole
    spec = RecordSpec(tuple(tables.levels), tables.customer_spec, tables.merchant_spec, FANOUTS)
    with pytest.raises(DataError, match=r"edges/part-00002\.parquet: column 'merchant_id' has values that are not in "
                                        r"the merchants table, e\.g\. row 4 \{merchant_id='m99999'\}"):
        write_records(parts / "customers", parts / "merchants", parts / "edges", tmp_path / "out", encoders, spec,
                      LocalExecutor())
    assert not (tmp_path / "out" / ".graph").exists()


def test_ray_gives_the_local_records(ray_cluster, data, whole, records, tmp_path):
    _, table = _generate(data, whole, tmp_path / "ray", make_executor("ray", workers=2))
    assert table.equals(records[1])


def test_parts_without_seeds_give_empty_record_parts(world, whole, tmp_path):
    """An empty part and a part whose customers are all unlabelled write parts of no rows (same columns)."""
    customers = world.customers.dropna(subset=["redeemed"])
    pieces = [customers.iloc[:40], customers.iloc[:0], world.customers[world.customers.redeemed.isna()]]
    _write(pieces, tmp_path / "customers", tmp_path / "c.parquet")
    _write([world.edges[world.edges.customer_id.isin(p.customer_id)] for p in pieces], tmp_path / "edges",
           tmp_path / "e.parquet")
    _write([world.merchants], tmp_path / "merchants", tmp_path / "m.parquet")
    tables, encoders, _ = whole
    spec = RecordSpec(tuple(tables.levels), tables.customer_spec, tables.merchant_spec, FANOUTS)
    summary = write_records(tmp_path / "customers", tmp_path / "merchants", tmp_path / "edges", tmp_path / "out",
                            encoders, spec, LocalExecutor())
    assert [part["records"] for part in summary["parts"]] == [40, 0, 0]
    tables = [pq.read_table(tmp_path / "out" / f"part-{k:05d}.parquet") for k in range(3)]
    assert tables[1].schema == tables[0].schema, [(a, b) for a, b in zip(tables[1].schema, tables[0].schema) if a != b]
    assert tables[2].num_rows == 0
    assert read_batch(tables[1]).sub.customers.shape == (0,)
    assert read_batch(tables[0]).sub.n_seed_customers == 40


def test_gathered_shard_pages_are_unmapped(tmp_path):
    """A gather reads its rows and leaves none of the shard file's pages mapped in (resident) in the process: its
    mapped set is one shard's reads, whatever the graph's size."""
    values = np.arange(2**22, dtype=np.int64).reshape(-1, 8)  # 32 MiB
    (tmp_path / "left" / "00000").mkdir(parents=True)
    np.save(tmp_path / "left" / "00000" / "gid.npy", values)
    adjacency = ShardAdjacency(SimpleNamespace(folder=lambda shard: tmp_path / shard.side / f"{shard.index:05d}"),
                               LEFT, len(values))
    before = resident_mb()["rss_file_mb"]
    if np.isnan(before):
        pytest.skip("no /proc/self/status")
    rows = np.arange(len(values))[::-1]
    got = adjacency.gather(np.zeros(len(rows), np.int64), rows, LEFT, ("gid",))[0]
    np.testing.assert_array_equal(got, values[rows])
    assert resident_mb()["rss_file_mb"] - before < 8


@pytest.mark.parametrize("settings, message", [
    ({"fanouts": ()}, r"fanouts must be one positive number \(or -1: every neighbour\) per GNN layer, got \[\]"),
    ({"fanouts": (10, 0)}, r"got \[10, 0\]"),
    ({"draws": ()}, r"draws must be distinct epochs ≥ 0, at least one, got \[\]"),
    ({"draws": (1, 1)}, r"got \[1, 1\]"),
])
def test_bad_record_settings_are_one_line_errors(whole, settings, message):
    tables = whole[0]
    with pytest.raises(DataError, match=message):
        RecordSpec(tuple(tables.levels), tables.customer_spec, tables.merchant_spec, **settings)

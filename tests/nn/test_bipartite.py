"""The customer–merchant graph (CSR), its neighbour sampler and the joint-incentive GNN block (§3, eq. 1)."""

from collections import Counter

import numpy as np
import pytest
import torch

from promokit.nn.bipartite import BipartiteGNN, BipartiteGraph, sample_neighbours

torch.set_num_threads(1)


def random_graph(n_customers=40, n_merchants=15, n_edges=150, isolated=(5, 3), weighted=True, seed=0):
    """Unique random edges; the last ``isolated`` customers / merchants have none."""
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, [n_customers - isolated[0], n_merchants - isolated[1]], size=(n_edges, 2))
    pairs = np.unique(pairs, axis=0)
    rng.shuffle(pairs)
    weight = rng.uniform(0.1, 2.0, len(pairs)) if weighted else None
    return BipartiteGraph.from_edges(pairs[:, 0], pairs[:, 1], n_customers, n_merchants, weight), pairs


def test_csr_from_a_hand_written_edge_list():
    # customer 3 and merchant 2 have no edges; (2, 1) is given twice and kept twice
    graph = BipartiteGraph.from_edges(np.array([2, 0, 2, 1, 2]), torch.tensor([1, 0, 0, 1, 1]), 4, 3,
                                      weight=np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert graph.customer_ptr.tolist() == [0, 1, 2, 5, 5]
    assert graph.merchant_of.tolist() == [0, 1, 1, 0, 1]
    assert graph.merchant_of_weight.tolist() == pytest.approx([0.2, 0.4, 0.1, 0.3, 0.5])
    assert graph.merchant_ptr.tolist() == [0, 2, 5, 5]
    assert graph.customer_of.tolist() == [0, 2, 2, 1, 2]
    assert graph.customer_of_weight.tolist() == pytest.approx([0.2, 0.3, 0.1, 0.4, 0.5])
    assert graph.customer_degree.tolist() == [1, 1, 3, 0]
    assert graph.merchant_degree.tolist() == [2, 3, 0]
    assert graph.customer_ptr.dtype == graph.merchant_of.dtype == torch.int64
    assert graph.merchant_of_weight.dtype == torch.float32
    with pytest.raises(ValueError, match="merchant indices"):
        BipartiteGraph.from_edges(np.array([0]), np.array([3]), 4, 3)


def global_edges(sub):
    """Sampled edges as (customer, merchant) global pairs, per direction, with their local destinations."""
    m2c = [(sub.customers[c].item(), sub.merchants[m].item()) for m, c in sub.merchant_to_customer.t().tolist()]
    c2m = [(sub.customers[c].item(), sub.merchants[m].item()) for c, m in sub.customer_to_merchant.t().tolist()]
    return m2c, c2m


def test_sampling_respects_fanouts_and_the_graph():
    graph, pairs = random_graph(200, 50, 2000, isolated=(0, 0), weighted=False)
    edges = set(map(tuple, pairs.tolist()))
    neighbours_c = {u: set(pairs[pairs[:, 0] == u, 1].tolist()) for u in range(200)}
    neighbours_m = {v: set(pairs[pairs[:, 1] == v, 0].tolist()) for v in range(50)}
    customer_seeds, merchant_seeds = torch.tensor([17, 3, 150, 42]), torch.tensor([9, 0])
    k = 6
    sub = sample_neighbours(graph, customer_seeds, merchant_seeds, (k, k), torch.Generator().manual_seed(0))

    assert sub.customers[:4].tolist() == customer_seeds.tolist() and sub.merchants[:2].tolist() == [9, 0]
    assert (sub.n_seed_customers, sub.n_seed_merchants) == (4, 2)
    assert len(set(sub.customers.tolist())) == len(sub.customers)
    assert len(set(sub.merchants.tolist())) == len(sub.merchants)
    assert sub.merchant_to_customer_weight is None and sub.customer_to_merchant_weight is None
    assert len(sub.customers_per_hop) == len(sub.merchants_per_hop) == 3 and sub.customers_per_hop[0] == 4
    assert sum(sub.customers_per_hop) == len(sub.customers) and sum(sub.merchants_per_hop) == len(sub.merchants)
    assert sum(sub.merchant_to_customer_per_hop) == sub.merchant_to_customer.shape[1]
    assert sum(sub.customer_to_merchant_per_hop) == sub.customer_to_merchant.shape[1]
    m2c, c2m = global_edges(sub)
    assert set(m2c) <= edges and set(c2m) <= edges
    assert len(set(m2c)) == len(m2c) and len(set(c2m)) == len(c2m)

    into_customer = Counter(sub.customers[sub.merchant_to_customer[1]].tolist())
    into_merchant = Counter(sub.merchants[sub.customer_to_merchant[1]].tolist())
    # hop 0 (seeds) and hop 1 are expanded, hop 2 is not
    hop1_customers = {c for c, m in c2m if m in merchant_seeds.tolist()} - set(customer_seeds.tolist())
    hop1_merchants = {m for c, m in m2c if c in customer_seeds.tolist()} - set(merchant_seeds.tolist())
    expanded_c = set(customer_seeds.tolist()) | hop1_customers
    expanded_m = set(merchant_seeds.tolist()) | hop1_merchants
    assert set(into_customer) == expanded_c and set(into_merchant) == expanded_m
    for u in expanded_c:
        assert into_customer[u] == min(len(neighbours_c[u]), k)
        if len(neighbours_c[u]) <= k:
            assert {m for c, m in m2c if c == u} == neighbours_c[u]
    for v in expanded_m:
        assert into_merchant[v] == min(len(neighbours_m[v]), k)
    assert any(len(neighbours_c[u]) <= k for u in expanded_c)  # the keep-all branch was exercised
    assert any(len(neighbours_m[v]) > k for v in expanded_m)  # and the drawing branch

    everything = sample_neighbours(graph, customer_seeds, merchant_seeds, (-1,))
    m2c, c2m = global_edges(everything)
    assert set(m2c) == {(u, m) for u in customer_seeds.tolist() for m in neighbours_c[u]}
    assert set(c2m) == {(c, v) for v in merchant_seeds.tolist() for c in neighbours_m[v]}


def test_draws_are_uniform_subsets_without_replacement():
    # 3000 customers share the same 5 merchants; each seed draws 2 of them
    customers = np.repeat(np.arange(3000), 5)
    merchants = np.tile(np.arange(5), 3000)
    graph = BipartiteGraph.from_edges(customers, merchants, 3000, 5)
    sub = sample_neighbours(graph, torch.arange(3000), torch.tensor([], dtype=torch.long), (2,),
                            torch.Generator().manual_seed(1))
    source, destination = sub.merchants[sub.merchant_to_customer[0]], sub.merchant_to_customer[1]
    drawn = source[torch.argsort(destination, stable=True)].view(3000, 2).sort(1).values
    assert (drawn[:, 0] != drawn[:, 1]).all()
    counts = Counter(map(tuple, drawn.tolist()))
    assert len(counts) == 10 and all(240 <= n <= 360 for n in counts.values())  # 300 expected per pair


def test_sampling_is_deterministic_given_the_generator():
    graph, _ = random_graph(200, 50, 2000)
    seeds = torch.tensor([1, 2, 3, 100]), torch.tensor([7, 30])

    def draw(seed):
        return sample_neighbours(graph, *seeds, (3, 2), torch.Generator().manual_seed(seed))

    first, again, other = draw(5), draw(5), draw(6)
    for a, b in zip(first, again):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    assert not torch.equal(first.merchant_to_customer_weight, other.merchant_to_customer_weight)
    assert first.merchant_to_customer_weight.shape[0] == first.merchant_to_customer.shape[1]
    with pytest.raises(ValueError, match="unique"):
        sample_neighbours(graph, torch.tensor([1, 1]), seeds[1])
    with pytest.raises(ValueError, match="merchant seed indices"):
        sample_neighbours(graph, seeds[0], torch.tensor([-1]))


@pytest.mark.parametrize("conv", ["sage", "gat", "graph"])
def test_forward_on_full_neighbourhoods_equals_inference(conv):
    torch.manual_seed(0)
    graph, _ = random_graph()
    x_customers, x_merchants = torch.randn(40, 6), torch.randn(15, 4)
    model = BipartiteGNN(6, 4, width=16, depth=2, conv=conv).eval()
    # customers 35-39 and merchants 12-14 have no edges
    sub = sample_neighbours(graph, torch.tensor([0, 38, 7, 21]), torch.tensor([14, 2, 5]), (-1, -1))
    seeds = model(x_customers[sub.customers], x_merchants[sub.merchants], sub)
    full = model.inference(x_customers, x_merchants, graph, chunk_size=7)
    assert seeds.customers.shape == (4, 16) and seeds.merchants.shape == (3, 16)
    torch.testing.assert_close(seeds.customers, full.customers[[0, 38, 7, 21]], atol=1e-5, rtol=0)
    torch.testing.assert_close(seeds.merchants, full.merchants[[14, 2, 5]], atol=1e-5, rtol=0)
    # chunk_size=7 cuts some chunks short at 7 × the mean degree edges; 1 puts every node alone; the default none
    for chunk_size in (1, 65536):
        torch.testing.assert_close(model.inference(x_customers, x_merchants, graph, chunk_size), full)
    # without the per-hop counts every layer runs on the whole subgraph: same seed states
    untrimmed = sub._replace(customers_per_hop=(), merchants_per_hop=(), merchant_to_customer_per_hop=(),
                             customer_to_merchant_per_hop=())
    torch.testing.assert_close(model(x_customers[sub.customers], x_merchants[sub.merchants], untrimmed), seeds)


@pytest.mark.parametrize("conv", ["sage", "gat", "graph"])
def test_isolated_nodes_get_states_from_their_own_features(conv):
    torch.manual_seed(0)
    graph, _ = random_graph()
    model = BipartiteGNN(6, 4, width=8, conv=conv, dropout=0.3)
    x_customers, x_merchants = torch.randn(40, 6), torch.randn(15, 4)
    sub = sample_neighbours(graph, torch.tensor([39]), torch.tensor([13, 14]), (5, 5))
    assert sub.merchant_to_customer.shape[1] == sub.customer_to_merchant.shape[1] == 0
    model.eval()
    before = model.inference(x_customers, x_merchants, graph)
    x_customers[39] += 1.0
    after = model.inference(x_customers, x_merchants, graph)
    assert not torch.allclose(before.customers[39], after.customers[39])
    torch.testing.assert_close(before.customers[:35], after.customers[:35])
    model.train()
    states = model(x_customers[sub.customers], x_merchants[sub.merchants], sub)
    (states.customers.sum() + states.merchants.sum()).backward()
    assert model.customer_in.weight.grad.abs().sum() > 0 and model.merchant_in.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("conv", ["sage", "gat", "graph"])
def test_sampled_training_step_and_reset(conv):
    torch.manual_seed(0)
    graph, _ = random_graph(200, 50, 2000)
    model = BipartiteGNN(6, 4, width=8, conv=conv, dropout=0.2)
    sub = sample_neighbours(graph, torch.arange(10), torch.arange(3), (4, 4), torch.Generator().manual_seed(0))
    states = model(torch.randn(len(sub.customers), 6), torch.randn(len(sub.merchants), 4), sub)
    assert states.customers.shape == (10, 8) and states.merchants.shape == (3, 8)
    states.customers.square().mean().backward()
    assert all(p.grad is not None for p in model.to_customer[0].parameters())
    before = [p.detach().clone() for p in model.parameters()]
    model.reset_parameters()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_unknown_conv_lists_the_choices():
    with pytest.raises(ValueError, match="sage, gat, graph"):
        BipartiteGNN(4, 4, conv="gcn")


def test_graph_conv_aggregates_the_weighted_mean():
    """α = w_ij / Σ_k w_ik: scaling every weight changes nothing, and a node's state is the conv of the weighted
    mean of its neighbours (here a customer with two merchants weighted 1 and 3)."""
    torch.manual_seed(0)
    graph = BipartiteGraph.from_edges(np.array([0, 0, 1]), np.array([0, 1, 1]), 2, 2, weight=np.array([1.0, 3.0, 2.0]))
    scaled = BipartiteGraph.from_edges(np.array([0, 0, 1]), np.array([0, 1, 1]), 2, 2, weight=np.array([5.0, 15.0, 10.0]))
    model = BipartiteGNN(3, 3, width=4, depth=1, conv="graph").eval()
    x_c, x_m = torch.randn(2, 3), torch.randn(2, 3)
    states = model.inference(x_c, x_m, graph)
    torch.testing.assert_close(states.customers, model.inference(x_c, x_m, scaled).customers)
    conv, h_c, h_m = model.to_customer[0], model.customer_in(x_c), model.merchant_in(x_m)
    expected = conv.lin_rel((h_m[0] + 3 * h_m[1]) / 4) + conv.lin_root(h_c[0])
    torch.testing.assert_close(states.customers[0], expected.detach())

"""The customer–merchant bipartite graph, a neighbour sampler over it, and the graph block of the
joint-incentive paper (Yu et al., AAAI 2021, §3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GraphConv, SAGEConv

CONVS = ("sage", "gat", "graph")


@dataclass
class BipartiteGraph:
    """Customer–merchant edges stored as CSR in both directions (int64).

    Customer u's merchants are ``merchant_of[customer_ptr[u]:customer_ptr[u + 1]]``, merchant v's customers
    ``customer_of[merchant_ptr[v]:merchant_ptr[v + 1]]``, each in input edge order. ``merchant_of_weight`` and
    ``customer_of_weight`` (float32 or None) are the edge weights aligned with ``merchant_of`` and
    ``customer_of``.
    """

    n_customers: int
    n_merchants: int
    customer_ptr: Tensor
    merchant_of: Tensor
    merchant_ptr: Tensor
    customer_of: Tensor
    merchant_of_weight: Tensor | None = None
    customer_of_weight: Tensor | None = None

    @classmethod
    def from_edges(cls, customer: np.ndarray | Tensor, merchant: np.ndarray | Tensor, n_customers: int,
                   n_merchants: int, weight: np.ndarray | Tensor | None = None) -> BipartiteGraph:
        """The graph of edges ``(customer[e], merchant[e])``, 0-based indices; duplicate edges are kept."""
        customer = torch.as_tensor(customer, dtype=torch.long)
        merchant = torch.as_tensor(merchant, dtype=torch.long)
        if customer.dim() != 1 or customer.shape != merchant.shape:
            raise ValueError(f"customer and merchant must be 1-d of one length, got {tuple(customer.shape)} "
                             f"and {tuple(merchant.shape)}")
        _check_range(customer, n_customers, "customer")
        _check_range(merchant, n_merchants, "merchant")
        if weight is not None:
            weight = torch.as_tensor(weight, dtype=torch.float32)
            if weight.shape != customer.shape:
                raise ValueError(f"weight must have one value per edge ({len(customer)}), got {tuple(weight.shape)}")
        customer_ptr, by_customer = _csr(customer, n_customers)
        merchant_ptr, by_merchant = _csr(merchant, n_merchants)
        return cls(n_customers, n_merchants, customer_ptr, merchant[by_customer], merchant_ptr, customer[by_merchant],
                   None if weight is None else weight[by_customer], None if weight is None else weight[by_merchant])

    @property
    def customer_degree(self) -> Tensor:
        return self.customer_ptr.diff()

    @property
    def merchant_degree(self) -> Tensor:
        return self.merchant_ptr.diff()


def _check_range(index: Tensor, n: int, name: str) -> None:
    if len(index) and (index.min() < 0 or index.max() >= n):
        raise ValueError(f"{name} indices must be in [0, {n}), got [{index.min().item()}, {index.max().item()}]")


def _csr(index: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Row pointer of ``index`` grouped by value, and the stable order that groups it."""
    ptr = torch.zeros(n + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(index, minlength=n), 0, out=ptr[1:])
    return ptr, torch.sort(index, stable=True).indices


class Subgraph(NamedTuple):
    """A sampled neighbourhood: global node indices (seeds first, in seed order) and edges in local indices.

    ``merchant_to_customer`` is ``(2, E1)`` with row 0 the source merchant (position in ``merchants``) and
    row 1 the destination customer (position in ``customers``); ``customer_to_merchant`` the reverse
    direction. The weights are aligned with the edges, None when the graph has none.

    The ``*_per_hop`` counts (PyG's ``num_sampled_nodes`` / ``num_sampled_edges``) say how many nodes were first
    reached at hops 0 (the seeds), 1, … and how many edges were drawn at hops 1, 2, …; nodes and edges are
    stored in hop order, so :class:`BipartiteGNN` can skip the nodes a layer no longer needs. Left empty, the
    model runs every layer on the whole subgraph.
    """

    customers: Tensor
    merchants: Tensor
    merchant_to_customer: Tensor
    customer_to_merchant: Tensor
    merchant_to_customer_weight: Tensor | None
    customer_to_merchant_weight: Tensor | None
    n_seed_customers: int
    n_seed_merchants: int
    customers_per_hop: tuple[int, ...] = ()
    merchants_per_hop: tuple[int, ...] = ()
    merchant_to_customer_per_hop: tuple[int, ...] = ()
    customer_to_merchant_per_hop: tuple[int, ...] = ()


class _NodeSet:
    """A growing set of one node type: global → local map, and the nodes added last (the next frontier)."""

    def __init__(self, seeds: Tensor, n: int, name: str):
        _check_range(seeds, n, f"{name} seed")
        self.local = torch.full((n,), -1, dtype=torch.long)
        self.local[seeds] = torch.arange(len(seeds))
        if not torch.equal(self.local[seeds], torch.arange(len(seeds))):
            raise ValueError(f"{name} seeds must be unique (deduplicate with torch.unique(return_inverse=True))")
        self.nodes = [seeds]
        self.front, self.front_start = seeds, 0

    def add(self, nodes: Tensor) -> Tensor:
        """Local indices of ``nodes``, appending the unseen ones (sorted) as the new frontier."""
        new = torch.unique(nodes[self.local[nodes] < 0])
        self.front_start = self.front_start + len(self.front)
        self.local[new] = torch.arange(self.front_start, self.front_start + len(new))
        self.nodes.append(new)
        self.front = new
        return self.local[nodes]


def sample_neighbours(graph: BipartiteGraph, customer_seeds: Tensor, merchant_seeds: Tensor,
                      fanouts: Sequence[int] = (10, 10), generator: torch.Generator | None = None) -> Subgraph:
    """Neighbourhoods of the seeds for mini-batch training, like PyG's ``NeighborLoader`` on the bipartite graph.

    Hop k = 1, 2, … draws up to ``fanouts[k - 1]`` neighbours (all if -1) of every node first reached at hop
    k - 1 (the seeds are hop 0): a node with more neighbours gets a uniform draw without replacement, one with
    fewer keeps them all. A model of depth ``len(fanouts)`` computes exact seed states on this subgraph when every
    fanout is -1. The seeds of each type must be unique; repeated draws with one ``generator`` are reproducible.
    """
    customer_seeds = torch.as_tensor(customer_seeds, dtype=torch.long)
    merchant_seeds = torch.as_tensor(merchant_seeds, dtype=torch.long)
    customers = _NodeSet(customer_seeds, graph.n_customers, "customer")
    merchants = _NodeSet(merchant_seeds, graph.n_merchants, "merchant")
    to_customer, to_merchant, customer_positions, merchant_positions = [], [], [], []
    for fanout in fanouts:
        customer_pos, customer_dst = _draw(graph.customer_ptr, customers.front, fanout, generator)
        merchant_pos, merchant_dst = _draw(graph.merchant_ptr, merchants.front, fanout, generator)
        customer_dst += customers.front_start
        merchant_dst += merchants.front_start
        to_customer.append(torch.stack([merchants.add(graph.merchant_of[customer_pos]), customer_dst]))
        to_merchant.append(torch.stack([customers.add(graph.customer_of[merchant_pos]), merchant_dst]))
        customer_positions.append(customer_pos)
        merchant_positions.append(merchant_pos)
    no_edges = torch.empty(2, 0, dtype=torch.long)
    return Subgraph(
        torch.cat(customers.nodes), torch.cat(merchants.nodes), torch.cat([no_edges, *to_customer], 1),
        torch.cat([no_edges, *to_merchant], 1), _gather(graph.merchant_of_weight, customer_positions),
        _gather(graph.customer_of_weight, merchant_positions), len(customer_seeds), len(merchant_seeds),
        tuple(map(len, customers.nodes)), tuple(map(len, merchants.nodes)), tuple(map(len, customer_positions)),
        tuple(map(len, merchant_positions)))


def _gather(weight: Tensor | None, positions: list[Tensor]) -> Tensor | None:
    return None if weight is None else weight[torch.cat([torch.empty(0, dtype=torch.long), *positions])]


def _draw(ptr: Tensor, nodes: Tensor, fanout: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """CSR positions of up to ``fanout`` neighbours of each node (all if -1), and for each the index into
    ``nodes`` of its owner."""
    start = ptr[nodes]
    degree = ptr[nodes + 1] - start
    if fanout < 0:  # all neighbours: a fanout no degree exceeds
        fanout = int(degree.max()) if len(degree) else 0
    keep_all = degree <= fanout
    whole = keep_all.nonzero().squeeze(1)
    count = degree[whole]
    whole_owner = whole.repeat_interleave(count)
    whole_offset = torch.arange(len(whole_owner)) - (count.cumsum(0) - count).repeat_interleave(count)
    drawn = (~keep_all).nonzero().squeeze(1)
    owner = torch.cat([whole_owner, drawn.repeat_interleave(fanout)])
    offset = torch.cat([whole_offset, _floyd(degree[drawn], fanout, generator).flatten()])
    return start[owner] + offset, owner


def _floyd(degree: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """``(len(degree), k)`` distinct offsets, row i a uniform k-subset of ``0 .. degree[i] - 1`` (needs
    ``degree >= k``).

    Floyd's algorithm, vectorised over rows: for top = d - k .. d - 1 draw t uniform in 0 .. top and keep t,
    or top itself if t is already taken. k rounds of O(rows · k) work, whatever the degrees.
    """
    chosen = torch.empty(len(degree), k, dtype=torch.long)
    for step in range(k):
        top = degree - k + step
        # float64 keeps the floor uniform for degrees far beyond 2**24
        draw = (torch.rand(len(degree), dtype=torch.float64, generator=generator) * (top + 1)).long()
        taken = (chosen[:, :step] == draw.unsqueeze(1)).any(1)
        chosen[:, step] = torch.where(taken, top, draw)
    return chosen


class NodeStates(NamedTuple):
    customers: Tensor
    merchants: Tensor


def _make_conv(conv: str, width: int) -> nn.Module:
    if conv == "sage":
        return SAGEConv((width, width), width, aggr="mean")
    if conv == "gat":
        # residual=True is GAT's root weight: without it a node with no neighbours would get only the bias
        return GATConv((width, width), width, heads=1, add_self_loops=False, residual=True)
    return GraphConv((width, width), width, aggr="add")  # with weights normalised per destination: a weighted mean


class BipartiteGNN(nn.Module):
    r"""The graph representation block of the joint-incentive paper ("Joint Incentive Optimization of Customer and
    Merchant in Mobile Payment Marketing", Yu et al., AAAI 2021, ``joint-incentive-hazard-allocation.txt``): the
    GNN of its "Jointly Learning Representations" section, h_u = GNN(u | A, X), in the form of eq. (1) (its
    "Background" section), on the customer–merchant graph:

    .. math::
        h^{l+1}(v_i) = \sigma\Big(\sum_j \alpha(v_i, v_j)\, h^l(v_j)\, W^l\Big)

    Customers and merchants are first projected to ``width``; each of the ``depth`` layers (the paper: 2 × 64)
    updates customers from their merchants and merchants from their customers with one PyG conv per direction,
    each adding a root term ``h^l(v_i) W^l_root`` so a node without edges keeps a state from its own features:

    - ``"sage"``: :math:`\alpha = 1/\deg(v_i)` (SAGEConv, mean);
    - ``"gat"``: :math:`\alpha` a softmax over v_i's neighbours of learned scores (GATConv, one head);
    - ``"graph"``: :math:`\alpha = w_{ij} / \sum_k w_{ik}`, the edge-weighted mean of the neighbours (GraphConv
      summing weights normalised per destination; the plain mean without weights). On a payment graph this is
      the payment-weighted mean, e.g. a customer's merchants weighted by how often it pays each.

    SAGE and GAT ignore edge weights. ReLU and dropout come between layers, not after the last: the states are
    features for the head that consumes them.

    :meth:`forward` trains on a :class:`Subgraph` from :func:`sample_neighbours` with ``depth`` fanouts;
    :meth:`inference` computes every node's state from full neighbourhoods, layer by layer.

    ``homogeneous=True`` runs the same block on a graph of one node type (customer–customer), stored as the
    bipartite graph of the nodes with themselves with every edge in both directions: the two sides share one
    projection and one conv per layer, so a node's state is the same on either side and each layer is eq. 1 on
    the homogeneous graph (``"graph"``: :math:`h^{l+1}_i = W^l_{root} h^l_i + W^l \sum_j \alpha_{ij} h^l_j`,
    PyG's GraphConv). Sampled from the customer seeds alone, hop k reaches the other side at odd k and this side at
    even k, which are the k-hop neighbours of the seeds, so training computes exactly that model too.

    The EOCA paper's consumption graph (``eoca-expected-transaction-value.txt``, §4.1.2: a two-layer graph
    attention network on the user–merchant graph, e_c of eq. 14) is this block with ``conv="gat"``.

    Args:
        customer_dim: width of the customers' input features.
        merchant_dim: width of the merchants' input features (unused with ``homogeneous``).
        width: width of the projections and of every layer's states.
        depth: number of layers (hops).
        conv: the aggregation, one of ``"sage"``, ``"gat"``, ``"graph"``.
        dropout: dropout between layers.
        homogeneous: one node type on both sides (a customer–customer graph), sharing projection and convs.

    Shapes:
        - **input:** :meth:`forward`: x_customers ``(len(sub.customers), customer_dim)``, x_merchants
          ``(len(sub.merchants), merchant_dim)``, a :class:`Subgraph` ``sub``; :meth:`inference`: one row per node of
          the graph, ``(n_customers, customer_dim)`` and ``(n_merchants, merchant_dim)``
        - **output:** :class:`NodeStates`: :meth:`forward` the seeds' ``(sub.n_seed_customers, width)`` and
          ``(sub.n_seed_merchants, width)``; :meth:`inference` every node's ``(n_customers, width)`` and
          ``(n_merchants, width)``
    """

    def __init__(self, customer_dim: int, merchant_dim: int, width: int = 64, depth: int = 2, conv: str = "sage",
                 dropout: float = 0.0, homogeneous: bool = False):
        super().__init__()
        if conv not in CONVS:
            raise ValueError(f"conv must be one of {', '.join(CONVS)}; got {conv!r}")
        self.dropout, self.homogeneous = dropout, homogeneous
        # this creation order fixes the weights a seed gives the bipartite models (the benches' figures rest on it)
        self.customer_in = nn.Linear(customer_dim, width)
        if not homogeneous:
            self.merchant_in = nn.Linear(merchant_dim, width)
        self.to_customer = nn.ModuleList(_make_conv(conv, width) for _ in range(depth))
        if not homogeneous:
            self.to_merchant = nn.ModuleList(_make_conv(conv, width) for _ in range(depth))
        else:  # plain aliases, not submodules: the state dict holds each weight once (safetensors' rule)
            object.__setattr__(self, "merchant_in", self.customer_in)
            object.__setattr__(self, "to_merchant", self.to_customer)

    def reset_parameters(self) -> None:
        for module in (self.customer_in, self.merchant_in, *self.to_customer, *self.to_merchant):
            module.reset_parameters()

    def forward(self, x_customers: Tensor, x_merchants: Tensor, sub: Subgraph) -> NodeStates:
        """States of the seeds; ``x_customers`` / ``x_merchants`` rows are ``sub.customers`` / ``sub.merchants``."""
        customers, merchants = self.customer_in(x_customers), self.merchant_in(x_merchants)
        for layer, (to_customer, to_merchant) in enumerate(zip(self.to_customer, self.to_merchant)):
            n_customers, n_merchants, into_customers, into_merchants = _trim(sub, len(self.to_customer) - layer)
            customers, merchants = (_conv(to_customer, merchants, customers[:n_customers], *into_customers),
                                    _conv(to_merchant, customers, merchants[:n_merchants], *into_merchants))
            if layer < len(self.to_customer) - 1:
                customers = F.dropout(customers.relu(), self.dropout, self.training)
                merchants = F.dropout(merchants.relu(), self.dropout, self.training)
        return NodeStates(customers[:sub.n_seed_customers], merchants[:sub.n_seed_merchants])

    @torch.no_grad()
    def inference(self, x_customers: Tensor, x_merchants: Tensor, graph: BipartiteGraph,
                  chunk_size: int = 16384) -> NodeStates:
        """States of every node (no dropout), each layer over ``chunk_size`` destination nodes at a time;
        ``x_customers`` / ``x_merchants`` have one row per node of ``graph``, in index order (homogeneous: the
        states of ``x_customers`` serve both sides)."""
        customers = self.customer_in(x_customers)
        merchants = customers if self.homogeneous else self.merchant_in(x_merchants)
        for layer in range(len(self.to_customer)):
            updated = self.layer(layer, "customer", merchants, customers, graph.customer_ptr, graph.merchant_of,
                                 graph.merchant_of_weight, chunk_size)
            # homogeneous: the other side is these nodes again, with the same edges and weights
            merchants = updated if self.homogeneous else self.layer(
                layer, "merchant", customers, merchants, graph.merchant_ptr, graph.customer_of,
                graph.customer_of_weight, chunk_size)
            customers = updated
        return NodeStates(customers, merchants)

    @torch.no_grad()
    def layer(self, index: int, into: str, source: Tensor, destination: Tensor, ptr: Tensor, neighbour: Tensor,
              weight: Tensor | None, chunk_size: int = 16384) -> Tensor:
        """Layer ``index`` of :meth:`inference` for the ``into`` nodes (``"customer"`` or ``"merchant"``) alone:
        ``destination`` holds their states, ``ptr`` / ``neighbour`` / ``weight`` their full neighbourhoods in CSR
        over the rows of ``source``, the other type's states. A graph in shards runs it shard by shard
        (:mod:`promokit.data.graph_shards`): a node's new state needs only its own edges and its neighbours' states."""
        conv = (self.to_customer if into == "customer" else self.to_merchant)[index]
        out = _chunked(conv, source, destination, ptr, neighbour, weight, chunk_size)
        return out.relu() if index < len(self.to_customer) - 1 else out


def _trim(sub: Subgraph, hops: int) -> tuple[int, int, tuple[Tensor, Tensor | None], tuple[Tensor, Tensor | None]]:
    """PyG's ``trim_to_layer`` for a layer followed by ``hops - 1`` more: only the nodes within ``hops - 1``
    hops of a seed need its output, and only the edges drawn at hops 1 .. ``hops`` lead into them. Returns those
    customer and merchant counts and the (edges, weights) into each."""

    def first(per_hop: tuple[int, ...], everything: int) -> int:
        return sum(per_hop[:hops]) if per_hop else everything

    def edges(edge_index: Tensor, weight: Tensor | None, per_hop: tuple[int, ...]) -> tuple[Tensor, Tensor | None]:
        n = first(per_hop, edge_index.shape[1])
        return edge_index[:, :n], None if weight is None else weight[:n]

    return (first(sub.customers_per_hop, len(sub.customers)), first(sub.merchants_per_hop, len(sub.merchants)),
            edges(sub.merchant_to_customer, sub.merchant_to_customer_weight, sub.merchant_to_customer_per_hop),
            edges(sub.customer_to_merchant, sub.customer_to_merchant_weight, sub.customer_to_merchant_per_hop))


def _conv(conv: nn.Module, source: Tensor, destination: Tensor, edge_index: Tensor, weight: Tensor | None) -> Tensor:
    if isinstance(conv, GraphConv):
        if weight is None:
            weight = torch.ones(edge_index.shape[1])
        total = torch.zeros(len(destination)).index_add_(0, edge_index[1], weight)
        return conv((source, destination), edge_index, edge_weight=weight / total.clamp_min(1e-12)[edge_index[1]])
    return conv((source, destination), edge_index)


def _chunked(conv: nn.Module, source: Tensor, destination: Tensor, ptr: Tensor, neighbour: Tensor,
             weight: Tensor | None, chunk_size: int) -> Tensor:
    """``conv`` over the full CSR neighbourhoods of up to ``chunk_size`` destinations at a time: every
    destination's edges are in one chunk, so the chunk's aggregation (GAT's softmax too) is exact.

    A chunk also stops at ``chunk_size`` times the mean degree edges (unless its first destination alone has
    more), so popular merchants on a skewed graph do not blow up the memory of their chunk."""
    out = destination.new_empty(len(destination), conv.out_channels)
    n = len(destination)
    max_edges = chunk_size * max(1, -(-len(neighbour) // max(n, 1)))
    lo = 0
    while lo < n:
        within_budget = int(torch.searchsorted(ptr, ptr[lo] + max_edges, right=True)) - 1
        hi = max(lo + 1, min(lo + chunk_size, within_budget, n))
        first, last = ptr[lo].item(), ptr[hi].item()
        local = torch.arange(hi - lo).repeat_interleave(ptr[lo + 1:hi + 1] - ptr[lo:hi])
        chunk_source, index = source, neighbour[first:last]
        if isinstance(conv, GATConv):
            # GATConv projects every source row it is given (SAGE and GraphConv only the aggregate): give it only
            # the chunk's sources, or each chunk pays for all of them
            used, index = torch.unique(index, return_inverse=True)
            chunk_source = source[used]
        out[lo:hi] = _conv(conv, chunk_source, destination[lo:hi], torch.stack([index, local]),
                           None if weight is None else weight[first:last])
        lo = hi
    return out

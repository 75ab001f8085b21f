"""User-Behavior Voucher Graphs (DMBGN section 3.2), built for every session at once and stored as CSR arrays.

A UVG is one session's graph: node 0 is the voucher, the other nodes are the items the user acted on, grouped
into zones by phase (pre / post collection) and action (``atc`` add-to-cart, ``ord`` order), in the paper's
order ``atc_pre, ord_pre, atc_post, ord_post``. Clicks are ignored by default (the paper's footnote 3 found
them noise); passing ``actions=("atc", "ord", "click")`` adds ``click_pre`` / ``click_post`` zones.

Edges, all directed forward in time:

- within a zone each item links to its chronological neighbour, earlier → later;
- the voucher links to the ``z`` items of each zone nearest in time to the collection: pre-collection items
  point *to* the voucher (they happened before it), the voucher points *to* post-collection items.

Message passing (PyG's ``source_to_target`` flow) therefore lets the voucher node gather the behaviour that led
up to the collection, and lets post-collection items see the voucher.

Pre-collection behaviour is cut to the ``max_pre_events`` events nearest the collection; post-collection
behaviour runs until the session's ``outcome_time`` (redemption or expiry), later events are dropped.

Where the tables also say which items each voucher applies to (``voucher_items``), every item node of a behaviour
graph carries whether it is one of them (its *scope* code: 2 in the voucher's scope, 1 outside it, 0 unknown), a
property of the (voucher, item) pair known at collection. The paper's item nodes embed the item alone (id, category,
price level), and the network then has to learn which categories each voucher id covers before it can tell behaviour
that meets the voucher from behaviour that does not; with the code it reads that directly
(benchmarks/comparisons.md#voucher-dmbgn-against-lr).

For data without a behaviour log (AmExpert), :meth:`UVGStore.from_voucher_items` builds one graph per voucher
from a ``voucher_items`` table instead: a single zone ``items`` of the voucher's applicable items (at most
``max_items``, in item-id order), linked to the voucher in both directions (a star: these items have no time
order). All sessions of a voucher share its graph.

Codes come from the store's vocabulary (:meth:`UVGStore.vocabulary`): fitted on the training sessions when a
model is trained, then passed back as ``vocabulary`` to build the graphs of any other tables with the same
codes, so a saved model needs only its vocabulary, never its training sessions.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from torch_geometric.data import Batch

from promokit.data import CategoryEncoder, DataError
from promokit.data.errors import example_row
from promokit.voucher.contract import VOUCHER_ITEM_COLUMNS

ACTIONS = ("atc", "ord")
VOUCHER_ZONE = -1
#: Scope codes of an item node (:attr:`UVGStore.scoped`): unknown (and voucher nodes), outside the voucher's items,
#: among them.
SCOPE_UNKNOWN, SCOPE_OUT, SCOPE_IN = 0, 1, 2
SCHEMA_COLUMNS = ("min_spend", "discount")
_RESERVED = ("item", "voucher")

_VOCABULARY_NAMES = ("zones", "target_zones", "item_features", "schema_columns")
_NODE_ARRAYS = ("node_ptr", "node_item", "node_features", "node_zone", "edge_ptr", "edge_index", "session_graph",
                "session_voucher", "session_schema")


@dataclass
class UVGStore:
    """Every session's UVG as concatenated node and edge arrays with per-graph offsets (CSR).

    Graph ``g`` owns nodes ``node_ptr[g]:node_ptr[g+1]`` (its voucher node first) and edges
    ``edge_ptr[g]:edge_ptr[g+1]``, whose ``edge_index`` holds node positions local to the graph. Session row
    ``s`` (row order of the sessions table) uses graph ``session_graph[s]``; its voucher node takes the
    session's voucher code and standardised voucher terms ``session_schema[s]`` (the ``schema_columns``
    min_spend, discount that the sessions have).

    An item node carries its item code and the codes of the ``item_features`` (the items table's feature
    columns, e.g. category, brand, price level), then, when ``scoped``, its scope code (:data:`SCOPE_IN`,
    :data:`SCOPE_OUT`, :data:`SCOPE_UNKNOWN`: whether the session's voucher applies to the item). Codes come from
    vocabularies (``encoders``, keyed ``item``, ``voucher`` and the feature names) with the out-of-vocabulary slot 0;
    with the zones, feature names, ``schema_stats`` and ``scoped`` they form the store's :meth:`vocabulary`.
    """

    zones: tuple[str, ...]
    target_zones: tuple[str, ...]
    item_features: tuple[str, ...]
    schema_columns: tuple[str, ...]
    node_ptr: np.ndarray        # (G + 1,) int64
    node_item: np.ndarray       # (N,) int64 item code, 0 on voucher nodes
    node_features: np.ndarray   # (N, len(item_features) + scoped) int64 feature (and scope) codes, 0 on vouchers
    node_zone: np.ndarray       # (N,) int8 index into ``zones``, VOUCHER_ZONE on voucher nodes
    edge_ptr: np.ndarray        # (G + 1,) int64
    edge_index: np.ndarray      # (2, E) int32, graph-local node positions
    session_graph: np.ndarray   # (S,) int64
    session_voucher: np.ndarray  # (S,) int64 voucher code
    session_schema: np.ndarray  # (S, len(schema_columns)) float32 standardised voucher terms
    encoders: dict[str, CategoryEncoder]
    schema_stats: dict[str, list[float]]  # mean / std of the schema columns
    scoped: bool = False  # item nodes carry a scope code (the tables had voucher_items)

    # ---------------------------------------------------------------- building
    @classmethod
    def build(cls, tables, z: int = 6, max_pre_events: int = 50, actions: tuple[str, ...] = ACTIONS,
              fit_rows=None, vocabulary: dict | None = None, behaviour: bool | None = None) -> UVGStore:
        """UVGs of all sessions of ``tables`` (a ``VoucherTables``: ``sessions``, ``events``, ``items``; its
        ``item_features`` when present, else every items column but ``item_id``).

        ``fit_rows`` (session rows, e.g. the training rows) restricts the item and voucher vocabularies and the
        schema standardisation to those sessions; items and vouchers never seen there get code 0, as at
        prediction time. Default: all sessions. ``vocabulary`` (another store's :meth:`vocabulary`, e.g. the
        training store's) is used as it is instead: nothing is fitted, items and vouchers it lacks get code 0 and
        the voucher terms are standardised with its mean / std. Tables without behaviour events but with
        ``voucher_items`` get :meth:`from_voucher_items` graphs (``max_pre_events`` items per voucher); with both,
        the behaviour graphs are ``scoped`` (each item node marked in or out of its voucher's scope). A scoped
        ``vocabulary`` given tables without ``voucher_items`` marks every item's scope unknown, with a warning.
        ``behaviour``: behaviour graphs (True) or voucher–item stars (False) whatever these tables hold, as for one
        part of a larger table; default: as the ``vocabulary``'s zones say when given, else as above.
        """
        sessions, events, items = tables.sessions, tables.events, tables.items
        voucher_items = getattr(tables, "voucher_items", None)
        if z < 1 or max_pre_events < 0:
            raise DataError(f"z must be ≥ 1 and max_pre_events ≥ 0, got z={z}, max_pre_events={max_pre_events}")
        if behaviour is None:
            behaviour = (tuple(vocabulary["zones"]) != ("items",) if vocabulary is not None else
                         voucher_items is None or (events is not None and not events.empty))
        if not behaviour:
            return cls.from_voucher_items(sessions, voucher_items, items, max_pre_events, fit_rows,
                                          getattr(tables, "item_features", None), vocabulary)
        n_sessions = len(sessions)
        row_of = pd.Index(sessions["session_id"])
        owner = row_of.get_indexer(events["session_id"])
        unknown = owner < 0
        if unknown.any():
            raise DataError(f"events: {int(unknown.sum())} rows have a session_id not in sessions, e.g. "
                            f"{example_row(events.reset_index(drop=True), unknown, ['session_id'])}")
        action = pd.Index(actions).get_indexer(events["action"].astype("string"))
        collect = _seconds(sessions["collect_time"])
        outcome = (_seconds(sessions["outcome_time"]) if "outcome_time" in sessions
                   else np.full(n_sessions, np.inf))
        outcome = np.where(np.isnan(outcome), np.inf, outcome)
        time = _seconds(events["action_time"])
        pre = time < collect[owner]
        keep = (action >= 0) & (pre | (time <= outcome[owner]))
        keep &= ~pre | (_nearest_first_rank(owner, -time, pre & keep) < max_pre_events)
        owner, action, time, pre = owner[keep], action[keep], time[keep], pre[keep]
        zone = action + np.where(pre, 0, len(actions))
        item_ids = events["item_id"].to_numpy()[keep]

        zones = tuple(f"{a}_pre" for a in actions) + tuple(f"{a}_post" for a in actions)
        fit = _fit_mask(fit_rows, n_sessions, vocabulary)
        vocab = _vocabulary(vocabulary, zones, zones[:len(actions)], sessions, items,
                            getattr(tables, "item_features", None), item_ids[fit[owner]], fit,
                            scoped=voucher_items is not None)
        item_code, feature_codes = _item_codes(vocab, items, item_ids)
        if vocab["scoped"]:
            scope = _scope_codes(sessions["voucher_id"].to_numpy()[owner], item_ids, voucher_items)
            feature_codes = np.column_stack([feature_codes, scope])
        is_pre = np.arange(len(zones)) < len(actions)
        arrays = _behaviour_graphs(owner, zone, time, item_code, feature_codes, n_sessions, is_pre, z)
        return cls(**vocab, **arrays, session_graph=np.arange(n_sessions, dtype=np.int64),
                   **_voucher_features(vocab, sessions))

    @classmethod
    def from_voucher_items(cls, sessions: pd.DataFrame, voucher_items: pd.DataFrame, items: pd.DataFrame,
                           max_items: int = 50, fit_rows=None, item_features=None,
                           vocabulary: dict | None = None) -> UVGStore:
        """One star graph per voucher over its applicable items (data without a behaviour log, e.g. AmExpert).

        ``item_features``: item columns to embed (default: every items column but ``item_id``). The single zone
        ``items`` is a property of the voucher, known at collection, so the target session uses it too
        (``target_zones == ("items",)``). ``fit_rows`` and ``vocabulary`` as in :meth:`build`.
        """
        fit = _fit_mask(fit_rows, len(sessions), vocabulary)
        vouchers = pd.Index(pd.unique(sessions["voucher_id"]))
        pairs = voucher_items.drop_duplicates(["voucher_id", "item_id"]).sort_values(["voucher_id", "item_id"])
        owner = vouchers.get_indexer(pairs["voucher_id"])
        pairs, owner = pairs[owner >= 0], owner[owner >= 0]
        rank = _nearest_first_rank(owner, np.zeros(len(owner)), np.ones(len(owner), bool))
        pairs, owner = pairs[rank < max_items], owner[rank < max_items]
        fit_vouchers = pd.Index(pd.unique(sessions["voucher_id"][fit]))
        fit_items = pairs["item_id"][fit_vouchers.get_indexer(pairs["voucher_id"]) >= 0]
        vocab = _vocabulary(vocabulary, ("items",), ("items",), sessions, items, item_features, fit_items, fit)
        item_code, feature_codes = _item_codes(vocab, items, pairs["item_id"].to_numpy())
        zone = np.zeros(len(owner), np.int64)
        arrays = _behaviour_graphs(owner, zone, np.zeros(len(owner)), item_code, feature_codes, len(vouchers),
                                   np.array([True]), z=None)
        return cls(**vocab, **arrays, session_graph=vouchers.get_indexer(sessions["voucher_id"]).astype(np.int64),
                   **_voucher_features(vocab, sessions))

    @classmethod
    def empty(cls, vocabulary: dict) -> UVGStore:
        """A store of no session with ``vocabulary``: it sizes a network (:meth:`cardinality`, ``zones``,
        ``item_features``, ``schema_columns``) before the tables it will score are known."""
        vocab = _decode(vocabulary)
        none = np.zeros(0, np.int64)
        width = len(vocab["item_features"]) + vocab["scoped"]
        arrays = _behaviour_graphs(none, none, none, none, np.zeros((0, width), np.int64),
                                   0, np.ones(len(vocab["zones"]), bool), z=None)
        return cls(**vocab, **arrays, session_graph=none, session_voucher=none,
                   session_schema=np.zeros((0, len(vocab["schema_columns"])), np.float32))

    def vocabulary(self) -> dict:
        """Zones, item feature and voucher term names, encoders and voucher-term mean / std as plain JSON data:
        the ``vocabulary`` argument of :meth:`build` and :meth:`empty`."""
        return {**{name: list(getattr(self, name)) for name in _VOCABULARY_NAMES},
                "encoders": {name: encoder.to_dict() for name, encoder in self.encoders.items()},
                "schema_stats": self.schema_stats, "scoped": self.scoped}

    # ---------------------------------------------------------------- sizes
    @property
    def n_sessions(self) -> int:
        return len(self.session_graph)

    @property
    def n_graphs(self) -> int:
        return len(self.node_ptr) - 1

    def cardinality(self, name: str) -> int:
        """Embedding rows of ``item``, ``voucher`` or an item feature (vocabulary + OOV slot)."""
        return self.encoders[name].cardinality

    @property
    def node_cardinalities(self) -> list[int]:
        """Embedding rows of each column of an item node after its item code: the item features', then the scope
        code's when ``scoped``."""
        return [self.cardinality(name) for name in self.item_features] + [SCOPE_IN + 1] * self.scoped

    # ---------------------------------------------------------------- batching
    def distinct(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Collapse session ``rows`` whose UVGs are identical (same graph, voucher code and voucher terms, e.g. the
        sessions of one voucher in a voucher–item store, or one history session in many users' batches):
        ``(first, position)`` with ``first`` one session row per distinct UVG and ``rows[i]``'s UVG equal to
        ``first[position[i]]``'s."""
        picked = rows.cpu().numpy().astype(np.int64).reshape(-1)
        key = np.column_stack([self.session_graph[picked], self.session_voucher[picked],
                               self.session_schema[picked]])
        _, first, position = np.unique(key, axis=0, return_index=True, return_inverse=True)
        return torch.from_numpy(picked[first]), torch.from_numpy(position.reshape(-1))

    def batch(self, rows, zones: tuple[str, ...] | None = None) -> Batch:
        """The UVGs of session ``rows`` as one PyG ``Batch``, keeping only the nodes of ``zones`` (default: all)
        plus the voucher node, and the edges between kept nodes.

        The target session must be batched with ``zones=store.target_zones`` (pre-collection only).

        Fields: ``x`` (N, 1 + F) int64 codes (item, then ``item_features``, then the scope code when ``scoped``;
        0 on voucher nodes), ``zone`` (N,)
        (index into ``store.zones``, −1 on voucher nodes), ``edge_index`` (2, E), ``batch`` (N,), ``ptr``
        (B + 1,), ``voucher_index`` (B,) node position of each graph's voucher, ``voucher`` (B,) voucher code,
        ``schema`` (B, len(schema_columns)) standardised voucher terms.
        """
        rows = rows.cpu().numpy() if isinstance(rows, Tensor) else np.asarray(rows)
        rows = rows.astype(np.int64).reshape(-1)
        bad = (rows < 0) | (rows >= self.n_sessions)
        if bad.any():
            raise DataError(f"session rows: {int(bad.sum())} outside 0..{self.n_sessions - 1}, e.g. {rows[bad][0]}")
        wanted = self.zones if zones is None else tuple(zones)
        unknown = [name for name in wanted if name not in self.zones]
        if unknown:
            raise DataError(f"zones: {len(unknown)} unknown, e.g. {unknown[0]!r}; this store has {self.zones}")
        zone_kept = np.zeros(len(self.zones) + 1, bool)  # shifted by one: slot 0 is the voucher
        zone_kept[0] = True
        zone_kept[[self.zones.index(name) + 1 for name in wanted]] = True

        graphs = self.session_graph[rows]
        n_graphs = len(rows)
        node_start, node_count = self.node_ptr[graphs], np.diff(self.node_ptr)[graphs]
        nodes = _concat_ranges(node_start, node_count)
        keep = zone_kept[self.node_zone[nodes].astype(np.int64) + 1]
        new_position = np.cumsum(keep) - 1

        edge_count = np.diff(self.edge_ptr)[graphs]
        edges = _concat_ranges(self.edge_ptr[graphs], edge_count)
        first_node = np.repeat(np.cumsum(node_count) - node_count, edge_count)
        src = first_node + self.edge_index[0, edges]
        dst = first_node + self.edge_index[1, edges]
        edge_kept = keep[src] & keep[dst]
        edge_index = np.stack([new_position[src[edge_kept]], new_position[dst[edge_kept]]])

        nodes = nodes[keep]
        graph_of_node = np.repeat(np.arange(n_graphs), node_count)[keep]
        ptr = np.zeros(n_graphs + 1, np.int64)
        ptr[1:] = np.cumsum(np.bincount(graph_of_node, minlength=n_graphs))
        x = np.concatenate([self.node_item[nodes, None], self.node_features[nodes]], axis=1)
        return Batch(x=torch.from_numpy(x), zone=torch.from_numpy(self.node_zone[nodes].astype(np.int64)),
                     edge_index=torch.from_numpy(edge_index.astype(np.int64)),
                     batch=torch.from_numpy(graph_of_node), ptr=torch.from_numpy(ptr),
                     voucher_index=torch.from_numpy(ptr[:-1].copy()),
                     voucher=torch.from_numpy(self.session_voucher[rows]),
                     schema=torch.from_numpy(self.session_schema[rows]))

    # ---------------------------------------------------------------- cache
    def save(self, path: str | Path) -> None:
        """Write every array plus the vocabularies (as JSON text) to one ``.npz`` file, no pickle."""
        with open(path, "wb") as handle:  # an open handle stops numpy from appending ".npz" to the name
            np.savez(handle, meta=np.array(json.dumps(self.vocabulary())),
                     **{k: getattr(self, k) for k in _NODE_ARRAYS})

    @classmethod
    def load(cls, path: str | Path) -> UVGStore:
        with np.load(path, allow_pickle=False) as data:
            vocabulary = json.loads(str(data["meta"]))
            arrays = {k: data[k] for k in _NODE_ARRAYS}
        return cls(**_decode(vocabulary), **arrays)


# -------------------------------------------------------------------- helpers
def _behaviour_graphs(owner, zone, time, item, features, n_graphs: int, is_pre: np.ndarray,
                      z: int | None) -> dict[str, np.ndarray]:
    """Node and edge CSR arrays from item events (``owner`` graph, ``zone``, ``time``), all graphs at once.

    ``z=None`` gives the voucher-items star (every item ↔ voucher, no chain); otherwise the UVG edges of the
    module docstring.
    """
    order = _sort_within(owner.astype(np.int64) * len(is_pre) + zone, time)
    owner, zone = owner[order].astype(np.int64), zone[order].astype(np.int64)
    item, features = item[order], features[order]
    n_events = len(owner)
    counts = np.bincount(owner, minlength=n_graphs)
    node_ptr = np.zeros(n_graphs + 1, np.int64)
    node_ptr[1:] = np.cumsum(counts + 1)
    event_start = node_ptr[:-1] - np.arange(n_graphs)  # first event of each graph in the sorted events
    local = 1 + np.arange(n_events) - event_start[owner]  # graph-local node position, voucher = 0

    n_nodes = int(node_ptr[-1])
    is_item = np.ones(n_nodes, bool)
    is_item[node_ptr[:-1]] = False
    node_item = np.zeros(n_nodes, np.int64)
    node_features = np.zeros((n_nodes, features.shape[1]), np.int64)
    node_zone = np.full(n_nodes, VOUCHER_ZONE, np.int8)
    node_item[is_item], node_features[is_item], node_zone[is_item] = item, features, zone

    group = owner * len(is_pre) + zone
    starts_group = np.ones(n_events, bool)
    starts_group[1:] = group[1:] != group[:-1]
    position = np.arange(n_events) - np.maximum.accumulate(np.where(starts_group, np.arange(n_events), 0))
    if z is None:
        src = np.concatenate([local, np.zeros(n_events, np.int64)])
        dst = np.concatenate([np.zeros(n_events, np.int64), local])
        edge_owner = np.concatenate([owner, owner])
    else:
        chain = ~starts_group[1:]  # event i and i + 1 are chronological neighbours in one zone
        group_size = np.bincount(group, minlength=n_graphs * len(is_pre))[group]
        pre = is_pre[zone]
        near = np.where(pre, position >= group_size - z, position < z)
        src = np.concatenate([local[:-1][chain], np.where(pre, local, 0)[near]])
        dst = np.concatenate([local[1:][chain], np.where(pre, 0, local)[near]])
        edge_owner = np.concatenate([owner[:-1][chain], owner[near]])
    by_graph = np.argsort(edge_owner, kind="stable")
    edge_ptr = np.zeros(n_graphs + 1, np.int64)
    edge_ptr[1:] = np.cumsum(np.bincount(edge_owner, minlength=n_graphs))
    edge_index = np.stack([src[by_graph], dst[by_graph]]).astype(np.int32)
    return {"node_ptr": node_ptr, "node_item": node_item, "node_features": node_features, "node_zone": node_zone,
            "edge_ptr": edge_ptr, "edge_index": edge_index}


def _nearest_first_rank(owner: np.ndarray, key: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Rank (0, 1, …) of each masked row within its ``owner`` by ascending ``key``; unmasked rows get 0."""
    index = np.flatnonzero(mask)
    order = index[_sort_within(owner[index].astype(np.int64), key[index])]
    sorted_owner = owner[order]
    starts = np.ones(len(order), bool)
    starts[1:] = sorted_owner[1:] != sorted_owner[:-1]
    positions = np.arange(len(order))
    rank = np.zeros(len(owner), np.int64)
    rank[order] = positions - np.maximum.accumulate(np.where(starts, positions, 0))
    return rank


def _sort_within(group: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Permutation sorting by integer ``group``, then ``key``: two stable sorts, faster than ``lexsort``."""
    by_key = np.argsort(key, kind="stable")
    return by_key[np.argsort(group[by_key], kind="stable")]


def _concat_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + c) for s, c in zip(starts, counts)])`` without the loop."""
    total = int(counts.sum())
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(total)


def _seconds(series: pd.Series) -> np.ndarray:
    """Times as float seconds: datetimes (naive = UTC) or plain numbers, so sessions and events compare."""
    if pd.api.types.is_datetime64_any_dtype(series):
        if getattr(series.dt, "tz", None) is not None:
            series = series.dt.tz_convert("UTC").dt.tz_localize(None)
        values = series.astype("datetime64[ns]").to_numpy().astype("int64").astype(np.float64) / 1e9
        values[series.isna().to_numpy()] = np.nan
        return values
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _fit_mask(rows, n: int, vocabulary) -> np.ndarray:
    """The sessions the vocabulary is fitted on: ``rows`` (default all); none when a ``vocabulary`` is reused."""
    if vocabulary is not None and rows is not None:
        raise DataError(f"pass fit_rows or a fitted vocabulary, not both; got {len(rows)} fit_rows and a vocabulary")
    if rows is None:
        return np.full(n, vocabulary is None)
    mask = np.zeros(n, bool)
    mask[np.asarray(rows, dtype=np.int64)] = True
    return mask


def _item_features(items: pd.DataFrame, names) -> tuple[str, ...]:
    names = tuple(c for c in items.columns if c != "item_id") if names is None else tuple(names)
    missing = [c for c in names if c not in items.columns]
    if missing:
        raise DataError(f"items: {len(missing)} item feature columns missing, e.g. {missing[0]!r}")
    clash = [c for c in names if c in _RESERVED]
    if clash:
        raise DataError(f"items: feature column {clash[0]!r} clashes with a reserved vocabulary name {_RESERVED}")
    return names


def _vocabulary(vocabulary: dict | None, zones: tuple[str, ...], target_zones: tuple[str, ...],
                sessions: pd.DataFrame, items: pd.DataFrame, item_features, fit_item_ids, fit: np.ndarray,
                scoped: bool = False) -> dict:
    """The store's vocabulary fields: ``vocabulary`` decoded when given (nothing fitted), else fitted: the item
    vocabulary from the items acted on in the fit sessions, item features from the whole catalogue (a static
    table), the voucher vocabulary and the voucher terms' mean / std from the fit sessions, and ``scoped``."""
    if vocabulary is not None:
        vocab = _decode(vocabulary)
        if vocab["zones"] != zones:
            raise DataError(f"these tables give the zones {zones}, the vocabulary was fitted on {vocab['zones']}")
        missing = [c for c in vocab["schema_columns"] if c not in sessions]
        if missing:
            raise DataError(f"sessions: {len(missing)} voucher term columns of the vocabulary missing, "
                            f"e.g. {missing[0]!r}")
        _item_features(items, vocab["item_features"])
        return vocab
    features = _item_features(items, item_features)
    columns = tuple(c for c in SCHEMA_COLUMNS if c in sessions)
    terms = voucher_terms(sessions, columns)[fit]
    std = np.nanstd(terms, axis=0)
    encoders = {"item": CategoryEncoder.fit(pd.Series(fit_item_ids, name="item_id")),
                "voucher": CategoryEncoder.fit(sessions["voucher_id"][fit]),
                **{name: CategoryEncoder.fit(items[name]) for name in features}}
    return {"zones": zones, "target_zones": target_zones, "item_features": features, "schema_columns": columns,
            "encoders": encoders, "schema_stats": {"mean": np.nanmean(terms, axis=0).tolist(),
                                                   "std": np.where(std > 0, std, 1.0).tolist()},
            "scoped": scoped}


def _decode(vocabulary: dict) -> dict:
    """The store fields of a :meth:`UVGStore.vocabulary` dict."""
    return {**{name: tuple(vocabulary[name]) for name in _VOCABULARY_NAMES},
            "encoders": {name: CategoryEncoder.from_dict(e) for name, e in vocabulary["encoders"].items()},
            "schema_stats": vocabulary["schema_stats"], "scoped": bool(vocabulary.get("scoped", False))}


def _item_codes(vocab: dict, items: pd.DataFrame, item_ids: np.ndarray):
    """Item codes (N,) and feature codes (N, F); items missing from the catalogue get feature code 0."""
    encoders, features = vocab["encoders"], vocab["item_features"]
    catalogue = items.drop_duplicates("item_id")
    where = pd.Index(catalogue["item_id"]).get_indexer(item_ids)
    found = where >= 0
    columns = [np.where(found, encoders[name].transform(catalogue[name])[np.maximum(where, 0)], 0)
               for name in features]
    feature_codes = np.stack(columns, axis=1) if columns else np.zeros((len(item_ids), 0))
    item = encoders["item"].transform(pd.Series(item_ids, name="item_id")).astype(np.int64)
    return item, feature_codes.astype(np.int64)


def _scope_codes(vouchers: np.ndarray, item_ids: np.ndarray, voucher_items: pd.DataFrame | None) -> np.ndarray:
    """The scope code of each (voucher, item) pair: :data:`SCOPE_IN` when ``voucher_items`` lists it,
    :data:`SCOPE_OUT` when it lists the voucher with other items; :data:`SCOPE_UNKNOWN` for a voucher it does not
    list, and for every pair without ``voucher_items`` (a warning)."""
    if voucher_items is None:
        if len(item_ids):
            warnings.warn("the model marks each item of a session's graph in or out of its voucher's scope, and these "
                          "tables have no voucher_items: every item's scope is read as unknown (pass voucher_items)",
                          stacklevel=4)
        return np.full(len(item_ids), SCOPE_UNKNOWN, np.int64)
    listed = pd.MultiIndex.from_frame(voucher_items[list(VOUCHER_ITEM_COLUMNS)])
    found = listed.get_indexer(pd.MultiIndex.from_arrays([vouchers, item_ids])) >= 0
    scoped = pd.Index(pd.unique(voucher_items["voucher_id"])).get_indexer(vouchers) >= 0
    return np.where(found, SCOPE_IN, np.where(scoped, SCOPE_OUT, SCOPE_UNKNOWN)).astype(np.int64)


def voucher_terms(sessions: pd.DataFrame, columns) -> np.ndarray:
    return sessions[list(columns)].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64).reshape(len(sessions), -1)


def _voucher_features(vocab: dict, sessions: pd.DataFrame) -> dict[str, np.ndarray]:
    """Session voucher codes and voucher terms (min_spend, discount) standardised with the vocabulary's mean / std."""
    stats = vocab["schema_stats"]
    terms = (voucher_terms(sessions, vocab["schema_columns"]) - np.asarray(stats["mean"])) / np.asarray(stats["std"])
    return {"session_voucher": vocab["encoders"]["voucher"].transform(sessions["voucher_id"]).astype(np.int64),
            "session_schema": np.nan_to_num(terms).astype(np.float32)}

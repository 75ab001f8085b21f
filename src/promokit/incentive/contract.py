"""The incentive-experiment contract: customers, merchants and the bipartite graph between them.

Tables (CSV or Parquet)
-----------------------
``customers`` — one row per customer of the randomized experiment:

================  =========================================================================================
``customer_id``   unique key, any type
``level``         the incentive value r^c offered (a coupon), a number in the value list R
``redeemed``      label y^c, 0/1; missing (NaN, an empty cell) for a customer without a label — one held out, or
                  outside the experiment — who stays in the graph (its ``level`` may be missing too)
other columns     customer features, typed by :func:`~promokit.data.spec.infer_feature_columns`
================  =========================================================================================

``merchants`` — one row per merchant: ``merchant_id``, ``level`` (the commission r^m offered, in R),
``shares`` (incentives shared in the label window, a whole number ≥ 0), ``prior_shares`` (shared in the window
before, ≥ 0: the paper's normaliser, section 4) and merchant features.

``edges`` — the customer–merchant interaction graph: ``customer_id``, ``merchant_id``, optional ``weight``
(payments, ≥ 0) and numeric edge features. Every id must be in its node table; nodes without edges are allowed.

Without a merchant side (a coupon experiment with customers only, the common e-commerce case) ``merchants`` and
``edges`` are both left out: the customers alone train the models that need no graph (``lr``, ``dnn``, ``dnn-h``).

Instead of merchants, the graph the GNN models read may be one of (:data:`GRAPHS`):

- ``item_edges`` — a customer–item graph (purchases, views): ``customer_id``, ``item_id``, optional ``weight`` and
  numeric edge features, with an optional ``items`` table (``item_id`` and item features; left out, the items are
  the ids of ``item_edges``, known by their edges alone). Items pass messages as merchants do, but have no
  labels, no score and no budget;
- ``customer_edges`` — a customer–customer graph (referrals, shared devices, friends): ``customer_id``,
  ``neighbour_id`` (both customers), optional ``weight`` and numeric edge features. Edges are undirected (each row
  links both ways); a customer linked to itself is an error.

The value list R is the sorted distinct levels of both tables, or the ``levels`` given; a level outside it is
an error. For scoring (``require_labels=False``) ``level``, ``redeemed``, ``shares`` and ``prior_shares`` may be
absent, and so may a column ``labels`` maps a role to. Every broken rule is a one-line :class:`DataError` naming the table, column, count and an example row.
:func:`read_tables` reads the three from a folder or a mapping of paths and frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.spec import (FeatureSpec, check_label_roles, infer_feature_columns, keyed_table, map_labels,
                                require_columns, require_label_columns, table_types)
from promokit.data import datasets

CUSTOMER, MERCHANT, ITEM, NEIGHBOUR = "customer_id", "merchant_id", "item_id", "neighbour_id"
LEVEL, REDEEMED, SHARES, PRIOR_SHARES, WEIGHT = "level", "redeemed", "shares", "prior_shares", "weight"
CUSTOMER_LABELS = (LEVEL, REDEEMED)
TABLES = ("customers", "merchants", "edges", "items", "item_edges", "customer_edges")
#: What the customers' edges may lead to → the tables that give that graph (the first one required).
GRAPHS = {"merchants": ("edges", "merchants"), "items": ("item_edges", "items"), "customers": ("customer_edges",)}
#: What to give to score with a model fit on each graph (``none``: customers only).
GRAPH_TABLES = {"none": "the customers alone, without merchants and edges",
                "merchants": "its merchants and edges with the customers",
                "items": "its item_edges (and items) with the customers",
                "customers": "its customer_edges with the customers"}
MERCHANT_LABELS = (LEVEL, SHARES, PRIOR_SHARES)
#: The label roles ``labels`` may map (``level`` in both node tables).
LABELS = (LEVEL, REDEEMED, SHARES, PRIOR_SHARES)


@dataclass
class IncentiveTables:
    """Validated tables; node tables keep their row order (row = node index) with a RangeIndex.

    ``edges`` holds ``customer`` and the other end's column :attr:`partner_column` (node indices: ``merchant``,
    ``item``, or ``neighbour`` for a customer–customer graph, whose edges it holds in both directions), ``weight``
    (1 when not given) and the edge features. ``graph`` says which (:data:`GRAPHS`, or ``none``: customers only);
    merchants are only ever a ``merchants`` graph's (``items`` and ``item_spec`` hold the items). Labels are float
    arrays (NaN where unknown); ``customer_level`` / ``merchant_level`` are indices into ``levels`` (-1 where
    unknown). ``labels`` is the label mapping the tables were read with (role → column).
    """

    customers: pd.DataFrame
    merchants: pd.DataFrame
    edges: pd.DataFrame
    levels: np.ndarray
    customer_spec: FeatureSpec
    merchant_spec: FeatureSpec
    edge_features: list[str]
    customer_level: np.ndarray
    merchant_level: np.ndarray
    redeemed: np.ndarray
    shares: np.ndarray
    prior_shares: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    #: no merchants and no edges were given: an experiment with customers only (the node tables still exist, empty)
    customers_only: bool = False
    graph: str = "merchants"
    items: pd.DataFrame | None = None
    item_spec: FeatureSpec | None = None

    @property
    def partner_column(self) -> str:
        """The column of :attr:`edges` that holds the other end of each customer's edge."""
        return {"items": "item", "customers": "neighbour"}.get(self.graph, "merchant")

    def partners(self) -> tuple[pd.DataFrame, FeatureSpec]:
        """The nodes at the other end of the customers' edges and their feature spec: the merchants, the items, or
        the customers themselves."""
        if self.graph == "items":
            return self.items, self.item_spec
        if self.graph == "customers":
            return self.customers, self.customer_spec
        return self.merchants, self.merchant_spec

    @property
    def labelled_customers(self) -> np.ndarray:
        """Rows of the customers with a ``redeemed`` label (the others are nodes of the graph only)."""
        return np.flatnonzero(~np.isnan(self.redeemed))

    @property
    def has_merchant_labels(self) -> bool:
        return bool(len(self.shares)) and not np.isnan(self.shares).any()

    def merchant_target(self) -> np.ndarray:
        """y^m: shares normalised by the previous window's shares (section 4), ``shares / max(prior_shares, 1)``."""
        return self.shares / np.maximum(self.prior_shares, 1.0)


def check_tables(customers: pd.DataFrame, merchants: pd.DataFrame | None = None, edges: pd.DataFrame | None = None, *,
                 levels: Sequence[float] | None = None, require_labels: bool = True,
                 customer_features: FeatureSpec | None = None,
                 merchant_features: FeatureSpec | None = None,
                 types: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                 items: pd.DataFrame | None = None, item_edges: pd.DataFrame | None = None,
                 customer_edges: pd.DataFrame | None = None,
                 item_features: FeatureSpec | None = None) -> IncentiveTables:
    """Validate the three tables and return them in contract form.

    Feature columns are inferred from the remaining columns (:func:`~promokit.data.spec.infer_feature_columns`;
    ``types``, column → ``"categorical"`` / ``"numeric"``, sets the type of those it names in either table) unless
    ``customer_features`` / ``merchant_features`` name them (a trained model passes its own, so scoring tables may
    carry extra columns). ``labels`` maps the label roles (:data:`LABELS`: ``level`` and ``redeemed`` of the
    customers, ``level``, ``shares`` and ``prior_shares`` of the merchants) to the columns that hold them; for
    scoring (``require_labels=False``) a mapped column may be absent. Without ``merchants`` and ``edges`` (both
    None) the tables are the customers alone: ``customers_only``, with empty merchant and edge tables, unless
    ``item_edges`` (with ``items``, typed by ``item_features`` when given) or ``customer_edges`` give another graph.
    """
    check_label_roles(labels, LABELS)
    if (merchants is None) != (edges is None):
        raise DataError("merchants and edges go together: give both, or neither for an experiment with customers "
                        "only")
    graph = _graph_kind({"merchants": merchants, "edges": edges, "items": items, "item_edges": item_edges,
                         "customer_edges": customer_edges})
    customers_only = graph == "none"
    merchant_labels = require_labels and graph == "merchants"
    customers = _mapped(keyed_table(customers, "customers", CUSTOMER), labels, CUSTOMER_LABELS, "customers",
                        require_labels)
    if graph != "merchants":
        merchants = pd.DataFrame({MERCHANT: pd.Series(dtype=object)})
        edges = pd.DataFrame({CUSTOMER: pd.Series(dtype=object), MERCHANT: pd.Series(dtype=object)})
    else:
        merchants = _mapped(keyed_table(merchants, "merchants", MERCHANT), labels, MERCHANT_LABELS, "merchants",
                            merchant_labels)
    redeemed = _binary(customers, "customers", REDEEMED, require_labels)
    c_level = _levels_column(customers, "customers", require_labels, unlabelled=np.isnan(redeemed))
    m_level = _levels_column(merchants, "merchants", merchant_labels)
    grid = _value_list(levels, c_level, m_level)
    if require_labels:
        _randomised("customers", c_level[~np.isnan(redeemed)])
        _randomised("merchants", m_level)
    shares = _counts(merchants, SHARES, merchant_labels, whole=True)
    prior = _counts(merchants, PRIOR_SHARES, merchant_labels, whole=False)
    if graph == "items":
        items = _items(items, item_edges)
        edge_table, edge_features = _edges(item_edges, "item_edges", (CUSTOMER, customers[CUSTOMER], "customers",
                                                                      "customer"), (ITEM, items[ITEM], "items", "item"))
    elif graph == "customers":
        edge_table, edge_features = _edges(customer_edges, "customer_edges",
                                           (CUSTOMER, customers[CUSTOMER], "customers", "customer"),
                                           (NEIGHBOUR, customers[CUSTOMER], "customers", "neighbour"))
        edge_table = _both_ways(edge_table, customer_edges)
    else:
        edge_table, edge_features = _edges(edges, "edges", (CUSTOMER, customers[CUSTOMER], "customers", "customer"),
                                           (MERCHANT, merchants[MERCHANT], "merchants", "merchant"))
    given = {"merchants": edges, "items": item_edges, "customers": customer_edges}.get(graph)
    counts = {"edges": 0 if given is None else len(given), "customers": len(customers), "merchants": len(merchants),
              "unlabelled_customers": int(np.isnan(redeemed).sum()) if REDEEMED in customers.columns else 0,
              "isolated_customers": int(len(customers) - edge_table["customer"].nunique())}
    if graph == "items":
        counts.update(items=len(items), isolated_items=int(len(items) - edge_table["item"].nunique()))
    elif graph != "customers":
        counts["isolated_merchants"] = int(len(merchants) - edge_table["merchant"].nunique())
    frames = {"customers": customers, "merchants": merchants, **({"items": items} if graph == "items" else {})}
    given_types = table_types(types or {}, frames)
    item_spec = _features(items, "items", ITEM, (), item_features, given_types["items"]) if graph == "items" else None
    return IncentiveTables(
        customers=customers, merchants=merchants, edges=edge_table, levels=grid,
        customer_spec=_features(customers, "customers", CUSTOMER, CUSTOMER_LABELS + (REDEEMED,), customer_features,
                                given_types["customers"]),
        merchant_spec=_features(merchants, "merchants", MERCHANT, MERCHANT_LABELS,
                                None if graph != "merchants" else merchant_features, given_types["merchants"]),
        edge_features=edge_features, customer_level=_level_index(c_level, grid), merchant_level=_level_index(m_level, grid),
        redeemed=redeemed, shares=shares, prior_shares=prior, counts=counts, labels=dict(labels or {}),
        customers_only=customers_only, graph=graph, items=items if graph == "items" else None, item_spec=item_spec)


def read_tables(data, **checks) -> IncentiveTables:
    """The :class:`IncentiveTables` of ``data``: tables already checked, as they are (``checks`` unused); a mapping
    of ``customers``, ``merchants`` and ``edges`` to DataFrames or paths (:func:`~promokit.data.read_table`: CSV,
    Parquet or a directory of Parquet parts; ``merchants`` and ``edges`` left out, or None, for customers only); or
    a folder holding them as ``<name>.parquet``, ``<name>.csv`` or a directory ``<name>/`` of parts (what
    ``promokit incentive synth`` writes). Tables read are validated by :func:`check_tables` with ``checks``
    (``levels``, ``require_labels``, ``types`` …)."""
    if isinstance(data, IncentiveTables):
        return data
    frames = datasets.read_tables(data, TABLES, ("customers",), "incentive data")
    nodes = [frames.pop(name, None) for name in TABLES[:3]]  # customers, merchants, edges; the rest by name
    return check_tables(*nodes, **frames, **checks)


def check_customer_part(customers: pd.DataFrame, edges: pd.DataFrame, *, levels: Sequence[float],
                        customer_features: FeatureSpec, edge_features: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One part of a graph in parts, for scoring (:mod:`promokit.incentive.parts`): the part's customers, checked
    as :func:`check_tables` checks them (a part may be empty), and the edges of those customers, co-partitioned
    with them. Returns the customers and the edges as ``node`` (the customer's row in the part), ``right_key``
    (the merchant_id), ``weight`` and ``edge_features``."""
    customers = _node_part(customers, "customers", CUSTOMER, levels, customer_features,
                           unlabelled=np.isnan(_binary(customers, "customers", REDEEMED, False)))
    require_columns(edges, [CUSTOMER, MERCHANT, *edge_features], "edges")
    node = pd.Index(customers[CUSTOMER]).get_indexer(edges[CUSTOMER])
    elsewhere = node < 0
    if elsewhere.any():
        raise DataError(f"edges: column {CUSTOMER!r} has {int(elsewhere.sum())} values in {len(edges)} rows that are "
                        f"not in this part's customers, e.g. {example_row(edges, elsewhere, [CUSTOMER, MERCHANT])}; "
                        "in parts, part k of the edges holds the edges of part k's customers")
    missing = edges[MERCHANT].isna().to_numpy()
    if missing.any():
        raise DataError(f"edges: column {MERCHANT!r} has {int(missing.sum())} missing values in {len(edges)} rows, "
                        f"e.g. {example_row(edges, missing, [CUSTOMER, MERCHANT])}")
    weight = _weights(edges)
    table = pd.DataFrame({"node": node.astype(np.int64), "right_key": edges[MERCHANT].to_numpy(), WEIGHT: weight})
    for name in edge_features:
        table[name] = _numbers(edges, "edges", name)
    return customers, table


def check_merchant_part(merchants: pd.DataFrame, *, levels: Sequence[float],
                        merchant_features: FeatureSpec) -> pd.DataFrame:
    """One part of the merchants of a graph in parts, for scoring, checked as :func:`check_tables` checks them."""
    merchants = _node_part(merchants, "merchants", MERCHANT, levels, merchant_features)
    _counts(merchants, SHARES, False, whole=True)
    _counts(merchants, PRIOR_SHARES, False, whole=False)
    return merchants


def prior_shares(merchants: pd.DataFrame) -> np.ndarray:
    """The merchants' ``prior_shares`` (NaN when the table has none), as :func:`check_tables` reads them."""
    return _counts(merchants, PRIOR_SHARES, False, whole=False)


def _mapped(frame: pd.DataFrame, labels: dict[str, str] | None, roles: tuple[str, ...], table: str,
            require_labels: bool) -> pd.DataFrame:
    """``frame`` with its label columns under their roles' names (:func:`~promokit.data.spec.map_labels`); for
    scoring, a mapped column it lacks is left out as an absent label is."""
    if not require_labels:
        labels = {role: column for role, column in (labels or {}).items() if column in frame.columns}
    return map_labels(frame, labels, roles, table)


def _node_part(frame: pd.DataFrame, table: str, key: str, levels: Sequence[float], spec: FeatureSpec,
               unlabelled: np.ndarray | None = None) -> pd.DataFrame:
    """A part of a node table: keyed (an empty part allowed), its features present, its levels in the list (a
    level may be missing on the ``unlabelled`` rows)."""
    if len(frame):
        frame = keyed_table(frame, table, key)
    require_columns(frame, [key, *spec.features], table)
    levels_column = _levels_column(frame, table, False, unlabelled)
    if levels_column is not None:
        _value_list(levels, levels_column, None)
    return frame.reset_index(drop=True)


def _numbers(frame: pd.DataFrame, table: str, column: str, may_miss: np.ndarray | None = None) -> np.ndarray:
    """A column as float64; text, NaN or infinite values are an error, except a missing value (NaN) on the rows
    ``may_miss`` marks."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if may_miss is not None:
        bad &= ~(may_miss & frame[column].isna().to_numpy())
    if bad.any():
        raise DataError(f"{table}: column {column!r} has {int(bad.sum())} missing, non-numeric or infinite values "
                        f"in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values


def _levels_column(frame: pd.DataFrame, table: str, required: bool,
                   unlabelled: np.ndarray | None = None) -> np.ndarray | None:
    """The offered levels (NaN where an ``unlabelled`` row has none)."""
    if LEVEL not in frame.columns:
        if required:
            require_label_columns(frame, [LEVEL], table)
        return None
    return _numbers(frame, table, LEVEL, unlabelled)


def _value_list(levels, c_level, m_level) -> np.ndarray:
    if levels is not None:
        grid = np.asarray(levels, dtype=np.float64)
        if grid.ndim != 1 or len(grid) < 2 or not np.isfinite(grid).all():
            raise DataError(f"levels must be at least two finite numbers, got {list(np.atleast_1d(levels))}")
        if (np.diff(grid) <= 0).any():
            raise DataError(f"levels must be strictly increasing, got {grid.tolist()}")
    else:
        seen = [v[~np.isnan(v)] for v in (c_level, m_level) if v is not None]
        if not seen:
            raise DataError("no value list: the tables have no 'level' column; pass the levels")
        grid = np.unique(np.concatenate(seen))
        if len(grid) < 2:
            raise DataError(f"the experiment needs at least two incentive levels to learn a response; the tables "
                            f"have only {grid.tolist()}")
    if (grid < 0).any():
        raise DataError(f"incentive levels must be ≥ 0, got {grid.tolist()}")
    for table, values in (("customers", c_level), ("merchants", m_level)):
        if values is None:
            continue
        outside = ~np.isin(values, grid) & ~np.isnan(values)
        if outside.any():
            raise DataError(f"{table}: column 'level' has {int(outside.sum())} values outside the value list "
                            f"{grid.tolist()}, e.g. {values[outside][0]:g}")
    return grid


def _randomised(table: str, values: np.ndarray | None) -> None:
    """A response to the value can only be learned from rows offered different values."""
    if values is not None and len(np.unique(values)) < 2:
        raise DataError(f"{table}: every one of the {len(values)} labelled rows was offered the level "
                        f"{values[0]:g}; the experiment must randomise the level over at least two values to learn "
                        "a response to it")


def _level_index(values: np.ndarray | None, grid: np.ndarray) -> np.ndarray:
    if values is None:
        return np.empty(0, dtype=np.int64)
    return np.where(np.isnan(values), -1, np.searchsorted(grid, values)).astype(np.int64)


def _binary(frame: pd.DataFrame, table: str, column: str, required: bool) -> np.ndarray:
    """A 0/1 label column, NaN where the value is missing (an unlabelled row)."""
    if column not in frame.columns:
        if required:
            require_label_columns(frame, [column], table)
        return np.full(len(frame), np.nan)
    missing = frame[column].isna().to_numpy()
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isin(values, (0.0, 1.0)) & ~missing
    if bad.any():
        raise DataError(f"{table}: label column {column!r} must be 0/1 but has {int(bad.sum())} other values in "
                        f"{len(frame)} rows (leave it empty for an unlabelled row), e.g. "
                        f"{example_row(frame, bad, [column])}")
    seen = np.unique(values[~missing])
    if required and len(seen) < 2:
        found = f"only the value {seen[0]:g}" if len(seen) else "no value"
        blank = f" ({int(missing.sum())} missing)" if missing.any() else ""
        raise DataError(f"{table}: label column {column!r} has {found} in {len(frame)} rows{blank}; a response model "
                        "needs redemptions and non-redemptions")
    return values


def _counts(frame: pd.DataFrame, column: str, required: bool, whole: bool) -> np.ndarray:
    if column not in frame.columns:
        if required:
            require_label_columns(frame, [column], "merchants")
        return np.full(len(frame), np.nan)
    values = _numbers(frame, "merchants", column)
    bad = (values < 0) | ((values != np.round(values)) if whole else False)
    if bad.any():
        kind = "whole numbers ≥ 0" if whole else "numbers ≥ 0"
        raise DataError(f"merchants: column {column!r} must hold {kind} but has {int(bad.sum())} other values in "
                        f"{len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values


def _graph_kind(given: dict[str, pd.DataFrame | None]) -> str:
    """Which graph of :data:`GRAPHS` the tables ``given`` (name → frame or None) make, ``none`` without one."""
    kinds = [kind for kind, names in GRAPHS.items() if any(given[name] is not None for name in names)]
    if len(kinds) > 1:
        raise DataError(f"give one graph for the customers, not both {GRAPHS[kinds[0]][0]} and "
                        f"{GRAPHS[kinds[1]][0]}")
    if kinds and given[GRAPHS[kinds[0]][0]] is None:
        raise DataError(f"the {GRAPHS[kinds[0]][1]} table needs the {GRAPHS[kinds[0]][0]} table linking them to the "
                        "customers")
    return kinds[0] if kinds else "none"


def _items(items: pd.DataFrame | None, item_edges: pd.DataFrame) -> pd.DataFrame:
    """The items table, or without one the items named by ``item_edges`` (in order of first appearance)."""
    if items is not None:
        return keyed_table(items, "items", ITEM)
    require_columns(item_edges, [CUSTOMER, ITEM], "item_edges")
    missing = item_edges[ITEM].isna().to_numpy()
    if missing.any():
        raise DataError(f"item_edges: column {ITEM!r} has {int(missing.sum())} missing values in {len(item_edges)} "
                        f"rows, e.g. {example_row(item_edges, missing, [CUSTOMER, ITEM])}")
    if not len(item_edges):
        raise DataError("item_edges: the table is empty; without an items table the items are those it names")
    return pd.DataFrame({ITEM: pd.unique(item_edges[ITEM])})


def _edges(edges: pd.DataFrame, table: str, *ends: tuple[str, pd.Series, str, str]) -> tuple[pd.DataFrame, list[str]]:
    """The edge table as node indices: each end (edge column, the node table's ids, its name, the index column)
    must name a node of its table."""
    ids = [column for column, *_ in ends]
    require_columns(edges, ids, table)
    table_out = {}
    for column, keys, nodes, index in ends:
        position = pd.Index(keys).get_indexer(edges[column])
        unknown = position < 0
        if unknown.any():
            raise DataError(f"{table}: column {column!r} has {int(unknown.sum())} values in {len(edges)} rows that "
                            f"are not in the {nodes} table, e.g. {example_row(edges, unknown, ids)}")
        table_out[index] = position.astype(np.int64)
    table_out[WEIGHT] = _weights(edges, table)
    features = [c for c in edges.columns if c not in (*ids, WEIGHT)]
    frame = pd.DataFrame(table_out)
    for name in features:
        frame[name] = _numbers(edges, table, name)
    return frame, features


def _both_ways(edges: pd.DataFrame, given: pd.DataFrame) -> pd.DataFrame:
    """Undirected customer–customer edges, each row once per direction; a customer linked to itself is an error
    (the model adds each customer's own state itself)."""
    loop = (edges["customer"] == edges["neighbour"]).to_numpy()
    if loop.any():
        raise DataError(f"customer_edges: {int(loop.sum())} of {len(edges)} rows link a customer to itself, e.g. "
                        f"{example_row(given, loop, [CUSTOMER, NEIGHBOUR])}; drop them")
    reverse = edges.rename(columns={"customer": "neighbour", "neighbour": "customer"})
    return pd.concat([edges, reverse[edges.columns]], ignore_index=True)


def _weights(edges: pd.DataFrame, table: str = "edges") -> np.ndarray:
    """The ``weight`` column (1 when absent): finite numbers ≥ 0."""
    if WEIGHT not in edges.columns:
        return np.ones(len(edges))
    weight = _numbers(edges, table, WEIGHT)
    negative = weight < 0
    if negative.any():
        raise DataError(f"{table}: column 'weight' has {int(negative.sum())} negative values in {len(edges)} rows, "
                        f"e.g. {example_row(edges, negative, [WEIGHT])}")
    return weight


def _features(frame: pd.DataFrame, table: str, key: str, contract: tuple[str, ...],
              given: FeatureSpec | None, types: dict[str, str]) -> FeatureSpec:
    if given is not None:
        require_columns(frame, given.features, table)
        return FeatureSpec(categorical=list(given.categorical), numeric=list(given.numeric), group_key=None,
                           min_count=given.min_count)
    categorical, numeric = infer_feature_columns(frame, {key, *contract}, types)
    return FeatureSpec(categorical=categorical, numeric=numeric, group_key=None, types=types)

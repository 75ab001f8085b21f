"""Item embeddings for DMBGN's item nodes (DMBGN section 3.4.2): pre-trained by MetaPath2Vec, or supplied.

Pre-training (:func:`pretrain_item_embeddings`)
-----------------------------------------------
The paper pre-trains the item nodes' first-layer embeddings f⁽⁰⁾ with "a meta-path type graph embedding
algorithm" over the logged behaviour. Here: **MetaPath2Vec** (Dong, Chawla and Swami, "metapath2vec: Scalable
Representation Learning for Heterogeneous Networks", KDD 2017; PyG ``torch_geometric.nn.MetaPath2Vec``) on a
heterogeneous co-occurrence graph built from the **training sessions only** (never a validation or test
session, so it cannot leak their behaviour):

- user–item edges: the ``atc`` / ``ord`` behaviour events of the training sessions (``tables.events``), each
  linking the session's user to the item (one edge per distinct pair);
- voucher–item edges: ``tables.voucher_items`` pairs of the training sessions' vouchers, when the tables have
  them (AmExpert has no behaviour log, only these).

Walks follow the metapath item → user → item (items bought or carted by the same users), item → voucher →
item (items of the same voucher), or, when both kinds of edge exist, item → user → item → voucher → item; a
walk that reaches a node without the next relation stops, and context windows reaching past its end are
dropped. Skip-gram with negative sampling then pulls co-occurring items together.

Rows are the store's item codes (:meth:`UVGStore.vocabulary`, fitted on the training sessions): items outside
that vocabulary are dropped from the graph. Row 0 (the out-of-vocabulary code) and the rows of vocabulary
items without any edge are **zeros**. Differences from the paper: one embedding per item for both behaviour
types (the paper trains add-to-cart and order separately) and no category / brand / shop side information
(the UVG encoder embeds those item features beside the item id anyway).

User-supplied embeddings (:func:`read_item_embeddings`)
-------------------------------------------------------
A CSV or Parquet table, one row per item:

==========  ====================================================================================
``item_id``  the items table's item id (same values and type)
k columns    the embedding, every other column, any names, all numeric and finite (k ≥ 1)
==========  ====================================================================================

Rows of items the model never saw in training are ignored (they are out-of-vocabulary for it anyway); the
model's training items without a row get zeros, and a warning counts them.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from promokit.data import DataError, read_table
from promokit.data.errors import example_row, unique_index
from promokit.data.spec import missing_column_message
from promokit.training import progress_display
from promokit.voucher.graph import UVGStore

#: ``item_embeddings`` value that asks for MetaPath2Vec pre-training (any other string is a table's path).
METAPATH2VEC = "metapath2vec"
BEHAVIOUR_ACTIONS = ("atc", "ord")
#: Estimator parameters of the item embeddings: the first two are the estimator's own (never passed to the
#: network), ``freeze_items`` and ``item_dim`` are DMBGN's.
ESTIMATOR_KEYS = ("item_embeddings", "item_pretrain")
ITEM_PARAMS = (*ESTIMATOR_KEYS, "freeze_items", "item_dim")
#: Start of the skip-gram table: PyG's N(0, 1) is large next to what a few epochs of SparseAdam move (with it
#: items of one category ended barely closer than others on the synthetic world); word2vec starts small too.
INIT_STD = 0.1
PRETRAIN_OPTIONS = ("dim", "walk_length", "context_size", "walks_per_node", "num_negative_samples", "epochs",
                    "batch_size", "lr", "seed", "progress")

_USER_ITEM = [("item", "acted_on_by", "user"), ("user", "acts_on", "item")]
_VOUCHER_ITEM = [("item", "applies_to", "voucher"), ("voucher", "covers", "item")]


# ------------------------------------------------------------------------------------------------ pre-training
def pretrain_item_embeddings(tables, train_rows, store: UVGStore, *, dim: int = 16, walk_length: int = 20,
                             context_size: int = 5, walks_per_node: int = 10, num_negative_samples: int = 5,
                             epochs: int = 5, batch_size: int = 16, lr: float = 0.05, seed: int = 0,
                             progress: bool = True) -> Tensor:
    """MetaPath2Vec item embeddings (DMBGN §3.4.2; Dong et al. 2017) from the co-occurrence graph of the
    training sessions ``train_rows`` of ``tables`` (see the module docstring): a float32 tensor
    ``(store.cardinality("item"), dim)`` whose row ``c`` embeds the item of code ``c``; row 0 (OOV) and the
    items without any edge are zeros.

    ``walk_length`` steps per walk, ``walks_per_node`` walks from each item, skip-gram windows of
    ``context_size`` nodes with ``num_negative_samples`` negatives each, ``epochs`` passes over the items in
    batches of ``batch_size`` start items, SparseAdam at ``lr``. Seeded: the same inputs and ``seed`` give a
    bit-identical tensor (torch's global random state is left as it was). ``progress`` shows a rich progress
    bar; Ctrl-C stops the training and keeps what was learned so far (with a warning).

    On the synthetic demo world (1,000 items, 2,900 training users, 119k distinct user–item pairs) the defaults
    take about 15 s on one core, and the nearest item (cosine) of 97 % of the items is of their own category,
    which only the users' behaviour reveals.
    """
    from torch_geometric.nn import MetaPath2Vec

    _check_options(dim=dim, walk_length=walk_length, context_size=context_size, walks_per_node=walks_per_node,
                   num_negative_samples=num_negative_samples, epochs=epochs, batch_size=batch_size, lr=lr)
    edges, sizes = co_occurrence_graph(tables, train_rows, store)
    metapath = ([*(_USER_ITEM if ("user", "acts_on", "item") in edges else ()),
                 *(_VOUCHER_ITEM if ("voucher", "covers", "item") in edges else ())])
    if not metapath:
        raise DataError(f"item embeddings: the {len(np.asarray(train_rows).ravel())} training sessions have no "
                        f"{'/'.join(BEHAVIOUR_ACTIONS)} events and no voucher_items of the model's items; "
                        "there is no co-occurrence to learn from")
    n_items = sizes["item"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MetaPath2Vec(edges, embedding_dim=dim, metapath=metapath, walk_length=walk_length,
                             context_size=context_size, walks_per_node=walks_per_node,
                             num_negative_samples=num_negative_samples, num_nodes_dict=sizes, sparse=True)
        torch.nn.init.normal_(model.embedding.weight, std=INIT_STD)
        loader = model.loader(batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
        optimizer = torch.optim.SparseAdam(list(model.parameters()), lr=lr)
        model.train()
        epoch = 0
        with progress_display(progress) as bar:
            try:
                for epoch in range(epochs):
                    _train_epoch(model, loader, optimizer, bar, f"item embeddings {epoch + 1}/{epochs}")
            except KeyboardInterrupt:
                warnings.warn(f"item-embedding pre-training interrupted in epoch {epoch + 1} of {epochs}: "
                              "keeping the embeddings learned so far", stacklevel=2)
    table = model("item").detach().clone().float()
    linked = np.zeros(n_items, bool)
    for (source, _, _), edge_index in edges.items():
        if source == "item":
            linked[edge_index[0].numpy()] = True
    linked[0] = False
    table[torch.from_numpy(~linked)] = 0.0
    return table.contiguous()


def co_occurrence_graph(tables, train_rows, store: UVGStore) -> tuple[dict, dict[str, int]]:
    """The heterogeneous graph of :func:`pretrain_item_embeddings`: ``edge_index`` tensors keyed by PyG edge
    type (both directions of user–item and voucher–item) and the node count of each type. Item nodes are the
    store's item codes; users are numbered in their order of appearance in the kept events, vouchers in their
    order of appearance among the training sessions. Only the sessions ``train_rows`` (their events, their
    vouchers) are read."""
    sessions = tables.sessions
    rows = np.asarray(train_rows, dtype=np.int64).ravel()
    bad = (rows < 0) | (rows >= len(sessions))
    if bad.any():
        raise DataError(f"train_rows: {int(bad.sum())} of {len(rows)} row indices are outside the {len(sessions)} "
                        f"sessions, e.g. {int(rows[bad][0])}")
    is_train = np.zeros(len(sessions), bool)
    is_train[rows] = True
    item_encoder = store.encoders["item"]
    edges: dict = {}
    sizes = {"item": store.cardinality("item")}

    events = getattr(tables, "events", None)
    if events is not None and len(events):
        owner = pd.Index(sessions["session_id"]).get_indexer(events["session_id"])
        action = events["action"].astype("string").str.lower().isin(BEHAVIOUR_ACTIONS).to_numpy(dtype=bool)
        keep = (owner >= 0) & action
        keep[keep] = is_train[owner[keep]]
        user = pd.factorize(sessions["user_id"].to_numpy()[owner[keep]])[0]
        item = item_encoder.transform(pd.Series(events["item_id"].to_numpy()[keep], name="item_id"))
        pairs = _distinct_pairs(user, item)
        if pairs is not None:
            sizes["user"] = int(pairs[0].max()) + 1
            edges[("user", "acts_on", "item")] = pairs
            edges[("item", "acted_on_by", "user")] = pairs.flip(0)

    voucher_items = getattr(tables, "voucher_items", None)
    if voucher_items is not None and len(voucher_items):
        vouchers = pd.Index(pd.unique(sessions["voucher_id"].to_numpy()[rows]))
        voucher = vouchers.get_indexer(voucher_items["voucher_id"])
        known = voucher >= 0
        item = item_encoder.transform(pd.Series(voucher_items["item_id"].to_numpy()[known], name="item_id"))
        pairs = _distinct_pairs(voucher[known], item)
        if pairs is not None:
            sizes["voucher"] = len(vouchers)
            edges[("voucher", "covers", "item")] = pairs
            edges[("item", "applies_to", "voucher")] = pairs.flip(0)
    return edges, sizes


def _distinct_pairs(owner: np.ndarray, item_code: np.ndarray) -> Tensor | None:
    """``(2, E)`` distinct (owner, item) pairs with a known item (code > 0), sorted; None when there is none."""
    known = item_code > 0
    if not known.any():
        return None
    pairs = np.unique(np.stack([owner[known].astype(np.int64), item_code[known].astype(np.int64)]), axis=1)
    return torch.from_numpy(np.ascontiguousarray(pairs))


def _train_epoch(model, loader, optimizer, bar, description: str) -> float:
    """One pass of skip-gram with negative sampling over walks from every item; windows reaching a dead end
    (the dummy node MetaPath2Vec walks into when a node lacks the next relation) are dropped."""
    task = bar.add_task(description, total=len(loader), loss="") if bar is not None else None
    total, seen = 0.0, 0
    for step, (positive, negative) in enumerate(loader):
        positive = positive[(positive != model.dummy_idx).all(dim=1)]
        if len(positive):
            optimizer.zero_grad(set_to_none=True)
            loss = model.loss(positive, negative)
            loss.backward()
            optimizer.step()
            total, seen = total + loss.item() * len(positive), seen + len(positive)
        if task is not None and (step % 25 == 24 or step == len(loader) - 1):
            bar.update(task, completed=step + 1, loss=f"loss {total / max(seen, 1):.4f}")
    if task is not None:
        bar.remove_task(task)
    return total / seen if seen else math.nan


def _check_options(**options) -> None:
    for name in ("dim", "walk_length", "context_size", "walks_per_node", "num_negative_samples", "batch_size"):
        if int(options[name]) != options[name] or options[name] < 1:
            raise DataError(f"item embeddings: {name} must be a positive integer, got {options[name]!r}")
    if options["context_size"] < 2 or options["context_size"] > options["walk_length"] + 1:
        raise DataError(f"item embeddings: context_size must be between 2 and walk_length + 1 = "
                        f"{options['walk_length'] + 1}, got {options['context_size']}")
    if int(options["epochs"]) != options["epochs"] or options["epochs"] < 0:
        raise DataError(f"item embeddings: epochs must be an integer ≥ 0, got {options['epochs']!r}")
    if not options["lr"] > 0:
        raise DataError(f"item embeddings: lr must be positive, got {options['lr']!r}")


# ------------------------------------------------------------------------------------------------ user table
def read_item_embeddings(path_or_frame: str | os.PathLike | pd.DataFrame, store: UVGStore) -> Tensor:
    """A user-supplied embedding table (schema in the module docstring) aligned to the store's item codes: a
    float32 tensor ``(store.cardinality("item"), k)``, row 0 (OOV) and the training items absent from the
    table zeros (a warning counts the absent ones). One-line :class:`DataError` for a missing ``item_id``
    column or value, no embedding column, a non-numeric column, NaN / infinite values, duplicate item ids, or
    no item in common with the store."""
    if isinstance(path_or_frame, pd.DataFrame):
        frame, where = path_or_frame.reset_index(drop=True), "item embeddings"
    else:
        frame, where = read_table(path_or_frame), f"item embeddings {Path(path_or_frame).name}"
    n = len(frame)
    if "item_id" not in frame.columns:
        raise DataError(f"{where}: " + missing_column_message("item_id", list(frame.columns), "the item id", n))
    missing = frame["item_id"].isna().to_numpy()
    if missing.any():
        raise DataError(f"{where}: column 'item_id' has {int(missing.sum())} missing values in {n} rows, e.g. "
                        f"{example_row(frame, missing)}")
    columns = [c for c in frame.columns if c != "item_id"]
    if not columns:
        raise DataError(f"{where}: no numeric embedding columns beside 'item_id' in {n} rows; the table needs "
                        "item_id and k ≥ 1 numeric columns")
    values = np.empty((n, len(columns)), np.float64)
    for j, column in enumerate(columns):
        series = frame[column]
        parsed = (pd.Series(np.nan, index=frame.index) if pd.api.types.is_bool_dtype(series)
                  else pd.to_numeric(series, errors="coerce"))
        not_number = (parsed.isna() & series.notna()).to_numpy()
        if not_number.any():
            raise DataError(f"{where}: column {column!r} is not numeric: {int(not_number.sum())} of {n} values are "
                            f"not numbers, e.g. {example_row(frame, not_number, ['item_id', column])}")
        values[:, j] = parsed.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        column = columns[int(np.flatnonzero(bad.any(axis=0))[0])]
        rows = bad[:, columns.index(column)]
        raise DataError(f"{where}: column {column!r} has {int(rows.sum())} NaN or infinite values in {n} rows "
                        f"({int(bad.any(axis=1).sum())} rows in all columns), e.g. "
                        f"{example_row(frame, rows, ['item_id', column])}")
    unique_index(frame, "item_id", where)
    encoder = store.encoders["item"]
    code = encoder.transform(frame["item_id"])
    known = code > 0
    n_store = store.cardinality("item") - 1
    if not known.any():
        store_example = encoder.vocabulary[0] if encoder.vocabulary else None
        raise DataError(f"{where}: none of its {n} item_ids is among the model's {n_store} training items, e.g. "
                        f"table {_plain(frame['item_id'].iloc[0])!r} vs model {store_example!r}; item_id must "
                        "hold the items table's ids")
    table = torch.zeros(store.cardinality("item"), len(columns), dtype=torch.float32)
    table[torch.from_numpy(code[known])] = torch.from_numpy(values[known].astype(np.float32))
    present = np.zeros(n_store + 1, bool)
    present[code[known]] = True
    absent = np.flatnonzero(~present[1:])
    if len(absent):
        warnings.warn(f"{where}: {len(absent)} of the model's {n_store} training items have no row and get a zero "
                      f"embedding, e.g. item_id {encoder.vocabulary[absent[0]]!r}", stacklevel=2)
    return table


def _plain(value):
    return value.item() if hasattr(value, "item") else value


# ------------------------------------------------------------------------------------------------ parameters
def check_item_params(params: dict, uses_graphs: bool, model: str) -> dict:
    """Validate the item-embedding parameters of a ``VoucherModel`` (:data:`ITEM_PARAMS`); return ``params``
    with a path made a string (JSON). Only DMBGN-family models (``uses_graphs``) take them."""
    given = [k for k in ITEM_PARAMS if params.get(k) not in (None, False)]
    if given and not uses_graphs:
        raise DataError(f"{given[0]} applies to DMBGN models only (they embed item nodes); model {model!r} has "
                        "no item graph")
    source = params.get("item_embeddings")
    if source is not None:
        if isinstance(source, os.PathLike):
            params = {**params, "item_embeddings": os.fspath(source)}
        elif not isinstance(source, str) or not source:
            raise DataError(f"item_embeddings must be {METAPATH2VEC!r} or the path of a CSV/Parquet table "
                            f"item_id + k numeric columns, got {source!r}")
    options = params.get("item_pretrain")
    if options is not None:
        if not isinstance(options, dict):
            raise DataError(f"item_pretrain must be a dict of MetaPath2Vec options {list(PRETRAIN_OPTIONS)}, "
                            f"got {options!r}")
        unknown = [k for k in options if k not in PRETRAIN_OPTIONS]
        if unknown:
            raise DataError(f"item_pretrain: unknown option {unknown[0]!r}; known: {list(PRETRAIN_OPTIONS)}")
    return params

"""``voucher train`` over sessions and events in parts (``--sessions DIR --events DIR``), never holding them whole.

The parts are paired and checked as ``voucher predict`` pairs them (:mod:`promokit.voucher.parts`): sessions part
*k* and events part *k* hold the same users, each user in one part, so a part's UVGs and redeemed histories (DMBGN
§3.2, §3.5: a user's own sessions) are built from it alone. The items and voucher_items are single files, read
once per worker. The dataset means the one-folder tables whose sessions and events are the parts concatenated;
training over it fits what :meth:`VoucherModel.fit` fits there, in three steps on the executor it is given:

1. **scan**: each part, validated by the contract's :func:`check_tables`, sends the counts of its collection times
   and its events. The driver turns the times into the cuts :meth:`VoucherModel.split_rows` makes (the held-out
   sessions, the latest ``test_fraction`` or those from ``test_from``; validation, the latest fraction of the rest
   or those from a time), so the same sessions are held out and validated on (:class:`SessionSplit`);
2. **count**: each part sends its share of the fit, over its training sessions: the encoder's value counts and
   moments (:meth:`TableEncoder.count`), its labels per role, its users' hashes and, for DMBGN, the item and voucher
   vocabularies of its graphs and the moments of the voucher terms. The driver adds them up into the encoder and the
   graph vocabulary a one-folder fit builds (the same vocabularies; means and deviations to rounding), with the same
   label checks; the label-leak guard judges the first part's training sessions;
3. **train**: the executor's ``train`` (``promokit.training.shard_loop`` in this process with the local executor,
   DDP on Ray Train with the Ray one) streams each worker's shard: a worker reads part *k*, builds its graphs with
   the fitted vocabulary and encodes its sessions (:class:`SessionRows`). A batch may mix the rows of consecutive
   parts, so DMBGN reads graphs from :class:`PartStores`, the stores of the parts a worker holds (a session's id in a
   batch is ``part · STRIDE + row``). DMBGN's UVG pre-training (eq. 6, ``pretrain``) runs first, as a job of its
   own over the same shards (:class:`~promokit.voucher.pretrain.UVGScoring`).

Differences from one folder, as training over parts elsewhere: the rows are shuffled within a part and the parts
visited in a new order each epoch (the same rows per epoch, in other batches), and an ``offset`` wide term (the lr
floor solved on the whole training table) falls back to none, with a warning. Refused, in one line: ``gbdt``
(boosts on the whole training table) and ``lr`` (solved to its optimum on it), MetaPath2Vec item embeddings (random
walks over the whole training graph; a table of item embeddings is read as in one folder), validation on row
indices, and a hold-out of sessions that share one collection time (one folder draws it at random over the whole
table).
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.data import CategoryEncoder, DataError, TableEncoder, read_table
from promokit.data.encoders import NumericEncoder, combine_moments
from promokit.data.ids import id_hashes
from promokit.data.leakage import validation_leak_warning
from promokit.data.parts import read_part
from promokit.data.split import FRACTION, ROWS, TABLE, TIME, Validation, parse_validation
from promokit.data.uris import local_dir
from promokit.training import TrainConfig, auc_metric, take
from promokit.training.device import on_cpu
from promokit.training.shard_loop import TrainJob, checkpoint_folder
from promokit.training.shards import (TEST, TRAIN, VALID, first_with_rows, row_roles, since, summed_time_counts,
                                      time_counts, wide_over_parts)
from promokit.voucher.contract import VoucherTables, check_tables
from promokit.voucher.graph import SCHEMA_COLUMNS, UVGStore, voucher_terms
from promokit.voucher.parts import naming_parts, check_users, pair_parts

#: A session's id in a batch over parts: ``part · STRIDE + row`` (its row in its part).
STRIDE = 1 << 32


@dataclass(frozen=True)
class Source:
    """The dataset in parts: the (sessions, events) part pairs, the reference tables' files, the
    :func:`check_tables` options (``categorical``, ``numeric``, ``terms``, ``item_features``, ``validity``,
    ``labels``) and ``behaviour``: whether the graphs are behaviour graphs (the parts have events; a part without
    events then gets empty behaviour graphs, never voucher–item stars, as in one folder)."""

    pairs: tuple[tuple[Path, Path | None], ...]
    items: Path
    voucher_items: Path | None
    options: dict
    behaviour: bool = False

    def tables(self, k: int) -> VoucherTables:
        """Part *k*, validated with its labels; a contract error names the part's file."""
        sessions, events = self.pairs[k]
        items, voucher_items = _reference(self.items, self.voucher_items)
        with naming_parts({"sessions": sessions, "events": events, "items": self.items,
                           "voucher_items": self.voucher_items}):
            tables = check_tables(read_part(sessions), read_part(events) if events else None, items,
                                  voucher_items=voucher_items, require_labels=True, **self.options)
        return tables


@lru_cache(maxsize=1)
def _reference(items: Path, voucher_items: Path | None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The items and voucher_items tables, read once per process."""
    return read_table(items), read_table(voucher_items) if voucher_items else None


@dataclass(frozen=True)
class SessionSplit:
    """Sessions collected from ``test_from`` on are held out; from ``valid_from`` on (and not held out) validate;
    the rest train (None: no such cut)."""

    valid_from: pd.Timestamp | None
    test_from: pd.Timestamp | None

    def roles(self, sessions: pd.DataFrame) -> np.ndarray:
        collect = sessions["collect_time"]
        return row_roles(len(collect), since(collect, self.valid_from), since(collect, self.test_from))


class PartStores:
    """The UVG stores of the parts a worker holds, seen by DMBGN as one store: session ``part · STRIDE + row`` is row
    ``row`` of part ``part``'s store. Sizes and codes come from the fitted ``vocabulary``. A part's store is kept
    while a batch may still hold its rows: the newest part, and older ones while the rows loaded after them are fewer
    than ``keep_rows`` (a batch and the rows carried into the next)."""

    def __init__(self, vocabulary: dict, keep_rows: int):
        self.sizes = UVGStore.empty(vocabulary)
        self.keep_rows = keep_rows
        self.held: OrderedDict[int, tuple[UVGStore, int]] = OrderedDict()

    def __getstate__(self):  # a job travels to its workers without the stores of the parts last held
        return {**self.__dict__, "held": OrderedDict()}

    def hold(self, part: int, store: UVGStore, rows: int) -> None:
        """Hold part ``part``'s ``store``, from which ``rows`` sessions were loaded; let go of what no batch needs."""
        self.held.pop(part, None)
        self.held[part] = (store, rows)
        while len(self.held) > 1 and sum(r for _, r in list(self.held.values())[1:-1]) >= self.keep_rows:
            self.held.popitem(last=False)

    def __getattr__(self, name):  # zones, target_zones, item_features, schema_columns, encoders, cardinality …
        if name in ("sizes", "held", "keep_rows"):
            raise AttributeError(name)
        return getattr(self.sizes, name)

    def vocabulary(self) -> dict:
        return self.sizes.vocabulary()

    def _split(self, rows) -> tuple[np.ndarray, np.ndarray]:
        rows = (rows.cpu().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)).astype(np.int64)
        return rows.reshape(-1) // STRIDE, rows.reshape(-1) % STRIDE

    def _store(self, part: int) -> UVGStore:
        if part not in self.held:
            raise DataError(f"the graphs of part {part} are no longer held (parts held: {list(self.held)})")
        return self.held[part][0]

    def distinct(self, rows) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`UVGStore.distinct` over the parts: the first rows come grouped by part."""
        parts, local = self._split(rows)
        key = np.zeros((len(local), 3 + len(self.sizes.schema_columns)))
        key[:, 0] = parts
        for part in np.unique(parts):
            store, mine = self._store(int(part)), parts == part
            key[mine, 1:] = np.column_stack([store.session_graph[local[mine]], store.session_voucher[local[mine]],
                                             store.session_schema[local[mine]]])
        _, first, position = np.unique(key, axis=0, return_index=True, return_inverse=True)
        picked = parts[first] * STRIDE + local[first]
        return torch.from_numpy(picked), torch.from_numpy(position.reshape(-1))

    def batch(self, rows, zones: tuple[str, ...] | None = None):
        """:meth:`UVGStore.batch` over the parts: each run of rows of one part batched by its store, joined in order,
        on the CPU (the network moves the batch to its device)."""
        parts, local = self._split(rows)
        starts = np.flatnonzero(np.diff(parts, prepend=-1)) if len(parts) else np.zeros(0, np.int64)
        with on_cpu():
            runs = [self._store(int(parts[s])).batch(local[s:e], zones)
                    for s, e in zip(starts, [*starts[1:], len(parts)])]
            return runs[0] if len(runs) == 1 else _join(runs)


def _join(batches: list):
    """One PyG ``Batch`` of the graphs of ``batches`` in order (the fields of :meth:`UVGStore.batch`)."""
    from torch_geometric.data import Batch

    nodes = torch.tensor([0, *[len(b.x) for b in batches]]).cumsum(0)
    graphs = torch.tensor([0, *[len(b.voucher) for b in batches]]).cumsum(0)
    ptr = torch.cat([batches[0].ptr[:1], *[b.ptr[1:] + nodes[i] for i, b in enumerate(batches)]])
    return Batch(x=torch.cat([b.x for b in batches]), zone=torch.cat([b.zone for b in batches]),
                 edge_index=torch.cat([b.edge_index + nodes[i] for i, b in enumerate(batches)], dim=1),
                 batch=torch.cat([b.batch + graphs[i] for i, b in enumerate(batches)]), ptr=ptr,
                 voucher_index=ptr[:-1].clone(), voucher=torch.cat([b.voucher for b in batches]),
                 schema=torch.cat([b.schema for b in batches]))


@dataclass
class Network:
    """What every training worker builds (a :class:`TrainJob`'s ``estimator``): the model's network from the
    pre-trained UVG encoder ``pretrained`` and the ``items`` embeddings, or, with ``pretraining``, the UVG encoder
    that eq. (6) pre-trains."""

    model: object
    train_config: TrainConfig
    pretrained: dict | None = None
    items: torch.Tensor | None = None
    pretraining: bool = False

    def build_net(self):
        if self.pretraining:
            from promokit.voucher.pretrain import UVGScoring

            return UVGScoring(self.model.store_, self.model.uvg_params, self.items)
        return self.model.build_net(self.pretrained, self.items)

    def validation_metrics(self, labels: dict) -> dict:
        y = labels["redeemed"]
        return {"auc": auc_metric("p_redeem", "redeemed")} if 0 < int(y.sum()) < len(y) else {}


@dataclass(frozen=True)
class SessionRows:
    """The sessions of one role of a dataset's parts, read by a training worker a segment at a time."""

    source: Source
    split: SessionSplit
    role: int

    def load(self, network: Network, segment: tuple[int, int, int]) -> dict[str, torch.Tensor]:
        """Rows ``start:stop`` of this role's sessions of part ``index`` as the network's tensors (their graphs held
        by the model's :class:`PartStores`)."""
        index, start, stop = segment
        model = network.model
        tables = self.source.tables(index)
        tensors = model.tensors(tables)
        rows = np.flatnonzero(self.split.roles(tables.sessions) == self.role)[start:stop]
        if model.uses_graphs:
            model.store_.hold(index, UVGStore.build(tables, **_graph_settings(model),
                                                    vocabulary=model.store_.vocabulary()), len(rows))
            offset = index * STRIDE
            tensors["session"] = tensors["session"] + offset
            tensors["history"] = torch.where(tensors["history"] >= 0, tensors["history"] + offset, -1)
        return take(tensors, torch.from_numpy(rows))


@dataclass(frozen=True)
class PartScan:
    """A part's sessions, the counts of their distinct collection times (ns) and its events."""

    rows: int
    times: tuple | None
    events: int


@dataclass(frozen=True)
class PartCount:
    """A part's share of the fit: sessions, redeemed and unlabelled sessions per role (an unlabelled one's id), the
    encoder's counts and the users' hashes of its training sessions, and for DMBGN the graph vocabulary fitted on them
    with the moments of their voucher terms."""

    rows: list
    positives: list
    unlabelled: list
    example: object
    shares: dict
    subjects: np.ndarray
    vocabulary: dict | None
    terms: list


def train_parts(model, sessions: Path, events: Path | None, items: Path, voucher_items: Path | None, executor,
                scratch: Path, *, options: dict, validation=None, checkpoint_dir: str | os.PathLike | None = None,
                resume: bool = False):
    """Fit ``model`` (a :class:`~promokit.voucher.estimator.VoucherModel` of a network trained by epochs) on the
    sessions and events in parts at ``sessions`` / ``events`` with the reference tables ``items`` /
    ``voucher_items`` (files), read with the :func:`check_tables` ``options`` (``labels`` included), on ``executor``
    (module docstring): part by part in this process on the local executor, else data-parallel on its Ray Train
    workers. ``validation``: None (the latest 10 % of the sessions not held out), a fraction or a time;
    ``checkpoint_dir`` / ``resume`` as in :meth:`VoucherModel.fit` (the pre-training is not checkpointed: a resumed
    run pre-trains again, then continues from the checkpoint); ``scratch``: a folder for the users' hashes. The
    parts may be URIs, ``checkpoint_dir`` and ``scratch`` not (a one-line error). The model comes back fitted, as
    :meth:`VoucherModel.fit` leaves it."""
    check_trains_over_parts(model)
    checkpoint_dir = checkpoint_folder(checkpoint_dir)
    scratch = local_dir(scratch, "scratch")
    model._start_fit()
    wide_over_parts(model.model_params_)
    job, vocabulary = _plan(model, Source(tuple(pair_parts(sessions, events)), items, voucher_items, options),
                            executor, scratch, validation)
    network = job.estimator
    if model.uses_graphs and model.model_params_.get("pretrain"):
        pretraining = Network(model, replace(model.train_config, epochs=int(model.model_params_["pretrain"]),
                                             weight_decay=0.0, embedding_decay=0.0),
                              items=network.items, pretraining=True)
        net, _ = executor.train(replace(job, estimator=pretraining, valid_rows=None,
                                        valid=[[] for _ in job.valid]), None, False)
        network.pretrained = net.state
    model.net_, model.history_ = executor.train(job, checkpoint_dir, resume)
    if model.uses_graphs:
        model.store_ = UVGStore.empty(vocabulary)
        model.net_.attach(model.store_)
    history = model.history_
    kept = history.epochs[history.best_epoch] if 0 <= history.best_epoch < len(history.epochs) else {}
    message = validation_leak_warning({"auc": kept.get("valid_auc")})
    if message:
        warnings.warn(message, stacklevel=2)
    return model


def check_trains_over_parts(model) -> None:
    """A one-line error for a model that cannot train over parts, saying why and what to do instead."""
    if not model.is_neural or hasattr(model.model_class, "solve"):
        how = "boosts its trees" if not model.is_neural else "is solved to its optimum"
        raise DataError(f"model {model.model!r} {how} on the whole training table in one process, so it does not "
                        "train over parts; give the sessions and events as single files, or train a network (dnn, "
                        "wdl, din, dmbgn)")
    if model._model_params.get("item_embeddings") == "metapath2vec":
        raise DataError("`item_embeddings` 'metapath2vec' pre-trains by random walks over the whole training graph, "
                        "which training over parts never holds; give a table of item embeddings (item_id + k "
                        "columns), train without them, or give the sessions and events as single files")


def _plan(model, source: Source, executor, scratch: Path, validation) -> tuple[TrainJob, dict | None]:
    """Scan and count the parts on ``executor``; fit the model's encoder, graph vocabulary and hold-out from the
    counts; cut the shards of the executor's workers. Returns the job and the graph vocabulary (DMBGN)."""
    validation = parts_validation(validation)
    source_file = model.model_params_.get("item_embeddings")
    if source_file is not None and not os.path.exists(source_file):
        raise DataError(f"`item_embeddings` {source_file}: no such file (or pass 'metapath2vec')")
    _reference.cache_clear()
    check_users(executor, list(source.pairs), scratch)
    scans = executor.map(partial(_scan, source), range(len(source.pairs)), label="scanning parts")
    first = first_with_rows([scan.rows for scan in scans], f"{source.pairs[0][0].parent}: no sessions")
    source = replace(source, behaviour=sum(scan.events for scan in scans) > 0)
    counts = summed_time_counts([scan.times for scan in scans if scan.rows])
    counts.index = pd.DatetimeIndex(counts.index.to_numpy().astype("datetime64[ns]"))
    split = _split(model, counts, validation)
    sample = source.tables(first)
    model.feature_spec_ = model._feature_spec(sample)
    model.table_options_, model.labels_ = sample.options, sample.labels
    counted = executor.map(partial(_count, source, split, model), range(len(scans)), label="counting parts")
    rows = np.sum([c.rows for c in counted], axis=0)
    if validation.form == TIME and not rows[VALID]:
        raise DataError(f"`validation` {validation.value} leaves {int(rows[TRAIN])} training and 0 validation sessions of "
                        f"{int(rows.sum())} ({int(rows[TEST])} held out); both must be non-empty")
    _check_labels(model, counted, rows)
    model.encoder_ = TableEncoder.from_counts([c.shares for c in counted], model.feature_spec_)
    model.training_ids_ = np.unique(np.concatenate([c.subjects for c in counted]))
    test_times = counts[counts.index >= split.test_from] if split.test_from is not None else counts.iloc[:0]
    model.holdout_ = {"test_fraction": float(model.test_fraction),
                      "test_from": None if model.test_from is None else str(model.test_cut),
                      "how": "time" if model.test_cut is not None or len(test_times) else "random",
                      "cut": str(test_times.index[0]) if len(test_times) else None, "seed": model.train_config.seed,
                      "rows": int(rows.sum()), "held_out": int(rows[TEST])}
    from promokit.voucher.estimator import FitReport

    model.report_ = FitReport(n_train=int(rows[TRAIN]), n_valid=int(rows[VALID]), n_test=int(rows[TEST]))
    trained = split.roles(sample.sessions) == TRAIN  # the label-leak guard judges the first part's, as value's does
    model.warn_leaks(sample.sessions, _redeemed(sample.sessions), trained)
    vocabulary, items = None, None
    if model.uses_graphs:
        vocabulary = _graph_vocabulary([c for c in counted if c.vocabulary is not None])
        if source_file is not None:
            from promokit.voucher.item_embedding import read_item_embeddings

            items = read_item_embeddings(source_file, UVGStore.empty(vocabulary))
            model.model_params_["item_dim"] = int(items.shape[1])
    validated = rows[VALID] > 0
    job = TrainJob.cut(Network(model, model.train_config, items=items), SessionRows(source, split, TRAIN),
                       SessionRows(source, split, VALID) if validated else None, [int(c.rows[TRAIN]) for c in counted],
                       [int(c.rows[VALID]) for c in counted], executor.workers)
    if model.uses_graphs:
        model.store_ = PartStores(vocabulary, 2 * job.batch_size + 1)
    return job, vocabulary


def _graph_settings(model) -> dict:
    from promokit.voucher.estimator import GRAPH_PARAMS

    return {k: model.model_params_[k] for k in GRAPH_PARAMS if k in model.model_params_}


def _scan(source: Source, k: int) -> PartScan:
    tables = source.tables(k)
    collect = tables.sessions["collect_time"].to_numpy().astype("datetime64[ns]").view(np.int64)
    return PartScan(len(collect), time_counts(collect) if len(collect) else None,
                    0 if tables.events is None else len(tables.events))


def parts_validation(validation) -> Validation:
    """``fit(validation=…)`` over sessions in parts (:func:`~promokit.data.split.parse_validation`): a fraction of the
    latest sessions or a time; row positions and a table apart are refused in one line."""
    from promokit.voucher.estimator import VALIDATION_FRACTION

    return parse_validation(validation, default=VALIDATION_FRACTION, model="a voucher model over parts",
                            tables=(pd.DataFrame, VoucherTables),
                            takes={FRACTION: "a fraction in [0, 1) of the sessions (the latest)",
                                   TIME: "a time (the sessions collected from it on)"},
                            refuses={ROWS: "sessions in parts have no row positions",
                                     TABLE: "the validation sessions belong in the parts: give the time they start "
                                            "from"})


def _split(model, counts: pd.Series, validation: Validation) -> SessionSplit:
    """The cuts :meth:`VoucherModel.split_rows` makes, from the sessions per collection time of every part."""
    test_from = model.test_cut
    if test_from is None and model.test_fraction:
        test_from = _latest(counts, model.test_fraction, "test_fraction")
    usable = counts if test_from is None else counts[counts.index < test_from]
    if validation.form == TIME:
        valid_from = validation.value
    else:
        valid_from = _latest(usable, validation.value, "validation") if validation.value else None
    return SessionSplit(valid_from, test_from)


def _latest(counts: pd.Series, fraction: float, argument: str) -> pd.Timestamp:
    """The cut of :func:`~promokit.voucher.history.hold_out_latest`: the ``1 − fraction`` quantile of the collection
    times (pandas' linear interpolation between the two times around it), from their counts."""
    n = int(counts.sum())
    q = 1 - fraction
    position = n * q - q  # numpy's index of the linear quantile
    below = int(np.floor(position))
    ends = np.cumsum(counts.to_numpy())
    around = counts.index[np.searchsorted(ends, [below, min(below + 1, n - 1)], side="right")]
    cut = pd.Series(around).quantile(position - below)
    held = int(counts[counts.index >= cut].sum())
    if held in (0, n):
        raise DataError(f"{argument}: the latest {fraction:.0%} of {n} sessions are cut by their collection time, and "
                        f"{'all' if held else 'none'} of them would be held out (they share their times); one folder "
                        "draws them at random over the whole table, which training over parts does not: give a time "
                        "to cut at (test_from, or validation as a time), or the sessions as one file")
    return cut


def _count(source: Source, split: SessionSplit, model, k: int) -> PartCount:
    """Part *k*'s share of the fit over its training sessions (:class:`PartCount`)."""
    tables = source.tables(k)
    sessions = tables.sessions
    roles = split.roles(sessions)
    label = _redeemed(sessions)
    unknown = np.isnan(label)
    per_role = [np.flatnonzero(roles == role) for role in (TRAIN, VALID, TEST)]
    missing = np.flatnonzero(unknown & (roles != TEST))
    train = per_role[TRAIN]
    vocabulary, terms = None, []
    if model.uses_graphs and len(train):
        vocabulary = UVGStore.build(tables, **_graph_settings(model), fit_rows=train,
                                    behaviour=source.behaviour).vocabulary()
        values = voucher_terms(sessions, [c for c in SCHEMA_COLUMNS if c in sessions])[train]
        terms = [NumericEncoder.moments(pd.Series(values[:, j])) for j in range(values.shape[1])]
    return PartCount([len(r) for r in per_role], [int(np.nansum(label[r])) for r in per_role],
                     [int(unknown[r].sum()) for r in per_role],
                     sessions["session_id"].iloc[missing[0]] if len(missing) else None,
                     TableEncoder.count(sessions.iloc[train], model.feature_spec_),
                     id_hashes(sessions["user_id"].to_numpy()[train]), vocabulary, terms)


def _check_labels(model, counted: list[PartCount], rows: np.ndarray) -> None:
    """:meth:`VoucherModel.fit`'s checks of the labels, from every part's counts."""
    positives = np.sum([c.positives for c in counted], axis=0)
    unlabelled = np.sum([c.unlabelled for c in counted], axis=0)
    example = next((c.example for c in counted if c.example is not None), None)
    for name, role in (("training", TRAIN), ("validation", VALID)):
        if unlabelled[role]:
            raise DataError(f"{int(unlabelled[role])} of the {int(rows[role])} {name} sessions have no 'redeemed' "
                            f"label, e.g. session_id {example!r}")
    if rows[TRAIN] == 0 or positives[TRAIN] in (0, rows[TRAIN]):
        raise DataError(f"training needs redeemed and unredeemed sessions; {int(positives[TRAIN])} of the "
                        f"{int(rows[TRAIN])} training sessions are redeemed: a classifier cannot learn from one class")
    if rows[VALID] and model.train_config.monitor == "auc" and positives[VALID] in (0, rows[VALID]):
        raise DataError(f"early stopping on validation AUC needs redeemed and unredeemed validation sessions; "
                        f"{int(positives[VALID])} of the {int(rows[VALID])} are redeemed (use monitor='loss' or more "
                        "validation sessions)")


def _graph_vocabulary(counted: list[PartCount]) -> dict:
    """The graph vocabulary :meth:`UVGStore.build` fits on the training sessions of every part together: the items
    and vouchers of each part's graphs united, the item features from the one catalogue, the voucher terms'
    mean and deviation from each part's moments."""
    vocabulary = counted[0].vocabulary
    encoders = dict(vocabulary["encoders"])
    for name in ("item", "voucher"):
        shares = []
        for c in counted:
            encoder = c.vocabulary["encoders"][name]
            values = pd.Series(encoder["vocabulary"], dtype="int64" if encoder["kind"] == "int" else object)
            shares.append((values, np.ones(len(values), dtype=np.int64)))
        encoders[name] = CategoryEncoder.from_counts(shares).to_dict()
    mean, std = [], []
    for j in range(len(vocabulary["schema_columns"])):
        _, n, m, m2 = combine_moments([c.terms[j] for c in counted])
        deviation = float(np.sqrt(m2 / n)) if n else float("nan")
        mean.append(m if n else float("nan"))
        std.append(deviation if deviation > 0 else 1.0)
    return {**vocabulary, "encoders": encoders, "schema_stats": {"mean": mean, "std": std}}


def _redeemed(sessions: pd.DataFrame) -> np.ndarray:
    return pd.to_numeric(sessions["redeemed"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)

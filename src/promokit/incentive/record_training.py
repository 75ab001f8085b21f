"""Training the incentive GNN from training records (:mod:`promokit.incentive.records`) in bounded memory, in this
process or data-parallel on N workers (AGL's trainer, Zhang et al. VLDB 2020): the trainer's one epoch loop
(:func:`~promokit.training.trainer.train_epochs`, through :func:`~promokit.training.shard_loop.run_shard`) over
mini-batches read from the records parts row group by row group, so that no process holds the graph, only a row
group or two of records at a time.

The merchants' records (``merchants/`` in the records folder, when the merchants are labelled) train the merchant
term of eq. 7: each step's batch takes customers' and merchants' records in the proportion of their seeds, and the
network runs its GNN on each group's subgraph (the customers' states from theirs, the merchants' from theirs).
Epoch e trains on draw ``draws[e mod S]`` of the S draws written (one draw: the same neighbourhoods every epoch).
Each worker's shard of a draw is a contiguous range of its records (row groups in file order), of equal length on
every worker (the last padded by wrapping around, as :func:`promokit.training.shards.shards` cuts a table's parts);
each epoch a worker visits its row groups in a new order, shuffles each one's records and cuts ``ceil(batch_size /
N)`` records at a time across row-group boundaries (:func:`~promokit.training.batches.stream_batches`), so every
worker takes the same number of steps and N workers take the steps of one process. Each batch is
:func:`~promokit.incentive.record_batches.read_batch` of its rows, on which :class:`IncentiveNet` runs its GNN,
towers and heads with the loss of eq. 7. Validation, for
early stopping and the monitored metric, reads the validation records' first draw, each worker its share, in
evaluation mode (sampled neighbourhoods, where the in-memory path validates on full ones).

The job (:class:`RecordJob`) carries only the folders and counts: each worker opens the parts itself, so on a
cluster the records must be on storage every node reads (a shared file system).
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from promokit.data.errors import DataError
from promokit.data.ids import id_hashes
from promokit.data.uris import local_dir
from promokit.incentive.contract import CUSTOMER
from promokit.incentive.estimator import FitReport, IncentiveModel, validation_metrics
from promokit.incentive.record_batches import read_batch
from promokit.incentive.records import MERCHANT_RECORDS, META
from promokit.training.batches import stream_batches
from promokit.training.shard_loop import checkpoint_folder, epoch_order, train_in_process, validate_share
from promokit.training.shards import Segment, shards

LABELS = ("node", "customer", "level", "label")


class RecordParts:
    """The records parts of one folder, or of several read as one (``name``: the argument they came from, for
    errors), checked against the network's fanouts and its input ``widths`` (:func:`input_widths`) and to hold the
    same draws: their row groups and how many records of each draw each holds. Pickles as its files and counts; a
    file is opened for each read and closed after it (a ``ParquetFile`` kept open holds buffers of what it read: a
    worker's heap then grew with the number of files)."""

    def __init__(self, folders, name: str, fanouts: list[int], widths: dict[str, int]):
        folders = _folders(folders, name)
        self.paths = [path for folder in folders if folder.is_dir() for path in sorted(folder.glob("part-*.parquet"))]
        folder = " and ".join(map(str, folders))
        if not self.paths:
            raise DataError(f"{name}: no records parts (part-*.parquet) in {folder}; write them with "
                            "promokit.incentive.records.write_records")
        import pyarrow.parquet as pq

        metas, row_groups = [], []
        for path in self.paths:
            file = pq.ParquetFile(path)
            metas.append(_meta(file))
            row_groups.append(file.num_row_groups)
            file.close()
        meta = metas[0]
        for path, file_meta in zip(self.paths, metas):
            written = file_meta["fanouts"]
            if list(written) != list(fanouts):
                raise DataError(f"{name}: {path} holds records drawn with fanouts {written}, but the model's fanouts "
                                f"are {list(fanouts)}; write the records with the model's fanouts")
            if list(file_meta["draws"]) != list(meta["draws"]):
                raise DataError(f"{name}: {path} holds the draws {list(file_meta['draws'])}, but {self.paths[0]} "
                                f"holds {list(meta['draws'])}; train from records written together")
        written = {key: meta[key] for key in widths}
        if written != widths:
            raise DataError(f"{name}: {self.paths[0]} holds inputs of widths {written}, but the model's encoders give "
                            f"{widths}; write the records with the model's encoders")
        self.draws = [int(d) for d in meta["draws"]]
        self.groups = [(f, g) for f, count in enumerate(row_groups) for g in range(count)]
        draws = [self._group(k, ["draw"]).column("draw").to_numpy() for k in range(len(self.groups))]
        self.sizes = np.array([[np.sum(d == draw) for draw in self.draws] for d in draws]).reshape(-1, len(self.draws))
        self.seeds = int(self.sizes[:, 0].sum()) if len(self.groups) else 0
        if not self.seeds:
            raise DataError(f"{name}: the {len(self.paths)} records parts in {folder} hold no records (no labelled "
                            "customer)")

    def _group(self, k: int, columns: list[str] | None = None):
        import pyarrow.parquet as pq

        f, g = self.groups[k]
        with pq.ParquetFile(self.paths[f]) as file:
            return file.read_row_group(g, columns=columns)

    def customer_ids(self) -> np.ndarray:
        """The seeds' ids (one column read part by part)."""
        import pyarrow.parquet as pq

        return np.unique(np.concatenate([pq.read_table(p, columns=[CUSTOMER]).column(CUSTOMER)
                                         .to_numpy(zero_copy_only=False) for p in self.paths]))

    def shards(self, draw_index: int, workers: int, pad: bool) -> list[list[Segment]]:
        """The records of draw ``draws[draw_index]`` cut into ``workers`` contiguous ranges
        (:func:`promokit.training.shards.shards`), as segments (row group, first, end) of the draw's records in
        each row group."""
        return shards(self.sizes[:, draw_index].tolist(), workers, pad)

    def read(self, draw_index: int, segment: Segment):
        """A segment's records (an Arrow table)."""
        import pyarrow.compute as pc

        k, first, end = segment
        table = self._group(k)
        return table.filter(pc.equal(table.column("draw"), self.draws[draw_index])).slice(first, end - first)


def _folders(folders, name: str) -> list[Path]:
    """One folder (a path) or several (a list) as a list of local paths (``name``: the argument, named by the
    one-line error a URI gets: records are written to and read from local folders)."""
    return [local_dir(f, name) for f in ([folders] if isinstance(folders, (str, os.PathLike)) else folders)]


def input_widths(model: IncentiveModel) -> dict[str, int]:
    """The widths of the encoded inputs ``model``'s encoders give, as a records part's metadata names them."""
    encoders = model.encoders_
    return {f"{side}_{name}": width for side, features, structure in
            (("customer", encoders.customers, encoders.customer_structure),
             ("merchant", encoders.merchants, encoders.merchant_structure))
            for name, width in (("cat", len(features.cardinalities)), ("num", features.numeric_width),
                                ("structure", structure.numeric_width))}


def _meta(file) -> dict:
    """What a records part's metadata says (:func:`~promokit.incentive.record_batches.record_widths`)."""
    return json.loads(file.schema_arrow.metadata[META])


def record_stream(tables, batch_size: int, generator: torch.Generator):
    """Trainer batches of ``batch_size`` records from a stream of record tables, shuffled and cut across the
    tables' boundaries as :func:`~promokit.training.batches.stream_batches` cuts tensors: the stream carries each
    record's (table, row) and a batch reads its rows from the tables it spans; a table is dropped once no later
    batch can reach it (the stream keeps table order)."""
    import pyarrow as pa

    held: dict[int, object] = {}

    def positions():
        for k, table in enumerate(tables):
            held[k] = table
            yield {"table": torch.full((table.num_rows,), k), "row": torch.arange(table.num_rows)}

    for batch in stream_batches(positions(), batch_size, generator):
        which, rows = batch["table"].numpy(), batch["row"].numpy()
        for k in [k for k in held if k < which.min()]:
            del held[k]
        picked = pa.concat_tables([held[k].take(rows[which == k]) for k in np.unique(which)])
        order = np.argsort(np.argsort(which, kind="stable"), kind="stable")  # back to the batch's shuffled order
        record = read_batch(picked.take(order))
        yield {**record.labels(), "record": record}


class RecordBatches:
    """Worker ``rank``'s batches of ``world`` (:func:`~promokit.training.trainer.train_epochs`) of a
    :class:`RecordJob` (module docstring): each step ``batch_size / world`` records, customers' and merchants' in
    the proportion of their seeds."""

    def __init__(self, job: RecordJob, rank: int, world: int):
        self.job, self.rank = job, rank
        train, merchants = job.train, job.merchants
        share = train.seeds / (train.seeds + (merchants.seeds if merchants is not None else 0))
        self.shards = [train.shards(d, world, pad=True) for d in range(len(train.draws))]
        self.rows = train.seeds + (merchants.seeds if merchants is not None else 0)
        self.batch_size = max(1, round(math.ceil(job.batch_size / world) * share))
        self.steps = math.ceil(math.ceil(train.seeds / world) / self.batch_size)
        if merchants is not None:
            self.merchant_shards = [merchants.shards(d, world, pad=True) for d in range(len(merchants.draws))]
            self.merchant_batch_size = math.ceil(math.ceil(merchants.seeds / world) / self.steps)
        self.valid = [(parts, parts.shards(0, world, pad=False)[rank]) for parts in (job.valid, job.valid_merchants)
                      if parts is not None]
        self.validated = job.valid is not None

    def wide(self, net) -> list[dict]:
        return []  # the incentive network has no wide term

    def train(self, generator: torch.Generator, epoch: int):
        customers = self._stream(self.job.train, self.shards, self.batch_size, generator, epoch)
        if self.job.merchants is None:
            return customers
        merchants = self._stream(self.job.merchants, self.merchant_shards, self.merchant_batch_size, generator, epoch)
        return _with_merchants(customers, merchants)

    def _stream(self, parts: RecordParts, shards: list, batch_size: int, generator: torch.Generator, epoch: int):
        draw = epoch % len(parts.draws)
        segments = epoch_order(shards[draw][self.rank], generator)
        return record_stream((parts.read(draw, segment) for segment in segments), batch_size, generator)

    def validate(self, net, comm) -> dict[str, float]:
        return validate_share(net, comm, self._valid_batches(), LABELS, lambda labels: validation_metrics())

    def _valid_batches(self):
        for parts, segments in self.valid:
            for segment in segments:
                table = parts.read(0, segment)
                for lo in range(0, table.num_rows, self.job.eval_batch_size):
                    record = read_batch(table.slice(lo, self.job.eval_batch_size))
                    yield {**record.labels(), "record": record}


def _with_merchants(customers, merchants):
    """Each customers' batch with the next merchants' batch, if any left, as one step's rows (customers first)."""
    for batch in customers:
        extra = next(merchants, None)
        if extra is None:
            yield batch
            continue
        yield {**{k: torch.cat([batch[k], extra[k]]) for k in LABELS}, "record": batch["record"],
               "merchant_record": extra["record"]}


@dataclass
class RecordJob:
    """A training job over records (:func:`promokit.training.shard_loop.run_shard`, on any executor's ``train``):
    the prepared model, whose network every worker copies, and the records of training and of validation."""

    model: IncentiveModel
    train: RecordParts
    valid: RecordParts | None
    merchants: RecordParts | None = None
    valid_merchants: RecordParts | None = None

    @property
    def estimator(self) -> RecordJob:
        return self

    @property
    def train_config(self):
        return self.model.train_config if self.valid is not None else replace(self.model.train_config,
                                                                               monitor="loss")

    @property
    def batch_size(self) -> int:
        return self.train_config.batch_size

    @property
    def eval_batch_size(self) -> int:
        return self.train_config.eval_batch_size

    def build_net(self):
        """A copy of the prepared model's network (the same weights on every worker)."""
        return copy.deepcopy(self.model.net_)

    def batches(self, rank: int, world: int) -> RecordBatches:
        return RecordBatches(self, rank, world)


def fit_from_records(model: IncentiveModel, records, validation: str | os.PathLike | None = None,
                     *, executor=None, checkpoint_dir: str | os.PathLike | None = None,
                     resume: bool = False) -> IncentiveModel:
    """Train ``model``'s GNN (a ``gnn`` representation) on the training records in the folder ``records`` (or in
    each folder of a list), its epoch picked on the records in ``validation`` (None: the epochs run to the end), as
    :meth:`IncentiveModel.fit` trains on tables (same network, loss, optimisers, learning rates, seeds, early
    stopping, checkpoints; module docstring for what differs), on ``executor`` (its ``train``:
    ``promokit.scale.LocalExecutor`` in this process, ``RayExecutor`` data-parallel on its workers; None: in this
    process). ``model`` is prepared (:meth:`IncentiveModel.prepare`) with the encoders that wrote the records, which
    must be drawn with its fanouts. Returns the model, which saves, loads, predicts and evaluates as a fitted one
    (:meth:`~IncentiveModel.evaluate` with ``held_out=False`` on customers kept out of the records); its ``report_``
    counts the customers it trained and validated on."""
    checkpoint_folder(checkpoint_dir)  # a URI is refused before any work
    if getattr(model, "net_", None) is None or getattr(model, "encoders_", None) is None:
        raise DataError("model: prepare it (IncentiveModel.prepare) with the encoders that wrote the records before "
                        "training from records")
    if model.model_params_["representation"] != "gnn":
        raise DataError(f"model {model.model!r} is no GNN: training from records needs one of the gnn models")
    fanouts = list(model.net_.fanouts)
    widths = input_widths(model)
    train = RecordParts(records, "records", fanouts, widths)
    valid = RecordParts(validation, "validation", fanouts, widths) if validation is not None else None
    merchants, valid_merchants = (_merchant_records(folders, name, fanouts, widths)
                                  for folders, name in ((records, "records"), (validation, "validation")))
    model.net_.attach(None)  # the records carry their inputs; prediction attaches the graph's again
    job = RecordJob(model, train, valid, merchants, valid_merchants)
    train_job = executor.train if executor is not None else train_in_process
    model.net_, model.history_ = train_job(job, checkpoint_dir, resume)
    model.recalibration_ = None
    model.training_ids_ = id_hashes(train.customer_ids())
    valid_seeds = valid.seeds if valid is not None else 0
    model.test_fraction = 0.0
    model.holdout_ = {"test_fraction": 0.0, "valid_fraction": valid_seeds / (train.seeds + valid_seeds),
                      "seed": job.train_config.seed, "rows": train.seeds + valid_seeds, "held_out": 0,
                      "records": " and ".join(map(str, _folders(records, "records"))),
                      "merchants_trained": merchants is not None}
    model.report_ = FitReport(train.seeds, valid_seeds, 0)
    return model


def _merchant_records(folders, name: str, fanouts: list[int], widths: dict[str, int]) -> RecordParts | None:
    """The merchants' records beside the customers' in ``folders`` (:data:`MERCHANT_RECORDS`); None without any."""
    if folders is None:
        return None
    merchants = [folder / MERCHANT_RECORDS for folder in _folders(folders, name)]
    if not any(any(folder.glob("part-*.parquet")) for folder in merchants):
        return None
    return RecordParts(merchants, name, fanouts, widths)

"""Training the incentive GNN from training records (:mod:`promokit.incentive.records`) in bounded memory: the
trainer's one epoch loop (:func:`~promokit.training.trainer.train_epochs`) over mini-batches read from the records
parts row group by row group, so that no process holds the graph, only one row group of records at a time.

Epoch e trains on draw ``draws[e mod S]`` of the S draws written (one draw: the same neighbourhoods every epoch),
its row groups in a new order each epoch and their records shuffled, cut in ``batch_size`` records; each batch is
:func:`~promokit.incentive.record_batches.read_batch` of its rows, on which :class:`IncentiveNet` runs its GNN,
towers and customer head with the loss of eq. 7 (customer term: the records hold customers only). Validation,
for early stopping and the monitored metric, reads the validation records' first draw the same way, in evaluation
mode (sampled neighbourhoods, where the in-memory path validates on full ones).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from promokit.data.errors import DataError
from promokit.data.ids import id_hashes
from promokit.incentive.contract import CUSTOMER
from promokit.incentive.estimator import IncentiveModel, validation_metrics
from promokit.incentive.record_batches import read_batch
from promokit.incentive.records import META
from promokit.training.device import net_device, to_cpu, to_device
from promokit.training.trainer import LocalComm, train_epochs, validation_record

LABELS = ("node", "customer", "level", "label")


class RecordParts:
    """The records parts of one folder (``name``: the argument it came from, for errors), checked against the
    network's fanouts and its input ``widths`` (:func:`input_widths`); their row groups and the records of each draw
    in each."""

    def __init__(self, folder: str | os.PathLike, name: str, fanouts: list[int], widths: dict[str, int]):
        import pyarrow.parquet as pq

        folder = Path(folder)
        paths = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
        if not paths:
            raise DataError(f"{name}: no records parts (part-*.parquet) in {folder}; write them with "
                            "promokit.incentive.records.write_records")
        self.files = [pq.ParquetFile(p) for p in paths]
        meta = _meta(self.files[0])
        for path, file in zip(paths, self.files):
            written = _meta(file)["fanouts"]
            if list(written) != list(fanouts):
                raise DataError(f"{name}: {path} holds records drawn with fanouts {written}, but the model's fanouts "
                                f"are {list(fanouts)}; write the records with the model's fanouts")
        written = {key: meta[key] for key in widths}
        if written != widths:
            raise DataError(f"{name}: {paths[0]} holds inputs of widths {written}, but the model's encoders give "
                            f"{widths}; write the records with the model's encoders")
        self.draws = [int(d) for d in meta["draws"]]
        self.groups = [(f, g) for f in range(len(self.files)) for g in range(self.files[f].num_row_groups)]
        draws = [self.files[f].read_row_group(g, columns=["draw"]).column("draw").to_numpy() for f, g in self.groups]
        self.sizes = np.array([[np.sum(d == draw) for draw in self.draws] for d in draws]).reshape(-1, len(self.draws))
        self.seeds = int(self.sizes[:, 0].sum()) if len(self.groups) else 0
        if not self.seeds:
            raise DataError(f"{name}: the {len(paths)} records parts in {folder} hold no records (no labelled "
                            "customer)")

    def customer_ids(self) -> np.ndarray:
        """The seeds' ids (one column read part by part)."""
        return np.unique(np.concatenate([f.read(columns=[CUSTOMER]).column(CUSTOMER).to_numpy(zero_copy_only=False)
                                         for f in self.files]))

    def batches(self, draw_index: int, batch_size: int, generator: torch.Generator | None = None):
        """The records of draw ``draws[draw_index]`` as trainer batches of ``batch_size`` records, row group by row
        group; shuffled by ``generator`` (None: in file order)."""
        import pyarrow.compute as pc

        order = range(len(self.groups)) if generator is None else torch.randperm(len(self.groups),
                                                                                 generator=generator).tolist()
        for k in order:
            if not self.sizes[k, draw_index]:
                continue
            f, g = self.groups[k]
            table = self.files[f].read_row_group(g)
            table = table.filter(pc.equal(table.column("draw"), self.draws[draw_index]))
            rows = torch.arange(table.num_rows) if generator is None else torch.randperm(table.num_rows,
                                                                                         generator=generator)
            for chunk in rows.split(batch_size):
                record = read_batch(table.take(chunk.numpy()))
                yield {**record.labels(), "record": record}


def input_widths(model: IncentiveModel) -> dict[str, int]:
    """The widths of the encoded inputs ``model``'s encoders give, as a records part's metadata names them."""
    encoders = model.encoders
    return {f"{side}_{name}": width for side, features, structure in
            (("customer", encoders.customers, encoders.customer_structure),
             ("merchant", encoders.merchants, encoders.merchant_structure))
            for name, width in (("cat", len(features.cardinalities)), ("num", features.numeric_width),
                                ("structure", structure.numeric_width))}


def _meta(file) -> dict:
    """What a records part's metadata says (:func:`~promokit.incentive.record_batches.record_widths`)."""
    return json.loads(file.schema_arrow.metadata[META])


class RecordBatches:
    """The trainer's batches (:func:`~promokit.training.trainer.train_epochs`) of training records and, optionally,
    validation records."""

    def __init__(self, batch_size: int, eval_batch_size: int, train: RecordParts, valid: RecordParts | None):
        self.batch_size, self.eval_batch_size, self.train_parts, self.valid = batch_size, eval_batch_size, train, valid
        self.rows = train.seeds
        self.steps = int(np.ceil(train.sizes[:, 0] / batch_size).sum())
        self.validated = valid is not None

    def wide(self, net) -> list[dict]:
        return []  # the incentive network has no wide term

    def train(self, generator: torch.Generator, epoch: int):
        return self.train_parts.batches(epoch % len(self.train_parts.draws), self.batch_size, generator)

    @torch.no_grad()
    def validate(self, net, comm) -> dict[str, float]:
        net.eval()
        device = net_device(net)
        outputs, labels = {}, {}
        for batch in self.valid.batches(0, self.eval_batch_size):
            for name, value in to_cpu(net(to_device(batch, device))).items():
                outputs.setdefault(name, []).append(value)
            for name in LABELS:
                labels.setdefault(name, []).append(batch[name])
        outputs = {k: torch.cat(v) for k, v in outputs.items()}
        labels = {k: torch.cat(v) for k, v in labels.items()}
        return validation_record(net, outputs, labels, validation_metrics())


def fit_from_records(model: IncentiveModel, records: str | os.PathLike, validation: str | os.PathLike | None = None,
                     *, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False,
                     on_epoch=None) -> IncentiveModel:
    """Train ``model``'s GNN (a ``gnn`` representation) on the training records in the folder ``records``, its
    epoch picked on the records in ``validation`` (None: the epochs run to the end), as :meth:`IncentiveModel.fit`
    trains on tables (same network, loss, optimisers, learning rates, seeds, early stopping, checkpoints; module
    docstring for what differs). ``model`` is prepared (:meth:`IncentiveModel.prepare`) with the encoders that wrote
    the records, which must be drawn with its fanouts. Returns the model, which saves, loads, predicts and evaluates
    as a fitted one (:meth:`~IncentiveModel.evaluate` with ``held_out=False`` on customers kept out of the
    records)."""
    if model.net is None or model.encoders is None:
        raise DataError("model: prepare it (IncentiveModel.prepare) with the encoders that wrote the records before "
                        "training from records")
    if model.model_params["representation"] != "gnn":
        raise DataError(f"model {model.model!r} is no GNN: training from records needs one of the gnn models")
    fanouts = list(model.net.fanouts)
    widths = input_widths(model)
    train = RecordParts(records, "records", fanouts, widths)
    valid = RecordParts(validation, "validation", fanouts, widths) if validation is not None else None
    cfg = model.train_config if valid is not None else replace(model.train_config, monitor="loss")
    model.net.attach(None)  # the records carry their inputs; prediction attaches the graph's again
    batches = RecordBatches(cfg.batch_size, cfg.eval_batch_size, train, valid)
    model.history = train_epochs(model.net, batches, cfg, LocalComm(Path(checkpoint_dir) if checkpoint_dir else None,
                                                                     resume), on_epoch)
    model.recalibration = None
    model.training_ids = id_hashes(train.customer_ids())
    valid_seeds = valid.seeds if valid is not None else 0
    model.test_fraction, model.valid_fraction = 0.0, valid_seeds / (train.seeds + valid_seeds)
    model.holdout = {"test_fraction": 0.0, "valid_fraction": model.valid_fraction, "seed": cfg.seed,
                     "rows": train.seeds + valid_seeds, "held_out": 0, "records": str(records)}
    return model

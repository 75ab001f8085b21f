"""Training a model that reads the consumption graph (``esdpm``) over a value dataset in parts: each delivery's e_c
(EOCA eq. 14) computed by the encoder's GNN layers on its user's record (:mod:`promokit.value.graph_records`), so
that no process holds the graph.

A worker streams its shard of the training deliveries as any value network over parts does
(:class:`~promokit.training.shard_loop.TrainJob`'s segments, :func:`~promokit.training.stream_batches`), each delivery
carrying its user's row in its part; a batch cut from the stream is joined to the records of its distinct users,
read from the records part of each users part it holds (:func:`~promokit.nn.graph_records.read_records`: one
:class:`~promokit.nn.bipartite.Subgraph`, seeds first), as :class:`~promokit.value.inputs.GraphBatch`. A worker holds
the records of the parts whose deliveries are still in its stream: the current part and the rows carried over.

**A fixed set of draws, not a fresh one per epoch.** The records hold ``draws`` neighbourhoods per user, written
once before training; epoch e reads draw e mod ``draws``. One folder draws anew for every batch
(:func:`~promokit.nn.bipartite.sample_neighbours`); a fresh draw per epoch over parts would mean a records pass per
epoch, outside the training loop. A user whose degree is within the fanouts has one neighbourhood anyway.
Validation reads draw 0 in evaluation mode (sampled neighbourhoods, where one folder validates on every user's full
neighbourhood); prediction over parts is unchanged: e_c over the whole graph in shards
(:mod:`promokit.value.consumption`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from promokit.data.parts import part_name
from promokit.nn.graph_records import read_records
from promokit.training.batches import iterate_batches, stream_batches
from promokit.training.shard_loop import ShardBatches, TrainJob, epoch_order, validate_share
from promokit.value.inputs import GraphBatch

CHUNK = "_chunk"  # the position of a delivery's segment in its worker's epoch, while it streams


@dataclass
class GraphJob:
    """A :class:`TrainJob` over a value dataset in parts whose deliveries carry their ``user_row``, and the folder
    of its records written with ``draws`` draws: every worker's batches are :class:`RecordedBatches`."""

    job: TrainJob
    records: str
    draws: int

    @property
    def estimator(self):
        return self.job.estimator

    def batches(self, rank: int, world: int) -> RecordedBatches:
        return RecordedBatches(self, rank)


class PartRecords:
    """The records of one users part at one draw, found by the user's row in the part."""

    def __init__(self, path: Path, draw: int):
        import pyarrow.parquet as pq

        self.table = pq.read_table(path, filters=[("draw", "=", draw)])
        rows = self.table.column("user_row").to_numpy()
        self.position = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
        self.position[rows] = np.arange(len(rows))

    def take(self, users: np.ndarray):
        return self.table.take(self.position[users])


def graph_batch(batch: dict, records: dict[int, PartRecords]) -> dict:
    """``batch`` (with each delivery's ``_chunk`` and ``user_row``) with its users' records as ``graph``, read from
    ``records[chunk]``."""
    import pyarrow as pa

    chunk, user = batch.pop(CHUNK), batch.pop("user_row")
    pairs, seed = torch.unique(torch.stack([chunk, user], dim=1), dim=0, return_inverse=True)
    pairs = pairs.numpy()
    bounds = np.flatnonzero(np.diff(pairs[:, 0])) + 1
    table = pa.concat_tables([records[int(group[0, 0])].take(group[:, 1]) for group in np.split(pairs, bounds)])
    found = read_records(table)
    users, merchants = ({f: torch.from_numpy(values) for f, values in found.inputs[side].items()}
                        for side in ("customer", "merchant"))
    return {**batch, "graph": GraphBatch(found.collated.sub, users["cat"], users["num"], users["structure"],
                                         merchants["cat"][:, 0], merchants["structure"], seed)}


class RecordedBatches(ShardBatches):
    """Worker ``rank``'s batches (module docstring): a :class:`~promokit.training.shard_loop.ShardBatches` (every
    worker takes the same steps, and no wide term is solved first) whose batches carry their users' records."""

    def __init__(self, job: GraphJob, rank: int):
        super().__init__(job.job, rank)
        self.graph = job

    def _records(self, part: int, draw: int) -> PartRecords:
        return PartRecords(Path(self.graph.records) / part_name(part), draw)

    def train(self, generator: torch.Generator, epoch: int):
        segments = epoch_order(self.job.train[self.rank], generator)
        draw, records = epoch % self.graph.draws, {}

        def chunks():
            for position, segment in enumerate(segments):
                tensors = self.job.train_rows.load(self.job.estimator, segment)
                records[position] = self._records(segment[0], draw)
                yield {**tensors, CHUNK: torch.full((len(tensors["user_row"]),), position, dtype=torch.long)}

        for batch in stream_batches(chunks(), self.job.batch_size, generator):
            first = int(batch[CHUNK].min())
            yield graph_batch(batch, records)
            for position in [p for p in records if p < first]:  # the stream is past these parts' deliveries
                del records[position]

    def validate(self, net, comm) -> dict:
        """The validation record of the whole validation set (draw 0's records), every worker predicting its share."""
        estimator = self.job.estimator
        size = estimator.train_config.eval_batch_size

        def batches():
            for segment in self.job.valid[self.rank]:
                tensors = self.job.valid_rows.load(estimator, segment)
                records = {0: self._records(segment[0], 0)}
                rows = {**tensors, CHUNK: torch.zeros(len(tensors["user_row"]), dtype=torch.long)}
                yield from (graph_batch(b, records) for b in iterate_batches(rows, size))

        return validate_share(net, comm, batches(), net.labels, estimator.validation_metrics)

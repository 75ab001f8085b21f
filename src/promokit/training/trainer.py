"""One model-agnostic trainer: one epoch loop for a table in memory and for a table's parts, in one process or as one
of N data-parallel workers.

A model is an ``nn.Module`` whose ``forward(batch)`` returns a dict of named tensors and whose
``loss(outputs, batch)`` returns ``(total, parts)``. The trainer sees nothing else of it; validation metrics
beyond the loss are functions ``metric(outputs, batch) -> float`` passed to :meth:`Trainer.fit`.

The loop (:func:`train_epochs`) seeds each epoch, sets its learning rate, steps over the batches, validates, keeps the
best weights, stops early and checkpoints each epoch, whatever the batches' source and the communicator:

- the batches (:class:`TableBatches` for a table in memory, ``promokit.training.shard_loop.ShardBatches`` for a
  worker's shard of a table's parts) give ``rows`` (the training rows an epoch covers, for the embedding decay),
  ``steps`` (per epoch), ``validated``, ``wide(net)`` (what a fresh run solves first), ``train(generator, epoch)``
  (epoch ``epoch``'s batches, shuffled by ``generator``) and ``validate(net, comm)`` (the validation record, the
  same on every worker);
- the communicator (:class:`LocalComm` for one process, ``promokit.scale.train``'s for a worker of a Ray Train run)
  gives the worker's ``rank`` and ``world`` and whether it shows progress (``interactive``), wraps the network
  (DDP, or nothing), sums, gathers and broadcasts, and loads (``load()``) and saves (``save(state, record)``) the
  checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import rich
import torch
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from torch import Tensor, nn

from promokit.data.io import atomic_path
from promokit.data.uris import local_dir
from promokit.metrics import auc
from promokit.training.batches import Batch, iterate_batches, n_rows
from promokit.training.config import TrainConfig
from promokit.training.device import made_on_cpu, net_device, on_cpu, resolve_device, running_on, to_cpu, to_device
from promokit.training.logistic import solve_wide
from promokit.training.optim import LazyWeightDecay, make_optimizers
from promokit.training.threads import training_threads

CHECKPOINT = "checkpoint.pt"


#: A validation metric: named outputs of a whole table and that table's batch → a number, higher is better.
Metric = Callable[[dict[str, Tensor], Batch], float]


def auc_metric(output: str, label: str, given: str | None = None) -> Metric:
    """The validation AUC of ``outputs[output]`` against ``batch[label]``; with ``given``, only on the rows where
    ``batch[given] == 1`` (e.g. CVR on clicked rows)."""

    def metric(outputs: dict[str, Tensor], batch: Batch) -> float:
        rows = slice(None) if given is None else batch[given] == 1
        return auc(batch[label][rows].numpy(), outputs[output][rows].numpy())

    return metric


@dataclass
class History:
    """Per-epoch records; ``best_score`` is the monitored quantity at ``best_epoch`` (validation loss, or the
    monitored metric's value; the training loss without validation rows).

    A model solved rather than trained by epochs (e.g. logistic regression over a path of L2 strengths) keeps
    one record per candidate in ``epochs``, names them by ``unit`` and flags the kept ones ``chosen``."""

    epochs: list[dict] = field(default_factory=list)
    best_epoch: int = -1
    monitor: str = "loss"
    best_score: float = math.nan
    stopped: str = "completed"  # completed | early_stopping | interrupted
    unit: str = "epoch"
    #: an ``offset`` wide term's floor, one record per logit (:func:`promokit.training.solve_wide`)
    wide: list[dict] = field(default_factory=list)
    #: the embedding decay the run used (:func:`embedding_decay_for`)
    embedding_decay: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def read(cls, model_dir: str | Path) -> History | None:
        """The history a model directory keeps (``history.json``), or None where it keeps none."""
        path = Path(model_dir) / "history.json"
        return cls(**json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else None

    def summary(self) -> str:
        """One line for a terminal, e.g. ``early_stopping after 5 epochs; best validation auc 0.71234 at epoch 3``."""
        if self.unit != "epoch":
            chosen = "; ".join(", ".join(f"{k} {v:.5g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in r.items() if k != "chosen")
                               for r in self.epochs if r.get("chosen"))
            return f"{self.stopped}: {len(self.epochs)} candidates ({self.unit}); chosen: {chosen}"
        validated = bool(self.epochs) and "valid_loss" in self.epochs[0]
        watched = f"validation {self.monitor}" if validated else "training loss"
        return f"{self.stopped} after {len(self.epochs)} epochs; best {watched} {self.best_score:.5f} at epoch {self.best_epoch + 1}"


class Trainer:
    """Mini-batch training of a table in memory (:func:`train_epochs` in one process) with early stopping on the
    validation loss or a validation metric, a checkpoint after every epoch, resume after interruption, and a
    progress display.

    Each epoch's shuffle and dropout are seeded from ``(seed, epoch)``, so a resumed run continues exactly
    as the uninterrupted one would have.
    """

    def __init__(self, config: TrainConfig | None = None, checkpoint_dir: str | Path | None = None):
        self.config = config or TrainConfig()
        self.checkpoint_dir = local_dir(checkpoint_dir, "checkpoint_dir") if checkpoint_dir else None

    def fit(self, model: nn.Module, train: Batch, valid: Batch | None = None, resume: bool = False,
            metrics: Mapping[str, Metric] | None = None,
            on_epoch: Callable[[int, dict], None] | None = None) -> History:
        """Train ``model``; keep the epoch that is best on ``valid`` by ``config.monitor``. Every ``metrics``
        entry is computed on ``valid`` after each epoch and recorded as ``valid_<name>``. ``on_epoch(epoch,
        record)`` sees each epoch's record (e.g. to prune a hyper-parameter trial by raising); an exception it
        raises ends training and propagates."""
        metrics = dict(metrics or {})
        if self.config.monitor != "loss" and self.config.monitor not in metrics:
            raise ValueError(f"monitor {self.config.monitor!r} is neither 'loss' nor one of the metrics "
                             f"{sorted(metrics)}")
        return train_epochs(model, TableBatches(self.config, train, valid, metrics), self.config,
                            LocalComm(self.checkpoint_dir, resume), on_epoch)

    @torch.no_grad()
    def evaluate_loss(self, model: nn.Module, tensors: Batch) -> tuple[float, dict[str, float]]:
        """Mean loss and loss parts over a whole table, in evaluation mode."""
        model.eval()
        total, parts, seen = 0.0, {}, 0
        device = net_device(model)
        for batch in iterate_batches(tensors, self.config.eval_batch_size):
            batch = to_device(batch, device)
            loss, named = model.loss(model(batch), batch)
            size = n_rows(batch)
            total += loss.item() * size
            for k, v in named.items():
                parts[k] = parts.get(k, 0.0) + float(v) * size
            seen += size
        return total / seen, {k: v / seen for k, v in parts.items()}

    def predict(self, model: nn.Module, tensors: Batch) -> dict[str, Tensor]:
        """Named outputs over a whole table, concatenated in row order (:func:`predict`), on ``config.device``
        (:func:`~promokit.training.device.running_on`; the outputs on the CPU) and, there, the cores free now unless
        the user chose a thread count (:func:`~promokit.training.threads.training_threads`)."""
        with training_threads(), running_on(model, resolve_device(self.config.device)):
            return predict(model, tensors, self.config.eval_batch_size)


@torch.no_grad()
def predict(model: nn.Module, tensors: Batch, batch_size: int) -> dict[str, Tensor]:
    """Named outputs of ``model`` (evaluation mode) over a whole table, ``batch_size`` rows at a time on the model's
    device, concatenated in row order on the CPU."""
    model.eval()
    device = net_device(model)
    chunks: dict[str, list[Tensor]] = {}
    for batch in iterate_batches(tensors, batch_size):
        for name, value in to_cpu(model(to_device(batch, device))).items():
            chunks.setdefault(name, []).append(value)
    if not chunks:  # a table without rows (an empty partition): one pass over it still names every output
        chunks = {name: [value] for name, value in to_cpu(model(to_device(tensors, device))).items()}
    return {name: torch.cat(values) for name, values in chunks.items()}


class TableBatches:
    """The batches of a one-process run over a table in memory: ``train`` shuffled anew each epoch and cut in
    ``config.batch_size`` rows (:func:`~promokit.training.iterate_batches`), ``valid`` predicted whole and scored by
    its loss and ``metrics``; a fresh run first solves the model's ``offset`` wide terms on them
    (:func:`solve_wide`)."""

    def __init__(self, config: TrainConfig, train: Batch, valid: Batch | None, metrics: Mapping[str, Metric]):
        self.config, self.table, self.valid, self.metrics = config, train, valid, metrics
        self.rows = n_rows(train)
        self.steps = math.ceil(self.rows / config.batch_size)
        self.validated = valid is not None

    def wide(self, net: nn.Module) -> list[dict]:
        return solve_wide(net, self.table, self.valid, progress=self.config.progress)

    def train(self, generator: torch.Generator, epoch: int):
        return iterate_batches(self.table, self.config.batch_size, generator)

    def validate(self, net: nn.Module, comm) -> dict[str, float]:
        return validation_record(net, predict(net, self.valid, self.config.eval_batch_size), self.valid, self.metrics)


class LocalComm:
    """The communicator of one process: rank 0 of 1, the network as it is, sums, gathers and broadcasts of its own
    values; the checkpoint is ``checkpoint_dir/checkpoint.pt`` (none without a folder), continued from with
    ``resume`` (:func:`latest_state`)."""

    rank, world, interactive = 0, 1, True

    def __init__(self, checkpoint_dir: Path | None = None, resume: bool = False):
        self.checkpoint_dir, self.resume = checkpoint_dir, resume

    def wrap(self, net: nn.Module) -> nn.Module:
        return net

    def sum(self, values: list[float]) -> list[float]:
        return values

    def gather(self, obj) -> list:
        return [obj]

    def broadcast(self, obj):
        return obj

    def load(self) -> dict | None:
        return resumed_state(self.checkpoint_dir, self.resume)

    def save(self, state: Callable[[], dict], record: dict) -> None:
        if self.checkpoint_dir is not None:
            with atomic_path(self.checkpoint_dir / CHECKPOINT) as tmp:
                torch.save(state(), tmp)


def resumed_state(folder: Path | None, resume: bool) -> dict | None:
    """What a run continues from: with ``resume``, the latest checkpoint under ``folder`` (:func:`latest_state`).
    Asked to resume where there is none (or no folder), it warns in one line and the run starts at epoch 1."""
    if not resume:
        return None
    state = None if folder is None else latest_state(folder)
    if state is None:
        where = f"in {folder}" if folder is not None else "without a checkpoint_dir"
        warnings.warn(f"resume: no checkpoint {where}; training starts at epoch 1", stacklevel=2)
    return state


def latest_state(folder: Path) -> dict | None:
    """The checkpoint of the latest epoch under ``folder``: this process's ``checkpoint.pt`` or a Ray Train
    checkpoint's (``checkpoint_*/checkpoint.pt``, a run begun on Ray that continues here)."""
    found = [p for p in [folder / CHECKPOINT, *folder.glob(f"checkpoint_*/{CHECKPOINT}")] if p.exists()]
    states = [torch.load(p, weights_only=True, map_location="cpu") for p in found]
    return max(states, key=lambda s: s["epoch"], default=None)


def train_epochs(net: nn.Module, batches, config: TrainConfig, comm,
                 on_epoch: Callable[[int, dict], None] | None = None) -> History:
    """Train ``net`` epoch by epoch on ``batches`` as the worker ``comm`` says (module docstring): continue from
    ``comm.load()`` when it gives a checkpoint, else solve ``batches.wide`` first; each epoch seeded from ``(seed,
    epoch, rank)``, at ``lr · lr_decay**epoch``, validated, filed by :class:`EpochLoop` (``on_epoch(epoch, record)``
    sees each record) and checkpointed by ``comm.save``. Ctrl-C ends training as ``interrupted``. Returns the history,
    with ``net`` holding the kept epoch's weights (evaluation mode). The network and each batch are on the device
    ``comm.device`` gives (a worker's GPU), else ``config.device`` (:func:`~promokit.training.device.running_on`);
    on the CPU torch runs on the cores free now unless the user chose a thread count
    (:func:`~promokit.training.threads.training_threads`)."""
    with training_threads():  # the cores free now, unless the user chose a count
        state = comm.load()
        wide = batches.wide(net) if state is None else []  # solved on the CPU, before the network moves
        device = getattr(comm, "device", None) or resolve_device(config.device)
        with running_on(net, device):
            return _train_placed(net, batches, config, comm, on_epoch, state, wide)


def _train_placed(net: nn.Module, batches, config: TrainConfig, comm, on_epoch, state: dict | None,
                  wide: list[dict]) -> History:
    """:func:`train_epochs` once the network is on its device."""
    forward = comm.wrap(net)  # DDP broadcasts rank 0's initial weights
    decay = embedding_decay_for(config, batches.rows)
    optimizers = make_optimizers(net, config.lr, config.weight_decay, decay)
    loop = EpochLoop(config, validated=batches.validated)
    try:
        if state is not None:
            loop.restore(state, net, optimizers)
        else:
            loop.history.wide = wide
        loop.history.embedding_decay = decay
        with progress_display(config.progress and comm.interactive) as progress:
            try:
                for epoch in loop.epochs():
                    record = _train_epoch(net, forward, optimizers, batches, config, comm, epoch, progress)
                    if batches.validated:
                        record.update(batches.validate(net, comm))
                    stop = loop.end_epoch(record, net, on_epoch)
                    if progress is not None:
                        progress.end_epoch(record, config.epochs)
                    comm.save(partial(loop.checkpoint, net, optimizers, epoch), record)
                    if stop:
                        break
            except KeyboardInterrupt:  # in one process only: Ray Train handles Ctrl-C on the driver
                loop.history.stopped = "interrupted"
                # a half-done epoch's rows, for a model interrupted before its first best
                flush_optimizers(optimizers)
        return loop.finish(net)
    finally:
        for opt in optimizers:
            if isinstance(opt, LazyWeightDecay):
                opt.remove_hooks()


def _train_epoch(net: nn.Module, forward, optimizers, batches, config: TrainConfig, comm, epoch: int,
                 progress) -> dict:
    """One optimisation step per batch: ``net.loss(forward(batch), batch)``, backward, every optimiser's step.
    ``forward`` is the network or its DDP wrapper, which averages the gradients over the workers in backward. The
    record's ``train_loss`` is the mean over every worker's rows. Each batch goes where the network is."""
    net.train()
    device = net_device(net)
    set_epoch_lr(optimizers, config, epoch)
    generator = seed_epoch(config, epoch, comm.rank)
    with on_cpu():  # batches are read and assembled on the CPU, then moved whole
        epoch_batches = made_on_cpu(batches.train(generator, epoch))
    task = progress.add_task(f"epoch {epoch + 1}/{config.epochs}", total=batches.steps, loss="") if progress else None
    started = time.perf_counter()
    total, seen = torch.zeros(()), 0
    for step, batch in enumerate(epoch_batches):
        batch = to_device(batch, device)
        value, _ = net.loss(forward(batch), batch)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        value.backward()
        for opt in optimizers:
            opt.step()
        size = n_rows(batch)
        total += value.detach() * size
        seen += size
        if task is not None and (step % 25 == 24 or step == batches.steps - 1):
            progress.update(task, completed=step + 1, loss=f"loss {total.item() / seen:.4f}")
    flush_optimizers(optimizers)
    seconds = time.perf_counter() - started
    if task is not None:
        progress.remove_task(task)
    loss_sum, rows = comm.sum([total.item(), float(seen)])
    rows = int(rows)
    return {"epoch": epoch, "train_loss": loss_sum / max(rows, 1), "seconds": seconds,
            "samples_per_second": rows / max(seconds, 1e-9)}


class EpochLoop:
    """Early stopping, the kept epoch and the checkpoint state of a training run, epoch by epoch.

    ``end_epoch(record, model)`` files an epoch's record, keeps the model's weights when the monitored score is the
    best so far and says whether to stop (``config.patience`` epochs without a better one, with validation rows);
    ``checkpoint`` is what a run needs to continue exactly (``restore`` reads it back); ``finish`` loads the kept
    weights. The monitored score is ``valid_<monitor>`` (maximised) or ``valid_loss`` (minimised) with validation
    rows, else ``train_loss``.
    """

    def __init__(self, config: TrainConfig, validated: bool):
        self.config = config
        self.validated = validated
        self.history = History(monitor=config.monitor)
        self.best_state: dict | None = None
        self.bad_epochs = 0
        self.start = 0
        maximise = validated and config.monitor != "loss"  # a metric; losses are minimised
        self.key = f"valid_{config.monitor}" if maximise else "valid_loss" if validated else "train_loss"
        self.sign = 1.0 if maximise else -1.0

    def restore(self, state: dict, model: nn.Module, optimizers) -> None:
        """Continue from a :meth:`checkpoint`: the model's and optimisers' state, the history and the kept weights."""
        model.load_state_dict(state["model"])
        for opt, opt_state in zip(optimizers, state["optimizers"]):
            opt.load_state_dict(opt_state)
        self.history = History(**state["history"])
        self.best_state, self.bad_epochs, self.start = state["best_state"], state["bad_epochs"], state["epoch"] + 1

    def epochs(self) -> range:
        """The epochs still to train (none after a restored run that had stopped early)."""
        return range(self.start, self.config.epochs if self.history.stopped == "completed" else self.start)

    def end_epoch(self, record: dict, model: nn.Module, on_epoch: Callable[[int, dict], None] | None = None) -> bool:
        """File ``record`` (an epoch's ``train_loss``, ``valid_*`` …); True when training should stop here."""
        epoch = record["epoch"]
        self.history.epochs.append(record)
        if on_epoch is not None:
            on_epoch(epoch, record)
        if self.history.best_epoch < 0 or self.sign * record[self.key] > self.sign * self.history.best_score:
            self.history.best_score, self.history.best_epoch, self.bad_epochs = record[self.key], epoch, 0
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        else:
            self.bad_epochs += 1
        if self.validated and self.bad_epochs >= self.config.patience:
            self.history.stopped = "early_stopping"
            return True
        return False

    def checkpoint(self, model: nn.Module, optimizers, epoch: int) -> dict:
        return {"model": to_cpu(model.state_dict()), "optimizers": [o.state_dict() for o in optimizers],
                "history": self.history.to_dict(), "best_state": self.best_state, "bad_epochs": self.bad_epochs,
                "epoch": epoch}

    def finish(self, model: nn.Module) -> History:
        """Load the kept epoch's weights into ``model`` (evaluation mode) and return the history."""
        if self.best_state is not None:
            model.load_state_dict(self.best_state)
        model.eval()
        return self.history


def embedding_decay_for(config: TrainConfig, rows: int) -> float:
    r"""The embedding decay of a run over ``rows`` training rows: ``config.embedding_decay``, times
    :math:`\min(1, \text{decay_rows} / \text{rows})` when ``config.decay_rows`` is set.

    Decoupled decay shrinks every row by :math:`1 - \eta\lambda` per step, so an epoch of n / B steps shrinks it by
    about :math:`e^{-\eta\lambda n / B}`: a decay chosen on a small table is n / n₀ times stronger per epoch on a
    larger one, while an L2 prior fixed per row should weigh *less* against a mean loss over more rows. Scaling
    λ by n₀ / n keeps the decay per epoch what it was where it was chosen (it is never made stronger)."""
    if config.decay_rows <= 0 or rows <= config.decay_rows:
        return config.embedding_decay
    return config.embedding_decay * config.decay_rows / rows


def set_epoch_lr(optimizers, config: TrainConfig, epoch: int) -> None:
    """``config.lr · config.lr_decay ** epoch`` on every optimiser (times a group's ``lr_scale``)."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = config.lr * config.lr_decay ** epoch * group.get("lr_scale", 1.0)


def seed_epoch(config: TrainConfig, epoch: int, rank: int = 0) -> torch.Generator:
    """Seed torch (dropout …) for ``epoch`` and return the generator of its shuffle. Worker ``rank`` of a
    data-parallel run draws its own dropout and shuffle; rank 0 draws what a one-process run draws."""
    torch.manual_seed(config.seed * 100_003 + epoch + rank * 7_919_993)
    return torch.Generator().manual_seed(config.seed * 1_000_003 + epoch + rank * 7_919_993)


@torch.no_grad()  # a loss with a penalty on the weights (the incentive heads) would track gradients
def validation_record(model: nn.Module, outputs: dict[str, Tensor], batch: Batch,
                      metrics: Mapping[str, Metric]) -> dict[str, float]:
    """``valid_loss``, ``valid_<part>`` and ``valid_<metric>`` of a whole validation table from its outputs (the
    loss reads only the outputs and the labels of ``batch``)."""
    device = net_device(model)  # a loss may read the weights (a penalty)
    loss, parts = model.loss(to_device(outputs, device), to_device(batch, device))
    record = {"valid_loss": float(loss), **{f"valid_{k}": float(v) for k, v in parts.items()}}
    record.update({f"valid_{name}": float(metric(outputs, batch)) for name, metric in metrics.items()})
    return record


def flush_optimizers(optimizers) -> None:
    """Bring every lazily decayed embedding row up to date (before validating or saving)."""
    for opt in optimizers:
        if isinstance(opt, LazyWeightDecay):
            opt.flush()


def progress_display(enabled: bool):
    """What a training loop shows when ``enabled`` (a null context otherwise): on a terminal, a transient rich
    progress display (description, bar, done/total, a ``loss`` field, time left); elsewhere (a log file, a pipe),
    where rich's live display stays blank until it ends, :class:`EpochLines`. The loop passes each epoch's
    record to its ``end_epoch``."""
    if not enabled:
        return contextlib.nullcontext()
    console = rich.get_console()
    if not (console.is_interactive or console.is_jupyter):
        return EpochLines()
    return EpochProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                         TextColumn("{task.fields[loss]}"), TimeRemainingColumn(), transient=True)


class EpochProgress(Progress):
    """The live display of a training loop on a terminal: its bars show each epoch while it runs."""

    def end_epoch(self, record: dict, epochs: int) -> None:
        pass


class EpochLines:
    """The display of a training loop whose output is not a terminal: no bars (``add_task`` gives no task), one
    plain line per epoch, flushed, e.g. ``epoch 2/10: train_loss 0.41234, valid_loss 0.40123, valid_cvr_auc
    0.70120 (12.3 s)``."""

    def __enter__(self) -> EpochLines:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, *args, **kwargs) -> None:
        return None

    def end_epoch(self, record: dict, epochs: int) -> None:
        scores = ", ".join(f"{name} {value:.5f}" for name, value in record.items()
                           if name.startswith(("train_", "valid_")))
        print(f"epoch {record['epoch'] + 1}/{epochs}: {scores} ({record['seconds']:.1f} s)", flush=True)

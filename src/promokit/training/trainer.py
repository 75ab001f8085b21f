"""One model-agnostic trainer.

A model is an ``nn.Module`` whose ``forward(batch)`` returns a dict of named tensors and whose
``loss(outputs, batch)`` returns ``(total, parts)``. The trainer sees nothing else of it; validation metrics
beyond the loss are functions ``metric(outputs, batch) -> float`` passed to :meth:`Trainer.fit`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
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
from promokit.metrics import auc
from promokit.training.batches import Batch, iterate_batches, n_rows
from promokit.training.logistic import solve_wide
from promokit.training.optim import LazyWeightDecay, make_optimizers

CHECKPOINT = "checkpoint.pt"


@dataclass
class TrainConfig:
    """Optimisation settings; the defaults are ESM²'s Table 2 (Adam, lr 0.0005, batch 1000).

    ``weight_decay`` is decoupled L2 on the dense parameters (AdamW); ``embedding_decay`` the same on the rows
    of sparse embedding tables, applied lazily to the rows a batch touches (:class:`LazyWeightDecay`).

    ``lr_decay`` is exponential learning-rate decay by epoch: epoch e trains at ``lr · lr_decay**e`` (the
    joint-incentive paper's section 5 uses 0.95; 1 keeps the rate constant).

    ``monitor`` is what early stopping and the kept epoch follow on the validation rows: ``"loss"`` (lowest
    validation loss) or the name of a metric passed to :meth:`Trainer.fit` (highest value, e.g. ``"auc"``).

    ``decay_rows`` > 0 makes ``embedding_decay`` follow the table's size: it is the decay at ``decay_rows`` training
    rows, and a table of n > ``decay_rows`` rows gets ``embedding_decay · decay_rows / n``
    (:func:`embedding_decay_for`).
    """

    epochs: int = 10
    batch_size: int = 1000
    lr: float = 5e-4
    lr_decay: float = 1.0
    weight_decay: float = 0.0
    embedding_decay: float = 0.0
    patience: int = 2
    seed: int = 0
    eval_batch_size: int = 16384
    progress: bool = True
    monitor: str = "loss"
    decay_rows: int = 0

    def to_dict(self) -> dict:
        return asdict(self)

    def merged(self, params: Mapping | None) -> tuple[TrainConfig, dict]:
        """Flat parameters (``--params``, or what ``tune`` writes) split into this config with their TrainConfig
        fields replaced (``lr``, ``embedding_decay`` …) and the remaining (model) parameters."""
        params = dict(params or {})
        names = set(self.to_dict())
        return (TrainConfig(**{**self.to_dict(), **{k: v for k, v in params.items() if k in names}}),
                {k: v for k, v in params.items() if k not in names})


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
    """Mini-batch training with early stopping on the validation loss or a validation metric, a checkpoint
    after every epoch, resume after interruption, and a progress display.

    Each epoch's shuffle and dropout are seeded from ``(seed, epoch)``, so a resumed run continues exactly
    as the uninterrupted one would have.
    """

    def __init__(self, config: TrainConfig | None = None, checkpoint_dir: str | Path | None = None):
        self.config = config or TrainConfig()
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None

    def fit(self, model: nn.Module, train: Batch, valid: Batch | None = None, resume: bool = False,
            metrics: Mapping[str, Metric] | None = None,
            on_epoch: Callable[[int, dict], None] | None = None) -> History:
        """Train ``model``; keep the epoch that is best on ``valid`` by ``config.monitor``. Every ``metrics``
        entry is computed on ``valid`` after each epoch and recorded as ``valid_<name>``. ``on_epoch(epoch,
        record)`` sees each epoch's record (e.g. to prune a hyper-parameter trial by raising); an exception it
        raises ends training and propagates."""
        cfg = self.config
        metrics = dict(metrics or {})
        if cfg.monitor != "loss" and cfg.monitor not in metrics:
            raise ValueError(f"monitor {cfg.monitor!r} is neither 'loss' nor one of the metrics {sorted(metrics)}")
        decay = embedding_decay_for(cfg, n_rows(train))
        optimizers = make_optimizers(model, cfg.lr, cfg.weight_decay, decay)
        try:
            history = self._fit(model, optimizers, train, valid, resume, metrics, on_epoch)
            history.embedding_decay = decay
            return history
        finally:
            for opt in optimizers:
                if isinstance(opt, LazyWeightDecay):
                    opt.remove_hooks()

    def _fit(self, model, optimizers, train, valid, resume, metrics, on_epoch) -> History:
        cfg = self.config
        loop = EpochLoop(cfg, validated=valid is not None)
        if resume and self.checkpoint_dir and (self.checkpoint_dir / CHECKPOINT).exists():
            loop.restore(torch.load(self.checkpoint_dir / CHECKPOINT, weights_only=True), model, optimizers)
        else:
            loop.history.wide = solve_wide(model, train, valid)
        with progress_display(cfg.progress) as progress:
            try:
                for epoch in loop.epochs():
                    record = self._train_epoch(model, optimizers, train, epoch, progress)
                    if valid is not None:
                        record.update(self._validate(model, valid, metrics))
                    stop = loop.end_epoch(record, model, on_epoch)
                    if progress is not None:
                        progress.end_epoch(record, cfg.epochs)
                    if self.checkpoint_dir is not None:
                        self._save_checkpoint(loop.checkpoint(model, optimizers, epoch))
                    if stop:
                        break
            except KeyboardInterrupt:
                loop.history.stopped = "interrupted"
                flush_optimizers(optimizers)  # a half-done epoch's rows, for a model interrupted before its first best
        return loop.finish(model)

    def _train_epoch(self, model, optimizers, train: Batch, epoch: int, progress) -> dict:
        cfg = self.config
        model.train()
        set_epoch_lr(optimizers, cfg, epoch)
        generator = seed_epoch(cfg, epoch)
        n_batches = math.ceil(n_rows(train) / cfg.batch_size)
        task = progress.add_task(f"epoch {epoch + 1}/{cfg.epochs}", total=n_batches, loss="") if progress else None
        started = time.perf_counter()
        total, seen = train_steps(model, model.loss, optimizers, iterate_batches(train, cfg.batch_size, generator),
                                  on_step=step_progress(progress, task, n_batches))
        flush_optimizers(optimizers)
        if task is not None:
            progress.remove_task(task)
        return epoch_record(epoch, total.item(), seen, time.perf_counter() - started)

    @torch.no_grad()
    def _validate(self, model: nn.Module, valid: Batch, metrics: Mapping[str, Metric]) -> dict[str, float]:
        """Loss, loss parts and ``metrics`` of the whole validation table, from one prediction pass."""
        return validation_record(model, self.predict(model, valid), valid, metrics)

    @torch.no_grad()
    def evaluate_loss(self, model: nn.Module, tensors: Batch) -> tuple[float, dict[str, float]]:
        """Mean loss and loss parts over a whole table, in evaluation mode."""
        model.eval()
        total, parts, seen = 0.0, {}, 0
        for batch in iterate_batches(tensors, self.config.eval_batch_size):
            loss, named = model.loss(model(batch), batch)
            size = n_rows(batch)
            total += loss.item() * size
            for k, v in named.items():
                parts[k] = parts.get(k, 0.0) + float(v) * size
            seen += size
        return total / seen, {k: v / seen for k, v in parts.items()}

    @torch.no_grad()
    def predict(self, model: nn.Module, tensors: Batch) -> dict[str, Tensor]:
        """Named outputs over a whole table, concatenated in row order."""
        model.eval()
        chunks: dict[str, list[Tensor]] = {}
        for batch in iterate_batches(tensors, self.config.eval_batch_size):
            for name, value in model(batch).items():
                chunks.setdefault(name, []).append(value)
        if not chunks:  # a table without rows (an empty partition): one pass over it still names every output
            chunks = {name: [value] for name, value in model(tensors).items()}
        return {name: torch.cat(values) for name, values in chunks.items()}

    def _save_checkpoint(self, state: dict) -> None:
        with atomic_path(self.checkpoint_dir / CHECKPOINT) as tmp:
            torch.save(state, tmp)


# ------------------------------------------------------------------------------------------------------------------
# The pieces of an epoch loop. The Trainer above is one loop over a table in memory; a data-parallel loop over a
# table's parts (``promokit.training.shard_loop``) is another, made of the same pieces, so both optimise, seed, stop
# early and checkpoint alike.


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
            self.best_state = copy.deepcopy(model.state_dict())
        else:
            self.bad_epochs += 1
        if self.validated and self.bad_epochs >= self.config.patience:
            self.history.stopped = "early_stopping"
            return True
        return False

    def checkpoint(self, model: nn.Module, optimizers, epoch: int) -> dict:
        return {"model": model.state_dict(), "optimizers": [o.state_dict() for o in optimizers],
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


def train_steps(forward: Callable[[Batch], dict[str, Tensor]], loss: Callable, optimizers, batches: Iterable[Batch],
                on_step: Callable[[int, Tensor, int], None] | None = None) -> tuple[Tensor, int]:
    """One optimisation step per batch: ``loss(forward(batch), batch)``, backward, every optimiser's step.
    ``forward`` is the model, or its data-parallel wrapper (which averages the gradients over the workers in
    backward); ``loss`` the model's own. Returns the sum of loss × rows and the rows seen; ``on_step(step, total,
    seen)`` after each step (progress)."""
    total, seen = torch.zeros(()), 0
    for step, batch in enumerate(batches):
        value, _ = loss(forward(batch), batch)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        value.backward()
        for opt in optimizers:
            opt.step()
        size = n_rows(batch)
        total += value.detach() * size
        seen += size
        if on_step is not None:
            on_step(step, total, seen)
    return total, seen


def epoch_record(epoch: int, loss_sum: float, seen: int, seconds: float) -> dict:
    return {"epoch": epoch, "train_loss": loss_sum / max(seen, 1), "seconds": seconds,
            "samples_per_second": seen / max(seconds, 1e-9)}


def step_progress(progress, task, n_batches: int):
    """An ``on_step`` for :func:`train_steps` that moves a progress task (every 25 steps and at the last)."""
    if task is None:
        return None

    def on_step(step: int, total: Tensor, seen: int) -> None:
        if step % 25 == 24 or step == n_batches - 1:
            progress.update(task, completed=step + 1, loss=f"loss {total.item() / seen:.4f}")

    return on_step


def validation_record(model: nn.Module, outputs: dict[str, Tensor], batch: Batch,
                      metrics: Mapping[str, Metric]) -> dict[str, float]:
    """``valid_loss``, ``valid_<part>`` and ``valid_<metric>`` of a whole validation table from its outputs (the
    loss reads only the outputs and the labels of ``batch``)."""
    loss, parts = model.loss(outputs, batch)
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

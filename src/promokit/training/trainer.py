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
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
        optimizers = make_optimizers(model, cfg.lr, cfg.weight_decay, cfg.embedding_decay)
        try:
            return self._fit(model, optimizers, train, valid, resume, metrics, on_epoch)
        finally:
            for opt in optimizers:
                if isinstance(opt, LazyWeightDecay):
                    opt.remove_hooks()

    def _fit(self, model, optimizers, train, valid, resume, metrics, on_epoch) -> History:
        cfg = self.config
        history, best_state, bad_epochs, start = History(monitor=cfg.monitor), None, 0, 0
        if resume and self.checkpoint_dir and (self.checkpoint_dir / CHECKPOINT).exists():
            state = torch.load(self.checkpoint_dir / CHECKPOINT, weights_only=True)
            model.load_state_dict(state["model"])
            for opt, opt_state in zip(optimizers, state["optimizers"]):
                opt.load_state_dict(opt_state)
            history = History(**state["history"])
            best_state, bad_epochs, start = state["best_state"], state["bad_epochs"], state["epoch"] + 1
        maximise = valid is not None and cfg.monitor != "loss"  # a metric; losses are minimised
        key = f"valid_{cfg.monitor}" if maximise else "valid_loss" if valid is not None else "train_loss"
        sign = 1.0 if maximise else -1.0
        with progress_display(cfg.progress) as progress:
            try:
                for epoch in range(start, cfg.epochs):
                    record = self._train_epoch(model, optimizers, train, epoch, progress)
                    if valid is not None:
                        record.update(self._validate(model, valid, metrics))
                    history.epochs.append(record)
                    if on_epoch is not None:
                        on_epoch(epoch, record)
                    if history.best_epoch < 0 or sign * record[key] > sign * history.best_score:
                        history.best_score, history.best_epoch, bad_epochs = record[key], epoch, 0
                        best_state = copy.deepcopy(model.state_dict())
                    else:
                        bad_epochs += 1
                    self._save_checkpoint(model, optimizers, history, best_state, bad_epochs, epoch)
                    if valid is not None and bad_epochs >= cfg.patience:
                        history.stopped = "early_stopping"
                        break
            except KeyboardInterrupt:
                history.stopped = "interrupted"
                _flush(optimizers)  # a half-done epoch's rows, for a model interrupted before its first best
        if best_state is not None:
            model.load_state_dict(best_state)
        model.eval()
        return history

    def _train_epoch(self, model, optimizers, train: Batch, epoch: int, progress) -> dict:
        cfg = self.config
        model.train()
        for opt in optimizers:
            for group in opt.param_groups:
                group["lr"] = cfg.lr * cfg.lr_decay ** epoch
        torch.manual_seed(cfg.seed * 100_003 + epoch)
        generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
        n = n_rows(train)
        n_batches = math.ceil(n / cfg.batch_size)
        task = progress.add_task(f"epoch {epoch + 1}/{cfg.epochs}", total=n_batches, loss="") if progress else None
        total, seen, started = torch.zeros(()), 0, time.perf_counter()
        for step, batch in enumerate(iterate_batches(train, cfg.batch_size, generator)):
            loss, _ = model.loss(model(batch), batch)
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in optimizers:
                opt.step()
            size = n_rows(batch)
            total += loss.detach() * size
            seen += size
            if task is not None and (step % 25 == 24 or step == n_batches - 1):
                progress.update(task, completed=step + 1, loss=f"loss {total.item() / seen:.4f}")
        _flush(optimizers)
        if task is not None:
            progress.remove_task(task)
        seconds = time.perf_counter() - started
        return {"epoch": epoch, "train_loss": total.item() / max(seen, 1), "seconds": seconds,
                "samples_per_second": seen / max(seconds, 1e-9)}

    @torch.no_grad()
    def _validate(self, model: nn.Module, valid: Batch, metrics: Mapping[str, Metric]) -> dict[str, float]:
        """Loss, loss parts and ``metrics`` of the whole validation table, from one prediction pass."""
        outputs = self.predict(model, valid)
        loss, parts = model.loss(outputs, valid)
        record = {"valid_loss": float(loss), **{f"valid_{k}": float(v) for k, v in parts.items()}}
        record.update({f"valid_{name}": float(metric(outputs, valid)) for name, metric in metrics.items()})
        return record

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

    def _save_checkpoint(self, model, optimizers, history, best_state, bad_epochs, epoch) -> None:
        if self.checkpoint_dir is None:
            return
        state = {"model": model.state_dict(), "optimizers": [o.state_dict() for o in optimizers],
                 "history": history.to_dict(), "best_state": best_state, "bad_epochs": bad_epochs, "epoch": epoch}
        with atomic_path(self.checkpoint_dir / CHECKPOINT) as tmp:
            torch.save(state, tmp)


def _flush(optimizers) -> None:
    for opt in optimizers:
        if isinstance(opt, LazyWeightDecay):
            opt.flush()


def progress_display(enabled: bool):
    """A transient rich progress display (description, bar, done/total, a ``loss`` field, time left) for
    training loops; a null context when not ``enabled``."""
    if not enabled:
        return contextlib.nullcontext()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[loss]}"), TimeRemainingColumn(), transient=True)

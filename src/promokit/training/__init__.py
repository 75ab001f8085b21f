"""Model-agnostic training: batches, the Trainer, seeds and the model directory."""

from promokit.training.artifact import (
    ModelDirWriter,
    load_weights,
    read_json,
    read_model_config,
    read_training_ids,
    read_weights,
    write_model_dir,
)
from promokit.training.batches import Batch, iterate_batches, n_rows, stream_batches, take
from promokit.training.logistic import fit_logistic, solve_wide
from promokit.training.optim import LazyWeightDecay, make_optimizers
from promokit.training.params import check_model_params
from promokit.training.seed import seed_everything
from promokit.training.trainer import (
    EpochLoop,
    History,
    TrainConfig,
    Trainer,
    auc_metric,
    embedding_decay_for,
    epoch_record,
    flush_optimizers,
    progress_display,
    seed_epoch,
    set_epoch_lr,
    step_progress,
    train_steps,
    validation_record,
)

__all__ = ["Batch", "EpochLoop", "History", "LazyWeightDecay", "ModelDirWriter", "TrainConfig", "Trainer",
           "auc_metric", "check_model_params", "embedding_decay_for", "epoch_record", "fit_logistic",
           "flush_optimizers", "iterate_batches", "load_weights", "make_optimizers", "n_rows", "progress_display",
           "read_json", "read_model_config", "read_training_ids", "read_weights", "seed_epoch", "seed_everything",
           "set_epoch_lr", "solve_wide", "step_progress", "stream_batches", "take", "train_steps", "validation_record",
           "write_model_dir"]

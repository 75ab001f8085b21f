"""Model-agnostic training: batches, the Trainer, seeds and the model directory."""

from promokit.training.artifact import (
    ModelDirWriter,
    load_weights,
    read_json,
    read_model_config,
    read_weights,
    write_model_dir,
)
from promokit.training.batches import Batch, iterate_batches, n_rows, take
from promokit.training.logistic import fit_logistic
from promokit.training.optim import LazyWeightDecay, make_optimizers
from promokit.training.params import check_model_params
from promokit.training.seed import seed_everything
from promokit.training.trainer import History, TrainConfig, Trainer, auc_metric, progress_display

__all__ = ["Batch", "History", "LazyWeightDecay", "ModelDirWriter", "TrainConfig", "Trainer", "auc_metric",
           "check_model_params", "fit_logistic", "iterate_batches", "load_weights", "make_optimizers", "n_rows",
           "progress_display", "read_json", "read_model_config", "read_weights", "seed_everything", "take",
           "write_model_dir"]

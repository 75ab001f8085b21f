"""Model-agnostic training: batches, the Trainer, seeds and the model directory.

Exports load lazily (PEP 562): the torch-free parts (``config``, ``defaults``) import without torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "Batch": "promokit.training.batches",
    "History": "promokit.training.trainer",
    "LazyWeightDecay": "promokit.training.optim",
    "ModelDirWriter": "promokit.training.artifact",
    "TrainConfig": "promokit.training.config",
    "Trainer": "promokit.training.trainer",
    "auc_metric": "promokit.training.trainer",
    "check_model_params": "promokit.training.params",
    "embedding_decay_for": "promokit.training.trainer",
    "fit_logistic": "promokit.training.logistic",
    "iterate_batches": "promokit.training.batches",
    "load_weights": "promokit.training.artifact",
    "make_optimizers": "promokit.training.optim",
    "n_rows": "promokit.training.batches",
    "progress_display": "promokit.training.trainer",
    "read_json": "promokit.training.artifact",
    "read_model_config": "promokit.training.artifact",
    "read_training_ids": "promokit.training.artifact",
    "read_weights": "promokit.training.artifact",
    "resolve_device": "promokit.training.device",
    "GroupRecalibration": "promokit.training.recalibration",
    "Recalibration": "promokit.training.recalibration",
    "seed_everything": "promokit.training.seed",
    "set_epoch_lr": "promokit.training.trainer",
    "solve_wide": "promokit.training.logistic",
    "stream_batches": "promokit.training.batches",
    "take": "promokit.training.batches",
    "write_model_dir": "promokit.training.artifact",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS, subpackages=("defaults",))

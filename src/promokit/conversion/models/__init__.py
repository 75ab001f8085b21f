"""Conversion models by the names the ESM² paper uses; each entry is a class and its default params."""

from promokit.conversion.models.dnn import DNN
from promokit.conversion.models.esm2 import ESM2, sequential_composition
from promokit.conversion.models.esmm import ESMM
from promokit.conversion.models.gbdt import GBDT
from promokit.conversion.models.lr import LR
from promokit.training import defaults

#: The neural models' default network (``promokit.training.defaults``, chosen on validation data); the classes'
#: own defaults are the ESM² paper's Table 2, tuned for 10⁹ impressions.
NET_DEFAULTS = defaults.NET
#: The paper's Table 2 network as parameters (with ``promokit.conversion.estimator.PAPER_TRAIN``).
PAPER_NET = {"emb_dim": 16, "hidden": (512, 256, 128, 32), "dropout": 0.5}

#: name → (class, default parameters). DNN-OS is DNN with over-sampled positives; LR is the linear floor.
MODELS = {
    "lr": (LR, {}),
    "gbdt": (GBDT, {}),
    "dnn": (DNN, NET_DEFAULTS),
    "dnn-os": (DNN, {**NET_DEFAULTS, "oversample": 5.0}),
    "esmm": (ESMM, NET_DEFAULTS),
    "esm2": (ESM2, NET_DEFAULTS),
}

__all__ = ["DNN", "ESM2", "ESMM", "GBDT", "LR", "MODELS", "NET_DEFAULTS", "PAPER_NET", "sequential_composition"]

"""Conversion models by the names the ESM² paper uses; each entry is a class and its default params."""

from promokit.conversion.models.dnn import DNN
from promokit.conversion.models.esm2 import ESM2, sequential_composition
from promokit.conversion.models.esmm import ESMM
from promokit.conversion.models.gbdt import GBDT

#: name → (class, default parameters). DNN-OS is DNN with over-sampled positives.
MODELS = {
    "gbdt": (GBDT, {}),
    "dnn": (DNN, {}),
    "dnn-os": (DNN, {"oversample": 5.0}),
    "esmm": (ESMM, {}),
    "esm2": (ESM2, {}),
}

__all__ = ["DNN", "ESM2", "ESMM", "GBDT", "MODELS", "sequential_composition"]

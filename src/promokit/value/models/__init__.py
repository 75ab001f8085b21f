"""The value models by name: the floor every model has to beat (``hurdle``: boosted trees for P(convert) and the
log amount), then ESDPM and the baselines of the EOCA paper's Tables 1–2, as ESDPM configurations.

Following §5.1, every network reads the same behaviour sequence through the same self-attention encoder; only
ESDPM reads the consumption graph (MTL-ZILN and MTL-MSE share ESDPM-NCG's bottom, as the paper notes).
"""

from promokit.value.models.esdpm import ESDPM
from promokit.value.models.hurdle import Hurdle

NO_GRAPH = {"graph": False}
MODELS = {
    "hurdle": (Hurdle, {}),
    "esdpm": (ESDPM, {}),
    "esdpm-ncg": (ESDPM, NO_GRAPH),
    "mtl-ziln": (ESDPM, {**NO_GRAPH, "loss": "ziln"}),
    "mtl-mse": (ESDPM, {**NO_GRAPH, "amount": "mse"}),
    "esmm": (ESDPM, {**NO_GRAPH, "amount": None}),
    "mmoe": (ESDPM, {**NO_GRAPH, "conversion": "direct", "amount": "mse"}),
    "shared-bottom": (ESDPM, {**NO_GRAPH, "bottom": "shared", "conversion": "direct", "amount": "mse"}),
    "dnn": (ESDPM, {**NO_GRAPH, "bottom": "separate", "conversion": "direct", "amount": "mse"}),
}

#: former names of models: a model directory saved under one still loads, and the CLI still takes it with a warning
RENAMED = {"two-part": "hurdle"}

__all__ = ["ESDPM", "Hurdle", "MODELS", "RENAMED"]

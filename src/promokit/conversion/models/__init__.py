"""Conversion models by the names the ESM² paper uses; each entry is a class and its default params."""

from promokit.conversion.models.base import Base
from promokit.conversion.models.dcn import DCN
from promokit.conversion.models.division import Division
from promokit.conversion.models.dnn import DNN
from promokit.conversion.models.esm2 import ESM2, sequential_composition
from promokit.conversion.models.esmm import ESMM
from promokit.conversion.models.gbdt import GBDT
from promokit.conversion.models.gmcm import GMCM
from promokit.conversion.models.lr import LR
from promokit.conversion.models.mcm import MCM
from promokit.conversion.models.mcm_gru import MCMGRU
from promokit.conversion.models.resnet import ResNet
from promokit.training import defaults

#: The neural models' default network (``promokit.training.defaults``, chosen on validation data); the classes'
#: own defaults are the ESM² paper's Table 2, tuned for 10⁹ impressions.
NET_DEFAULTS = {**defaults.NET, "wide": defaults.WIDE}
#: The paper's Table 2 network as parameters (with ``promokit.conversion.estimator.PAPER_TRAIN``).
PAPER_NET = {"emb_dim": 16, "hidden": (512, 256, 128, 32), "dropout": 0.5}

#: Every neural model's wide term (``promokit.training.defaults.WIDE``).
WIDE = {"wide": defaults.WIDE}
#: name → (class, default parameters). DNN-OS is DNN with over-sampled positives; LR is the linear floor.
MODELS = {
    "lr": (LR, {}),
    "gbdt": (GBDT, {}),
    "dnn": (DNN, NET_DEFAULTS),
    "dnn-os": (DNN, {**NET_DEFAULTS, "oversample": 5.0}),
    "esmm": (ESMM, NET_DEFAULTS),
    "esm2": (ESM2, NET_DEFAULTS),
    # GMCM, its Table 2 baselines and its Figure 5 ablations, with the GMCM paper's section 5.4 networks (the
    # classes' defaults: (512, 256, 128, 64) with batch normalisation)
    "base": (Base, WIDE),
    "division": (Division, WIDE),
    "resnet": (ResNet, WIDE),
    "dcn": (DCN, WIDE),
    "gmcm": (GMCM, WIDE),
    "mcm-2": (MCM, {"keep": 2, **WIDE}),
    "mcm-10": (MCM, WIDE),
    "mcm-gru": (MCMGRU, WIDE),
}

__all__ = ["DCN", "DNN", "ESM2", "ESMM", "GBDT", "GMCM", "LR", "MCM", "MCMGRU", "MODELS", "NET_DEFAULTS", "PAPER_NET",
           "Base", "Division", "ResNet", "sequential_composition"]

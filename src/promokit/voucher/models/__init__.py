"""Voucher-redemption models by the names of the DMBGN paper's Table 3; each a class and its default params."""

from promokit.training import defaults
from promokit.voucher.models.base import FieldLayout, RedeemModel
from promokit.voucher.models.din import DIN
from promokit.voucher.models.dmbgn import DMBGN
from promokit.voucher.models.dnn import DNN
from promokit.voucher.models.gbdt import GBDT
from promokit.voucher.models.lr import LR
from promokit.voucher.models.wdl import WDL

#: name → (class, default parameters). ``pretrain: k`` makes the estimator pre-train DMBGN's UVG encoder for
#: k epochs on the training sessions (eq. 6) first: DMBGN fine-tunes it, DMBGN-Pretrained keeps it frozen,
#: DMBGN-AvgPooling averages item embeddings instead of running the GNN (paper section 5).
#: Every neural model starts from the shared network defaults (``promokit.training.defaults``, chosen on
#: validation data); the classes' own defaults are the paper's section 4.4 (MLP (128, 64), dropout 0.5), kept
#: as ``PAPER_NET``.
#: The shared network with the default wide term (WDL keeps its own, trained jointly as the paper's).
WIDE_NET = {**defaults.NET, "wide": defaults.WIDE}
MODELS = {
    "lr": (LR, {}),
    "gbdt": (GBDT, {}),
    "dnn": (DNN, WIDE_NET),
    "wdl": (WDL, defaults.NET),
    "din": (DIN, WIDE_NET),
    "dmbgn-avgpooling": (DMBGN, {**WIDE_NET, "encoder": "avg"}),
    "dmbgn-pretrained": (DMBGN, {**WIDE_NET, "pretrain": 3, "freeze_pretrained": True}),
    "dmbgn": (DMBGN, {**WIDE_NET, "pretrain": 3}),
}
PAPER_NET = {"emb_dim": 16, "hidden": (128, 64), "dropout": 0.5}

__all__ = ["DIN", "DMBGN", "DNN", "GBDT", "LR", "MODELS", "PAPER_NET", "WDL", "FieldLayout", "RedeemModel"]

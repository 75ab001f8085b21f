"""Voucher-redemption models by the names of the DMBGN paper's Table 3; each a class and its default params."""

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
MODELS = {
    "lr": (LR, {}),
    "gbdt": (GBDT, {}),
    "dnn": (DNN, {}),
    "wdl": (WDL, {}),
    "din": (DIN, {}),
    "dmbgn-avgpooling": (DMBGN, {"encoder": "avg"}),
    "dmbgn-pretrained": (DMBGN, {"pretrain": 3, "freeze_pretrained": True}),
    "dmbgn": (DMBGN, {"pretrain": 3}),
}

__all__ = ["DIN", "DMBGN", "DNN", "GBDT", "LR", "MODELS", "WDL", "FieldLayout", "RedeemModel"]

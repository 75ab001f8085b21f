"""Neural blocks shared by several models."""

from promokit.nn.attention import AttentionUnit
from promokit.nn.embedding import FieldEmbedding, drop_to_oov
from promokit.nn.inputs import FeatureEmbedding
from promokit.nn.linear import LinearLogit
from promokit.nn.losses import binary_log_loss
from promokit.nn.mlp import MLP
from promokit.nn.wide import WIDE_L2, WIDE_MODES, WideTerm

__all__ = ["MLP", "WIDE_L2", "WIDE_MODES", "AttentionUnit", "FeatureEmbedding", "FieldEmbedding", "LinearLogit",
           "WideTerm", "binary_log_loss", "drop_to_oov"]

"""DIN (Zhou et al., KDD 2018) over the user's redeemed vouchers, the DIN baseline of the DMBGN paper."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from promokit.nn import MLP, WIDE_L2, AttentionUnit, FeatureEmbedding
from promokit.voucher.models.base import FieldLayout, RedeemModel


class DIN(RedeemModel):
    r"""DNN plus an attention-pooled history: the user's item history of DIN replaced by the user's last R
    redeemed vouchers (DMBGN section 4.2).

    A voucher is embedded as its id fields' embeddings (shared with the target's, as in DIN) ‖ its numeric
    features (min_spend, discount). :class:`promokit.nn.AttentionUnit` (DMBGN eq. 7, PReLU, 64 units)
    weighs each history voucher by the target voucher; the pooled vector joins the DNN input.

    Batch keys: ``cat``, ``num``, ``history`` ``(B, R)`` (−1 = padding), ``hist_cat`` ``(B, R, F_v)``,
    ``hist_num`` ``(B, R, D_v)``.
    ``wide`` adds the ``lr`` floor's linear term to the logit (:class:`~promokit.nn.WideTerm`: ``"none"``,
    ``"joint"`` or ``"offset"``; ``wide_l2`` is the joint term's decay).

    Paper: the DIN baseline of §4.2 of the DMBGN paper (``dmbgn-voucher-redemption.txt``), "replacing the user's
    historical item sequences with user's historical voucher sequences"; its attention is the AttentionNet of
    DMBGN's eq. (7) with voucher embeddings in place of UVG embeddings, and its loss eq. (8):

    .. math::
        h_T = \sum_{r=1}^{R} \mathrm{AttentionUnit}(e_r, e_T)\, e_r, \qquad
        \hat y_{RR} = \sigma\big(\mathrm{MLP}([g \,\|\, h_T])\big)

    with g the embedded features and e_r, e_T the history's and the target's voucher embeddings.

    Args:
        layout: where the id, profile and voucher columns sit in the batch (:class:`FieldLayout`).
        emb_dim: embedding size per categorical field (§4.4: 16).
        hidden: the MLP's hidden widths (§4.4: (128, 64)).
        dropout: dropout after each hidden layer (§4.4: 0.5).
        attention_units: PReLU units of the attention network (§4.4: 64).
        sparse: sparse embedding gradients.
        oov_dropout: probability of replacing a training code by the OOV slot.
        wide: the wide term's mode, ``"none"``, ``"joint"`` or ``"offset"``.
        wide_l2: the joint wide term's decay.

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``, ``batch["history"]``
          ``(B, R)`` (−1 = padding), ``batch["hist_cat"]`` ``(B, R, F_v)`` int64, ``batch["hist_num"]``
          ``(B, R, D_v)``; for :meth:`loss` also ``batch["redeemed"]`` ``(B,)``
        - **output:** ``p_redeem`` ``(B,)``
    """

    reads_history = True

    def __init__(self, layout: FieldLayout, emb_dim: int = 16, hidden: Sequence[int] = (128, 64),
                 dropout: float = 0.5, attention_units: int = 64, sparse: bool = True,
                 oov_dropout: float = 0.0, wide: str = "none", wide_l2: float = WIDE_L2):
        super().__init__()
        self.input = FeatureEmbedding(layout.cardinalities, layout.n_numeric, emb_dim, sparse=sparse,
                                      oov_dropout=oov_dropout)
        self.register_buffer("voucher_fields", torch.tensor(layout.voucher_fields, dtype=torch.long),
                             persistent=False)
        self.register_buffer("voucher_numeric", torch.tensor(layout.voucher_numeric, dtype=torch.long),
                             persistent=False)
        voucher_dim = len(layout.voucher_fields) * emb_dim + len(layout.voucher_numeric)
        self.attention = AttentionUnit(voucher_dim, attention_units)
        self.mlp = MLP(self.input.output_dim + voucher_dim, hidden, dropout=dropout)
        self.with_wide(layout, wide, wide_l2)

    def _voucher(self, codes: Tensor, numeric: Tensor) -> Tensor:
        """``codes`` (…, F_v), ``numeric`` (…, D_v) → (…, F_v·dim + D_v), through the shared table."""
        fields = self.input.fields
        embedded = fields.table(codes + fields.offsets[self.voucher_fields]).flatten(-2)
        return torch.cat([embedded, numeric], dim=-1)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        fields = self.input.fields
        embedded = self.input(batch)
        # the target's id embeddings are sliced from the SEM output, so OOV dropout hits both uses alike
        target_ids = embedded[:, :fields.output_dim].unflatten(1, (-1, fields.dim))[:, self.voucher_fields]
        target = torch.cat([target_ids.flatten(1), batch["num"][:, self.voucher_numeric]], dim=1)
        history = self._voucher(batch["hist_cat"], batch["hist_num"])
        pooled = self.attention(history, target, batch["history"] >= 0)
        logit = self.add_wide(self.mlp(torch.cat([embedded, pooled], dim=1)).squeeze(1), batch)
        return {"p_redeem": torch.sigmoid(logit)}

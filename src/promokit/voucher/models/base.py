"""What every voucher baseline shares: where each kind of feature sits in the batch, and the loss."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from promokit.nn import WideTerm, binary_log_loss


@dataclass(frozen=True)
class FieldLayout:
    """Columns of ``batch["cat"]`` ``(B, F)`` and ``batch["num"]`` ``(B, D)`` by role.

    ``id_fields`` are the sparse id fields (user_id, voucher_id) that the paper's LR and GBDT leave out
    ("only dense features", section 4.2); ``voucher_fields`` / ``voucher_numeric`` describe the voucher
    itself (voucher_id; min_spend, discount) — the same columns ``batch["hist_cat"]`` ``(B, R, F_v)`` and
    ``batch["hist_num"]`` ``(B, R, D_v)`` hold for the user's redeemed history.
    """

    cardinalities: tuple[int, ...]
    n_numeric: int
    id_fields: tuple[int, ...] = ()
    voucher_fields: tuple[int, ...] = ()
    voucher_numeric: tuple[int, ...] = ()

    @property
    def dense_fields(self) -> tuple[int, ...]:
        return tuple(j for j in range(len(self.cardinalities)) if j not in self.id_fields)


#: The one logit of a voucher model, supervised by the redemption on every row: what a wide term's floor is solved on.
WIDE_TARGETS = {"redeem": ("redeemed", {})}


class RedeemModel(nn.Module):
    r"""The Trainer contract of every neural voucher model: ``forward`` gives ``p_redeem``, the loss is the
    mean logloss against ``batch["redeemed"]`` (DMBGN eq. 8, L_target).

    Paper: the DMBGN paper (voucher redemption rate prediction, ``dmbgn-voucher-redemption.txt``; code
    https://github.com/fengtong-xiao/DMBGN), eq. (8):

    .. math::
        L_{target} = \frac{1}{N} \sum_{n=1}^{N} -\big(y^n_{RR} \log \hat y^n_{RR}
        + (1 - y^n_{RR}) \log(1 - \hat y^n_{RR})\big)

    The constructor takes no argument (it is nn.Module's), so there is no ``Args:`` section: each subclass
    documents its own.

    Shapes:
        - **input:** a batch of B sessions, ``batch["redeemed"]`` ``(B,)`` for :meth:`loss` (the other keys are
          the subclass's)
        - **output:** ``p_redeem`` ``(B,)``
    """

    labels = ("redeemed",)
    outputs = ("p_redeem",)
    #: whether the batch must hold the user's redeemed history (``history``, ``hist_cat``, ``hist_num``)
    reads_history = False

    def with_wide(self, layout: FieldLayout, wide: str, wide_l2: float) -> None:
        """Give the model its wide term (:class:`~promokit.nn.WideTerm`) over every field, as the ``lr`` floor."""
        self.wide = WideTerm(layout.cardinalities, layout.n_numeric, WIDE_TARGETS, wide, wide_l2)

    def add_wide(self, logit: Tensor, batch: dict[str, Tensor]) -> Tensor:
        return self.wide({"redeem": logit}, batch)["redeem"]

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        loss = binary_log_loss(out["p_redeem"], batch["redeemed"])
        return loss, {"redeem": loss.detach()}

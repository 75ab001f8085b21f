"""LR baseline of the DMBGN paper (section 4.2), the voucher domain's linear floor."""

from __future__ import annotations

import torch
from torch import Tensor

from promokit.nn import LinearLogit
from promokit.training import History, fit_logistic
from promokit.training.logistic import carried_start
from promokit.voucher.models.base import FieldLayout, RedeemModel


class LR(RedeemModel):
    r"""Logistic regression :math:`p = \sigma(b + \sum_j w_{j, x_j} + v^T x_{num})` over one-hot categorical
    fields and the numeric block (:class:`~promokit.nn.LinearLogit`).

    By default every field is used, ids included (ids seen fewer than ``min_count`` times share the OOV
    column): the standard sparse LR of CTR prediction. ``ids=False`` leaves out user_id and voucher_id, the
    paper's LR on "only dense features" — on AmExpert and on a real coupon log without behaviour it scored far
    below the same regression with ids (see docs/voucher.md).

    It is solved to the optimum of the L2-penalised logloss (:func:`promokit.training.fit_logistic`), with the
    strength ``l2`` chosen on the validation sessions' AUC when ``None``, instead of by gradient steps.

    Paper: the LR baseline of §4.2 of the DMBGN paper (``dmbgn-voucher-redemption.txt``), "a shallow model. Only
    dense features from user profiles and voucher information are used" (``ids=False``); no equation of its own.
    The logloss is eq. (8) plus (l2 / 2)·‖w‖².

    Args:
        layout: where the id, profile and voucher columns sit in the batch (:class:`FieldLayout`).
        ids: use the sparse id fields (user_id, voucher_id) too; False: the paper's dense features only.
        l2: the L2 strength (``None``: chosen on validation).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["redeemed"]`` ``(B,)``
        - **output:** ``p_redeem`` ``(B,)``
    """

    def __init__(self, layout: FieldLayout, ids: bool = True, l2: float | None = None):
        super().__init__()
        fields = list(range(len(layout.cardinalities))) if ids else list(layout.dense_fields)
        self.register_buffer("fields", torch.tensor(fields, dtype=torch.long), persistent=False)
        self.linear = LinearLogit([layout.cardinalities[j] for j in fields], layout.n_numeric)
        self.l2 = l2

    def logit(self, batch: dict[str, Tensor]) -> Tensor:
        return self.linear(batch["cat"][:, self.fields], batch["num"])

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return {"p_redeem": torch.sigmoid(self.logit(batch))}

    def solve(self, train: dict[str, Tensor], valid: dict[str, Tensor] | None = None,
              progress: bool = False, carry: tuple | None = None, refit_next: bool = False) -> History:
        """Fit to the optimum; returns the L2 path as a :class:`History` (one record per strength tried).
        ``progress``: a line per strength solved. ``carry`` (a refit's: the selected ``LR``, its field encoders and
        these, :func:`~promokit.training.refit.refit_carry`) starts the solve from the selected weights;
        ``refit_next``: only a refit's start is wanted (:func:`~promokit.training.fit_logistic`)."""
        def part(tensors):
            return tensors["cat"][:, self.fields], tensors["num"], tensors["redeemed"]

        start = None
        if carry is not None:
            fields = self.fields.tolist()
            start = carried_start(carry[0].linear, [carry[1][j] for j in fields], [carry[2][j] for j in fields])
        path = fit_logistic(self.linear, *part(train), None if valid is None else part(valid), self.l2,
                           progress=progress, name="lr", start=start, refit_next=refit_next)
        self.l2 = next(r["l2"] for r in path if r["chosen"])
        self.eval()
        return History(epochs=path, best_epoch=-1, monitor="auc", unit="l2 strength")

    @property
    def chosen_params(self) -> dict:
        return {"l2": self.l2}

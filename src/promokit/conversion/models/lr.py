"""LR: the linear floor of the conversion models — logistic regression for CTR and for CVR."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from promokit.nn import LinearLogit, binary_log_loss
from promokit.training import History, fit_logistic
from promokit.training.logistic import carried_start


class LR(nn.Module):
    r"""Two logistic regressions composed like DNN: CTR on all impressions, CVR on clicked impressions only,
    p_ctcvr = p_ctr · p_cvr. Every categorical feature is one-hot encoded (categories seen fewer than the
    spec's ``min_count`` times share the OOV column), numeric features enter as encoded (eq. 17).

    Each regression is solved to its L2-penalised optimum (:func:`promokit.training.fit_logistic`) rather than
    by gradient steps; with ``l2_ctr`` / ``l2_cvr`` left ``None`` each strength is chosen on the validation
    rows' AUC (CTR AUC, CVR AUC on clicked rows) and recorded in the parameters.

    The linear floor, not from the papers (neither ESM² nor GMCM has an LR baseline); its numeric inputs are
    ESM²'s eq. (17) ([Wen et al., SIGIR 2020](https://doi.org/10.1145/3397271.3401443)):

    .. math::
        p^{t} = \sigma\big(b_t + \textstyle\sum_j w_{t, j, x_j} + v_t^\top x_{num}\big), \quad t \in \{ctr, cvr\},
        \qquad p^{ctcvr} = p^{ctr}\, p^{cvr}

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]``.
        n_numeric: width D of ``batch["num"]``.
        l2_ctr: the CTR regression's L2 strength (``None``: chosen on validation).
        l2_cvr: the CVR regression's L2 strength (``None``: chosen on validation).

    Shapes:
        - **input:** ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``; for :meth:`loss` also
          ``batch["click"]`` and ``batch["purchase"]`` ``(B,)``
        - **output:** ``p_ctr``, ``p_cvr``, ``p_ctcvr`` ``(B,)`` each
    """

    labels = ("click", "purchase")
    outputs = ("p_ctr", "p_cvr", "p_ctcvr")

    def __init__(self, cardinalities: Sequence[int], n_numeric: int, l2_ctr: float | None = None,
                 l2_cvr: float | None = None):
        super().__init__()
        self.ctr = LinearLogit(cardinalities, n_numeric)
        self.cvr = LinearLogit(cardinalities, n_numeric)
        self.l2 = {"ctr": l2_ctr, "cvr": l2_cvr}

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        p_ctr = torch.sigmoid(self.ctr(batch["cat"], batch["num"]))
        p_cvr = torch.sigmoid(self.cvr(batch["cat"], batch["num"]))
        return {"p_ctr": p_ctr, "p_cvr": p_cvr, "p_ctcvr": p_ctr * p_cvr}

    def loss(self, out: dict[str, Tensor], batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        parts = {"ctr": binary_log_loss(out["p_ctr"], batch["click"]),
                 "cvr": binary_log_loss(out["p_cvr"], batch["purchase"], batch["click"])}
        return parts["ctr"] + parts["cvr"], {k: v.detach() for k, v in parts.items()}

    def solve(self, train: dict[str, Tensor], valid: dict[str, Tensor] | None = None,
              progress: bool = False, carry: tuple | None = None, refit_next: bool = False) -> History:
        """Fit both regressions; returns the L2 path as a :class:`History` (one record per strength tried).
        ``progress``: a line per strength solved. ``carry`` (a refit's: the selected ``LR``, its field encoders and
        these, :func:`~promokit.training.refit.refit_carry`) starts each solve from the selected weights;
        ``refit_next``: only a refit's start is wanted (:func:`~promokit.training.fit_logistic`)."""
        records = []
        for task, label, rows in (("ctr", "click", None), ("cvr", "purchase", "click")):
            start = None if carry is None else carried_start(getattr(carry[0], task), carry[1], carry[2])
            path = fit_logistic(getattr(self, task), *_part(train, label, rows),
                                None if valid is None else _part(valid, label, rows), self.l2[task],
                                progress=progress, name=f"lr {task}", start=start, refit_next=refit_next)
            self.l2[task] = next(r["l2"] for r in path if r["chosen"])
            records += [{"task": task, **r} for r in path]
        self.eval()
        return History(epochs=records, best_epoch=-1, monitor="auc", unit="l2 strength")

    @property
    def chosen_params(self) -> dict:
        return {f"l2_{task}": value for task, value in self.l2.items()}


def _part(tensors: dict[str, Tensor], label: str, given: str | None) -> tuple[Tensor, Tensor, Tensor]:
    rows = slice(None) if given is None else tensors[given] == 1
    return tensors["cat"][rows], tensors["num"][rows], tensors[label][rows]

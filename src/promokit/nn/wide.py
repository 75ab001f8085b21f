"""The wide term of Wide & Deep: the linear floor's logit added to each logit a deep model defines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor, nn

from promokit.nn.linear import LinearLogit

#: ``none``: no wide term; ``joint``: trained with the network; ``offset``: the solved floor, fixed.
WIDE_MODES = ("none", "joint", "offset")
#: The L2 strength of a jointly trained wide term, as the lazy decoupled decay of its rows (per step, × lr).
WIDE_L2 = 1e-3
#: A jointly trained wide term's learning rate, as a multiple of the network's: a weight of an id seen a handful of
#: times must travel to a solved model's ±1 in as many steps, which Adam's 0.001 per step never does.
WIDE_LR_SCALE = 30.0


class WideTerm(nn.Module):
    r"""A linear term per named logit, :math:`z_t = \mathrm{deep}_t(x) + b_t + \sum_j w_{t, j, x_j} + v_t^\top
    x_{num}` (Cheng et al., 2016, eq. 3), over the same one-hot categorical fields and numeric block as the
    ``lr`` floor (:class:`LinearLogit`).

    A deep model trained by SGD memorises ids seen a handful of times less well than a solved, L2-regularised
    linear model; with the linear weights inside it, the network only has to learn what they cannot.

    - ``"none"``: no term (:meth:`forward` returns the logits as given);
    - ``"joint"``: the weights start at zero and train with the model; ``promokit.training.make_optimizers``
      gives their rows their own SparseAdam at ``lr_scale`` times the network's learning rate and lazy L2
      ``l2`` (not the deep embeddings' decay);
    - ``"offset"``: the weights are the ``lr`` floor's, solved before training
      (:func:`promokit.training.solve_wide`) and then fixed: the network learns the correction to the floor,
      and a network that outputs 0 reproduces the floor exactly.

    A building block, not from the papers: the library adds it to every deep model. The linear term is Wide &
    Deep's, the WDL baseline of the DMBGN paper (``dmbgn-voucher-redemption.txt``, §4.2), where it is trained
    jointly (``"joint"``); eq. 3 above is the Wide & Deep paper's.

    Args:
        cardinalities: rows per categorical field of ``batch["cat"]`` ``(B, F)`` (the inputs' layout).
        n_numeric: width D of ``batch["num"]`` ``(B, D)``.
        targets: logit name → ``(label, rows)``, what the floor of that logit is solved on in ``offset`` mode:
            the label column and the rows it is observed on, ``{column: value}`` (e.g. CVR:
            ``("purchase", {"click": 1})``).
        mode: one of :data:`WIDE_MODES`.
        l2: the ``joint`` weights' decay.
        lr_scale: the ``joint`` weights' learning rate over the network's.

    Shapes:
        - **input:** logits, name → ``(B,)``; ``batch["cat"]`` ``(B, F)`` int64, ``batch["num"]`` ``(B, D)``
        - **output:** logits, name → ``(B,)``, each named in ``targets`` with its linear term added
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int,
                 targets: Mapping[str, tuple[str, Mapping[str, int]]], mode: str = "none", l2: float = WIDE_L2,
                 lr_scale: float = WIDE_LR_SCALE):
        super().__init__()
        if mode not in WIDE_MODES:
            raise ValueError(f"wide must be one of {WIDE_MODES}, got {mode!r}")
        self.mode, self.l2, self.lr_scale = mode, l2, lr_scale
        self.targets = dict(targets) if mode != "none" else {}
        self.logits = nn.ModuleDict({name: LinearLogit(cardinalities, n_numeric) for name in self.targets})
        if mode == "offset":
            self.requires_grad_(False)

    def forward(self, logits: dict[str, Tensor], batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """``logits`` with each named one's linear term added (the others unchanged)."""
        if not self.targets:
            return logits
        cat, num = batch["cat"], batch["num"]
        return {name: z + self.logits[name](cat, num) if name in self.logits else z for name, z in logits.items()}

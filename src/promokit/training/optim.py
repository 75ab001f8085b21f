"""Optimisers: SparseAdam for sparse embedding tables, Adam(W) for the rest, and lazy L2 on embedding rows."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from promokit.nn.wide import WideTerm


class LazyWeightDecay:
    r"""Decoupled L2 weight decay on sparse embedding tables, applied only to the rows a batch reads.

    Dense decoupled decay shrinks every parameter at every step; here by a factor applied after the
    optimiser's update, :math:`w_t = (1 - \eta_t\lambda)\,(w_{t-1} - \eta_t u_t)` (AdamW applies it before the
    update, which differs by a factor :math:`1 - \eta_t\lambda` on the update, 1 % at lr 0.001 and
    :math:`\lambda` = 10). For an embedding table of millions of rows dense decay means rewriting the whole table
    each step, and sparse optimisers (``torch.optim.SparseAdam``) have no decay at all. Here each row remembers
    how much of the decay :math:`\log\prod_s (1 - \eta_s\lambda)` it has received and gets the rest when it is
    next read:

    - :meth:`step` runs the wrapped optimiser's update and adds this step's factor to each table's running
      total, a scalar: no row is touched;
    - before a training forward pass, a pre-hook on each table brings the rows the batch reads up to date,
      so the forward sees exactly the values dense decay would have produced (tables must be read by calling
      their module, as every promokit model does);
    - :meth:`flush` brings every row up to date (the Trainer calls it at the end of each epoch, before the
      model is validated or saved);
    - :meth:`step` first brings up to date the rows of the gradient that the step will update. In one process
      they are the rows the batch read, already up to date; under data-parallel training the gradient is
      averaged over the workers and holds the rows every worker read, some of which this worker did not, and
      each must be decayed before its update as on the worker that read it, or the replicas drift apart.

    With plain SGD this reproduces dense SGD followed by ``w *= 1 - lr·λ`` at every step (up to rounding);
    with SparseAdam it is SparseAdam plus decoupled decay. Rows never read still decay, at the next flush, as
    under dense decay: this is an L2 prior on every row, not only on frequent ones.

    Args:
        optimizer: a torch optimiser over the tables' weights (e.g. ``SparseAdam``); its learning rate is read
            at every step, so schedules apply to the decay too.
        modules: the ``nn.Embedding`` tables whose weights ``optimizer`` updates.
        weight_decay: :math:`\lambda`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, modules: list[nn.Embedding], weight_decay: float):
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        self.optimizer = optimizer
        self.weight_decay = weight_decay
        self.modules = list(modules)
        owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if any(id(m.weight) not in owned for m in self.modules):
            raise ValueError("every module's weight must be a parameter of the optimizer")
        #: per table: the log of the total decay factor so far, and per row the part it has received
        self.total = [0.0 for _ in self.modules]
        self.applied = [torch.zeros(m.num_embeddings, dtype=torch.float64) for m in self.modules]
        self._hooks = [m.register_forward_pre_hook(self._make_hook(k)) for k, m in enumerate(self.modules)]

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def _lr(self, weight: Tensor) -> float:
        return next(g["lr"] for g in self.optimizer.param_groups if any(p is weight for p in g["params"]))

    @torch.no_grad()
    def _catch_up(self, k: int, rows: Tensor) -> None:
        """Give ``rows`` the decay they have not received yet (a row listed twice gets the same value twice)."""
        weight, applied = self.modules[k].weight, self.applied[k]
        factor = torch.exp(self.total[k] - applied.index_select(0, rows)).to(weight.dtype)
        weight.index_copy_(0, rows, weight.index_select(0, rows) * factor.unsqueeze(1))
        applied.index_fill_(0, rows, self.total[k])

    def _make_hook(self, k: int):
        def hook(module: nn.Module, args: tuple) -> None:
            if module.training and torch.is_grad_enabled():
                self._catch_up(k, args[0].reshape(-1))  # repeated rows get the same value twice: no need to sort
        return hook

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for k, module in enumerate(self.modules):  # rows updated without having been read here: see below
            grad = module.weight.grad
            if grad is not None and grad.is_sparse:
                self._catch_up(k, grad._indices().reshape(-1))
        self.optimizer.step()
        for k, module in enumerate(self.modules):
            if module.weight.grad is not None:  # as AdamW, a table without a gradient this step does not decay
                self.total[k] += math.log1p(-self._lr(module.weight) * self.weight_decay)

    def flush(self) -> None:
        """Apply every row's pending decay (before evaluating or saving the tables)."""
        for k, module in enumerate(self.modules):
            self._catch_up(k, torch.arange(module.num_embeddings))

    def remove_hooks(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "total": list(self.total),
                "applied": [a.clone() for a in self.applied]}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.total = list(state["total"])
        self.applied = [a.clone() for a in state["applied"]]


def make_optimizers(model: nn.Module, lr: float, weight_decay: float = 0.0,
                    embedding_decay: float = 0.0) -> list:
    """SparseAdam for sparse-gradient embedding tables (with :class:`LazyWeightDecay` when
    ``embedding_decay`` > 0), Adam for every other parameter (AdamW when ``weight_decay`` > 0). The tables of a
    jointly trained :class:`~promokit.nn.WideTerm` get their own SparseAdam, at the term's ``lr_scale`` times
    ``lr`` (a group's ``lr_scale``, which :func:`~promokit.training.set_epoch_lr` keeps) and decayed by its ``l2``."""
    trained = [m for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad]
    setting = {id(m): (embedding_decay, 1.0) for m in trained}
    for term in (m for m in model.modules() if isinstance(m, WideTerm)):
        setting.update({id(m): (term.l2, term.lr_scale) for m in term.modules() if id(m) in setting})
    groups = {}
    for m in trained:
        groups.setdefault(setting[id(m)], []).append(m)
    table_ids = {id(m.weight) for m in trained}
    dense = [p for p in model.parameters() if id(p) not in table_ids and p.requires_grad]
    optimizers: list = []
    for (strength, scale), tables in groups.items():
        sparse_adam = torch.optim.SparseAdam([{"params": [m.weight for m in tables], "lr_scale": scale}],
                                             lr=lr * scale)
        optimizers.append(LazyWeightDecay(sparse_adam, tables, strength) if strength > 0 else sparse_adam)
    if dense:
        optimizers.append(torch.optim.AdamW(dense, lr=lr, weight_decay=weight_decay) if weight_decay
                          else torch.optim.Adam(dense, lr=lr))
    return optimizers

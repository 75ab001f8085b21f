"""What a long solve prints so that it is seen to move: a line at most every :data:`PROGRESS_AFTER` seconds, from that
many on, with how far it got, the seconds so far and an estimate of those left. :class:`SolveProgress` follows an
iterative optimiser by its gradient (the linear floors' Newton and L-BFGS solves), :class:`BoostingProgress` a
LightGBM boosting run by its trees (``gbdt`` and the value floor ``hurdle``); the epochs of a network show
through :func:`~promokit.training.trainer.progress_display`."""

from __future__ import annotations

import time

import numpy as np

from promokit.console import get_console

#: Seconds after which a solve shows its progress, and between its lines.
PROGRESS_AFTER = 5.0


class _Paced:
    """The pace of the lines: :meth:`due` is true at most once every ``every`` seconds (:data:`PROGRESS_AFTER` by
    default), the first time ``every`` seconds after the start."""

    def __init__(self, every: float | None = None):
        self.every = PROGRESS_AFTER if every is None else every
        self.began = self.shown = time.perf_counter()

    def due(self) -> float | None:
        """The seconds since the start when a line is due, else None."""
        now = time.perf_counter()
        if now - self.shown < self.every:
            return None
        self.shown = now
        return now - self.began


class SolveProgress(_Paced):
    """The lines of an iterative solve: the iterations done, the gradient's max-norm against the tolerance that stops
    the solve, the seconds so far and an estimate of those left (the gradient's fall so far, in orders of magnitude
    per second, carried on to the tolerance: Newton's method speeds up near the optimum, so it errs long). ``name``
    and ``l2`` open the line, as the line of the strength solved does."""

    def __init__(self, name: str, l2: float, tolerance: float, every: float | None = None):
        super().__init__(every)
        self.name, self.l2, self.tolerance = name, l2, tolerance
        self.steps, self.first = 0, None

    def __call__(self, gradient: float) -> None:
        """One iteration done; ``gradient``: the gradient's max-norm after it."""
        self.steps += 1
        self.first = gradient if self.first is None else self.first
        elapsed = self.due()
        if elapsed is None:
            return
        fallen = np.log10(self.first / gradient) if gradient > 0 else 0.0
        left = (f", about {elapsed / fallen * np.log10(gradient / self.tolerance):.0f} s left"
                if fallen > 0 and gradient > self.tolerance else "")
        get_console().print(f"{self.name}: l2 {self.l2:.1e}, {self.steps} iterations, gradient {gradient:.1e} "
                            f"(stops at {self.tolerance:.1e}), {elapsed:.0f} s{left}", highlight=False)


class BoostingProgress(_Paced):
    """The lines of a LightGBM boosting run, as a callback of ``lightgbm.train``: the trees built of at most
    ``rounds``, the first validation metric with the best so far, the seconds so far and an estimate of those left at
    the pace so far (early stopping may end the run sooner). ``name`` opens the line."""

    order = 40  # after LightGBM's own callbacks: early stopping has recorded the iteration

    def __init__(self, name: str, rounds: int, every: float | None = None):
        super().__init__(every)
        self.name, self.rounds, self.best = name, rounds, None

    def __call__(self, env) -> None:
        trees = env.iteration - env.begin_iteration + 1
        scored = ""
        if env.evaluation_result_list:
            _, metric, value, higher_better = env.evaluation_result_list[0][:4]
            if self.best is None or (value > self.best if higher_better else value < self.best):
                self.best = value
            scored = f", valid {metric} {value:.4f} (best {self.best:.4f})"
        elapsed = self.due()
        if elapsed is None:
            return
        left = elapsed / trees * (self.rounds - trees)
        get_console().print(f"{self.name}: {trees} of at most {self.rounds} trees{scored}, {elapsed:.0f} s, "
                            f"about {left:.0f} s left at most", highlight=False)

"""Pacing: λ re-solved on a rolling window of recent requests, so realised spend per response tracks B (eq. 16).

The offline λ* is right for the traffic it was solved on. Online, the mix of requests drifts and the model's
curves are not the truth, so the service re-solves λ the way ``allocate budget`` does, on the last ``window``
requests it saw, every ``every`` decisions, against a corrected target

.. math::
    B_t = B \\cdot \\left(B / \\hat\\rho_t\\right)^{g}, \\quad \\text{clipped to } [B/4,\\ 4B], \\qquad
    \\hat\\rho_t = \\frac{\\text{paid} + \\sum_{\\text{open}} r\\,f}{\\text{responses} + \\sum_{\\text{open}} f}

where :math:`\\hat\\rho_t` is the campaign's spend per response so far: money actually paid and responses
actually reported for decisions with an outcome, the model's expectation for those still open. With gain
``g = 0`` the controller only follows the traffic; with ``g > 0`` it also corrects the model's bias: when
customers redeem more than predicted, :math:`\\hat\\rho_t > B` and the next λ is solved against a tighter
target. The rule itself is eq. 19 (eq. 20 for merchants paid on request) with cost ``f·(r − B_t)``.

Absolute budgets (``form = "absolute"``) are not paced: λ stays the offline λ*, and the ledger's cap bounds the
money. Each worker process paces on its own window; they share the ledger's totals.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from promokit.allocation.budget import ratio_form, solve_budget, stack_populations
from promokit.campaign.money import to_major
from promokit.data.errors import DataError

#: Re-solve only once the window holds this many requests.
MIN_WINDOW = 64
TARGET_RANGE = (0.25, 4.0)


@dataclass(frozen=True)
class PacingPoint:
    time: float
    decisions: int
    lam: float
    target: float
    realised: float | None


class Pacer:
    """The current (λ, B_t) of one worker and the window it is re-solved on. Thread-safe."""

    def __init__(self, levels, B: float, lam: float, paid_on: dict[str, str], window: int = 4096,
                 every: int = 256, gain: float = 0.5, enabled: bool = True):
        self.levels = np.asarray(levels, dtype=np.float64)
        self.B, self.lam, self.target = float(B), float(lam), float(B)
        self.paid_on = paid_on
        self.every, self.gain, self.enabled = every, gain, enabled
        self._rows = np.zeros((window, len(self.levels)))
        self._population = np.empty(window, dtype=object)
        self._seen = 0
        self._since = 0
        self._busy = False
        self._lock = threading.Lock()
        self.trace: list[PacingPoint] = [PacingPoint(time.time(), 0, self.lam, self.target, None)]

    @property
    def state(self) -> tuple[float, float]:
        """(λ, B_t) the rule uses now."""
        return self.lam, self.target

    def observe(self, population: str, scores: np.ndarray) -> bool:
        """Add a request's curve to the window; True when a re-solve is due (the caller runs :meth:`resolve`)."""
        with self._lock:
            slot = self._seen % len(self._rows)
            self._rows[slot], self._population[slot] = scores, population
            self._seen += 1
            self._since += 1
            due = (self.enabled and not self._busy and self._since >= self.every
                   and min(self._seen, len(self._rows)) >= MIN_WINDOW)
            if due:
                self._busy = True
            return due

    def resolve(self, realised: float | None) -> PacingPoint:
        """Solve λ on the window against the corrected target (module docstring); keeps λ if infeasible."""
        try:
            with self._lock:
                n = min(self._seen, len(self._rows))
                rows, population, seen = self._rows[:n].copy(), self._population[:n].copy(), self._seen
                self._since = 0
            target = self.corrected_target(realised)
            problems = [ratio_form(rows[population == p], self.levels, target, self.paid_on[p])
                        for p in self.paid_on if (population == p).any()]
            try:
                lam = solve_budget(*stack_populations(problems)).lam
            except DataError:  # even the lowest level costs more than B_t per response: the dearest λ seen
                lam = max(point.lam for point in self.trace)
            with self._lock:
                self.lam, self.target = float(lam), target
                point = PacingPoint(time.time(), seen, self.lam, target, realised)
                self.trace.append(point)
                del self.trace[:-2000]
            return point
        finally:
            self._busy = False

    def carry(self, old: Pacer) -> None:
        """Go on from ``old``, the pacer of the version this one replaces: its trace, and its correction of the
        target as a share of B (``B_t / B``). λ starts from this version's λ*, and the window fills again with
        this version's curves before the first re-solve (``decisions`` in the trace counts this version's)."""
        with old._lock:
            share, trace = (old.target / old.B if old.B > 0 else 1.0), list(old.trace)
        with self._lock:
            self.target = self.B * share
            self.trace = [*trace, PacingPoint(time.time(), 0, self.lam, self.target, None)][-2000:]

    def corrected_target(self, realised: float | None) -> float:
        if realised is None or not np.isfinite(realised) or realised <= 0 or self.B <= 0:
            return self.B
        low, high = TARGET_RANGE
        return float(np.clip(self.B * (self.B / realised) ** self.gain, low * self.B, high * self.B))


def realised_ratio(totals: dict) -> float | None:
    """:math:`\\hat\\rho_t` of the module docstring from the ledger's running totals (money in minor units; None
    before any response)."""
    responses = totals["responses"] + totals["open_expected_responses"]
    if responses <= 0:
        return None
    return (to_major(totals["paid"], totals["exponent"]) + totals["open_expected_cost"]) / responses

"""From a request to a proposed decision: the precomputed curve, eq. 19/20 at the current λ, and the fallbacks.

No solver runs here: the curve f_j of the requester over the levels is a row of the campaign's score table (the
population's mean curve for an id the table does not hold, flagged ``cold_start``) and the level is
``argmax_j f_j − λ·cost_j`` (:func:`promokit.allocation.budget.decide`), with ``cost_j = f_j (r_j − B_t)`` for the
ratio budget of eq. 16 (eq. 19), ``r_j − B_t`` for merchants paid on request (eq. 20), or ``r_j f_j`` for an
absolute budget. A subject in the exploration bucket (:mod:`promokit.serve.explore`) gets instead a level drawn
uniformly among all K, fixed per request_id. The ledger then issues it, or a fallback when the money-at-risk cap
leaves no room, and records the propensity of what it issued.
"""

from __future__ import annotations

import math

import numpy as np

from promokit.allocation.budget import decide
from promokit.campaign.directory import Campaign
from promokit.serve.explore import EXPLORE, Exploration
from promokit.serve.ledger import NO_LEVEL, DecisionRequest, Option, no_incentive
from promokit.serve.pacing import Pacer


class DecisionRule:
    """The campaign's rule at serving time: :meth:`propose` answers a request with a level (module docstring); the
    pacer (:class:`~promokit.serve.pacing.Pacer`) moves λ with the traffic."""

    def __init__(self, campaign: Campaign):
        config = campaign.config
        self.campaign, self.config = campaign, config
        self.levels = campaign.levels
        self.faces = config.level_faces
        self.exploration = Exploration(config.explore, config.explore_seed)
        self.paid_on = {"customer": "response", "merchant": config.merchant_paid_on}
        self.pacer = Pacer(self.levels, config.B, config.lam, {p: self.paid_on[p] for p in campaign.populations},
                           config.pacing.window, config.pacing.every, config.pacing.gain,
                           enabled=config.pacing.enabled and config.form == "ratio")
        # the hot path's copies, as Python floats: per request, numpy's dispatch on arrays of K costs more than
        # the arithmetic (propose took ≈ 35 µs with numpy, ≈ 10 µs without; the same IEEE operations, so the same
        # answers to the last bit)
        self._levels = [float(level) for level in self.levels]
        self._tables = {population: (table, table.plain_scores, [float(x) for x in table.mean])
                        for population, table in campaign.populations.items()}

    def curve(self, population: str, subject_id: str) -> tuple[np.ndarray, bool]:
        """The requester's f over the levels, and whether it is the population's mean (an unknown id)."""
        table = self.campaign.populations[population]
        row = table.row(subject_id)
        return (table.mean, True) if row is None else (np.asarray(table.scores[row]), False)

    def propose(self, request_id: str, population: str, subject_id: str) -> tuple[DecisionRequest, bool]:
        """The decision to record, and whether the pacer asks for a re-solve.

        An id the score table does not hold is answered as the campaign's ``cold_start`` says: by the rule on
        the population's mean curve (``mean``), with the lowest level (``lowest``) or with no incentive
        (``none``); the last two are not the rule's choice and do not enter the pacing window, and they hold in
        the exploration bucket too (exploring must not let a minted id draw a dearer coupon). A subject in the
        exploration bucket otherwise draws its level uniformly among all K; its curve still enters the pacing
        window, which stands for the traffic, not for the answers.
        """
        table, scores, mean = self._tables[population]
        row = table.row(subject_id)
        cold_start = row is None
        f = mean if cold_start else scores[row].tolist()
        config, paid_on = self.config, self.paid_on[population]
        bucket = self.exploration.bucket(population, subject_id)
        if cold_start and config.cold_start != "mean":
            chosen = no_incentive() if config.cold_start == "none" else self.option(0, f, paid_on)
            return DecisionRequest(request_id, population, subject_id, chosen, (no_incentive(),), self.pacer.lam,
                                   config.model_version, True, paid_on, config.coupon_ttl_seconds,
                                   reason="cold_start", bucket=bucket), False
        lam, target = self.pacer.state
        fallbacks = (self.option(0, f, paid_on), no_incentive()) if config.when_exhausted == "lowest" \
            else (no_incentive(),)
        if bucket == EXPLORE:
            among = tuple(self.option(j, f, paid_on) for j in range(len(self._levels)))
            chosen, reason = among[self.exploration.draw(request_id, len(among))], "explore"
        else:
            among, reason = None, "rule"
            chosen = self.option(self._choose(f, paid_on, target, lam), f, paid_on)
        request = DecisionRequest(request_id, population, subject_id, chosen, fallbacks, lam, config.model_version,
                                  cold_start, paid_on, config.coupon_ttl_seconds, reason, bucket, among)
        return request, self.pacer.observe(population, f)

    def _choose(self, f: list[float], paid_on: str, target: float, lam: float) -> int:
        """:func:`~promokit.allocation.budget.decide` on one request's curve with :meth:`cost`, in Python floats:
        ``argmax_j f_j − λ·cost_j``, ties to the cheaper option, then to the lower index (numpy's ``argmin``).
        Each operation is the one numpy does, in the same order, so the choice is the same; anything but finite
        scores and a finite λ ≥ 0 goes to ``decide`` itself, which says what is wrong."""
        r = self._levels
        if self.config.form == "ratio":
            cost = [x - target for x in r] if paid_on == "request" else [v * (x - target) for v, x in zip(f, r)]
        else:
            cost = list(r) if paid_on == "request" else [v * x for v, x in zip(f, r)]
        score = [v - lam * c for v, c in zip(f, cost)]
        if not (math.isfinite(lam) and lam >= 0 and all(map(math.isfinite, score))):
            return int(decide(np.asarray(f, dtype=np.float64), np.asarray(cost, dtype=np.float64), lam))
        best = max(score)
        return min((c, j) for j, (s, c) in enumerate(zip(score, cost)) if s == best)[1]

    def cost(self, f: np.ndarray, paid_on: str, target: float) -> np.ndarray:
        """Each level's cost in the rule: eq. 16's ratio budget at B_t (eq. 20 for merchants paid on request), or
        the absolute budget's expected spend."""
        r = self.levels
        if self.config.form == "ratio":
            return (r - target) if paid_on == "request" else f * (r - target)
        return r if paid_on == "request" else f * r

    def option(self, j: int, f, paid_on: str) -> Option:
        level, response = self._levels[j], float(f[j])
        return Option(j, self.faces[j], response, level if paid_on == "request" else level * response)


def level_of(index: int) -> int | None:
    return None if index == NO_LEVEL else index

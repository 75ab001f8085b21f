"""The EOCA paper's heuristic optimisation algorithm (HA, Algorithm 1, section 4.2), vectorised.

Algorithm 1 sorts users by a heuristic score h and gives each, in that order, its best remaining fund type;
whenever a quota fills it zeroes that type's ETV and recomputes α and h (lines 15–17). Between two such
events every user simply takes its best type, so the users are processed in blocks: one block ends where
the first quota fills, which is found with cumulative counts instead of a loop over users.

Choices the paper leaves open, fixed here:

- α_j = Σ_{remaining i} ETV_ij / (remaining d_j), line 3 read over the users and quotas still unassigned,
  with ETV zeroed where a type is forbidden (line 1) or closed; α_j = 0 for a closed type.
- a, b, c are the user's top-3 types by this zeroed ETV (ties to the lower index; a missing third type when
  k < 3 counts as ETV 0), and h_i = (α_a + α_b)/2 · (2·ETV_ia − ETV_ib − ETV_ic) (line 8).
- The type a user receives is its best *open* type by ETV (line 12): with zeros standing in for forbidden
  or full types, the zeroed top-1 of a user whose open ETVs are all 0 could otherwise be a forbidden type.
- A feasibility guard the paper leaves implicit: a user never receives a type that would leave the rest
  infeasible (the nested Hall conditions of ``quota_core.risk_slack``). When a risk level becomes tight, the
  types below it close for the users above it, which is a second kind of event that ends a block and
  triggers the same re-scoring. Without it the greedy order can strand low-tolerance users with only full
  types left; with it HA meets eqs. 3–5 on every feasible input.

With bounds L_j ≤ n_j ≤ U_j instead of exact quotas, d_j is read as the max: a type closes when it holds U_j
users (line 15) and α_j divides by the places left below U_j. Minimums enter only through the guard: a level
is also tight when the users above it are just enough for the unmet minimums of the types at or above it,
and a type whose minimum is met then closes to those users (an event too), so the users left over fill the
minimums last.
"""

from __future__ import annotations

import numpy as np

from promokit.allocation.quota_core import QuotaPlan, QuotaProblem, RiskSlack, finish_plan, risk_slack, row_blocks


def solve_ha(problem: QuotaProblem) -> QuotaPlan:
    """Algorithm 1 of the EOCA paper: heuristic scores, greedy allocation, re-scoring after each event."""
    places = problem.max_users.copy()  # users each type may still take (d_j, or U_j with bounds)
    needed = problem.min_users.copy()  # users each type still needs (d_j, or L_j with bounds)
    assignment = np.full(problem.n_users, -1, dtype=np.int64)
    remaining = np.arange(problem.n_users)
    blocks = 0
    while len(remaining):
        hall = risk_slack(problem.tolerance[remaining], problem.risk, needed, places)
        floor = _risk_floor(problem.tolerance[remaining], hall)
        type_open = (places > 0) & ~_met_and_spoken_for(problem.risk, hall, needed)
        alpha = _fill_speed(problem, remaining, floor, type_open, places)
        score, best = _score(problem, remaining, floor, type_open, alpha)
        order = np.argsort(-score, kind="stable")  # line 10
        best = best[order]
        end = _first_event(best, problem.tolerance[remaining[order]], problem.risk, places, needed, hall)
        assignment[remaining[order[:end]]] = best[:end]
        taken = np.bincount(best[:end], minlength=problem.n_types)
        places -= taken
        needed = np.maximum(needed - taken, 0)
        remaining = remaining[order[end:]]
        blocks += 1
    return finish_plan(problem, assignment, "ha", blocks=blocks)


def _risk_floor(tolerance: np.ndarray, hall: RiskSlack) -> np.ndarray:
    """Lowest risk each user may still take: the highest tight risk level (no slack or no room) at or below its
    tolerance."""
    tight = hall.levels[(hall.slack == 0) | (hall.room == 0)]
    floor = np.full(len(tolerance), -np.inf)
    for level in tight:  # ascending, so the last match wins
        floor[tolerance >= level] = level
    return floor


def _met_and_spoken_for(risk: np.ndarray, hall: RiskSlack, needed: np.ndarray) -> np.ndarray:
    """(k,) bool: types whose minimum is met while some level at or below their risk has no users to spare —
    every user able to take them is needed for an unmet minimum (never with exact quotas: met means full)."""
    lowest_slack = np.minimum.accumulate(hall.slack)[np.searchsorted(hall.levels, risk)]
    return (needed == 0) & (lowest_slack == 0)


def _open(problem: QuotaProblem, rows: np.ndarray, floor: np.ndarray, type_open: np.ndarray) -> np.ndarray:
    """(n, k) bool: eq. 5 allows the type, it is open (places left, not spoken for), and the guard keeps it."""
    risk = problem.risk[None, :]
    return (problem.tolerance[rows, None] >= risk) & (risk >= floor[:, None]) & type_open


def _fill_speed(problem, remaining, floor, type_open, places) -> np.ndarray:
    """α_j = Σ_i ETV_ij / d_j over the remaining users and places, ETV zeroed where closed (lines 1–4, 16)."""
    total = np.zeros(problem.n_types)
    for block in row_blocks(len(remaining)):
        rows = remaining[block]
        total += np.where(_open(problem, rows, floor[block], type_open), problem.etv[rows], 0.0).sum(axis=0)
    return np.divide(total, places, out=np.zeros(problem.n_types), where=places > 0)


def _score(problem, remaining, floor, type_open, alpha) -> tuple[np.ndarray, np.ndarray]:
    """h_i (lines 5–9) and the best open type of every remaining user (line 12)."""
    score = np.empty(len(remaining))
    best = np.empty(len(remaining), dtype=np.int64)
    padded_alpha = np.concatenate([alpha, [0.0, 0.0]])
    for block in row_blocks(len(remaining)):
        rows = remaining[block]
        is_open = _open(problem, rows, floor[block], type_open)
        values = problem.etv[rows]
        best[block] = np.argmax(np.where(is_open, values, -np.inf), axis=1)
        zeroed = np.zeros((len(rows), problem.n_types + 2))
        zeroed[:, :problem.n_types] = np.where(is_open, values, 0.0)
        top, top_value = [], []
        for _ in range(3):  # a, b, c
            index = np.argmax(zeroed, axis=1)
            top.append(index)
            top_value.append(np.take_along_axis(zeroed, index[:, None], axis=1)[:, 0])
            np.put_along_axis(zeroed, index[:, None], -np.inf, axis=1)
        spread = 2 * top_value[0] - top_value[1] - top_value[2]  # Δ1 + Δ2
        score[block] = (padded_alpha[top[0]] + padded_alpha[top[1]]) / 2 * spread
    return score, best


def _first_event(best, tolerance, risk, places, needed, hall: RiskSlack) -> int:
    """Number of users (in score order) served before the first event: a type fills (line 15) or a risk level
    runs out of room or slack (the feasibility guard); all users when none happens.

    Room at level r shrinks when a user with t ≥ r takes a type below r; slack too, and also when such a user
    takes a type whose minimum is already met. A level with no slack already ends the block before the first
    user who would take from it (only one whose type's minimum was met within the block can)."""
    ends = []
    beyond_minimum = np.zeros(len(best), dtype=bool)  # takes a type whose minimum the users before it met
    for j in np.flatnonzero(places > 0):
        takers = np.flatnonzero(best == j)
        beyond_minimum[takers[needed[j]:]] = True
        if len(takers) >= places[j]:
            ends.append(takers[places[j] - 1] + 1)
    given_risk = risk[best]
    for level, slack, room in zip(hall.levels, hall.slack, hall.room):
        above = tolerance >= level
        below = above & (given_risk < level)
        for spare, crossing in ((room, below), (slack, below | (above & beyond_minimum))):
            users = np.flatnonzero(crossing)
            if spare == 0 and len(users):
                ends.append(users[0])
            elif 0 < spare <= len(users):
                ends.append(users[spare - 1] + 1)
    return min(ends, default=len(best))

"""Judging plans on a log: every plan's estimates by every estimator, with paired bootstrap intervals and
each plan's difference from a reference plan; the diagnostics that say when to trust them.

The estimates are means per subject of the log's outcomes (:mod:`promokit.policy.estimators`); a plan's total is
its mean times the subjects it decides. For an incentive log the spend per response (the budget form of eq. 16)
comes with its own interval, from the same replicates. Every plan is judged on the same bootstrap replicates of
the log's subjects, so a difference from the reference is paired: its interval is that of the difference, not of
two independent estimates.

Diagnostics per plan: the effective sample size of its importance weights (Kish's), the share of the log's rows
whose logged action the plan would take, and the share of the plan's choices the log supports (actions the
logging policy gave positive probability; with only logged propensities, actions the log holds at all). A plan
whose choices the log does not support is judged there by the model alone (DM and DR), or not at all (IPS, SNIPS
count those choices as nothing): that is stated, as is an effective sample size too small to trust.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.policy.defaults import BOOTSTRAP, INTERVAL
from promokit.policy.estimators import (COLUMNS, INTERVALS, OUTER, Terms, bootstrap_sums, effective_sample_size,
                                        from_sums, in_outer_tail, influence, interval_levels, per_subject_sums,
                                        percentiles)
from promokit.policy.log import INCENTIVE, Log, action_list
from promokit.policy.plans import Plan, on_actions
from promokit.policy.report import Estimate, PlanResult, PolicyEvaluation

#: an effective sample size below this share of the log (or below MIN_ESS) is a stated warning
THIN_SHARE, MIN_ESS = 0.01, 30.0
#: a plan the log supports on less than this share of its choices is a stated warning
SUPPORTED = 0.99
#: an outcome whose estimate rests on fewer rows with a nonzero outcome than this, or whose largest 5 % of them carry
#: more than HEAVY_TAIL of the weighted sum, is a stated warning: the intervals under-cover there (benchmarks/
#: policy_coverage.py: 88–89.5 % for a value world's amounts with BCa, 85 % with percentiles, with 36 converting rows
#: whose top 5 % carried 28 %)
FEW_OUTCOMES, HEAVY_TAIL = 50, 0.25


def predicted_outcomes(log: Log, scores: np.ndarray, score_actions: np.ndarray, actions: np.ndarray
                       ) -> dict[str, np.ndarray]:
    """q̂ of each outcome over ``actions`` from a score table's rows aligned with the log (``scores``, over
    ``score_actions``): an incentive table's response probabilities give ``responses`` and, times the level,
    ``spend``; a value table's ETV gives ``amount`` (the conversions have no model: IPS and SNIPS only)."""
    missing = np.setdiff1d(actions, score_actions)
    if len(missing):
        raise DataError(f"the score table has no column for the action(s) {action_list(missing)}, which the log or a "
                        f"plan holds; its actions are {action_list(score_actions)}")
    q = scores[:, np.searchsorted(score_actions, actions)]
    if log.kind == INCENTIVE:
        return {"responses": q, "spend": q * actions[None, :].astype(np.float64)}
    return {"amount": q}


def judge(log: Log, plans: list[Plan], reference: Plan, predicted: dict[str, np.ndarray] | None = None, *,
          clip: float | None = None, bootstrap: int = BOOTSTRAP, seed: int = 0, population: int | None = None,
          interval: str = INTERVAL) -> PolicyEvaluation:
    """Judge ``plans`` and ``reference`` on ``log`` (their probabilities over the log's rows), ``predicted`` the
    model's q̂ per outcome over the union of the actions (:func:`predicted_outcomes`), with ``bootstrap``
    replicates; intervals by bootstrap percentiles or BCa (``interval``)."""
    if bootstrap < 2:
        raise DataError(f"`bootstrap` must be at least 2, got {bootstrap}")
    if interval not in INTERVALS:
        raise DataError(f"`interval` must be one of {list(INTERVALS)}, got {interval!r}")
    if clip is not None and not clip > 0:
        raise DataError(f"`clip` must be a weight above 0, got {clip}")
    actions = union_of_actions(log, [reference, *plans])
    action = np.searchsorted(actions, log.logged)
    everything = [reference, *plans]
    terms = {(p.name, o): _terms(p, log, actions, action, o, (predicted or {}).get(o), clip)
             for p in everything for o in log.outcomes}
    replicates = Replicates.of(terms, log, bootstrap, seed, interval)
    # the reference's totals count the subjects the plans decide, so that totals compare
    counted = population or max([p.subjects for p in plans], default=reference.subjects)
    results = [_result(p, log, terms, replicates, actions, population or (counted if p is reference else None))
               for p in everything]
    ref = results[0]
    for plan, result in zip(plans, results[1:]):
        _compare(result, ref, plan, replicates, log)
    tails = [warning for result in results for warning in _outer_tails(result, bootstrap)]
    return PolicyEvaluation(log, ref, results[1:], bootstrap, seed, clip, list(log.notes), tails)


@dataclass
class Replicates:
    """The column sums (:data:`COLUMNS`) of every (plan, outcome) block: over the log (``sums``), per bootstrap
    replicate (``replicated``) and per subject (``per_subject``, for BCa's influence values). A statistic is a
    function of such sums; :meth:`estimate` gives its value and interval."""

    blocks: list
    sums: np.ndarray
    replicated: np.ndarray
    per_subject: np.ndarray
    method: str

    @classmethod
    def of(cls, terms: dict, log: Log, replicates: int, seed: int, method: str) -> Replicates:
        blocks = list(terms)
        matrix = np.hstack([terms[b].matrix() for b in blocks])
        return cls(blocks, matrix.sum(axis=0), bootstrap_sums(matrix, replicates, seed, log.subjects),
                   per_subject_sums(matrix, log.subjects), method)

    def statistic(self, block, estimator: str):
        j = self.blocks.index(block) * len(COLUMNS)
        return lambda sums: from_sums(sums[..., j:j + len(COLUMNS)], estimator)

    def estimate(self, statistic, scale: float = 1.0) -> Estimate:
        with np.errstate(invalid="ignore", divide="ignore"):
            point, draws = float(statistic(self.sums)), statistic(self.replicated)
        weights = influence(statistic, self.per_subject) if self.method == "bca" else None
        levels = interval_levels(draws, point, weights)
        low, high = percentiles(draws, levels)
        return Estimate(point * scale, low * scale, high * scale, in_outer_tail(levels))


def union_of_actions(log: Log, plans: list[Plan]) -> np.ndarray:
    return np.unique(np.concatenate([log.actions, *[p.actions for p in plans]]))


def _terms(plan: Plan, log: Log, actions: np.ndarray, action: np.ndarray, outcome: str,
           predicted: np.ndarray | None, clip: float | None) -> Terms:
    y = log.outcomes[outcome]
    if plan.logging:  # the log's own policy: its value is the observed mean, every estimator alike
        return Terms(y, np.ones_like(y), y, np.zeros_like(y))
    return Terms.of(on_actions(plan, actions), action, log.propensity, y, predicted, clip)


def _result(plan: Plan, log: Log, terms: dict, replicates: Replicates, actions, population: int | None
            ) -> PlanResult:
    subjects = population or plan.subjects
    means, totals = {}, {}
    for outcome in log.outcomes:
        block = (plan.name, outcome)
        means[outcome], totals[outcome] = {}, {}
        for estimator in terms[block].estimators:
            statistic = replicates.statistic(block, estimator)
            means[outcome][estimator] = replicates.estimate(statistic)
            totals[outcome][estimator] = replicates.estimate(statistic, scale=subjects)
    ratio = {}
    if log.kind == INCENTIVE:
        for estimator in terms[(plan.name, "responses")].estimators:
            spend = replicates.statistic((plan.name, "spend"), estimator)
            responses = replicates.statistic((plan.name, "responses"), estimator)
            ratio[estimator] = replicates.estimate(lambda sums: spend(sums) / responses(sums))
    result = PlanResult(plan.name, subjects, means, totals, ratio, {})
    if not plan.logging:
        result.diagnostics, result.warnings = _diagnostics(plan, log, {o: terms[(plan.name, o)] for o in log.outcomes},
                                                           actions)
    return result


def _diagnostics(plan: Plan, log: Log, terms_by_outcome: dict[str, Terms], actions: np.ndarray
                 ) -> tuple[dict, list[str]]:
    probabilities = on_actions(plan, actions)
    terms = next(iter(terms_by_outcome.values()))  # the weights are the same for every outcome
    if log.logging is not None:
        logged = np.zeros_like(probabilities)
        logged[:, np.searchsorted(actions, log.actions)] = log.logging
        supported = float((probabilities * (logged > 0)).sum(axis=1).mean())
        basis = "actions the logging policy gave each subject"
    else:
        supported = float(probabilities[:, np.isin(actions, log.actions)].sum(axis=1).mean())
        basis = "actions the log holds"
    n = len(log)
    ess = effective_sample_size(terms.w)
    matched = int((terms.w > 0).sum())
    diagnostics = {"rows": n, "effective_sample_size": ess, "effective_share": ess / n, "matched_rows": matched,
                   "supported_share": supported, "max_weight": float(terms.w.max(initial=0.0)),
                   "outcomes": {o: _tail(t.wy) for o, t in terms_by_outcome.items()}}
    warnings = [f"{plan.name}: its {o} estimate rests on {t['rows']:,} rows with an outcome, the largest 5 % of "
                f"them carrying {t['top_share']:.0%} of the sum: intervals of so few, so heavy-tailed values hold "
                "the truth less than 95 % of the time (88–89.5 % measured for a value world's amounts)"
                for o, t in diagnostics["outcomes"].items()
                if t["rows"] and (t["rows"] < FEW_OUTCOMES or t["top_share"] > HEAVY_TAIL)]
    if supported < SUPPORTED:
        warnings.append(f"{plan.name}: {1 - supported:.1%} of its choices are not among the {basis}: IPS and SNIPS "
                        "count them as nothing, DM and DR rest on the model there")
    if ess < max(MIN_ESS, THIN_SHARE * n):
        warnings.append(f"{plan.name}: effective sample size {ess:,.1f} of {n:,} rows ({matched:,} rows whose logged "
                        "action it would take): too few to trust IPS, SNIPS or DR; widen the exploration or compare "
                        "plans that differ less")
    return diagnostics, warnings


def _tail(wy: np.ndarray) -> dict:
    """How many rows carry a weighted outcome, and the share of its sum the largest 5 % of them carry."""
    nonzero = np.sort(np.abs(wy[wy != 0]))[::-1]
    top = max(1, int(np.ceil(0.05 * len(nonzero))))
    total = float(nonzero.sum())
    return {"rows": int(len(nonzero)), "top_share": float(nonzero[:top].sum()) / total if total else 0.0}


def _compare(result: PlanResult, ref: PlanResult, plan: Plan, replicates: Replicates, log: Log) -> None:
    """The plan minus the reference, per outcome and estimator they share, on the same replicates."""
    for outcome in log.outcomes:
        result.differences[outcome], result.relative[outcome] = {}, {}
        for estimator in result.means[outcome]:
            mine = replicates.statistic((plan.name, outcome), estimator)
            theirs = replicates.statistic((ref.name, outcome), estimator)
            result.differences[outcome][estimator] = replicates.estimate(lambda sums: mine(sums) - theirs(sums))
            result.relative[outcome][estimator] = replicates.estimate(lambda sums: mine(sums) / theirs(sums) - 1)


def _outer_tails(result: PlanResult, replicates: int) -> list[str]:
    """A warning per group of estimators whose BCa intervals (of the mean, the spend per response or the difference
    from the reference) have an endpoint in the outer tails of the replicates, where a few replicates place it."""
    where: dict[str, list[str]] = {}
    for quantity, table in (("mean", result.means), ("difference", result.differences),
                            ("relative difference", result.relative)):
        for outcome, by_estimator in table.items():
            for estimator, estimate in by_estimator.items():
                if estimate.outer:
                    where.setdefault(estimator, []).append(f"{outcome} {quantity}")
    for estimator, estimate in result.ratio.items():
        if estimate.outer:
            where.setdefault(estimator, []).append("spend per response")
    alike: dict[tuple, list[str]] = {}  # the logging plan's estimators are one estimate: one line for them all
    for estimator, quantities in where.items():
        alike.setdefault(tuple(quantities), []).append(estimator)
    return [f"{result.name}: the BCa interval{'s' if len(estimators) > 1 else ''} of {_and(estimators)} "
            f"({', '.join(quantities)}) reach{'' if len(estimators) > 1 else 'es'} into the outer {OUTER:.1%} of the "
            f"{replicates:,} bootstrap replicates, where a few replicates place an endpoint: use more replicates "
            f"(several thousand) before trusting {'them' if len(estimators) > 1 else 'it'}"
            for quantities, estimators in alike.items()]


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def align_scores(log: Log, ids: np.ndarray, source: str) -> np.ndarray:
    """The rows of a score table (its ``ids``) of each log subject; a subject it lacks is an error."""
    at = pd.Index(np.asarray(ids).astype(str)).get_indexer(log.ids)
    missing = at < 0
    if missing.any():
        raise DataError(f"{source}: {int(missing.sum())} of the log's {len(log):,} subjects have no scores, e.g. "
                        f"{log.key} {log.ids[missing][0]!r}")
    return at

def read_scores(scores: str | os.PathLike | pd.DataFrame, log: Log) -> tuple[np.ndarray, np.ndarray]:
    """A score table (a frame or a path) as a matrix with a row per row of ``log`` (a subject it lacks is an error)
    and its actions, sorted as the log's are: levels of a budget table for an incentive log, funds of a quota table
    for a value log."""
    from promokit.allocation.tables import read_budget_table, read_quota_table

    source = "scores" if isinstance(scores, pd.DataFrame) else str(scores)
    if log.kind == INCENTIVE:
        table = read_budget_table(scores)
        ids, values, actions = table.user_ids, table.scores, table.levels
    else:
        table = read_quota_table(scores)
        order = np.argsort(table.funds)
        ids, values, actions = table.user_ids, table.etv[:, order], np.asarray(table.funds, dtype=str)[order]
    missing = [a for a in log.actions if a not in actions]
    if missing:
        raise DataError(f"{source}: no score column for the logged action(s) {action_list(missing)}; its actions "
                        f"are {action_list(actions)}")
    return values[align_scores(log, ids, source)], actions

"""``policy uplift``: how well a score table ranks a randomized log's subjects by what an action adds over a control
action. For each logged action a other than the control c, on the log's rows that took a or c, the rows are ranked
by the predicted uplift score(a) − score(c) and judged by scikit-uplift's uplift and Qini curves, AUUC and Qini
coefficient (:mod:`promokit.metrics.uplift`).

The log is read as ``policy evaluate`` reads it (:func:`promokit.policy.log.read_log`) with a uniform design:
the curves assume a and c were given at random with the same odds to every subject (within a pair of actions the
split need not be even). The score table is ``incentive predict``'s or ``allocate budget``'s wide (or long) layout
for an incentive log, a value ETV table for a value log, with a row for every subject of the log.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.metrics.uplift import DEFINITIONS, UpliftCurves, uplift_figure
from promokit.policy.log import INCENTIVE, VALUE, Log, action_label, action_list
from promokit.report import Report

#: the outcomes ``outcome`` names, per contract (the first is the default) → the log's outcome
OUTCOMES = {INCENTIVE: {"redeemed": "responses", "spend": "spend"},
            VALUE: {"convert": "conversions", "amount": "amount"}}


@dataclass
class UpliftByAction:
    """Each action against ``control``: a row per action (``table``) and its curves (``curves``, by action)."""

    control: str
    outcome: str
    table: pd.DataFrame
    curves: dict[str, UpliftCurves]



def uplift_by_action(log: Log, scores: np.ndarray, score_actions: np.ndarray, control: str | None = None,
                     outcome: str | None = None) -> UpliftByAction:
    """Every logged action against ``control`` (default: the lowest level of an incentive log; a value log's
    funds have no lowest, so it is named) on the ``outcome`` (:data:`OUTCOMES`), with the scores of each row of
    ``log`` over ``score_actions`` (:func:`~promokit.policy.read_scores`): response probabilities f of an incentive log (for
    ``spend``, r·f), the ETV of a value log. Per action: its rows (``treated``) and the control's,
    the observed uplift (the difference of their mean outcomes), the mean predicted uplift, the AUUC, the Qini
    coefficient and the Qini area (:class:`~promokit.metrics.UpliftCurves`; NaN where the pair's outcomes are
    all one value)."""
    name, y = _outcome(log, outcome)
    c = _control(log, control)
    if name == "spend":  # the expected spend r·f of an incentive level
        scores = scores * score_actions
    column = {a: int(np.searchsorted(score_actions, a)) for a in log.actions}
    rows, curves = [], {}
    for a in (a for a in log.actions if a != log.actions[c]):
        pair = np.flatnonzero((log.logged == a) | (log.logged == log.actions[c]))
        treated = (log.logged[pair] == a).astype(np.float64)
        predicted = scores[pair, column[a]] - scores[pair, column[log.actions[c]]]
        curves[action_label(a)] = judged = UpliftCurves.of(predicted, treated, y[pair])
        rows.append({"action": action_label(a), "treated": judged.treated, "control": judged.control,
                     "observed_uplift": float(y[pair][treated == 1].mean() - y[pair][treated == 0].mean()),
                     "predicted_uplift": float(predicted.mean()), **judged.areas()})
    return UpliftByAction(action_label(log.actions[c]), name, pd.DataFrame(rows), curves)


def uplift_report(result: UpliftByAction, log: Log, scores: str) -> Report:
    """report.md / report.json / uplift_curves.png of ``policy uplift``."""
    setup = {"log": f"{log.source}: a {log.kind} log of {len(log):,} rows, actions "
                    f"{[action_label(a) for a in log.actions]}",
             "scores": scores, "control": result.control, "outcome": result.outcome}
    report = Report(f"Uplift curves on {log.source}",
                    data={**setup, "actions": result.table.to_dict(orient="records")})
    report.add("Setup", "\n".join(f"- {k}: {v}" for k, v in setup.items()))
    report.add("Definitions", f"{DEFINITIONS} Each action's rows and the control's, ranked by the predicted "
                              f"uplift score(action) − score({result.control}).")
    report.add(f"Each action against {result.control}: {result.outcome}", result.table.set_index("action"))
    report.figures["uplift_curves"] = uplift_figure(
        result.curves, f"{result.outcome}: each action against {result.control} (dashed: random)")
    return report


def _outcome(log: Log, name: str | None) -> tuple[str, np.ndarray]:
    choices = OUTCOMES[log.kind]
    name = name or next(iter(choices))
    if name not in choices:
        raise DataError(f"`outcome` is one of {list(choices)} for {log.kind} logs, got {name!r}")
    y = log.outcomes[choices[name]]
    if len(np.unique(y)) < 2:
        raise DataError(f"{log.source}: the outcome {name!r} is {y[0]:g} on all {len(y):,} rows: no action can "
                        "change it there, so there is no uplift to rank")
    return name, y


def _control(log: Log, control: str | None) -> int:
    """The position of the control among the log's actions."""
    if control is None:
        if log.kind == VALUE:
            raise DataError(f"a value log's funds have no lowest: name the control fund with `control` (one of "
                            f"{action_list(log.actions)})")
        position = 0
    else:
        try:
            wanted = float(control) if log.kind == INCENTIVE else str(control)
        except ValueError:
            raise DataError(f"`control` must be a level (a number) for an incentive log, got {control!r}") from None
        found = np.flatnonzero(log.actions == wanted)
        if not len(found):
            raise DataError(f"`control` {control}: the log never took that action; its actions are "
                            f"{action_list(log.actions)}")
        position = int(found[0])
    if len(log.actions) < 2:
        raise DataError(f"{log.source}: every row took the action {action_label(log.actions[0])}: there is no other action "
                        "to compare with the control")
    return position


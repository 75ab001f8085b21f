"""``promokit.policy.evaluate``: judge plans on a randomized log from tables or paths, as ``promokit policy evaluate``
does — read and check the log, its propensities, the plans, the reference and the model's scores, then judge
(:func:`promokit.policy.judge`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import read_table
from promokit.policy.defaults import BOOTSTRAP, INTERVAL, MISSING, REFERENCE
from promokit.policy.judging import judge, predicted_outcomes, read_scores, union_of_actions
from promokit.policy.log import Log, read_log
from promokit.policy.plans import CONSTANT, LOGGING, UNIFORM, Plan, read_plan, reference_plan
from promokit.policy.report import PolicyEvaluation

Table = str | os.PathLike | pd.DataFrame | pd.Series
MISSING_CHOICES = ("error", "drop")


def evaluate(log: Table, plans: Table | Sequence[Table] | Mapping[str, Table], *, scores: Table | None = None,
             propensity: str | None = None, design: str | None = None, estimate_propensity: list[str] | None = None,
             reference: str | os.PathLike | pd.DataFrame = REFERENCE, clip: float | None = None,
             bootstrap: int = BOOTSTRAP, interval: str = INTERVAL, seed: int = 0, population: int | None = None,
             missing: str = MISSING, model: str | os.PathLike | None = None, labels: Mapping[str, str] | None = None,
             outcomes: Sequence[str] = ()) -> PolicyEvaluation:
    """Estimate each plan's outcomes per subject and in total on the randomized ``log`` (a table or its path), by
    DM, IPS, SNIPS, DR and SNDR with paired bootstrap intervals, against ``reference``.

    - ``labels``: the log's own column names by the contract's (``{"fund": "segment", "convert": "conversion",
      "amount": "spend"}``: :data:`~promokit.policy.log.ROLES`); ``outcomes``: further columns judged beside the
      contract's (numbers ≥ 0: a visit, a click), IPS and SNIPS only (the model scores none of them).
    - ``plans``: a plan (a table, a Series of actions indexed by subject, a file, parts, or the folder ``allocate``
      wrote), a list of them, or a mapping of name → plan; a plan is named by its folder or file (a Series by its
      name; ``plan`` for a table), made unique.
    - ``scores``: the model's score table, for DM, DR and SNDR (without it, IPS and SNIPS only).
    - the logging propensities: the log's ``propensity`` column (the default when there is one), ``design``
      (``uniform`` or ``bucket:COL``) or ``estimate_propensity`` (numeric columns to regress the action on).
    - ``reference``: ``logging`` (the log's own policy), ``uniform``, ``constant:ACTION``, or a plan.
    - ``clip`` caps the importance weights; ``bootstrap`` replicates, seeded by ``seed``, give ``interval``
      (``bca`` or ``percentile``) intervals; ``population`` is the subjects a plan's totals count (default: the
      subjects each plan decides).
    - ``missing``: a log subject some plan does not decide is an ``error``, or ``drop`` judges on the subjects
      every plan decides.
    - ``model``: the model directory behind the plans, to warn when the log's subjects are ones it was trained on.
    """
    if missing not in MISSING_CHOICES:
        raise DataError(f"`missing` must be {' or '.join(MISSING_CHOICES)}, got {missing!r}")
    source = _source(log, "log")
    the_log = read_log(log if isinstance(log, pd.DataFrame) else read_table(log), source, propensity, design,
                       estimate_propensity, dict(labels or {}), tuple(outcomes))
    named = _named(plans)
    special = isinstance(reference, str) and (reference in (LOGGING, UNIFORM) or reference.startswith(CONSTANT))
    if not special:
        named.append(("reference" if isinstance(reference, pd.DataFrame) else None, reference))
    read, the_log = _plans(named, the_log, missing)
    the_reference = reference_plan(reference, the_log) if special else read.pop()
    predicted = None
    if scores is not None:
        values, actions = read_scores(scores, the_log)
        predicted = predicted_outcomes(the_log, values, actions, union_of_actions(the_log, [the_reference, *read]))
    if model is not None:
        the_log.notes.extend(_training_overlap(model, the_log))
    evaluation = judge(the_log, read, the_reference, predicted, clip=clip, bootstrap=bootstrap, seed=seed,
                       population=population, interval=interval)
    evaluation.setup = {
        "log": f"{source}: a {the_log.kind} log of {len(the_log):,} rows, {len(set(the_log.ids)):,} {the_log.key} "
               f"values, actions {the_log.actions.tolist()}",
        "propensity": propensity or design or (f"estimated from {estimate_propensity}" if estimate_propensity
                                               else "the log's 'propensity' column"),
        "scores": _source(scores, "scores") if scores is not None else "none (IPS and SNIPS only)",
        "reference": _source(reference, "reference"),
        "bootstrap": f"{bootstrap} replicates, seed {seed}, {interval} intervals",
        "clip": clip if clip is not None else "none"}
    return evaluation


def _source(table, name: str) -> str:
    """How a message or the report names a table: its path, or ``name`` for a frame."""
    return name if isinstance(table, (pd.DataFrame, pd.Series)) else str(table)


def _named(plans) -> list[tuple[str | None, Table]]:
    """(name, plan) pairs: a mapping's names, else None (the plan names itself)."""
    if isinstance(plans, Mapping):
        return list(plans.items())
    if isinstance(plans, (str, os.PathLike, pd.DataFrame, pd.Series)):
        return [(None, plans)]
    return [(None, plan) for plan in plans]


def _plans(named: list, log: Log, missing: str) -> tuple[list[Plan], Log]:
    """Every plan over the log's rows, with unique names; with ``missing="drop"`` the log keeps the subjects every
    plan decides."""
    read = [read_plan(plan, log, name) for name, plan in named]
    decided = np.logical_and.reduce([mask for _, mask in read])
    if not decided.all():
        (name, _), (plan, mask) = next((n, r) for n, r in zip(named, read) if not r[1].all())
        example = log.ids[~mask][0]
        if missing == "error":
            raise DataError(f"{name or _source(plan, 'plan')}: {int((~mask).sum())} of the log's {len(log):,} subjects "
                            f"have no decision in this plan, e.g. {log.key} {example!r}; judge on the subjects every "
                            "plan decides with `missing` drop")
        if not decided.any():
            raise DataError(f"no subject of the log is decided by every plan (e.g. {log.key} {example!r} is not)")
        log = log.rows(decided)
        log.notes.append(f"{int((~decided).sum()):,} log subjects that some plan does not decide were left out: the "
                         f"estimates are for the other {int(decided.sum()):,}")
        for p, _ in read:
            p.probabilities = p.probabilities[decided]
    names = set()
    plans = []
    for p, _ in read:
        base, k = p.name, 2
        while p.name in names or p.name in (LOGGING, UNIFORM) or p.name.startswith(CONSTANT):
            p.name, k = f"{base}-{k}", k + 1
        names.add(p.name)
        plans.append(p)
    return plans, log


def _training_overlap(model: str | os.PathLike, log: Log) -> list[str]:
    from promokit.data.ids import share_in
    from promokit.training import read_training_ids

    hashes = read_training_ids(Path(model))
    if hashes is None:
        return [f"{model} does not record the subjects it was trained on (trained before it did): if they are "
                "the log's, the estimates are optimistic"]
    share = share_in(log.ids, hashes)
    if share == 0:
        return []
    return [f"{share:.1%} of the log's subjects are ones {model} was trained on: a plan judged on its own training "
            "subjects looks better than it will on new ones; judge it on a log of held-out subjects"]

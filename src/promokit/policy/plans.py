"""Plans to judge, as probabilities over actions for each subject of a log.

A plan is a table with the subject id (``user_id``, as ``allocate`` writes it, or the log's own id column) and
the action (``level`` or ``fund``):

- one row per subject: a deterministic plan (``allocate budget``'s ``plan.parquet``, whose ``population`` column,
  when there are merchants, picks the log's population; ``allocate quota``'s);
- rows (subject, action, ``probability``): a stochastic plan, each subject's probabilities summing to 1.

A plan is given as a table, a file, a directory or glob of parts, or the folder ``allocate`` wrote (its
``plan.parquet`` or ``plan/``). The reference plans are ``logging`` (the log's own policy: its value is the
observed mean, exactly), ``uniform`` (every action alike) and ``constant:ACTION``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.io import read_table
from promokit.policy.log import CONTRACTS, INCENTIVE, Log, action_list

PROBABILITY = "probability"
LOGGING, UNIFORM, CONSTANT = "logging", "uniform", "constant:"
#: how far a subject's probabilities may sum from 1 (they are written rounded)
TOLERANCE = 1e-6


@dataclass
class Plan:
    """A plan's probabilities over ``actions`` for each row of a log (rows × actions); ``subjects`` is how many
    subjects the plan decides (the population its totals count), ``logging`` marks the log's own policy."""

    name: str
    actions: np.ndarray
    probabilities: np.ndarray | None
    subjects: int
    logging: bool = False


def plan_path(path: str | Path) -> Path:
    """The table of a plan given as a file, parts, or the folder ``allocate`` wrote."""
    path = Path(path)
    for inner in (path / "plan.parquet", path / "plan"):
        if path.is_dir() and inner.exists():
            return inner
    return path


def read_plan(plan: str | Path | pd.DataFrame | pd.Series, log: Log, name: str | None = None
              ) -> tuple[Plan, np.ndarray]:
    """The plan (a table; a Series of actions indexed by subject; or a path as :func:`plan_path` reads it) over
    ``log``'s subjects, named ``name`` (by default its folder or file name, a Series' name; ``plan`` for a table),
    and the mask of the log's rows it decides (a subject the plan does not hold is False)."""
    if isinstance(plan, pd.Series):  # subject → action
        action_column = CONTRACTS[log.kind][0]
        frame = pd.DataFrame({log.key: plan.index.to_numpy(), action_column: plan.to_numpy()})
        source = name = name or (str(plan.name) if plan.name is not None else "plan")
    elif isinstance(plan, pd.DataFrame):
        frame, source, name = plan, name or "plan", name or "plan"
    else:
        table = plan_path(plan)
        frame, source, name = read_table(table), str(table), name or _name(plan)
    action_column = CONTRACTS[log.kind][0]
    key = "user_id" if "user_id" in frame.columns else log.key
    for column in (key, action_column):
        if column not in frame.columns:
            raise DataError(f"{source}: a plan needs the columns '{key}' and '{action_column}' (a {log.kind} log's "
                            f"action); columns are {list(frame.columns)[:12]}")
    if "population" in frame.columns and log.population is not None:
        frame = frame[frame["population"] == log.population].reset_index(drop=True)
        if frame.empty:
            raise DataError(f"{source}: the plan decides no {log.population}s, the log's population")
    ids = frame[key].astype(str).to_numpy()
    labels = _actions(frame, action_column, log.kind, source)
    probability = _probabilities(frame, ids, source)
    subjects = np.unique(ids)
    actions = np.unique(labels)
    row_of = pd.Index(subjects).get_indexer(ids)
    matrix = np.zeros((len(subjects), len(actions)))
    np.add.at(matrix, (row_of, np.searchsorted(actions, labels)), probability)
    at = pd.Index(subjects).get_indexer(log.ids)
    decided = at >= 0
    return Plan(name, actions, matrix[np.where(decided, at, 0)], len(subjects)), decided


def reference_plan(spec: str, log: Log) -> Plan:
    """``logging``, ``uniform`` or ``constant:ACTION`` over ``log``'s actions."""
    n, actions, subjects = len(log), log.actions, len(np.unique(log.ids))
    if spec == LOGGING:
        return Plan(LOGGING, actions, None, subjects, logging=True)
    if spec == UNIFORM:
        return Plan(UNIFORM, actions, np.full((n, len(actions)), 1.0 / len(actions)), subjects)
    if spec.startswith(CONSTANT):
        text = spec.removeprefix(CONSTANT)
        try:
            action = float(text) if log.kind == INCENTIVE else text
        except ValueError:
            raise DataError(f"`reference` {spec}: {text!r} is not a level") from None
        if action not in set(actions.tolist()):
            raise DataError(f"`reference` {spec}: the log holds no action {text!r}; its actions are "
                            f"{action_list(actions)}")
        probabilities = np.zeros((n, len(actions)))
        probabilities[:, np.searchsorted(actions, action)] = 1.0
        return Plan(spec, actions, probabilities, subjects)
    raise DataError(f"`reference` must be logging, uniform, constant:ACTION or a plan, got {spec!r}")


def on_actions(plan: Plan, actions: np.ndarray) -> np.ndarray:
    """The plan's probabilities over ``actions`` (a superset of the plan's, sorted)."""
    matrix = np.zeros((len(plan.probabilities), len(actions)))
    matrix[:, np.searchsorted(actions, plan.actions)] = plan.probabilities
    return matrix


def _actions(frame: pd.DataFrame, column: str, kind: str, source: str) -> np.ndarray:
    """The plan's actions: finite levels of an incentive plan, named funds of a value plan."""
    if kind == INCENTIVE:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values)
    else:
        values = frame[column].astype(str).to_numpy()
        bad = frame[column].isna().to_numpy()
    if bad.any():
        raise DataError(f"{source}: column {column!r} has {int(bad.sum())} missing or unreadable actions in "
                        f"{len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values


def _probabilities(frame: pd.DataFrame, ids: np.ndarray, source: str) -> np.ndarray:
    """Each row's probability: 1 for a deterministic plan (one row per subject), else the column, checked."""
    if PROBABILITY not in frame.columns:
        repeated = pd.Series(ids).duplicated().to_numpy()
        if repeated.any():
            raise DataError(f"{source}: {int(repeated.sum())} subjects have more than one row, e.g. "
                            f"{example_row(frame, repeated)}; a deterministic plan gives each subject one action "
                            f"(a stochastic one has a '{PROBABILITY}' column)")
        return np.ones(len(frame))
    values = pd.to_numeric(frame[PROBABILITY], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~((values >= 0) & (values <= 1))
    if bad.any():
        raise DataError(f"{source}: column {PROBABILITY!r} must hold probabilities in [0, 1] but has "
                        f"{int(bad.sum())} other values in {len(frame)} rows, e.g. {example_row(frame, bad, [PROBABILITY])}")
    totals = pd.Series(values).groupby(ids).sum()
    off = (totals - 1).abs() > TOLERANCE
    if off.any():
        raise DataError(f"{source}: the probabilities of {int(off.sum())} subjects do not sum to 1 (within "
                        f"{TOLERANCE:g}), e.g. subject {off[off].index[0]!r}: {totals[off].iloc[0]:g}; renormalise "
                        f"each subject's probabilities by their sum")
    return values


def _name(path) -> str:
    path = Path(path)
    return path.parent.name if path.name in ("plan.parquet", "plan") else path.stem

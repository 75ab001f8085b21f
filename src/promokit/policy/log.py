"""A randomized log in a domain contract, with the logging policy's propensity of every logged action.

Two contracts, told apart by their columns:

- **incentive** (`incentive` customers or merchants, or `campaign export`): ``customer_id`` or ``merchant_id``,
  ``level`` (the value offered: the action), ``redeemed`` (0/1) and optionally ``paid`` (money paid; else the
  face value ``level`` when redeemed). Outcomes: ``responses`` (redeemed) and ``spend``.
- **value** (`value` deliveries): ``user_id``, ``fund`` (the action), ``convert`` (0/1) and ``amount`` (≥ 0).
  Outcomes: ``conversions`` and ``amount`` (the transaction value).

An incentive log holds one row (one decision) per subject; a value log one row per delivery, a user on several
rows (its outcomes are per delivery, and the bootstrap resamples users, each with all its rows). The logging
propensity p_i = π₀(a_i | x_i) of each logged action comes from

- a column (``propensity``): numbers in (0, 1];
- the design (``design="uniform"``: uniform over the actions the log holds; ``design="bucket:COL"``: uniform,
  within each value of the bucket column, over the actions logged in that bucket, as the joint-incentive paper
  randomizes customers into buckets of values); or
- an estimate (``estimate_propensity``, a list of columns): a multinomial logistic regression of the logged action
  on those columns (scikit-learn), whose fitted probabilities are π₀ for every action. The intervals then leave out
  the estimate's own error.

A design and an estimate give π₀ for every action, not only the logged one, which tells how much of a plan the
log supports. A log that holds a propensity column as well as a design is checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.spec import require_columns

INCENTIVE, VALUE = "incentive", "value"
#: contract → (action column, outcome columns)
CONTRACTS = {INCENTIVE: ("level", ("responses", "spend")), VALUE: ("fund", ("conversions", "amount"))}
PROPENSITY = "propensity"
DESIGNS = ("uniform", "bucket:COL")


@dataclass
class Log:
    """A validated log: subject ``ids`` (text), each row's ``logged`` action among ``actions`` (sorted), its
    ``outcomes`` by name, the ``propensity`` of its action and, when the design or an estimate gives it, the
    logging policy over every action (``logging``, rows × actions). ``population`` is ``customer`` or
    ``merchant`` for an incentive log."""

    kind: str
    key: str
    ids: np.ndarray
    logged: np.ndarray
    actions: np.ndarray
    outcomes: dict[str, np.ndarray]
    propensity: np.ndarray
    logging: np.ndarray | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def subjects(self) -> np.ndarray:
        """Each row's subject as an index 0 … (distinct subjects − 1): the unit the bootstrap resamples."""
        return np.unique(self.ids, return_inverse=True)[1]

    @property
    def population(self) -> str | None:
        return {"customer_id": "customer", "merchant_id": "merchant"}.get(self.key)

    def rows(self, keep: np.ndarray) -> Log:
        """The log restricted to the rows ``keep`` (a boolean mask)."""
        return replace(self, ids=self.ids[keep], logged=self.logged[keep],
                       outcomes={k: v[keep] for k, v in self.outcomes.items()}, propensity=self.propensity[keep],
                       logging=None if self.logging is None else self.logging[keep], notes=list(self.notes))


#: the log's columns under the contract's names, which ``labels`` maps a log's own columns to
ROLES = ("customer_id", "merchant_id", "user_id", "level", "fund", "redeemed", "paid", "convert", "amount",
         PROPENSITY)


def read_log(frame: pd.DataFrame, source: str = "log", propensity: str | None = None, design: str | None = None,
             estimate_propensity: list[str] | None = None, labels: dict[str, str] | None = None,
             outcomes: list[str] | tuple[str, ...] = ()) -> Log:
    """Validate ``frame`` as a log (module docstring) and find its propensities; every breach is a one-line
    :class:`DataError` naming the column, the count and an example row. ``labels`` maps the contract's column
    names (:data:`ROLES`) to the log's own (``{"fund": "segment", "convert": "conversion", "amount": "spend"}``);
    ``outcomes`` names further columns of numbers ≥ 0 (a visit, a click) judged beside the contract's outcomes."""
    if len(frame) == 0:
        raise DataError(f"{source}: the log has no rows")
    if estimate_propensity and (propensity or design):
        raise DataError("`estimate_propensity` estimates the logging policy: give it without `propensity` or `design`")
    frame = _mapped(frame.reset_index(drop=True), labels or {}, source)
    kind, key = _contract(frame, source)
    action_column, _ = CONTRACTS[kind]
    ids = _ids(frame, key, source, unique=kind == INCENTIVE)
    logged = _actions(frame, action_column, kind, source)
    actions = np.unique(logged)
    log = Log(kind, key, ids, logged, actions, {**_outcomes(frame, kind, source),
                                                        **_further(frame, outcomes, kind, source)},
              np.ones(len(frame)), source=source)
    if estimate_propensity:
        log.logging = _estimated(frame, logged, actions, estimate_propensity, source)
    elif design is not None:
        log.logging = _designed(frame, logged, actions, design, source)
    if log.logging is not None:
        log.propensity = log.logging[np.arange(len(frame)), np.searchsorted(actions, logged)]
    column = propensity or (PROPENSITY if PROPENSITY in frame.columns and not estimate_propensity else None)
    if column is not None:
        given = _propensities(frame, column, source)
        if design is not None:
            _agree(frame, given, log.propensity, column, design, source)
        else:
            log.propensity = given
            if propensity is None:
                log.notes.append(f"the logging propensities are the log's {PROPENSITY!r} column")
    elif log.logging is None:
        raise DataError(f"{source}: no logging propensity: give `propensity` COL (a column of the log), `design` "
                        f"uniform|bucket:COL or `estimate_propensity` COLS")
    if "bucket" in frame.columns and (frame["bucket"] == "exploit").any():
        log.notes.append(f"{int((frame['bucket'] == 'exploit').sum()):,} rows are the service's exploit bucket, each "
                         "the rule's level at propensity 1: they support only plans that agree with the rule there; "
                         "to judge another plan, export the exploration bucket alone (the campaign export's bucket "
                         "explore)")
    return log


def _mapped(frame: pd.DataFrame, labels: dict[str, str], source: str) -> pd.DataFrame:
    """``frame`` with the columns ``labels`` names under their roles (one-line errors for an unknown role, a column
    the log lacks, or a role whose own column the log holds too)."""
    for role, column in labels.items():
        if role not in ROLES:
            raise DataError(f"`labels`: {role!r} is not a column of a log's contract; they are {list(ROLES)}")
        if column not in frame.columns:
            raise DataError(f"`labels`: column {column!r} (for {role!r}) is not in the {source}'s {len(frame)} rows; "
                            f"columns are {list(frame.columns)[:12]}")
        if role in frame.columns and role != column:
            raise DataError(f"`labels` maps {column!r} to {role!r}, but the {source} has a {role!r} column too: "
                            "rename or drop one")
    return frame.rename(columns={column: role for role, column in labels.items()})


def _further(frame: pd.DataFrame, columns, kind: str, source: str) -> dict[str, np.ndarray]:
    """The ``outcomes`` columns, each of numbers ≥ 0, under its own name."""
    taken = CONTRACTS[kind][1]
    for column in columns:
        if column in taken:
            raise DataError(f"`outcomes`: {column!r} is already an outcome of a {kind} log ({list(taken)}); name "
                            "another column")
    return {column: _numbers(frame, column, source) for column in dict.fromkeys(columns)}


def _contract(frame: pd.DataFrame, source: str) -> tuple[str, str]:
    if "fund" in frame.columns:
        return VALUE, "user_id"
    if "level" not in frame.columns:
        raise DataError(f"{source}: a log needs 'level' (an incentive log) or 'fund' (a value log) as its action "
                        f"column; columns are {list(frame.columns)[:12]}")
    keys = [k for k in ("customer_id", "merchant_id") if k in frame.columns]
    if len(keys) != 1:
        raise DataError(f"{source}: an incentive log names its subjects by exactly one of 'customer_id' and "
                        f"'merchant_id'; it has {keys or 'neither'}")
    return INCENTIVE, keys[0]


def _ids(frame: pd.DataFrame, key: str, source: str, unique: bool) -> np.ndarray:
    require_columns(frame, [key], source)
    missing = frame[key].isna().to_numpy()
    if missing.any():
        raise DataError(f"{source}: column {key!r} has {int(missing.sum())} missing values in {len(frame)} rows, "
                        f"e.g. {example_row(frame, missing, [key])}")
    ids = frame[key].astype(str).to_numpy()
    repeated = pd.Series(ids).duplicated().to_numpy()
    if unique and repeated.any():
        raise DataError(f"{source}: {int(repeated.sum())} repeated {key} values in {len(frame)} rows, e.g. "
                        f"{example_row(frame, repeated, [key])}; a log holds one decision per subject")
    return ids


def _numbers(frame: pd.DataFrame, column: str, source: str, low: float = 0.0) -> np.ndarray:
    """A column of finite numbers ≥ ``low`` (text, NaN, infinities and booleans refused)."""
    require_columns(frame, [column], source)
    series = frame[column]
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) | (values < low) | pd.api.types.is_bool_dtype(series)
    if np.any(bad):
        bad = np.broadcast_to(bad, values.shape)
        raise DataError(f"{source}: column {column!r} must hold finite numbers ≥ {low:g} but has "
                        f"{int(bad.sum())} other values in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values


def _binary(frame: pd.DataFrame, column: str, source: str) -> np.ndarray:
    values = _numbers(frame, column, source)
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        raise DataError(f"{source}: column {column!r} must be 0/1 but has {int(bad.sum())} other values in "
                        f"{len(frame)} rows, e.g. {example_row(frame, bad, [column])}")
    return values


def _actions(frame: pd.DataFrame, column: str, kind: str, source: str) -> np.ndarray:
    if kind == INCENTIVE:
        return _numbers(frame, column, source)
    require_columns(frame, [column], source)
    missing = frame[column].isna().to_numpy()
    if missing.any():
        raise DataError(f"{source}: column {column!r} has {int(missing.sum())} missing values in {len(frame)} rows, "
                        f"e.g. {example_row(frame, missing, [column])}")
    return frame[column].astype(str).to_numpy()


def _outcomes(frame: pd.DataFrame, kind: str, source: str) -> dict[str, np.ndarray]:
    if kind == VALUE:
        return {"conversions": _binary(frame, "convert", source), "amount": _numbers(frame, "amount", source)}
    responses = _binary(frame, "redeemed", source)
    spend = _numbers(frame, "paid", source) if "paid" in frame.columns else frame["level"].to_numpy(float) * responses
    return {"responses": responses, "spend": spend}


def _propensities(frame: pd.DataFrame, column: str, source: str) -> np.ndarray:
    values = _numbers(frame, column, source)
    bad = (values <= 0) | (values > 1)
    if bad.any():
        raise DataError(f"{source}: column {column!r} must hold propensities in (0, 1] but has {int(bad.sum())} "
                        f"other values in {len(frame)} rows, e.g. {example_row(frame, bad, [column])}; a logged "
                        "action of propensity 0 could not have been logged")
    return values


def _designed(frame: pd.DataFrame, labels: np.ndarray, actions: np.ndarray, design: str, source: str) -> np.ndarray:
    """π₀ of a uniform design, over all the log's actions or within each bucket's."""
    if design == "uniform":
        return np.full((len(frame), len(actions)), 1.0 / len(actions))
    if not design.startswith("bucket:") or not design.removeprefix("bucket:"):
        raise DataError(f"`design` must be one of {list(DESIGNS)}, got {design!r}")
    column = design.removeprefix("bucket:")
    require_columns(frame, [column], source)
    bucket = frame[column].astype(str).to_numpy()
    offered = pd.crosstab(bucket, labels).reindex(columns=actions, fill_value=0) > 0
    matrix = offered.loc[bucket].to_numpy(dtype=np.float64)
    return matrix / matrix.sum(axis=1, keepdims=True)


def _estimated(frame: pd.DataFrame, labels: np.ndarray, actions: np.ndarray, columns: list[str],
               source: str) -> np.ndarray:
    """π₀ as the fitted probabilities of a multinomial logistic regression of the action on ``columns``."""
    from sklearn.linear_model import LogisticRegression

    if len(actions) < 2:
        raise DataError(f"{source}: every row logged the action {action_label(actions[0])}; estimating a logging "
                        "policy needs at least two actions")
    features = np.column_stack([_numbers(frame, c, source, low=-np.inf) for c in columns])
    scale = features.std(axis=0)
    features = (features - features.mean(axis=0)) / np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(max_iter=1000).fit(features, np.searchsorted(actions, labels))
    return model.predict_proba(features)


def _agree(frame: pd.DataFrame, given: np.ndarray, implied: np.ndarray, column: str, design: str,
           source: str) -> None:
    """A propensity column must say what the design says (to 1e-6: propensities are written rounded)."""
    bad = np.abs(given - implied) > 1e-6
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{source}: column {column!r} disagrees with {design} in {int(bad.sum())} of {len(frame)} "
                        f"rows, e.g. row {i}: {given[i]:g} where {design} gives {implied[i]:g}")


def action_label(action) -> str:
    """An action as people write it: a level without a trailing .0 (``20``), a fund's name."""
    return f"{action:g}" if isinstance(action, (float, np.floating)) else str(action)


def action_list(actions, shown: int = 3) -> str:
    """Actions for a message, as people write them: all of a short list, else the first ``shown`` and how many
    more (``['a', 'b', 'c', … 17 more]``)."""
    labels = [action_label(a) for a in actions]
    if len(labels) <= shown + 2:
        return str(labels)
    return "[" + ", ".join(map(repr, labels[:shown])) + f", … {len(labels) - shown} more]"

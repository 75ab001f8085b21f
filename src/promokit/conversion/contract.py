"""The conversion table contract: one row per impression with labels click, optional daction, purchase."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.spec import FeatureSpec

REQUIRED_LABELS = ("click", "purchase")
OPTIONAL_LABELS = ("daction",)
#: Every label role of an impression table, as ``labels`` (role → column) maps them.
LABEL_ROLES = (*REQUIRED_LABELS, *OPTIONAL_LABELS)
#: The logits of the path impression → click → (DAction) → purchase that a model may define, each with the label
#: that supervises it and the rows it is observed on: what a wide term's floor is solved on (``promokit.nn.WideTerm``).
#: y2–y4 are ESM²'s (eqs. 1–4).
LOGIT_TARGETS = {"ctr": ("click", {}), "cvr": ("purchase", {"click": 1}), "ctcvr": ("purchase", {}),
                 "y2": ("daction", {"click": 1}), "y3": ("purchase", {"click": 1, "daction": 1}),
                 "y4": ("purchase", {"click": 1, "daction": 0})}


def wide_targets(*logits: str) -> dict[str, tuple[str, dict[str, int]]]:
    """:data:`LOGIT_TARGETS` of the named logits."""
    return {name: LOGIT_TARGETS[name] for name in logits}


def conversion_spec(spec: FeatureSpec | str | os.PathLike | None = None, *, micro_behaviors=None,
                    types: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                    allow_leaky=None) -> FeatureSpec:
    """``spec`` (a FeatureSpec, a YAML/JSON spec file, or None: an empty spec) with ``micro_behaviors``
    (:func:`micro_behavior_columns`) in place of its own, ``types`` (column → categorical | numeric) over its own,
    ``labels`` (role → column) over its own and ``allow_leaky`` (columns, a list or comma-separated names: features
    the label-leak guard leaves alone) added to its own."""
    if not isinstance(spec, FeatureSpec):
        spec = FeatureSpec.from_file(spec) if spec else FeatureSpec()
    if micro_behaviors is not None:
        spec = replace(spec, micro_behaviors=micro_behavior_columns(micro_behaviors))
    if labels:
        spec = replace(spec, labels={**spec.labels, **labels})
    if allow_leaky:
        given = allow_leaky.split(",") if isinstance(allow_leaky, str) else list(allow_leaky)
        names = [*spec.allow_leaky, *(name.strip() for name in given if name.strip())]
        spec = replace(spec, allow_leaky=list(dict.fromkeys(names)))
    return replace(spec, types={**spec.types, **(types or {})})


def micro_behavior_columns(names) -> list[str]:
    """The micro-behaviour label columns ``names`` gives: a list, or a string of comma-separated names (blanks
    ignored); at least one, none twice."""
    given = names.split(",") if isinstance(names, str) else list(names)
    columns = [name.strip() for name in given if name.strip()]
    if not columns:
        raise DataError(f"`micro_behaviors` names no column ({names!r}); give comma-separated column names, "
                        "e.g. cart,favorite")
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if repeated:
        raise DataError(f"`micro_behaviors` lists {repeated} more than once")
    return columns


@dataclass
class LabelReport:
    """What :func:`check_labels` changed: rows repaired per label (post-click label set on an unclicked row)."""

    repaired: dict[str, int] = field(default_factory=dict)


def check_labels(frame: pd.DataFrame, labels: dict[str, str], repair: bool = False) -> tuple[dict[str, np.ndarray], LabelReport]:
    """Validate the label columns and return them as float32 arrays keyed by role.

    Labels must be 0/1 without missing values. DAction and purchase happen only after a click (ESM² eqs. 2
    and 4 rely on it): a 1 on an unclicked row is an error naming the count and an example row, or, with
    ``repair=True``, is set to 0 and counted in the report.
    """
    arrays = {role: _binary(frame, column, role) for role, column in labels.items()}
    report = LabelReport()
    for role in ("daction", "purchase"):
        if role in arrays:
            arrays[role] = _after_click(frame, arrays, labels["click"], labels[role], role, repair, report)
    return arrays, report


def check_micro_behaviors(frame: pd.DataFrame, columns: list[str], click: np.ndarray, click_column: str,
                          repair: bool, report: LabelReport) -> np.ndarray:
    """The micro-behaviour label columns as one ``(rows, behaviours)`` float32 array, checked like DAction: 0/1,
    nothing missing, and a 1 only after a click (an error naming the column, or set to 0 and counted under its
    name in ``report`` with ``repair``)."""
    if not columns:
        return np.zeros((len(frame), 0), dtype=np.float32)
    arrays = {"click": click}
    for name in columns:
        arrays[name] = _after_click(frame, {**arrays, name: _binary(frame, name, "micro-behaviour")}, click_column,
                                    name, name, repair, report)
    return np.stack([arrays[name] for name in columns], axis=1)


def check_learnable(labels: dict[str, np.ndarray], columns: dict[str, str], micro: list[str]) -> list[str]:
    """Refuse training labels that no conversion model can learn from, and return a warning per label that
    carries nothing.

    ``labels`` are the training rows' arrays by role (``micro``: ``(rows, N)`` in the order of ``micro``) and
    ``columns`` the table column of each role. The click needs both classes over the rows (CTR) and the purchase
    both classes over the clicked rows (CVR is P(purchase | click)): otherwise a :class:`DataError`. A DAction or
    micro-behaviour that is constant over the clicked rows is kept, with a warning: its tower or node learns a
    constant and its AUC is undefined.
    """
    n, click = len(labels["click"]), labels["click"] == 1
    if click.all() or not click.any():
        raise DataError(f"label {columns['click']!r} (click) is {int(click.any())} on all {n} training rows: CTR "
                        "needs clicked and unclicked impressions")
    purchases = int(labels["purchase"][click].sum())
    if purchases in (0, int(click.sum())):
        raise DataError(f"label {columns['purchase']!r} (purchase) is {int(purchases > 0)} on all {int(click.sum())} "
                        f"clicked rows of the {n} training rows: CVR needs clicked rows with and without a purchase")
    optional = {columns["daction"]: labels["daction"]} if "daction" in labels else {}
    optional.update({name: labels["micro"][:, j] for j, name in enumerate(micro)})
    notes = []
    for column, values in optional.items():
        fired = int(values[click].sum())
        if fired in (0, int(click.sum())):
            notes.append(f"label {column!r} is {int(fired > 0)} on all {int(click.sum())} clicked training rows: "
                            "it teaches nothing and its AUC is undefined")
    return notes


def _binary(frame: pd.DataFrame, column: str, role: str) -> np.ndarray:
    n = len(frame)
    series = frame[column]
    missing = series.isna().to_numpy()
    if missing.any():
        raise DataError(f"label column {column!r} ({role}) has {int(missing.sum())} missing values in {n} rows, "
                        f"e.g. {example_row(frame, missing, [column])}")
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        raise DataError(f"label column {column!r} ({role}) must be 0/1 but has {int(bad.sum())} other values "
                        f"in {n} rows, e.g. {example_row(frame, bad, [column])}")
    return values.astype(np.float32)


def _after_click(frame: pd.DataFrame, arrays: dict, click_column: str, column: str, role: str, repair: bool,
                 report: LabelReport) -> np.ndarray:
    """``arrays[role]`` with no 1 where the click is 0: an error, or (``repair``) set to 0 and counted."""
    values = arrays[role]
    orphan = (arrays["click"] == 0) & (values == 1)
    if not orphan.any():
        return values
    if not repair:
        raise DataError(f"label {column!r} ({role}) is 1 on {int(orphan.sum())} of {len(frame)} rows where "
                        f"{click_column!r} is 0, e.g. {example_row(frame, orphan, [click_column, column])}; "
                        "post-click labels need a click (pass repair to set them to 0)")
    report.repaired[role] = int(orphan.sum())
    return np.where(orphan, 0.0, values).astype(np.float32)


#: A 0/1 feature whose k ones all fall on clicked rows is called a post-click label when chance (the clicked share
#: of the rows to the power k) would do that less often than this.
POST_CLICK_CHANCE = 1e-3


def post_click_counts(frame: pd.DataFrame, columns: list[str], click: np.ndarray) -> dict[str, tuple[int, int] | None]:
    """For each feature of ``columns``: its ones on unclicked and on clicked rows, or None when it holds anything but
    0 and 1 (text, other numbers, missing values): the sums :func:`post_click_warning` reads, part by part."""
    clicked = click == 1
    counts = {}
    for name in columns:
        series = frame[name]
        if not (pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)):
            counts[name] = None
            continue
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        counts[name] = (int(values[~clicked].sum()), int(values[clicked].sum())) if np.isin(values, (0, 1)).all() \
            else None
    return counts


def post_click_warning(counts: list[dict], rows: int, clicks: int, click_column: str) -> str | None:
    """A warning naming the 0/1 features that are 0 on every unclicked row and 1 on some clicked rows (summed over
    the :func:`post_click_counts` of every part of ``rows`` rows, ``clicks`` of them clicked), more often than
    :data:`POST_CLICK_CHANCE` allows by chance: post-click labels (a micro-behaviour, the DAction) left among the
    features, where they give the click away. None when there is none."""
    share = clicks / rows if rows else 0.0
    leaks = {}
    for name in counts[0] if counts else ():
        sums = [part[name] for part in counts]
        if any(s is None for s in sums):
            continue
        unclicked, clicked = (sum(s[k] for s in sums) for k in (0, 1))
        if unclicked == 0 and clicked > 0 and share ** clicked < POST_CLICK_CHANCE:
            leaks[name] = clicked
    if not leaks:
        return None
    names = list(leaks)
    return (f"feature columns {names} are 0 on all {rows - clicks} rows where {click_column!r} is 0 and 1 on some of "
            f"the {clicks} clicked rows ({', '.join(f'{n}: {k}' for n, k in leaks.items())}): they look like "
            "post-click labels (micro-behaviours, the DAction), which are not known when an impression is scored; "
            f"declare them as micro-behaviours (micro_behaviors: [{', '.join(map(str, names))}] in the spec) or one "
            f"as the DAction (labels: {{daction: {names[0]}}} in the spec), or drop them from the "
            "table")

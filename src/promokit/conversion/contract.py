"""The conversion table contract: one row per impression with labels click, optional daction, purchase."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row

REQUIRED_LABELS = ("click", "purchase")
OPTIONAL_LABELS = ("daction",)


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
    n = len(frame)
    arrays = {}
    for role, column in labels.items():
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
        arrays[role] = values.astype(np.float32)
    report = LabelReport()
    unclicked = arrays["click"] == 0
    for role in ("daction", "purchase"):
        if role not in arrays:
            continue
        orphan = unclicked & (arrays[role] == 1)
        if not orphan.any():
            continue
        if not repair:
            raise DataError(f"label {labels[role]!r} ({role}) is 1 on {int(orphan.sum())} of {n} rows where "
                            f"{labels['click']!r} is 0, e.g. {example_row(frame, orphan, [labels['click'], labels[role]])}; "
                            "post-click labels need a click (pass repair to set them to 0)")
        arrays[role] = np.where(orphan, 0.0, arrays[role]).astype(np.float32)
        report.repaired[role] = int(orphan.sum())
    return arrays, report

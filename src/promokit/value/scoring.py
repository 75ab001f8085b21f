"""What ``value predict`` scores a user × fund pair with besides the network: the time (and the behaviours that
time lets in), the users of a campaign's list, and the delivery contexts a model keeps to score without deliveries.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.io import read_table
from promokit.data.spec import FeatureSpec, require_columns
from promokit.value.contract import TIME, USER, ValueTables

#: Training delivery contexts a model keeps (drawn, seeded), to score users × funds when no deliveries are given.
KEPT_CONTEXTS = 32


def time_text(time) -> str:
    """A time in contract form (int64 ns of a datetime, or a float) as text: a date, with the time of day unless it
    is midnight, or the number."""
    if isinstance(time, (float, np.floating)):
        return f"{time:g}"
    stamp = pd.Timestamp(int(time))
    return stamp.date().isoformat() if stamp == stamp.normalize() else str(stamp)


def event_times(tables: ValueTables) -> np.ndarray:
    """The times the default scoring time follows: the deliveries', or without deliveries the behaviours'."""
    if len(tables.time) or tables.behaviors is None:
        return tables.time
    return tables.behaviors[TIME].to_numpy()


def scoring_notes(tables: ValueTables, when, at_given: bool, trained_until) -> list[str]:
    """What to know of the behaviours a scoring at ``when`` reads: those at or after it are left out, and by
    default (no ``--at``) those after the model's training deliveries (``trained_until_``) are read — the held-out
    period's, when the folder is the one the model was trained on."""
    if tables.behaviors is None:
        return []
    time = tables.behaviors[TIME].to_numpy()
    notes = []
    later = int((time >= when).sum())
    if later:
        notes.append(f"{later:,} behaviours at or after {time_text(when)} are not read (the scores are as of then; "
                     "--at sets another time)")
    if not at_given and trained_until is not None:
        unseen = int(((time > trained_until) & (time < when)).sum())
        if unseen:
            notes.append(f"warning: the scores read {unseen:,} behaviours later than the deliveries the model was "
                         f"trained on (which end at {time_text(trained_until)}); to score as of its training cut, as "
                         f"when judging plans on the deliveries it held out, pass --at '{time_text(trained_until)}'; "
                         "pass --at to choose the time and silence this")
    return notes


def read_users_list(path, tables: ValueTables) -> np.ndarray:
    """The rows in ``tables.users`` of the users listed in the table at ``path`` (its ``user_id`` column; other
    columns are ignored), in the list's order: a campaign's users, each once and each in the users table."""
    frame = read_table(path).reset_index(drop=True)
    require_columns(frame, [USER], f"users list {path}")
    ids = frame[USER].astype("string")
    missing = ids.isna().to_numpy()
    if missing.any():
        raise DataError(f"users list {path}: column {USER!r} has {int(missing.sum())} missing values in "
                        f"{len(frame)} rows, e.g. {example_row(frame, missing, [USER])}")
    repeated = ids.duplicated(keep=False).to_numpy()
    if repeated.any():
        raise DataError(f"users list {path}: column {USER!r} repeats {int(repeated.sum())} of {len(frame)} rows, "
                        f"e.g. {example_row(frame, repeated, [USER])}; list each user once")
    rows = pd.Index(tables.users[USER].astype("string")).get_indexer(ids)
    unknown = rows < 0
    if unknown.any():
        raise DataError(f"users list {path}: column {USER!r} has {int(unknown.sum())} of {len(frame)} users that are "
                        f"not in the users table, e.g. {example_row(frame, unknown, [USER])}")
    return rows.astype(np.int64)


def context_values(deliveries: pd.DataFrame, columns: list[str]) -> dict[str, list]:
    """The ``columns`` (context features) of ``deliveries`` as JSON lists by column: the contexts a model directory
    keeps (:data:`KEPT_CONTEXTS` training deliveries drawn by the estimator)."""
    return {str(c): [_json_value(v) for v in deliveries[c]] for c in columns}


def kept_contexts(kept: dict[str, list] | None, spec: FeatureSpec) -> pd.DataFrame:
    """The delivery contexts a model keeps (:func:`context_values`) as rows to score pairs in when no deliveries
    are given; one empty row for a model that reads no context feature."""
    if not spec.features:
        return pd.DataFrame(index=range(1))
    if not kept:
        raise DataError(f"the model reads the delivery context {spec.features} and its directory keeps no contexts "
                        "(a format-1 directory may lack them; format 2 keeps them): give the deliveries to draw "
                        "contexts from")
    return pd.DataFrame(kept)


def _json_value(value):
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, (np.generic,)):
        return value.item()
    return value if isinstance(value, (str, int, float, bool)) else str(value)

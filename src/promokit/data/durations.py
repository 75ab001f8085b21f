"""Durations as every option and argument that takes one reads them: ``7D``, ``12h``, ``30m``, ``604800s``, or a
bare number of seconds."""

from __future__ import annotations

import datetime
import math
import re
from numbers import Real

import pandas as pd

from promokit.data.errors import DataError

#: The accepted forms, as messages and help texts name them.
DURATION_FORMS = "a number and a unit: 7D (days), 12h (hours), 30m (minutes), 604800s (seconds); or a bare number of seconds"
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
_PATTERN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([dDhHms]?)\s*")  # no M: a month to some readers


def parse_duration(value, argument: str) -> pd.Timedelta:
    """``value`` as a non-negative :class:`pandas.Timedelta`: a text of :data:`DURATION_FORMS`, a number of seconds,
    or a ``timedelta``; anything else is a one-line :class:`DataError` naming ``argument`` and the forms."""
    if isinstance(value, (pd.Timedelta, datetime.timedelta)):
        period = pd.Timedelta(value)
    elif isinstance(value, Real) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise DataError(f"{argument}: {value!r} is not a duration; give {DURATION_FORMS}")
        period = pd.Timedelta(seconds=float(value))
    else:
        match = _PATTERN.fullmatch(value) if isinstance(value, str) else None
        if match is None:
            raise DataError(f"{argument}: {value!r} is not a duration; give {DURATION_FORMS}")
        number, unit = match.groups()
        period = pd.Timedelta(**{_UNITS[(unit or "s").lower()]: float(number)})
    if pd.isna(period) or period < pd.Timedelta(0):
        raise DataError(f"{argument} must be a duration of at least 0, got {value!r}")
    return period

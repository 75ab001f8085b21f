"""Score tables in, matrices out: the two layouts the allocation commands read and write.

**Long**: one row per user × option with columns ``user_id``, the option column (``level`` — the
incentive value r_j — for budgets, ``fund`` for quotas) and ``score`` (f_ij or ETV_ij), plus optional
``value`` / ``cost`` (budget) or a per-user ``tolerance`` (quota, the same on every row of a user). Other
columns are ignored. Every user needs exactly one row per option.

**Wide**: one row per user with ``user_id`` and one column per option named ``<prefix><option>``
(prefix ``score_`` by default: ``score_0.5, score_1, …`` or ``score_F1, score_F2, …``), plus optional
``value_<level>`` / ``cost_<level>`` (budget) or ``tolerance`` (quota). Any other column is an error, as it
is most likely a misspelt option. Budget levels are the numbers after the prefix, in increasing order.

In both layouts the key column may have another name than ``user_id`` (``key``; :func:`key_column` finds it).

Every violation is a :class:`~promokit.data.DataError` naming the column, the count and an example.
"""

from __future__ import annotations

import difflib
import os
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.allocation.defaults import AUTO, DEFAULT_PREFIX, LONG, TOLERANCE, WIDE
from promokit.data.errors import DataError, example_row
from promokit.data.io import read_table
from promokit.data.parts import parquet_schema
from promokit.data.spec import missing_column_message

USER, SCORE, LEVEL, FUND, VALUE, COST = "user_id", "score", "level", "fund", "value", "cost"
QUOTA, RISK = "quota", "risk"
MIN, MAX = "min", "max"  # quota bounds: at least / at most this many users of the fund


@dataclass
class BudgetTable:
    """Response scores of N requests to K incentive levels, with optional explicit value and cost."""

    user_ids: np.ndarray       # (N,) in the table's order
    levels: np.ndarray         # (K,) float64, increasing incentive values r_j
    scores: np.ndarray         # (N, K) response scores f_ij
    value: np.ndarray | None   # (N, K) what to maximise, when it is not the score
    cost: np.ndarray | None    # (N, K) expected spend, when it is not level × score
    layout: str
    key: str = USER            # the column naming the requests


@dataclass
class QuotaTable:
    """Expected transaction values of N users for k funds, with optional user risk tolerances."""

    user_ids: np.ndarray           # (N,)
    funds: list[str]               # (k,) fund names, in order of first appearance (long) or of the columns (wide)
    etv: np.ndarray                # (N, k)
    tolerance: np.ndarray | None   # (N,) int64 risk tolerance t_i
    key: str = USER                # the column naming the users


@dataclass
class FundQuotas:
    """Per fund, in the order of :attr:`QuotaTable.funds`: the fewest and most users (both d_j for a fund with an
    exact ``quota``; 0 and inf where a ``min`` or ``max`` is not given) and the risk level r_j."""

    min_users: np.ndarray      # (k,) int64
    max_users: np.ndarray      # (k,) float64, inf for a fund without a max
    risk: np.ndarray | None    # (k,) int64

    @property
    def quotas(self) -> np.ndarray | None:
        """The exact counts d_j (eq. 4) when every fund has one, else None (bounds)."""
        return self.min_users if np.array_equal(self.min_users, self.max_users) else None


@dataclass
class _Scores:
    user_ids: np.ndarray
    options: np.ndarray        # long: option values; wide: column suffixes (str)
    matrices: dict[str, np.ndarray]
    per_user: dict[str, np.ndarray]
    layout: str


def read_budget_table(source: str | os.PathLike | pd.DataFrame, layout: str = AUTO,
                      prefix: str = DEFAULT_PREFIX, key: str = USER) -> BudgetTable:
    """Read a budget score table (long: ``user_id, level, score[, value, cost]``; wide: ``score_<level>``), its
    requests named by the column ``key``."""
    frame = _frame(source)
    with _naming(source):
        parsed = _read_scores(frame, LEVEL, (SCORE, VALUE, COST), (), layout, prefix, True, key)
        levels = parsed.options if parsed.layout == LONG else _levels_from_columns(parsed.options, prefix)
    return BudgetTable(user_ids=parsed.user_ids, levels=levels, scores=parsed.matrices[SCORE],
                       value=parsed.matrices.get(VALUE), cost=parsed.matrices.get(COST), layout=parsed.layout,
                       key=key)


def read_quota_table(source: str | os.PathLike | pd.DataFrame, layout: str = AUTO, prefix: str = DEFAULT_PREFIX,
                     tolerance: str = TOLERANCE, key: str = USER) -> QuotaTable:
    """Read an ETV table (long: ``user_id, fund, score[, tolerance]``; wide: ``score_<fund>[, tolerance]``), its
    users named by the column ``key``."""
    frame = _frame(source)
    with _naming(source):
        parsed = _read_scores(frame, FUND, (SCORE,), (tolerance,), layout, prefix, False, key)
        user_tolerance = parsed.per_user.get(tolerance)
        if user_tolerance is not None:
            user_tolerance = _integers(tolerance, user_tolerance, "users")
    return QuotaTable(user_ids=parsed.user_ids, funds=[str(f) for f in parsed.options],
                      etv=parsed.matrices[SCORE], tolerance=user_tolerance, key=key)


def key_column(source: str | os.PathLike | pd.DataFrame, key: str | None = None) -> str:
    """The column naming the users of the score table ``source`` (a DataFrame, or a CSV or Parquet file): ``key``
    when given, else ``user_id``, else the table's only column named ``*_id`` (``customer_id`` …); without one,
    ``user_id`` (whose absence the readers report, with the names it may have been misspelt as)."""
    if key is not None:
        return key
    framed = isinstance(source, pd.DataFrame)
    columns = [str(c) for c in source.columns] if framed else _columns(source)
    ids = [c for c in columns if c.lower().endswith("_id")]
    if USER in columns or not ids:
        return USER
    if len(ids) == 1:
        return ids[0]
    raise DataError(f"{'the table has' if framed else f'{source}:'} no {USER!r} column and {len(ids)} id columns "
                    f"{ids[:5]} to take as the users' key; name it with `key`. Columns present: {columns[:20]}")


def _columns(path: str | os.PathLike) -> list[str]:
    """The column names of a CSV or Parquet file, from its header or schema (what the reader reports on errors)."""
    try:
        if str(path).lower().endswith((".parquet", ".pq")):
            return [str(c) for c in parquet_schema(path).names if not str(c).startswith("__index_level_")]
        return [str(c) for c in pd.read_csv(path, nrows=0).columns]
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return [str(c) for c in read_table(path).columns]


def read_quotas(source: str | os.PathLike | pd.DataFrame, funds: list[str]) -> FundQuotas:
    """Read a ``fund, quota | min | max[, risk]`` table and align it with ``funds`` (the score table's funds).

    A fund has either an exact ``quota`` or bounds, a ``min`` and/or a ``max`` (an empty cell is no bound); a
    table with only the ``quota`` column needs a quota for every fund."""
    frame = _frame(source)
    with _naming(source):
        return _align_quotas(frame, funds)


def _align_quotas(frame: pd.DataFrame, funds: list[str]) -> FundQuotas:
    n, what = len(frame), "quotas table"
    _require(frame, (FUND,), what)
    counted = [c for c in (QUOTA, MIN, MAX) if c in frame.columns]
    if not counted:
        raise DataError(missing_column_message(QUOTA, list(frame.columns), f"or {MIN!r} and/or {MAX!r}, required "
                                               f"in the {what}", n))
    unknown = [c for c in frame.columns if c not in (FUND, QUOTA, MIN, MAX, RISK)]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [QUOTA, MIN, MAX, RISK], n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DataError(f"{len(unknown)} unknown columns in the {what} of {n} rows, e.g. {unknown[0]!r}{hint} "
                        f"(a {what} has {FUND}, {QUOTA} or {MIN}/{MAX}, and optionally {RISK})")
    if frame[FUND].isna().any():
        raise _bad_rows(frame, frame[FUND].isna(), f"column {FUND!r} has missing values", what)
    names = frame[FUND].astype(str)
    duplicated = names.duplicated(keep=False)
    if duplicated.any():
        raise _bad_rows(frame, duplicated, f"column {FUND!r} repeats a fund", what, [FUND, *counted])
    unknown = sorted(set(names) - set(funds))
    if unknown:
        raise DataError(f"the {what} ({n} rows) has {len(unknown)} funds that are not in the score table, "
                        f"e.g. {unknown[0]!r}; score table funds: {funds[:20]}")
    present = set(names)
    missing = [f for f in funds if f not in present]
    if missing:
        raise DataError(f"{len(missing)} funds of the score table have no quota in the {what} ({n} rows), "
                        f"e.g. {missing[0]!r}")
    if counted == [QUOTA]:  # exact quotas only: every fund needs one
        quotas = _whole_counts(frame, QUOTA, _numeric(frame, QUOTA, what, negative_ok=False))
        lower, upper = quotas, quotas
    else:
        lower, upper = _fund_bounds(frame, {c: _optional_counts(frame, c) for c in counted})
    order = pd.Index(names).get_indexer(funds)
    risk = None
    if RISK in frame.columns:
        risk = _integers(RISK, _numeric(frame, RISK, what, negative_ok=True), "funds")[order]
    return FundQuotas(min_users=lower[order].astype(np.int64), max_users=upper[order], risk=risk)


def _fund_bounds(frame: pd.DataFrame, given: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(fewest, most) users per row from the ``quota``, ``min`` and ``max`` columns present (NaN: not given)."""
    what, shown = "quotas table", [FUND, *given]
    absent = np.full(len(frame), np.nan)
    quota, low, high = (given.get(c, absent) for c in (QUOTA, MIN, MAX))
    exact, bounded = ~np.isnan(quota), ~np.isnan(low) | ~np.isnan(high)
    if (exact & bounded).any():
        raise _bad_rows(frame, exact & bounded, f"funds with both a {QUOTA!r} and a {MIN!r} or {MAX!r} (give "
                        f"exactly {QUOTA} users, or bounds)", what, shown)
    if not (exact | bounded).all():
        raise _bad_rows(frame, ~(exact | bounded), f"funds with none of {list(given)} (each needs a {QUOTA!r}, "
                        f"or a {MIN!r} and/or a {MAX!r}; {MIN} 0 leaves a fund free)", what, shown)
    crossed = low > high
    if crossed.any():
        raise _bad_rows(frame, crossed, f"column {MIN!r} is above column {MAX!r}", what, [FUND, MIN, MAX])
    lower = np.where(exact, quota, np.nan_to_num(low, nan=0.0))
    upper = np.where(exact, quota, np.where(np.isnan(high), np.inf, high))
    return lower, upper


def _optional_counts(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A column of user counts with empty cells: NaN there; fail on text, infinities, negatives and fractions."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = (frame[column].notna().to_numpy() & ~np.isfinite(values)) | (values < 0)
    if bad.any():
        raise _bad_rows(frame, bad, f"column {column!r} has non-numeric, infinite or negative values",
                        "quotas table", [FUND, column])
    return _whole_counts(frame, column, values)


def _whole_counts(frame: pd.DataFrame, column: str, values: np.ndarray) -> np.ndarray:
    fractional = np.isfinite(values) & (values != np.round(values))
    if fractional.any():
        raise _bad_rows(frame, fractional, f"{column} must be whole numbers of users", "quotas table",
                        [FUND, column])
    return values


def score_frame(user_ids, options, matrices: dict[str, np.ndarray], option_column: str, layout: str = WIDE,
                prefix: str = DEFAULT_PREFIX, per_user: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Write matrices ``{"score": (N, K), …}`` as a long or wide table that the readers above read back.

    Wide columns are ``<prefix><option>`` for the score and ``<name>_<option>`` for the other matrices;
    numeric options are written in their shortest form (``0.5``, ``1``).
    """
    user_ids = np.asarray(user_ids)
    labels = [_option_label(o) for o in options]
    per_user = per_user or {}
    if layout == WIDE:
        columns = {USER: user_ids, **per_user}
        for name, matrix in matrices.items():
            head = prefix if name == SCORE else f"{name}_"
            columns.update({f"{head}{label}": matrix[:, j] for j, label in enumerate(labels)})
        return pd.DataFrame(columns)
    if layout != LONG:
        raise DataError(f"layout must be 'long' or 'wide', got {layout!r}")
    n, k = len(user_ids), len(labels)
    columns = {USER: np.repeat(user_ids, k), option_column: np.tile(np.asarray(options), n),
               **{name: matrix.reshape(-1) for name, matrix in matrices.items()},
               **{name: np.repeat(np.asarray(values), k) for name, values in per_user.items()}}
    return pd.DataFrame(columns)


@contextmanager
def _naming(source):
    """Start the messages of errors about a file's contents with the file's name."""
    try:
        yield
    except DataError as exc:
        if isinstance(source, pd.DataFrame):
            raise
        raise DataError(f"{source}: {exc}") from None


def _frame(source) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        if source.empty:
            raise DataError(f"the table has no rows (columns: {list(source.columns)})")
        return source.reset_index(drop=True)
    return read_table(source)


def _read_scores(frame: pd.DataFrame, option: str, matrices: tuple[str, ...], per_user: tuple[str, ...],
                 layout: str, prefix: str, numeric_options: bool, key: str) -> _Scores:
    if layout == AUTO:
        layout = LONG if option in frame.columns and SCORE in frame.columns else WIDE
        if layout == WIDE and not any(str(c).startswith(prefix) for c in frame.columns):
            layout = LONG  # neither layout fits: report the long form's missing column
    if layout == LONG:
        return _read_long(frame, option, matrices, per_user, numeric_options, key)
    if layout == WIDE:
        return _read_wide(frame, option, matrices, per_user, prefix, key)
    raise DataError(f"layout must be 'auto', 'long' or 'wide', got {layout!r}")


def _read_long(frame: pd.DataFrame, option: str, matrices, per_user, numeric_options: bool, key: str) -> _Scores:
    what = "long table"
    _require(frame, (key, option, matrices[0]), what)
    _no_missing(frame, key, what)
    if numeric_options:
        values = _numeric(frame, option, what, negative_ok=True, key=key)
        options, option_codes = np.unique(values, return_inverse=True)
    else:
        _no_missing(frame, option, what)
        option_codes, options = pd.factorize(frame[option].astype(str))
        options = np.asarray(options)
    user_codes, user_ids = pd.factorize(frame[key])
    n, k = len(user_ids), len(options)
    cell = user_codes.astype(np.int64) * k + option_codes
    counts = np.bincount(cell, minlength=n * k)
    duplicated = counts[cell] > 1
    if duplicated.any():
        raise _bad_rows(frame, duplicated, f"duplicate ({key}, {option}) pairs", what, [key, option])
    if (counts == 0).any():
        lacking = (counts.reshape(n, k) == 0)
        user, missing = np.argwhere(lacking)[0]
        raise DataError(f"{int(lacking.any(axis=1).sum())} of {n} users lack rows for some of the {k} "
                        f"{option} values in the {what} of {len(frame)} rows, e.g. {key}={_plain(user_ids[user])!r} "
                        f"has no row for {option}={_plain(options[missing])!r}")
    out = {}
    for name in matrices:
        if name in frame.columns:
            matrix = np.empty(n * k)
            matrix[cell] = _numeric(frame, name, what, negative_ok=name == VALUE, key=key)
            out[name] = matrix.reshape(n, k)
    first = np.full(n, -1, dtype=np.int64)
    first[user_codes[::-1]] = np.arange(len(frame))[::-1]  # each user's first row
    users = {}
    for name in (p for p in per_user if p in frame.columns):
        column = _numeric(frame, name, what, negative_ok=True, key=key)  # first: a bad value shown, not a neighbour
        varies = column != column[first][user_codes]
        if varies.any():
            raise _bad_rows(frame, varies, f"column {name!r} differs between rows of the same user",
                            what, [key, option, name])
        users[name] = column[first]
    return _Scores(np.asarray(user_ids), options, out, users, LONG)


def _read_wide(frame: pd.DataFrame, option: str, matrices, per_user, prefix: str, key: str) -> _Scores:
    what = "wide table"
    _require(frame, (key,), what)
    heads = {name: prefix if name == matrices[0] else f"{name}_" for name in matrices}
    columns = {name: [c for c in frame.columns if str(c).startswith(head)] for name, head in heads.items()}
    score_columns = columns[matrices[0]]
    if not score_columns:
        raise DataError(missing_column_message(f"{prefix}<{option}>", list(frame.columns), f"one per {option}",
                                               len(frame)))
    suffixes = [str(c)[len(prefix):] for c in score_columns]
    known = {key, *per_user, *score_columns}
    for name in matrices[1:]:
        if columns[name]:
            theirs = [str(c)[len(heads[name]):] for c in columns[name]]
            if theirs != suffixes:
                raise DataError(f"columns {heads[name]}* must match the score columns one for one and in the same "
                                f"order: got {columns[name]} for {score_columns} in the {what} of {len(frame)} rows")
            known.update(columns[name])
    unknown = [c for c in frame.columns if c not in known]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), [str(c) for c in known] + [f"{h}…" for h in heads.values()],
                                          n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise DataError(f"{len(unknown)} unknown columns in the {what} of {len(frame)} rows, e.g. {unknown[0]!r}"
                        f"{hint} (a wide table has {key}, {', '.join(f'{h}<{option}>' for h in heads.values())}"
                        f"{''.join(', ' + p for p in per_user)})")
    _no_missing(frame, key, what)
    duplicated = frame[key].duplicated(keep=False).to_numpy()
    if duplicated.any():
        raise _bad_rows(frame, duplicated, f"column {key!r} repeats users", what, [key])
    out = {name: _numeric_block(frame, cols, what, name == VALUE, key) for name, cols in columns.items() if cols}
    users = {name: _numeric(frame, name, what, True, key) for name in per_user if name in frame.columns}
    return _Scores(frame[key].to_numpy(), np.asarray(suffixes, dtype=object), out, users, WIDE)


def _levels_from_columns(suffixes, prefix: str) -> np.ndarray:
    """Budget levels from wide column names ``score_0.5, score_1, …``: numbers, unique, increasing."""
    levels = pd.to_numeric(pd.Series(suffixes, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(levels)
    if bad.any():
        raise DataError(f"{int(bad.sum())} score columns do not end in a number (the incentive level), "
                        f"e.g. {prefix + suffixes[np.argmax(bad)]!r}")
    if np.any(np.diff(levels) <= 0):
        where = int(np.argmax(np.diff(levels) <= 0))
        raise DataError(f"levels must be unique and increasing in column order, got {levels.tolist()}: "
                        f"{prefix + suffixes[where]!r} is followed by {prefix + suffixes[where + 1]!r}")
    return levels


def _require(frame: pd.DataFrame, names, what: str) -> None:
    for name in names:
        if name not in frame.columns:
            raise DataError(missing_column_message(name, list(frame.columns), f"required in the {what}", len(frame)))


def _no_missing(frame: pd.DataFrame, column: str, what: str) -> None:
    missing = frame[column].isna().to_numpy()
    if missing.any():
        raise _bad_rows(frame, missing, f"column {column!r} has missing values", what)


def _numeric(frame: pd.DataFrame, column: str, what: str, negative_ok: bool, key: str = USER) -> np.ndarray:
    """The column as float64; fail on text, NaN, infinities and (unless ``negative_ok``) negatives, showing the
    row's ``key``, level or fund."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    kinds = "missing, non-numeric or infinite"
    if not negative_ok:
        bad |= values < 0
        kinds = "missing, non-numeric, infinite or negative"
    if bad.any():
        shown = list(dict.fromkeys(c for c in (key, LEVEL, FUND, column) if c in frame.columns))
        raise _bad_rows(frame, bad, f"column {column!r} has {kinds} values", what, shown)
    return values


def _numeric_block(frame: pd.DataFrame, columns: list, what: str, negative_ok: bool, key: str) -> np.ndarray:
    """Columns as one (rows × columns) float64 matrix, checked like :func:`_numeric` but in one pass."""
    block = frame[columns]
    if all(pd.api.types.is_numeric_dtype(t) and not pd.api.types.is_bool_dtype(t) for t in block.dtypes):
        matrix = block.to_numpy(np.float64, na_value=np.nan)
        if np.isfinite(matrix).all() and (negative_ok or not (matrix < 0).any()):
            return matrix
    # text columns, or a bad entry to report by column, row and example
    return np.column_stack([_numeric(frame, column, what, negative_ok, key) for column in columns])


def _integers(name: str, values: np.ndarray, of: str) -> np.ndarray:
    fractional = values != np.round(values)
    if fractional.any():
        raise DataError(f"{name} must be whole numbers: {int(fractional.sum())} of {len(values)} {of} are not, "
                        f"e.g. {values[np.argmax(fractional)]!r}")
    return values.astype(np.int64)


def _bad_rows(frame: pd.DataFrame, mask, problem: str, what: str, columns: list[str] | None = None) -> DataError:
    mask = np.asarray(mask)
    first = frame.iloc[[int(np.argmax(mask))]].astype(object)  # object keeps ints from printing as floats
    return DataError(f"{problem}: {int(mask.sum())} of {len(frame)} rows in the {what}, "
                     f"e.g. {example_row(first, [True], columns)}")


def _option_label(option) -> str:
    return f"{option:g}" if isinstance(option, (float, np.floating)) else str(option)


def _plain(value):
    return value.item() if hasattr(value, "item") else value

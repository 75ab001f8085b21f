"""FeatureSpec: which columns are categorical, numeric, labels and the group key."""

from __future__ import annotations

import difflib
import json
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from promokit.data.errors import DataError, example_row

#: An integer column with at most this many distinct values is inferred as categorical.
MAX_INTEGER_LEVELS = 64
#: Categories seen fewer times in training map to the out-of-vocabulary row.
DEFAULT_MIN_COUNT = 1
SPEC_KEYS = ("categorical", "numeric", "labels", "group_key", "time_key", "min_count", "micro_behaviors")


@dataclass
class FeatureSpec:
    """Roles of the columns of a table.

    ``labels`` maps a domain's label role (``click``, ``daction``, ``purchase`` …) to a column name.
    Label columns are never features, even when listed as such. ``time_key`` names the column that orders
    rows in time (never a feature): training then validates on the latest rows, as a test on later data
    would. ``min_count``: categories seen fewer times in the training table share the out-of-vocabulary
    row (:class:`~promokit.data.CategoryEncoder`). ``micro_behaviors`` lists 0/1 post-click label columns (add to
    cart, favourite …: the nodes of GMCM's micro-behaviour graph); like every label they are never features.
    """

    categorical: list[str] = field(default_factory=list)
    numeric: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    group_key: str | None = "user_id"
    time_key: str | None = None
    min_count: int = DEFAULT_MIN_COUNT
    micro_behaviors: list[str] = field(default_factory=list)

    @property
    def features(self) -> list[str]:
        return [*self.categorical, *self.numeric]

    def to_dict(self) -> dict:
        return asdict(self)

    def __post_init__(self):
        if isinstance(self.min_count, bool) or not isinstance(self.min_count, int) or self.min_count < 1:
            raise DataError(f"feature spec: min_count must be a whole number >= 1, got {self.min_count!r}")

    @classmethod
    def from_dict(cls, data: dict) -> FeatureSpec:
        unknown = set(data) - set(SPEC_KEYS)
        if unknown:
            raise DataError(f"feature spec: unknown keys {sorted(unknown)}; allowed: {', '.join(SPEC_KEYS)}")
        return cls(categorical=list(data.get("categorical", [])), numeric=list(data.get("numeric", [])),
                   labels=dict(data.get("labels", {})), group_key=data.get("group_key", "user_id"),
                   time_key=data.get("time_key"), min_count=data.get("min_count", DEFAULT_MIN_COUNT),
                   micro_behaviors=list(data.get("micro_behaviors", [])))

    @classmethod
    def from_file(cls, path: str | Path) -> FeatureSpec:
        """Load a spec from YAML or JSON."""
        path = Path(path)
        if not path.exists():
            raise DataError(f"{path}: no such spec file")
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
        if not isinstance(data, dict):
            raise DataError(f"{path}: a feature spec is a mapping with keys categorical, numeric, labels, group_key")
        return cls.from_dict(data)

    def resolve(self, frame: pd.DataFrame, required_labels: tuple[str, ...],
                optional_labels: tuple[str, ...] = ()) -> FeatureSpec:
        """Check the spec against a table and fill what it leaves out.

        Label roles default to columns of the same name. Feature lists left empty are inferred:
        strings, booleans and categories are categorical; integers are categorical when the column is
        an id (``*_id``) or has at most ``MAX_INTEGER_LEVELS`` values; other numbers are numeric.
        Label columns and the group key are never features unless the group key is listed explicitly.
        """
        columns = list(frame.columns)
        labels = {}
        for role in (*required_labels, *optional_labels):
            name = self.labels.get(role, role)
            if name in frame.columns:
                labels[role] = name
            elif role in required_labels or role in self.labels:
                raise DataError(missing_column_message(name, columns, f"label '{role}'", len(frame)))
        extra_roles = set(self.labels) - set(required_labels) - set(optional_labels)
        if extra_roles:
            raise DataError(f"feature spec: unknown label roles {sorted(extra_roles)}; "
                            f"this task uses {[*required_labels, *optional_labels]}")
        micro = list(self.micro_behaviors)
        for name in micro:
            if name not in frame.columns:
                raise DataError(missing_column_message(name, columns, "micro-behaviour label", len(frame)))
        repeated = sorted({name for name in micro if micro.count(name) > 1})
        taken = sorted(set(micro) & set(labels.values()))
        if repeated or taken:
            raise DataError(f"feature spec: micro-behaviour columns {repeated or taken} are "
                            f"{'listed twice' if repeated else 'already label columns'}")
        as_features = sorted(set(micro) & {*self.categorical, *self.numeric})
        if as_features:
            raise DataError(f"feature spec: {as_features} are listed both as micro-behaviours and as features; "
                            "micro-behaviours happen after the click, so they are labels, never inputs")
        label_columns = set(labels.values()) | set(micro)
        if self.time_key is not None and self.time_key not in frame.columns:
            raise DataError(missing_column_message(self.time_key, columns, "time key", len(frame)))

        def checked(names: list[str], kind: str) -> list[str]:
            for name in names:
                if name not in frame.columns:
                    raise DataError(missing_column_message(name, columns, f"{kind} feature", len(frame)))
            dropped = [n for n in names if n in label_columns]
            if dropped:
                warnings.warn(f"label columns {dropped} were listed as {kind} features; "
                              "labels are never features, so they are excluded", stacklevel=3)
            return [n for n in names if n not in label_columns]

        categorical = checked(self.categorical, "categorical")
        numeric = checked(self.numeric, "numeric")
        both = set(categorical) & set(numeric)
        if both:
            raise DataError(f"feature spec: columns {sorted(both)} are listed as both categorical and numeric")
        if self.group_key is not None and self.group_key not in frame.columns:
            raise DataError(missing_column_message(self.group_key, columns, "group key", len(frame)))
        if self.time_key in (*categorical, *numeric):
            raise DataError(f"feature spec: the time key {self.time_key!r} cannot also be a feature (the test "
                            "rows' times are never seen in training)")
        if not categorical and not numeric:
            categorical, numeric = infer_feature_columns(frame, exclude=label_columns | {self.time_key})
        if not categorical and not numeric:
            raise DataError("the table has no feature columns besides the labels")
        return FeatureSpec(categorical=categorical, numeric=numeric, labels=labels, group_key=self.group_key,
                           time_key=self.time_key, min_count=self.min_count, micro_behaviors=micro)


def infer_feature_columns(frame: pd.DataFrame, exclude=()) -> tuple[list[str], list[str]]:
    """Split the columns of ``frame`` (minus ``exclude``) into categorical and numeric ones."""
    categorical, numeric = [], []
    for name in frame.columns:
        if name in exclude:
            continue
        series = frame[name]
        if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
            if pd.api.types.is_datetime64_any_dtype(series):
                continue
            _check_mostly_numeric(frame, name)
            categorical.append(name)
        elif pd.api.types.is_integer_dtype(series):
            is_id = str(name).lower().endswith("id")
            (categorical if is_id or series.nunique() <= MAX_INTEGER_LEVELS else numeric).append(name)
        else:
            numeric.append(name)
    return categorical, numeric


#: A text column whose values are numbers at least this often is a numeric column with a few bad values.
MOSTLY_NUMERIC = 0.95


def _check_mostly_numeric(frame: pd.DataFrame, name) -> None:
    """Refuse to infer a numeric column spoiled by a few non-numbers (``"abc"``, ``"n/a"``) as categorical: it
    would silently become thousands of categories. A column of ids or codes that are mostly numbers can still be
    listed as categorical in the spec."""
    values = frame[name].dropna()
    if values.empty or pd.api.types.is_bool_dtype(values):
        return
    parsed = pd.to_numeric(values, errors="coerce")
    share = float(parsed.notna().mean())
    if MOSTLY_NUMERIC <= share < 1.0:
        bad = frame[name].notna() & pd.to_numeric(frame[name], errors="coerce").isna()
        raise DataError(f"column {name!r} holds numbers in {share:.2%} of its {len(frame)} rows but "
                        f"{int(bad.sum())} values are not numbers, e.g. {example_row(frame, bad.to_numpy(), [name])}; "
                        "clean them, or list the column as categorical in the spec")


def missing_column_message(name: str, columns: list[str], what: str, n_rows: int) -> str:
    """A missing column's one-line message, with a hint: the file's delimiter when one column holds the whole header
    (``user_id;item_id;click``), else the present column most likely meant (:func:`close_column`)."""
    header, close = _whole_header(name, columns), None
    if header is not None:
        column, mark = header
        hint = (f"; the table's column {column!r} holds it among names separated by {mark!r}: the file is probably "
                f"delimited by {DELIMITERS[mark]}, not commas; save it comma-separated (or as Parquet)")
    else:
        close = close_column(name, columns)
        hint = f"; did you mean {close!r}?" if close is not None else ""
    return (f"column {name!r} ({what}) is missing from the table of {n_rows} rows{hint}{'' if close else '.'} "
            f"Columns present: {list(columns)[:20]}")


#: Delimiters a CSV file may be written with, which promokit (reading commas) would take for part of a name.
DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "pipes"}
#: difflib's similarity (ignoring case) from which a present column is suggested for a missing one.
CLOSE_NAME = 0.8


def _whole_header(name: str, columns) -> tuple[str, str] | None:
    """The column whose name is a header of names separated by one of :data:`DELIMITERS`, ``name`` among them,
    and that delimiter."""
    for column in map(str, columns):
        for mark in DELIMITERS:
            if mark in column and str(name) in (part.strip().strip("\"'") for part in column.split(mark)):
                return column, mark
    return None


def close_column(name: str, columns) -> str | None:
    """The present column most likely meant by the missing ``name``, ignoring case: the same name, one typo away
    (``purchse``, ``dya``), at least :data:`CLOSE_NAME` similar, or holding it as whole words (``is_click``) or
    held by it (``item`` for ``item_id``); None rather than a far-fetched guess (``price`` for ``purchase``)."""
    wanted, present = str(name).lower(), [str(c) for c in columns]
    tests = (lambda c: c == wanted, lambda c: _one_typo(wanted, c),
             lambda c: difflib.SequenceMatcher(None, wanted, c).ratio() >= CLOSE_NAME,
             lambda c: _within(_words(wanted), _words(c)) or _within(_words(c), _words(wanted)))
    for test in tests:
        for column in present:
            if test(column.lower()):
                return column
    return None


def _one_typo(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one inserted, deleted or replaced character, or two swapped neighbours."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    if len(a) != len(b):
        longer, shorter = (a, b) if len(a) > len(b) else (b, a)
        return longer[i + 1:] == shorter[i:]
    return a[i + 1:] == b[i + 1:] or (a[i:i + 2] == b[i:i + 2][::-1] and a[i + 2:] == b[i + 2:])


def _words(name: str) -> list[str]:
    return [word for word in re.split(r"[^0-9a-z]+", name) if word]


def _within(words: list[str], other: list[str]) -> bool:
    """``words`` (at least one) appear in ``other`` in a row."""
    n = len(words)
    return 0 < n <= len(other) and any(other[k:k + n] == words for k in range(len(other) - n + 1))


def keyed_table(frame: pd.DataFrame, table: str, key: str) -> pd.DataFrame:
    """``frame`` with a fresh RangeIndex, or a :class:`DataError` when it is empty, lacks ``key``, or has a missing
    or repeated ``key``: a table of entities (users, funds, customers …) needs one row per id."""
    if len(frame) == 0:
        raise DataError(f"{table}: the table is empty")
    frame = frame.reset_index(drop=True)
    require_columns(frame, [key], table)
    missing = frame[key].isna().to_numpy()
    if missing.any():
        raise DataError(f"{table}: column {key!r} has {int(missing.sum())} missing values in {len(frame)} rows, "
                        f"e.g. {example_row(frame, missing, [key])}")
    repeated = frame[key].duplicated().to_numpy()
    if repeated.any():
        raise DataError(f"{table}: {int(repeated.sum())} repeated {key} values in {len(frame)} rows, "
                        f"e.g. {example_row(frame, repeated, [key])}; one row per {key.removesuffix('_id')} is needed")
    return frame


def require_columns(frame: pd.DataFrame, columns, table: str) -> None:
    """A :class:`DataError` for the first of ``columns`` missing from ``frame``, prefixed by the ``table`` name."""
    for name in dict.fromkeys(columns):
        if name not in frame.columns:
            raise DataError(f"{table}: " + missing_column_message(name, list(frame.columns), f"{table} column",
                                                                  len(frame)))

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
SPEC_KEYS = ("categorical", "numeric", "labels", "group_key", "time_key", "min_count", "micro_behaviors", "types",
             "allow_leaky")
#: The types a feature column can be given (the spec's ``types``; ``--categorical`` / ``--numeric``).
FEATURE_TYPES = ("categorical", "numeric")


@dataclass
class FeatureSpec:
    """Roles of the columns of a table.

    ``labels`` maps a domain's label role (``click``, ``daction``, ``purchase`` …) to a column name.
    Label columns are never features, even when listed as such. ``time_key`` names the column that orders
    rows in time (never a feature): training then validates on the latest rows, as a test on later data
    would. ``min_count``: categories seen fewer times in the training table share the out-of-vocabulary
    row (:class:`~promokit.data.CategoryEncoder`). ``micro_behaviors`` lists 0/1 post-click label columns (add to
    cart, favourite …: the nodes of GMCM's micro-behaviour graph); like every label they are never features.
    ``types`` maps columns to ``"categorical"`` or ``"numeric"``, whatever the inference or the lists say: a column
    named there is a feature of that type (the others are inferred, or listed). ``allow_leaky`` lists features the
    label-leak guard (:mod:`promokit.data.leakage`) leaves alone: known to predict a label almost perfectly, and
    meant to.
    """

    categorical: list[str] = field(default_factory=list)
    numeric: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    group_key: str | None = "user_id"
    time_key: str | None = None
    min_count: int = DEFAULT_MIN_COUNT
    micro_behaviors: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    allow_leaky: list[str] = field(default_factory=list)

    @property
    def features(self) -> list[str]:
        return [*self.categorical, *self.numeric]

    def to_dict(self) -> dict:
        return asdict(self)

    def __post_init__(self):
        if isinstance(self.min_count, bool) or not isinstance(self.min_count, int) or self.min_count < 1:
            raise DataError(f"feature spec: min_count must be a whole number >= 1, got {self.min_count!r}")
        if not isinstance(self.types, dict) or set(self.types.values()) - set(FEATURE_TYPES):
            raise DataError(f"feature spec: types maps columns to {' or '.join(FEATURE_TYPES)}, got {self.types!r}")

    @classmethod
    def from_dict(cls, data: dict) -> FeatureSpec:
        unknown = set(data) - set(SPEC_KEYS)
        if unknown:
            raise DataError(f"feature spec: unknown keys {sorted(unknown)}; allowed: {', '.join(SPEC_KEYS)}")
        return cls(categorical=list(data.get("categorical", [])), numeric=list(data.get("numeric", [])),
                   labels=dict(data.get("labels", {})), group_key=data.get("group_key", "user_id"),
                   time_key=data.get("time_key"), min_count=data.get("min_count", DEFAULT_MIN_COUNT),
                   micro_behaviors=list(data.get("micro_behaviors", [])), types=data.get("types", {}),
                   allow_leaky=list(data.get("allow_leaky", [])))

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

        Label roles default to columns of the same name. Feature lists left empty are inferred
        (:func:`infer_feature_columns`); label columns, micro-behaviours and the time key are never features.
        The columns of ``types`` get their type whether listed or inferred (and become features when not listed).
        """
        columns = list(frame.columns)
        labels = {}
        for role in (*required_labels, *optional_labels):
            name = self.labels.get(role, role)
            if name in frame.columns:
                labels[role] = name
            elif role in required_labels or role in self.labels:
                raise DataError(missing_label_message(role, name, columns, len(frame), spec=True))
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
            categorical, numeric = infer_feature_columns(frame, label_columns | {self.time_key}, self.types)
        else:
            check_types(frame, self.types, label_columns | {self.time_key})
            categorical = [c for c in categorical if c not in self.types] + typed(self.types, "categorical")
            numeric = [c for c in numeric if c not in self.types] + typed(self.types, "numeric")
        if not categorical and not numeric:
            raise DataError("the table has no feature columns besides the labels")
        for name in self.allow_leaky:
            if name not in frame.columns:
                raise DataError(missing_column_message(name, columns, "allowed to leak, `allow_leaky`", len(frame)))
        return FeatureSpec(categorical=categorical, numeric=numeric, labels=labels, group_key=self.group_key,
                           time_key=self.time_key, min_count=self.min_count, micro_behaviors=micro,
                           types=dict(self.types), allow_leaky=list(self.allow_leaky))


def infer_feature_columns(frame: pd.DataFrame, exclude=(), types: dict[str, str] | None = None
                          ) -> tuple[list[str], list[str]]:
    """Split the columns of ``frame`` (minus ``exclude``) into categorical and numeric ones: a column of ``types``
    (column → ``"categorical"`` / ``"numeric"``) has the type given there; otherwise text, booleans and categories
    are categorical, date-times are no feature, an integer column is categorical when its name ends in ``id`` (any
    case: ``user_id``, ``userid``, ``paid`` …) or it has at most ``MAX_INTEGER_LEVELS`` distinct values, and other
    numbers are numeric."""
    types = types or {}
    check_types(frame, types, exclude)
    categorical, numeric = [], []
    for name in frame.columns:
        if name in exclude:
            continue
        if name in types:
            (categorical if types[name] == "categorical" else numeric).append(name)
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


def typed(types: dict[str, str], kind: str) -> list[str]:
    """The columns ``types`` gives the type ``kind``."""
    return [name for name, given in types.items() if given == kind]


def check_types(frame: pd.DataFrame, types: dict[str, str], exclude=()) -> None:
    """A :class:`DataError` for a column of ``types`` that ``frame`` lacks, or that is one of ``exclude`` (a label,
    key or time column, never a feature)."""
    for name, kind in types.items():
        if name not in frame.columns:
            raise DataError(missing_column_message(name, list(frame.columns), f"given the type {kind}", len(frame)))
        if name in exclude:
            raise DataError(f"column {name!r} is given the type {kind}, but it is a label, key or time column of the "
                            f"table of {len(frame)} rows, never a feature")


def table_types(types: dict[str, str], frames: dict[str, pd.DataFrame]) -> dict[str, dict[str, str]]:
    """The share of ``types`` of each table of ``frames`` (name → frame): a column given a type gets it in every
    table holding a column of that name; one that none holds is a :class:`DataError`."""
    columns = [str(c) for frame in frames.values() for c in frame.columns]
    for name, kind in types.items():
        if not any(name in frame.columns for frame in frames.values()):
            close = close_column(name, columns)
            raise DataError(f"column {name!r} (given the type {kind}) is in none of the tables {', '.join(frames)}"
                            + (f"; did you mean {close!r}?" if close is not None else ""))
    return {table: {n: k for n, k in types.items() if n in frame.columns} for table, frame in frames.items()}


#: A text column whose values are numbers at least this often is a numeric column with a few bad values.
MOSTLY_NUMERIC = 0.95


def _check_mostly_numeric(frame: pd.DataFrame, name) -> None:
    """Refuse to infer a numeric column spoiled by a few non-numbers (``"abc"``, ``"n/a"``) as categorical: it
    would silently become thousands of categories. A column of ids or codes that are mostly numbers can still be
    given the type categorical (``types``, ``--categorical``)."""
    values = frame[name].dropna()
    if values.empty or pd.api.types.is_bool_dtype(values):
        return
    parsed = pd.to_numeric(values, errors="coerce")
    share = float(parsed.notna().mean())
    if MOSTLY_NUMERIC <= share < 1.0:
        bad = frame[name].notna() & pd.to_numeric(frame[name], errors="coerce").isna()
        raise DataError(f"column {name!r} holds numbers in {share:.2%} of its {len(frame)} rows but "
                        f"{int(bad.sum())} values are not numbers, e.g. {example_row(frame, bad.to_numpy(), [name])}; "
                        f"clean them, or make it categorical (--categorical {name}, or the spec's types)")


def missing_column_message(name: str, columns: list[str], what: str, n_rows: int) -> str:
    """A missing column's one-line message, with a hint: the file's delimiter when one column holds the whole header
    (``user_id;item_id;click``), else the present column most likely meant (:func:`close_column`)."""
    header, close = _whole_header(name, columns), None
    if header is not None:
        hint = (f"; a column's name holds it among names separated by {header!r} (the whole header): the file is "
                f"probably delimited by {DELIMITERS[header]}, not commas; save it comma-separated (or as Parquet)")
    else:
        close = close_column(name, columns)
        hint = f"; did you mean {close!r}?" if close is not None else ""
    stop = "" if close is not None else "."
    return (f"column {name!r} ({what}) is missing from the table of {n_rows} rows{hint}{stop} "
            f"Columns present: {list(columns)[:20]}")


def label_mapping(role: str, column: str, spec: bool = False) -> str:
    """How a library user maps ``column`` to the label ``role``: ``labels={'click': 'is_click'}`` (the domain's
    table readers' ``labels`` argument) or, with ``spec``, the feature spec's ``FeatureSpec(labels={…})``. The CLI
    shows it as ``--label click=is_click`` (``promokit.cli.conventions.convention_errors``)."""
    mapping = f"labels={{{role!r}: {column!r}}}"
    return f"FeatureSpec({mapping})" if spec else mapping


def missing_label_message(role: str, name: str, columns: list[str], n_rows: int, spec: bool = False) -> str:
    """:func:`missing_column_message` for the column ``name`` of the label ``role``, saying how to map the user's
    column to it (:func:`label_mapping`)."""
    message = missing_column_message(name, columns, f"label {role!r}", n_rows)
    close = close_column(name, columns)
    how = (f" If it holds the label, map it: {label_mapping(role, close, spec)}." if close is not None else
           f" Map the column that holds it: {label_mapping(role, '<column>', spec)}.")
    cut = message.index(" Columns present:")
    return message[:cut] + how + message[cut:]


def require_label_columns(frame: pd.DataFrame, roles, table: str) -> None:
    """A :class:`DataError` for the first label of ``roles`` missing from ``frame`` (a table of the domain's contract,
    read with :func:`map_labels`), prefixed by the ``table`` name."""
    for role in roles:
        if role not in frame.columns:
            raise DataError(f"{table}: " + missing_label_message(role, role, list(frame.columns), len(frame)))


def map_labels(frame: pd.DataFrame, labels: dict[str, str] | None, roles, table: str) -> pd.DataFrame:
    """``frame`` with the columns that ``labels`` (label role → the user's column) maps to the ``roles`` of this
    table renamed to their roles; roles of other tables are left to them. A mapped column that is missing, or a
    role whose own column is there too, is a one-line error."""
    mapped = {column: role for role, column in (labels or {}).items() if role in roles and column != role}
    for column, role in mapped.items():
        if column not in frame.columns:
            close = close_column(column, list(frame.columns))
            raise DataError(f"{label_mapping(role, column)}: column {column!r} is missing from the {table} table of "
                            f"{len(frame)} rows" + (f"; did you mean {close!r}?" if close is not None else "") +
                            f" Columns present: {list(frame.columns)[:20]}")
        if role in frame.columns:
            raise DataError(f"{label_mapping(role, column)}: the {table} table of {len(frame)} rows has a column "
                            f"{role!r} too; drop one of them")
    return frame.rename(columns=mapped) if mapped else frame


def check_label_roles(labels: dict[str, str] | None, roles) -> None:
    """``labels`` maps only known label ``roles`` to column names."""
    if labels is None:
        return
    if not isinstance(labels, dict) or not all(isinstance(c, str) for c in labels.values()):
        raise DataError(f"labels must be a dict of label role → column name, got {labels!r}")
    unknown = [role for role in labels if role not in roles]
    if unknown:
        raise DataError(f"labels: unknown label role {unknown[0]!r}; the roles are {list(roles)}")


#: Delimiters a CSV file may be written with, which promokit (reading commas) would take for part of a name.
DELIMITERS = {";": "semicolons", "\t": "tabs", "|": "pipes"}
#: difflib's similarity (ignoring case) from which a present column is suggested for a missing one.
CLOSE_NAME = 0.8


def _whole_header(name: str, columns) -> str | None:
    """The delimiter of :data:`DELIMITERS` that separates names in a column's name, ``name`` among them."""
    for column in map(str, columns):
        for mark in DELIMITERS:
            if mark in column and str(name) in (part.strip().strip("\"'") for part in column.split(mark)):
                return mark
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

"""Encoders fitted on the training table and applied unchanged at prediction time.

Everything here serialises to plain JSON, so a model directory never needs pickle.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from promokit.data.errors import DataError, example_row
from promokit.data.spec import FeatureSpec

#: Code of the out-of-vocabulary slot: unseen and missing categories map here.
OOV = 0


class CategoryEncoder:
    """Vocabulary of one categorical column; code 0 is the out-of-vocabulary slot.

    Values seen fewer than ``min_count`` times in training also map to the OOV slot.
    """

    def __init__(self, vocabulary: list, kind: str):
        self.vocabulary = list(vocabulary)
        self.kind = kind
        self._index = pd.Index(self.vocabulary, dtype="int64" if kind == "int" else "string")

    @classmethod
    def fit(cls, series: pd.Series, min_count: int = 1) -> CategoryEncoder:
        return cls.fit_transform(series, min_count)[0]

    @classmethod
    def fit_transform(cls, series: pd.Series, min_count: int = 1,
                      rows: np.ndarray | None = None) -> tuple[CategoryEncoder, np.ndarray]:
        """The encoder :meth:`fit` builds on the values of ``series`` at ``rows`` (positions; default every row) and
        the :meth:`transform` of every value of ``series``, from one factorisation of the column: a text column is
        hashed once, not once to count and again to encode."""
        kind = "int" if pd.api.types.is_integer_dtype(series) and not pd.api.types.is_bool_dtype(series) else "str"
        if kind == "int" and _plain_integers(series):  # canonical already: counted as they are, five times faster
            values = series.to_numpy()
            distinct, counts = np.unique(values if rows is None else values[rows], return_counts=True)
            encoder = cls(distinct[counts >= min_count].astype(np.int64).tolist(), kind)
            return encoder, encoder.transform(series)
        codes, distinct = pd.factorize(series)
        canonical = _canonical(pd.Series(distinct), kind)
        merged, names = pd.factorize(canonical)  # distinct values one canonical value stands for (1 and "1")
        fitted = codes if rows is None else codes[rows]
        counts = np.bincount(fitted[fitted >= 0], minlength=len(distinct))
        counts = np.bincount(merged[merged >= 0], weights=counts[merged >= 0], minlength=len(names))
        kept = names[(counts > 0) & (counts >= min_count)]
        encoder = cls(sorted(int(v) for v in kept) if kind == "int" else sorted(str(v) for v in kept), kind)
        return encoder, encoder._lookup(codes, canonical)

    @staticmethod
    def count(series: pd.Series) -> tuple[pd.Series, np.ndarray]:
        """The distinct values of ``series`` in its own dtype (a missing value included) and how often each
        occurs: one part's share of a vocabulary, which :meth:`from_counts` adds up over a table's parts."""
        codes, _ = pd.factorize(series, use_na_sentinel=False)
        _, first = np.unique(codes, return_index=True)
        return series.iloc[first].reset_index(drop=True), np.bincount(codes, minlength=len(first)).astype(np.int64)

    @classmethod
    def from_counts(cls, counts: list[tuple[pd.Series, np.ndarray]], min_count: int = 1) -> CategoryEncoder:
        """The encoder :meth:`fit` builds on the concatenation of the parts whose :meth:`count` ``counts`` are: the
        values of every part joined as pandas joins the columns (so the kind, int or str, is the concatenated
        column's), made canonical, and their counts summed per canonical value."""
        values = pd.concat([v for v, _ in counts], ignore_index=True) if counts else pd.Series([], dtype="int64")
        kind = "int" if pd.api.types.is_integer_dtype(values) and not pd.api.types.is_bool_dtype(values) else "str"
        canonical = _canonical(values, kind)
        known = canonical.notna().to_numpy()
        frame = pd.DataFrame({"value": canonical[known].to_numpy(),
                              "count": np.concatenate([c for _, c in counts] or [np.zeros(0, np.int64)])[known]})
        totals = frame.groupby("value", sort=False)["count"].sum()
        kept = totals.index[totals.to_numpy() >= min_count]
        return cls(sorted(int(v) for v in kept) if kind == "int" else sorted(str(v) for v in kept), kind)

    @property
    def cardinality(self) -> int:
        """Number of embedding rows: the vocabulary plus the OOV slot."""
        return len(self.vocabulary) + 1

    def transform(self, series: pd.Series) -> np.ndarray:
        """The code of each value: its position in the vocabulary + 1, or :data:`OOV` (missing values too). Each
        distinct value is made canonical and looked up once (text, objects, categories, nullable integers)."""
        if self.kind == "int" and _plain_integers(series):
            return self._index.get_indexer(series.to_numpy()).astype(np.int64) + 1
        codes, distinct = pd.factorize(series)
        return self._lookup(codes, _canonical(pd.Series(distinct), self.kind))

    def _lookup(self, codes: np.ndarray, canonical: pd.Series) -> np.ndarray:
        """The code of each row of a column factorised into ``codes`` (−1: missing) over distinct values whose
        canonical forms are ``canonical``."""
        return np.append(self._index.get_indexer(canonical) + 1, OOV)[codes].astype(np.int64)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "vocabulary": self.vocabulary}

    @classmethod
    def from_dict(cls, data: dict) -> CategoryEncoder:
        return cls(data["vocabulary"], data["kind"])


def _plain_integers(series: pd.Series) -> bool:
    """Whether ``series`` holds NumPy integers that int64 holds: canonical already (no missing value), and looked up
    three times faster as they are than as pandas' nullable integers."""
    return isinstance(series.dtype, np.dtype) and series.dtype.kind in "iu" and np.can_cast(series.dtype, np.int64)


def _canonical(series: pd.Series, kind: str) -> pd.Series:
    if kind == "int":
        return pd.to_numeric(series, errors="coerce").astype("Int64")
    return series.astype("string")


class NumericEncoder:
    """Standardise a numeric column and squash it with tanh, ESM² eq. (17):
    g = tanh((f − μ) / σ), with μ and σ from the training table.

    Missing values are imputed with μ (so g = 0); ``flag_missing`` is set when the training column had
    missing values, and the encoder then emits a 0/1 indicator column as an extra feature.
    """

    def __init__(self, mean: float, std: float, flag_missing: bool, squash: bool = True):
        self.mean, self.std, self.flag_missing, self.squash = mean, std, flag_missing, squash

    @classmethod
    def fit(cls, series: pd.Series, squash: bool = True) -> NumericEncoder:
        values = _as_float(series)
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            raise DataError(f"numeric column {series.name!r} has no finite value in {len(series)} rows")
        std = float(finite.std())
        return cls(float(finite.mean()), std if std > 0 else 1.0, bool(finite.size < values.size), squash)

    @staticmethod
    def moments(series: pd.Series) -> tuple[int, int, float, float]:
        """(rows, finite values, their mean, their sum of squared deviations): one part's share of the encoder,
        which :meth:`from_moments` combines over a table's parts."""
        values = _as_float(series)
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            return int(values.size), 0, 0.0, 0.0
        mean = float(finite.mean())
        return int(values.size), int(finite.size), mean, float(np.square(finite - mean).sum())

    @classmethod
    def from_moments(cls, name: str, moments: list[tuple[int, int, float, float]],
                     squash: bool = True) -> NumericEncoder:
        """The encoder :meth:`fit` builds on the concatenation of the parts whose :meth:`moments` these are
        (:func:`combine_moments`)."""
        rows, n, mean, m2 = combine_moments(moments)
        if n == 0:
            raise DataError(f"numeric column {name!r} has no finite value in {rows} rows")
        std = float(np.sqrt(m2 / n))
        return cls(mean, std if std > 0 else 1.0, bool(n < rows), squash)

    @property
    def width(self) -> int:
        return 2 if self.flag_missing else 1

    def transform(self, series: pd.Series) -> np.ndarray:
        values = _as_float(series)
        missing = ~np.isfinite(values)
        z = np.where(missing, 0.0, (values - self.mean) / self.std)
        g = np.tanh(z) if self.squash else z
        columns = [g, missing.astype(np.float64)] if self.flag_missing else [g]
        return np.stack(columns, axis=1).astype(np.float32)

    def to_dict(self) -> dict:
        return {"mean": self.mean, "std": self.std, "flag_missing": self.flag_missing, "squash": self.squash}

    @classmethod
    def from_dict(cls, data: dict) -> NumericEncoder:
        return cls(data["mean"], data["std"], data["flag_missing"], data.get("squash", True))


def combine_moments(moments: list[tuple[int, int, float, float]]) -> tuple[int, int, float, float]:
    """The :meth:`NumericEncoder.moments` of the parts' concatenation from each part's (Chan et al.'s pairwise
    update: equal to one pass over all rows to rounding)."""
    rows, n, mean, m2 = 0, 0, 0.0, 0.0
    for part_rows, part_n, part_mean, part_m2 in moments:
        rows += part_rows
        if part_n == 0:
            continue
        delta, total = part_mean - mean, n + part_n
        mean += delta * part_n / total
        m2 += part_m2 + delta * delta * n * part_n / total
        n = total
    return rows, n, mean, m2


def _as_float(series: pd.Series) -> np.ndarray:
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass
class EncodedFeatures:
    """Model inputs for one table: category codes per field and the numeric block."""

    categorical: np.ndarray  # int64, rows × categorical fields, 0 = OOV
    numeric: np.ndarray      # float32, rows × numeric width
    oov_counts: dict[str, int]
    missing_counts: dict[str, int]


class TableEncoder:
    """Fits one encoder per feature column of a ``FeatureSpec`` and turns tables into arrays."""

    def __init__(self, categorical: dict[str, CategoryEncoder], numeric: dict[str, NumericEncoder]):
        self.categorical = categorical
        self.numeric = numeric

    @classmethod
    def fit(cls, frame: pd.DataFrame, spec: FeatureSpec, squash_numeric: bool = True) -> TableEncoder:
        """One encoder per feature of ``spec``; categories seen fewer than ``spec.min_count`` times in ``frame``
        map to the out-of-vocabulary slot."""
        check_numeric_columns(frame, spec.numeric)
        return cls({name: CategoryEncoder.fit(frame[name], spec.min_count) for name in spec.categorical},
                   {name: NumericEncoder.fit(frame[name], squash_numeric) for name in spec.numeric})

    @classmethod
    def fit_transform(cls, frame: pd.DataFrame, spec: FeatureSpec, rows: np.ndarray | None = None,
                      squash_numeric: bool = True) -> tuple[TableEncoder, EncodedFeatures]:
        """:meth:`fit` on the rows of ``frame`` at ``rows`` (positions; default every row) and :meth:`transform`
        of the whole ``frame``, each categorical column factorised once for both
        (:meth:`CategoryEncoder.fit_transform`)."""
        check_numeric_columns(frame, spec.numeric)
        fitted = {name: CategoryEncoder.fit_transform(frame[name], spec.min_count, rows) for name in spec.categorical}
        numeric = {name: NumericEncoder.fit(frame[name] if rows is None else frame[name].iloc[rows], squash_numeric)
                   for name in spec.numeric}
        encoder = cls({name: enc for name, (enc, _) in fitted.items()}, numeric)
        return encoder, encoder._encoded(frame, {name: codes for name, (_, codes) in fitted.items()})

    @staticmethod
    def count(frame: pd.DataFrame, spec: FeatureSpec) -> dict:
        """One part's share of the encoders of ``spec``: the value counts of each categorical feature and the
        moments of each numeric one (after checking them). :meth:`from_counts` adds the shares of a table's parts up
        into the encoders :meth:`fit` builds on the whole table; a share holds the part's distinct values, never its
        rows."""
        check_numeric_columns(frame, spec.numeric)
        return {"categorical": {name: CategoryEncoder.count(frame[name]) for name in spec.categorical},
                "numeric": {name: NumericEncoder.moments(frame[name]) for name in spec.numeric}}

    @classmethod
    def from_counts(cls, shares: list[dict], spec: FeatureSpec, squash_numeric: bool = True) -> TableEncoder:
        """The encoders of ``spec`` from the :meth:`count` of every part of a table, in the parts' order: the same
        vocabularies as :meth:`fit` on the parts' concatenation (``spec.min_count`` applies to the summed counts),
        the same means and deviations to rounding."""
        return cls({name: CategoryEncoder.from_counts([s["categorical"][name] for s in shares], spec.min_count)
                    for name in spec.categorical},
                   {name: NumericEncoder.from_moments(name, [s["numeric"][name] for s in shares], squash_numeric)
                    for name in spec.numeric})

    @property
    def cardinalities(self) -> list[int]:
        return [enc.cardinality for enc in self.categorical.values()]

    @property
    def numeric_width(self) -> int:
        return sum(enc.width for enc in self.numeric.values())

    def transform(self, frame: pd.DataFrame) -> EncodedFeatures:
        missing = [name for name in [*self.categorical, *self.numeric] if name not in frame.columns]
        if missing:
            raise DataError(f"feature columns {missing} used in training are missing from the table of "
                            f"{len(frame)} rows")
        check_numeric_columns(frame, list(self.numeric))
        return self._encoded(frame, {name: enc.transform(frame[name]) for name, enc in self.categorical.items()})

    def _encoded(self, frame: pd.DataFrame, codes: dict[str, np.ndarray]) -> EncodedFeatures:
        """The :class:`EncodedFeatures` of ``frame`` given its categorical ``codes``: the numeric block encoded, the
        out-of-vocabulary and missing values counted."""
        n = len(frame)
        oov = {name: int((column == OOV).sum()) for name, column in codes.items()}
        # stacked at the end: written column by column, the row-major array took a third of the transform
        cat = np.stack(list(codes.values()), axis=1) if codes else np.zeros((n, 0), dtype=np.int64)
        blocks = [enc.transform(frame[name]) for name, enc in self.numeric.items()]
        num = np.concatenate(blocks, axis=1) if blocks else np.zeros((n, 0), dtype=np.float32)
        missing_counts = {name: int(frame[name].isna().sum()) for name in self.numeric}
        for name, count in missing_counts.items():
            if count and not self.numeric[name].flag_missing:
                warnings.warn(f"numeric column {name!r}: {count} of {n} values are missing; imputed with the "
                              "training mean", stacklevel=3)
        return EncodedFeatures(cat, num, oov, missing_counts)

    def to_dict(self) -> dict:
        return {"categorical": {k: v.to_dict() for k, v in self.categorical.items()},
                "numeric": {k: v.to_dict() for k, v in self.numeric.items()}}

    @classmethod
    def from_dict(cls, data: dict) -> TableEncoder:
        return cls({k: CategoryEncoder.from_dict(v) for k, v in data["categorical"].items()},
                   {k: NumericEncoder.from_dict(v) for k, v in data["numeric"].items()})


def check_numeric_columns(frame: pd.DataFrame, names: list[str]) -> None:
    """Numeric features must hold finite numbers (NaN allowed: imputed): name the column and show a bad value
    otherwise. An infinity is refused rather than imputed: it is a broken value upstream (a division by zero),
    and standardising around it would hide it."""
    for name in names:
        series = frame[name]
        if pd.api.types.is_bool_dtype(series) or not pd.api.types.is_numeric_dtype(series):
            coerced = pd.to_numeric(series, errors="coerce")
            bad = coerced.isna() & series.notna()
            if bad.any():
                raise DataError(f"numeric column {name!r} has {int(bad.sum())} non-numeric values in {len(frame)} "
                                f"rows, e.g. {example_row(frame, bad.to_numpy(), [name])}; "
                                "list it as categorical or clean it")
            series = coerced
        infinite = np.isinf(series.to_numpy(dtype=np.float64, na_value=np.nan))
        if infinite.any():
            raise DataError(f"numeric column {name!r} has {int(infinite.sum())} infinite values in {len(frame)} rows, "
                            f"e.g. {example_row(frame, infinite, [name])}; replace them with a number, or leave the "
                            "cells empty to have them imputed")

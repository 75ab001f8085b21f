"""The contract every model of every domain follows, with scikit-learn's habits.

An estimator is constructed from its parameters, stored exactly as given, and checked once by
:meth:`Estimator._configure`, which derives what they imply; ``get_params`` shows the training settings as the model
will use them (the user's over the domain's defaults), so :func:`sklearn.base.clone`, pipelines and search tools
rebuild the same model. ``fit(data, *, validation=…)`` returns the estimator, ``validation`` read the same way in every
domain (:func:`~promokit.data.split.parse_validation`: a fraction, a table given apart, a time, row positions);
``predict(data)`` a DataFrame of the data's keys and named outputs; ``evaluate(data)`` an :class:`Evaluation` of
every row of ``data`` (``held_out=True``: of the rows ``fit`` held out of it); ``save(path)`` writes a model directory
and ``load(path)`` reads one back. ``data`` is the domain's own contract: a table, or a named set of tables.

What fitting learns (or ``load`` reads back) is held in attributes whose names end in ``_`` (``net_``,
``history_``, ``holdout_`` …: docs/conventions.md, one contract), none of which an unfitted estimator holds, so
:func:`sklearn.utils.validation.check_is_fitted` tells a fitted model from an unfitted one; caches are private
(``_name``).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from abc import ABCMeta, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError

from promokit.data.errors import DataError
from promokit.report import Report, json_safe
from promokit.training.auto import AUTO, check_auto_params
from promokit.training.device import resolve_device
from promokit.training.trainer import TrainConfig


@dataclass(frozen=True)
class Evaluation(Mapping):
    """A fitted model's metrics on labelled data: a read-only mapping of metric name → number, with the tables
    that break them down (``tables``, e.g. calibration by decile) and figures (``figures``, matplotlib figures by
    file stem). ``to_markdown()`` and ``to_json()`` render it; ``write(dir)`` writes report.md, report.json and
    the figures."""

    title: str
    metrics: dict[str, float]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, object] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.metrics[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.metrics)

    def __len__(self) -> int:
        return len(self.metrics)

    def report(self) -> Report:
        metrics = pd.DataFrame({"metric": list(self.metrics), "value": [_number(v) for v in self.metrics.values()]})
        report = Report(self.title, data={"metrics": dict(self.metrics),
                                          **{name: t.to_dict(orient="records") for name, t in self.tables.items()}},
                        figures=dict(self.figures))
        report.add("Metrics", metrics)
        for name, table in self.tables.items():
            report.add(name.replace("_", " ").capitalize(), table)
        return report

    def to_markdown(self) -> str:
        return self.report().markdown()

    def to_json(self) -> str:
        """The metrics and tables as JSON (a NaN is written as null)."""
        data = self.report().data
        return json.dumps(json_safe(data), indent=2, default=_scalar)

    def write(self, out_dir: str | os.PathLike):
        return self.report().write(out_dir)

    def _repr_markdown_(self) -> str:  # a notebook shows the report
        return self.to_markdown()

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_number(v):.4g}" for k, v in self.metrics.items())
        return f"Evaluation({self.title!r}, {shown})"


class Estimator(BaseEstimator, metaclass=ABCMeta):
    """The base of every promokit model (see the module's docstring).

    A subclass lists its parameters as the keyword arguments of ``__init__``, stores each unchanged under its own
    name, then calls :meth:`_configure`; :meth:`set_params` changes them and configures again, keeping the old
    values when the new ones are refused. What the parameters imply, :meth:`_configure` derives (``train_config``;
    private where fitting takes it over, as ``_model_params`` becomes the fitted ``model_params_``). What fitting
    learns lives in attributes ending in ``_``, set by ``fit`` and ``load`` (the recalibration, by ``recalibrate``)
    and never by ``__init__``; the names of those a refit on every row takes from its twin are the class's
    ``FITTED`` (:meth:`adopt`)."""

    @abstractmethod
    def _configure(self) -> None:
        """Check the parameters (a one-line error naming the argument and its value) and derive what they imply.
        Never modifies a parameter."""

    #: Parameters that :meth:`_configure` resolves against the domain's defaults, by the attribute holding what they
    #: resolve to: :meth:`get_params` shows what the model will use (``train``: every training setting, the user's
    #: over the domain's), and constructing from that gives the same model, so :func:`sklearn.base.clone` works.
    resolved_params = {"train": "train_config"}

    #: What ``model="auto"`` chooses among (the floor first) and by which validation metric (higher better).
    AUTO_CANDIDATES: tuple[str, ...] = ()
    AUTO_METRIC = ""

    @property
    def model_name(self) -> str:
        """The model this estimator is: ``model``, or with ``model="auto"`` the candidate fit chose
        (``model_choice_``, :mod:`promokit.training.auto`)."""
        return getattr(self, "model_choice_", None) or self.model

    @property
    def configured_model(self) -> str:
        """The model whose defaults :meth:`_configure` derives from: :attr:`model_name`, or the floor for a
        ``model="auto"`` not fitted yet."""
        return self.AUTO_CANDIDATES[0] if self.model_name == AUTO else self.model_name

    def get_params(self, deep: bool = True) -> dict:
        params = super().get_params(deep)
        for name, attribute in self.resolved_params.items():
            if name in params and hasattr(self, attribute):
                params[name] = getattr(self, attribute)
        return params

    def set_params(self, **params) -> Estimator:
        old = self.get_params(deep=False)
        if "model" in params and params["model"] != old.get("model"):
            self.__dict__.pop("model_choice_", None)  # what fit chose for model="auto" is no longer this model
        super().set_params(**params)
        try:
            self._configure()
        except Exception:
            super().set_params(**old)
            self._configure()
            raise
        return self

    def _check_fitted(self) -> None:
        """scikit-learn's :class:`~sklearn.exceptions.NotFittedError` (a ``ValueError`` and an ``AttributeError``)
        unless the model was fitted or loaded."""
        if not self.__sklearn_is_fitted__():
            name = type(self).__name__
            raise NotFittedError(f"this {name} is not fitted: call fit() or {name}.load()")

    def __sklearn_is_fitted__(self) -> bool:
        """Whether the model was fitted or loaded: it holds its fitted network, ``net_`` (what
        :func:`sklearn.utils.validation.check_is_fitted` asks, as :meth:`_check_fitted` does)."""
        return getattr(self, "net_", None) is not None

    def adopt(self, twin: Estimator, fitted) -> None:
        """Take what ``twin`` learnt, its attributes named in ``fitted`` (the class's ``FITTED``: fitted attributes,
        ending in ``_``, and the private caches that go with them): ``twin`` is this estimator refit on every row with
        the selection fixed (:func:`~promokit.training.refit.refit_twin`); the parameters, and what they imply, stay
        this estimator's."""
        for name in fitted:
            setattr(self, name, getattr(twin, name))

    def held_out_evaluation(self, data) -> Evaluation | None:
        """The metrics of the selected model on the rows of ``data`` that ``fit`` held out for evaluation, scored
        before the model was refit on them (:mod:`promokit.training.refit`): ``data`` must be what fit was given (its
        held-out rows as they were then, which the domain's ``held_out_frame(data)`` gives as one table). None when the model was not refit, held nothing out, or the held-out rows
        of ``data`` are not those it scored: then score them with ``evaluate``."""
        from promokit.training.refit import fingerprint

        refit = (getattr(self, "holdout_", None) or {}).get("refit") or {}
        if not refit.get("evaluation") or refit.get("fingerprint") != fingerprint(self.held_out_frame(data)):
            return None
        held = self.holdout_.get("held_out") or 0
        return Evaluation(f"{getattr(self, 'model_name', type(self).__name__)} on the {held:,} "
                          "held-out rows, scored before the refit on every row", dict(refit["evaluation"]),
                          tables={name: pd.DataFrame(rows) for name, rows in (refit.get("tables") or {}).items()})

    @abstractmethod
    def fit(self, data, *, validation=None) -> Estimator:
        """Learn from ``data``; choose the epoch (or the regularisation) on ``validation``. Returns ``self``."""

    @abstractmethod
    def predict(self, data) -> pd.DataFrame:
        """The data's keys and the model's named outputs, one row per scored row."""

    @abstractmethod
    def evaluate(self, data, *, held_out: bool = False) -> Evaluation:
        """Metrics on every row of labelled ``data``; with ``held_out=True`` on the rows of ``data`` that ``fit``
        held out for evaluation (``held_out(data)``), scored by the model as it is now (a model refit on every row
        has learnt from them: :meth:`held_out_evaluation` gives what they said before the refit)."""

    @abstractmethod
    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted model as a directory (config JSON, safetensors weights, encoders)."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | os.PathLike) -> Estimator:
        """Read a model directory written by :meth:`save`."""


def check_test_fraction(value) -> None:
    """``test_fraction``: a number in [0, 1) (0 holds nothing out), or a one-line error."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not 0 <= value < 1:
        raise DataError(f"test_fraction must be a number in [0, 1) (0: hold nothing out), got {value!r}")


def check_held_out(held_out, rows=None) -> None:
    """``evaluate``'s ``held_out``: True or False, and not with ``rows`` (which name the rows themselves)."""
    if not isinstance(held_out, (bool, np.bool_)):
        raise DataError(f"held_out must be True (the rows fit held out) or False (every row), got {held_out!r}")
    if held_out and rows is not None:
        raise DataError("evaluate: give `rows` or held_out=True, not both")


def check_refit(value) -> None:
    """``refit``: True (refit on every row after selection, :mod:`promokit.training.refit`) or False."""
    if not isinstance(value, bool):
        raise DataError(f"refit must be True or False, got {value!r}")


def check_same_data(holdout: dict | None, n: int, what: str) -> None:
    """``held_out(data)`` recomputes what ``fit`` held out, so ``data`` must be the data fit was given: as many
    ``what`` ("rows", "sessions" …) as fit counted in ``holdout["rows"]`` (unknown in a format-1 model directory
    without it)."""
    fitted = (holdout or {}).get("rows")
    if fitted is not None and fitted != n:
        raise DataError(f"held_out: the model held out {holdout['held_out']:,} of the {fitted:,} {what} it was fitted "
                        f"on, and these data have {n:,} {what}: give the data fit was given, or evaluate every "
                        "row of new data")


def check_common_params(model: str, params, train, *, models: Mapping, monitors: Mapping,
                        default_train: TrainConfig) -> TrainConfig:
    """The checks every estimator makes of its ``model`` (a name of ``models``), ``params`` (a mapping or None) and
    ``train``; returns the TrainConfig to use: ``default_train`` with the settings ``train`` sets replaced and every
    other kept, whether ``train`` is a mapping (``train={"epochs": 3, "progress": False}``) or a TrainConfig
    (``TrainConfig(epochs=3)``: the settings its constructor was given, :meth:`TrainConfig.over`); a copy of
    ``default_train`` when it is None. Its
    ``monitor`` must be one of ``monitors``, its ``device`` one this machine has
    (:func:`~promokit.training.device.resolve_device`)."""
    if model not in models and model != AUTO:
        raise DataError(f"model: unknown model {model!r}; choose one of {sorted(models)} or {AUTO!r}")
    check_auto_params(model, params)
    if params is not None and not isinstance(params, Mapping):
        raise DataError(f"params must be a dict of model parameters or None, got {type(params).__name__}")
    if isinstance(train, Mapping):
        settings = [f.name for f in fields(TrainConfig)]
        unknown = [name for name in train if name not in settings]
        if unknown:
            raise DataError(f"train: no setting {unknown[0]!r}; the settings are {settings}")
        train = replace(default_train, **train)
    elif isinstance(train, TrainConfig):
        train = train.over(default_train)
    elif train is None:
        train = replace(default_train)
    else:
        raise DataError(f"train must be a TrainConfig, a dict of its settings or None, got {type(train).__name__}")
    for name, least in (("epochs", 0), ("batch_size", 1)):  # 0 epochs: the network as initialised
        value = getattr(train, name)
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
            raise DataError(f"train: {name} must be a whole number ≥ {least}, got {value!r}")
    if not isinstance(train.lr, numbers.Real) or not math.isfinite(train.lr) or train.lr <= 0:
        raise DataError(f"train: lr must be a finite number > 0, got {train.lr!r}")
    if train.monitor not in monitors:
        raise DataError(f"train: monitor must be one of {list(monitors)}, got {train.monitor!r}")
    try:  # here, before any data is read: a device this machine lacks is a one-line error
        resolve_device(train.device)
    except DataError as exc:
        raise DataError(f"train: {exc}") from None
    return train


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _scalar(value):
    """NumPy scalars and timestamps in JSON."""
    if hasattr(value, "item"):
        return json_safe(value.item())
    return str(value)

"""ValueModel: value tables in → fitted model → ETV per delivery and per user × fund out, saved as a model
directory; and the split of the deliveries into the rows a model trains on, validates on and holds out."""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from numbers import Integral, Real

import numpy as np
import pandas as pd
import torch

from promokit import __version__
from promokit.data import DataError, FeatureSpec
from promokit.data.datasets import check_rows
from promokit.data.encoders import NumericEncoder
from promokit.data.ids import id_hashes
from promokit.data.leakage import allowed_columns
from promokit.data.spec import check_label_roles
from promokit.data.split import (
    FRACTION,
    ROWS,
    TABLE,
    TEST_FRACTION,
    TIME,
    NothingEarlier,
    Validation,
    latest_split,
    parse_validation,
    split_at_time,
)
from promokit.training import (
    History,
    TrainConfig,
    Trainer,
    auc_metric,
    check_model_params,
    load_weights,
    read_json,
    read_model_config,
    read_training_ids,
    write_model_dir,
)
from promokit.training.device import resolve_device, running_on, to_cpu, to_device
from promokit.training.estimator import (
    Estimator,
    Evaluation,
    check_common_params,
    check_held_out,
    check_refit,
    check_same_data,
)
from promokit.training.recalibration import (
    DEFAULT_METHOD,
    RECALIBRATION_FILE,
    GroupRecalibration,
    Recalibration,
    new_groups_warning,
    read_recalibration,
)
from promokit.training.auto import AUTO, fit_auto
from promokit.training.refit import REFIT, refit_after_selection
from promokit.training.seed import seed_everything
from promokit.training.shard_loop import checkpoint_folder
from promokit.training.shards import TEST, TRAIN, VALID, row_roles, since, time_threshold
from promokit.value.contract import FUND, LABELS, TIME, TOLERANCE, USER, ValueTables, check_conversions, value_tables
from promokit.value.defaults import DEFAULT_MODEL, DEFAULT_SPLIT, DEFAULT_TRAIN, SCORE_CONTEXTS, VALIDATION_FRACTION
from promokit.value.evaluate import value_metrics
from promokit.value.inputs import InputEncoders
from promokit.value.leaks import warn_leaks, warn_validation_leak
from promokit.value.models import ESDPM, MODELS, RENAMED, Hurdle
from promokit.value.models.esdpm import AmountStart
from promokit.value.models.hurdle import FORMER_PREFIX, PREFIX
from promokit.value.scoring import KEPT_CONTEXTS, context_values, event_times, kept_contexts, time_text

OUTPUTS = ("p_ctr", "p_cvr", "p_ctcvr", "mu", "sigma", "v_hat", "amount_if_convert", "etv")
MONITORS = ("loss", "auc")
SPLITS = ("time", "random")


def delivery_split(tables: ValueTables, test_fraction: float = TEST_FRACTION, valid_fraction: float = 0.1, how: str = "time",
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the deliveries to train on, validate on and test on.

    ``how="time"`` (the default, §5.1: train and validate on earlier days, test on the following ones): the latest
    ``test_fraction`` is the test, the latest ``valid_fraction`` of the rest the validation; a time shared by rows
    never straddles a cut. ``how="random"``: seeded random rows, for data whose deliveries share one time (a
    customer-value table such as CDNOW's). A fraction of 0 leaves its part empty. :meth:`ValueModel.split_rows`
    gives a model's split."""
    check_split(test_fraction, valid_fraction, how)
    n = len(tables.deliveries)
    if how == "random":
        roles = random_roles(n, test_fraction, valid_fraction, seed)
        return tuple(np.flatnonzero(roles == role) for role in (TRAIN, VALID, TEST))
    times = pd.Series(tables.time, name="time")
    with _nothing_earlier_said_of_deliveries():
        rest, test = latest_split(times, test_fraction) if test_fraction else (np.arange(n), np.empty(0, np.int64))
        if not valid_fraction:
            return rest, np.empty(0, dtype=np.int64), test
        train, valid = latest_split(times.iloc[rest].reset_index(drop=True), valid_fraction)
    return rest[train], rest[valid], test


@contextmanager
def _nothing_earlier_said_of_deliveries():
    """A split by time that leaves nothing to train on, said of the deliveries: the time as a date, and the way out
    for deliveries that share one time (a customer table with one time for every row)."""
    try:
        yield
    except NothingEarlier as error:
        raise DataError(f"deliveries: all {error.rows:,} rows are at or after {time_text(error.threshold)}, where the "
                        "latest ones begin: a split by time leaves nothing earlier to train on; deliveries that share "
                        "one time split with split='random'") from None


def check_split(test_fraction: float, valid_fraction: float, how: str) -> None:
    if how not in SPLITS:
        raise DataError(f"split must be one of {list(SPLITS)}, got {how!r}")
    for name, fraction in (("test_fraction", test_fraction), ("the validation fraction", valid_fraction)):
        if not _is_number(fraction) or not 0 <= fraction < 1:
            raise DataError(f"{name} must be a number in [0, 1), got {fraction!r}")


def _is_number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def random_roles(n: int, test_fraction: float, valid_fraction: float, seed: int) -> np.ndarray:
    """The role (:data:`TRAIN`, :data:`VALID`, :data:`TEST`) of each of ``n`` deliveries in the random split: the
    first ``test_fraction`` of a seeded permutation tests, the next ``valid_fraction`` of the rest validates."""
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(round(test_fraction * n))
    n_valid = int(round(valid_fraction * (n - n_test)))
    roles = np.full(n, TRAIN, dtype=np.int8)
    roles[order[:n_test]] = TEST
    roles[order[n_test:n_test + n_valid]] = VALID
    return roles


@dataclass(frozen=True)
class DeliverySplit:
    """:func:`delivery_split` as a rule each part of a dataset applies to its own deliveries (``promokit.value.parts``),
    holding out the rows one process would hold out of the parts' concatenation.

    By time: the deliveries at or after ``test_from`` test and those at or after ``valid_from`` (and before
    ``test_from``) validate — the boundary times :func:`~promokit.data.split.latest_split` finds, computed from the
    parts' counts of each time (:meth:`by_time`). Random: the roles :func:`random_roles` gives all ``n``
    deliveries, drawn by every process that reads a part (once: 8 bytes a delivery while drawing, 1 kept); a part's
    rows are its slice of them, from its first delivery's position ``offset`` in the concatenation."""

    how: str
    test_from: object = None
    valid_from: object = None
    n: int = 0
    test_fraction: float = 0.0
    valid_fraction: float = 0.0
    seed: int = 0

    @classmethod
    def by_time(cls, counts: pd.Series, test_fraction: float, valid_fraction: float) -> DeliverySplit:
        """From the deliveries per time over every part (``promokit.training.shards.summed_time_counts``)."""
        with _nothing_earlier_said_of_deliveries():
            test_from = time_threshold(TIME, test_fraction, counts) if test_fraction else None
            earlier = counts if test_from is None else counts[counts.index < test_from]
            valid_from = time_threshold(TIME, valid_fraction, earlier) if valid_fraction else None
        return cls("time", test_from, valid_from)

    def roles(self, time: np.ndarray, offset: int) -> np.ndarray:
        """The role of each delivery of a part with times ``time`` whose first delivery is the ``offset``-th."""
        if self.how == "random":
            return _cached_random_roles(self.n, self.test_fraction, self.valid_fraction, self.seed)[
                offset:offset + len(time)]
        return row_roles(len(time), since(time, self.valid_from), since(time, self.test_from))


_cached_random_roles = functools.lru_cache(maxsize=1)(random_roles)


@dataclass
class FitReport:
    """What :meth:`ValueModel.fit` counted: the deliveries it trained on, validated on (picked the epoch or the
    trees) and held out for evaluation (the training history is the model's ``history_``)."""

    n_train: int = 0
    n_valid: int = 0
    n_test: int = 0


class ValueModel(Estimator):
    """A value model by name (:data:`~promokit.value.models.MODELS`: the floor ``hurdle``, ``esdpm``,
    ``esdpm-ncg``, ``mtl-ziln``, ``mtl-mse``, ``esmm``, ``mmoe``, ``shared-bottom``, ``dnn``) with its encoders.

    Parameters, stored as given: ``model`` (the name); ``params``, overrides of
    :class:`~promokit.value.models.ESDPM`'s settings (``n_experts``, ``dropout``, ``sigma_floor`` …) or
    :class:`~promokit.value.models.Hurdle`'s (``n_trees``, ``num_leaves`` …), and ``max_len``, the behaviour events
    kept per delivery (50); ``train``, a :class:`~promokit.training.TrainConfig` (default :data:`DEFAULT_TRAIN`);
    ``split``, how :meth:`fit` holds deliveries out (``"time"``: the latest, §5.1; ``"random"``: seeded by the
    training seed, for deliveries that share one time); ``test_fraction``, the share of the deliveries held out
    for evaluation, never trained or validated on (0: none); ``labels``, the columns that hold the deliveries'
    labels when they are not named ``click``, ``convert`` and ``amount`` (``{"convert": "purchased"}``), read by
    :meth:`fit` and :meth:`evaluate` and kept in the model directory; and ``allow_leaky``, feature columns (a list,
    or comma-separated names) the label-leak guard leaves alone (:mod:`promokit.value.leaks`: before training,
    :meth:`fit` warns of a feature that alone predicts the conversion almost perfectly, and after, of a validation
    AUC above 0.99); ``refit`` (:data:`~promokit.training.refit.REFIT`): once the epoch (the floor: its trees and
    smearing factor) is chosen, fit again on every delivery with it fixed (:mod:`promokit.training.refit`; the
    held-out metrics of the selected model, scored before, are ``held_out_evaluation(data)``). What they imply:
    ``max_len`` and ``train_config``. What fitting learns ends in ``_`` (docs/conventions.md, one contract):
    ``feature_specs_`` (the feature spec of each table: ``context``, ``users``, ``funds``), ``encoders_``,
    ``amount_start_`` (where the amount towers start, from the training rows; None in a loaded model), ``net_``,
    ``model_params_`` (every setting of the network, written to the model directory), ``history_`` and
    ``report_`` (of the selection, before a refit), ``holdout_`` (the split it made, and the refit),
    ``training_ids_`` (the hashes of the training deliveries' user ids), ``trained_until_`` (the latest time of
    the deliveries trained or validated on; None in a format-1 directory without it) and ``kept_contexts_``
    (context features of training deliveries, ``scoring.context_values``, to score without deliveries);
    :meth:`recalibrate` adds ``recalibration_``.

    Example::

        model = ValueModel("esdpm").fit(tables)      # ValueTables, a dataset folder, or {"deliveries": frame, …}
        test = model.held_out(tables)                # the deliveries fit held out
        model.held_out_evaluation(tables)            # auc, logloss, mse, gini, thc, tha … before the refit
        model.predict(tables)                        # user_id, fund, p_ctcvr, mu, sigma, etv … per delivery
        model.score_table(tables)                    # user_id, score_<fund> …, tolerance
        model.save("model/"); ValueModel.load("model/")
    """

    def __init__(self, model: str = DEFAULT_MODEL, params: dict | None = None, train: TrainConfig | None = None, *,
                 split: str = DEFAULT_SPLIT, test_fraction: float = TEST_FRACTION, labels: dict | None = None,
                 allow_leaky=None, refit: bool = REFIT):
        self.model = model
        self.params = params
        self.train = train
        self.split = split
        self.test_fraction = test_fraction
        self.labels = labels
        self.allow_leaky = allow_leaky
        self.refit = refit
        self._configure()
        self._attached: ValueTables | None = None  # the tables whose node inputs the network holds

    def _configure(self) -> None:
        self.train_config = check_common_params(self.model, self.params, self.train, models=MODELS,
                                                monitors=MONITORS, default_train=DEFAULT_TRAIN)
        check_split(self.test_fraction, 0.0, self.split)
        check_label_roles(self.labels, LABELS)
        check_refit(self.refit)
        self.allowed_leaks = allowed_columns(self.allow_leaky)
        params = dict(self.params or {})
        max_len = params.pop("max_len", 50)
        if not isinstance(max_len, Integral) or isinstance(max_len, bool) or max_len < 1:
            raise DataError(f"params: max_len must be a whole number of at least 1, got {max_len!r}")
        check_model_params(self.configured_model, self.net_class, params)
        self.max_len = int(max_len)
        # every setting is written to the model directory, so a later change of a default cannot change a model
        self._model_params = {**net_defaults(self.net_class), **MODELS[self.configured_model][1], **params}
        if not self.is_neural:
            Hurdle.check_params(self._model_params)

    def _start_fit(self) -> None:
        """What every fit (:meth:`fit`, over parts :func:`~promokit.value.parts.train_parts`) starts from: the
        settings the parameters give as ``model_params_`` (the trees an earlier refit of the floor fixed are no
        parameter), no recalibration and no history yet."""
        self._configure()
        self.model_params_ = dict(self._model_params)
        self.recalibration_, self.history_ = None, None

    @property
    def net_class(self) -> type:
        return MODELS[self.configured_model][0]

    @property
    def is_neural(self) -> bool:
        """Trained by epochs (the networks), not boosted in one go (the floor ``hurdle``)."""
        return self.net_class is ESDPM

    @property
    def etv_uses_p(self) -> bool:
        """Whether the ETV is pCTCVR times an amount (eq. 13, the floor's product, ESMM's pCTCVR alone) rather than
        an amount of its own (``mtl-mse``'s exp(v̂) − 1)."""
        return not self.is_neural or self._model_params["amount"] != "mse"

    @property
    def reads_graph(self) -> bool:
        return bool(self._model_params.get("graph", False))

    @property
    def predicts_amount(self) -> bool:
        """Whether the ETV holds an amount (ESMM's ETV is its pCTCVR alone)."""
        return not self.is_neural or self._model_params["amount"] is not None

    def holdout_for(self, validation=None) -> dict:
        """:func:`delivery_split`'s arguments for this model's split and :meth:`fit`'s ``validation``: how
        (``split``), ``test_fraction``, ``valid_fraction`` (:data:`VALIDATION_FRACTION` for None, the fraction
        given, None for a time or rows given) and the seed (the training seed)."""
        choice = _validation(validation)
        valid_fraction = choice.fraction if choice.form == FRACTION else None
        return {"test_fraction": self.test_fraction, "valid_fraction": valid_fraction, "how": self.split,
                "seed": self.train_config.seed}

    def split_rows(self, data, validation=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The delivery rows of ``data`` that :meth:`fit` trains on, validates on and holds out for evaluation.

        ``test_fraction`` of the deliveries are held out by ``split`` (:func:`delivery_split`); ``validation`` picks
        the validation rows among the rest, read as in every domain (:func:`~promokit.data.split.parse_validation`):
        None (:data:`VALIDATION_FRACTION`), a fraction in [0, 1) (0: none), a time (``"2024-06-01"``, a Timestamp:
        the deliveries from it on that are not held out; it must leave deliveries to train on), or the delivery rows
        themselves (integers, none of them held out). Tables given apart are refused in one line: the network holds
        the users, funds and behaviours of one dataset, so the validation deliveries belong in ``data``."""
        choice = _validation(validation)
        tables = value_tables(data, require_labels=False)
        holdout = self.holdout_for(choice)
        if holdout["valid_fraction"] is not None:
            return delivery_split(tables, **holdout)
        train, _, test = delivery_split(tables, **{**holdout, "valid_fraction": 0.0})
        if choice.form == TIME:
            if tables.time.dtype.kind != "i":
                raise choice.refused("the deliveries' times are numbers, not datetimes, so no time can split them")
            later = tables.time >= choice.value.value  # the times as int64 nanoseconds, naive UTC
            return (*split_at_time(later, train, choice.value, "deliveries", len(test)), test)
        wanted = check_rows(choice.value, len(tables.deliveries), "validation", "deliveries")
        held = np.isin(wanted, test)
        if held.any():
            raise DataError(f"validation: {int(held.sum())} of its {len(wanted)} rows are held out for evaluation "
                            f"(test_fraction={self.test_fraction}), e.g. row {wanted[held][0]}; validate on other "
                            "deliveries, or hold none out with test_fraction=0")
        return np.setdiff1d(train, wanted), wanted, test

    def held_out(self, data) -> np.ndarray:
        """The delivery rows of ``data`` that :meth:`fit` held out for evaluation (none with ``test_fraction=0``),
        recomputed by the rule in ``holdout_``: ``data`` is the data fit was given."""
        if getattr(self, "holdout_", None) is None:  # fit sets it first, before the network
            self._check_fitted()
            return np.empty(0, dtype=np.int64)  # a format-1 directory without ``holdout`` held nothing out
        tables = self._tables(data, require_labels=False)
        check_same_data(self.holdout_, len(tables.deliveries), "deliveries")
        holdout = self.holdout_
        return delivery_split(tables, holdout["test_fraction"], 0.0, holdout["how"], holdout["seed"])[2]

    def fit(self, data, *, validation=None, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False,
            on_epoch=None) -> ValueModel:
        """Train on the deliveries of ``data`` (:class:`ValueTables`, a dataset folder, or a mapping of table name
        → DataFrame or path) that :meth:`split_rows` leaves for training: ``test_fraction`` of them are held out
        by ``split`` for evaluation (``holdout_`` records how), and the epoch is picked on the ``validation`` rows —
        None (the latest :data:`VALIDATION_FRACTION` of the rest, or a random share with ``split="random"``), a
        fraction in [0, 1) (0: none, the last epoch is kept), a time (the deliveries from it on) or the delivery
        rows themselves (:meth:`split_rows`). Encoders are fitted
        on the training rows; every user, fund, behaviour and payment of ``data`` is an input. ``checkpoint_dir``
        keeps the network's epoch checkpoint there (``resume``: continue from it); ``on_epoch`` is passed to
        :meth:`Trainer.fit`. Before training it warns of a feature that alone predicts the conversion almost
        perfectly, after it of a validation AUC above 0.99 (a label leak; ``allow_leaky`` silences the first); it
        drops a :meth:`recalibrate`-d map.

        With ``refit`` (the default) and deliveries held out for validation or evaluation, the held-out deliveries
        are then scored (:meth:`held_out_evaluation` gives it back) and the model fit again on every delivery with
        the epochs (the floor: its trees and smearing factor) it chose
        (:func:`~promokit.training.refit.refit_after_selection`; no checkpoint): ``history_`` and ``report_`` stay the
        selection's, ``holdout_["refit"]`` says what the refit learnt from. Training over a dataset in parts
        (:func:`~promokit.value.parts.train_parts`) refits over the parts on every delivery, keeping no held-out
        metrics (the held-out deliveries are not scored first)."""
        checkpoint_folder(checkpoint_dir)  # a local folder: a URI is refused before anything is read
        _validation(validation)  # a bad `validation` is refused before anything changes
        if self.model == AUTO:
            return fit_auto(self, value_tables(data, labels=self.labels), validation=validation)
        self._start_fit()
        tables = value_tables(data, labels=self.labels)
        if not tables.has_labels:
            raise DataError("deliveries: training needs the 'click', 'convert' and 'amount' columns")
        if self.reads_graph and tables.consumption is None:
            raise DataError(f"model {self.model_name!r} reads the consumption graph: give the consumption table "
                            "(or train esdpm-ncg, the same model without it)")
        train, valid, test = self.split_rows(tables, validation)
        for name, rows in (("training", train), ("validation", valid)):
            if len(rows):
                _check_learnable(name, len(rows), int(tables.convert[rows].sum()))
        self.feature_specs_ = {"context": tables.context_spec, "users": tables.user_spec, "funds": tables.fund_spec}
        warn_leaks(tables, train, self.feature_specs_, self.allowed_leaks, self.labels)
        seed_everything(self.train_config.seed)
        self.holdout_ = {**self.holdout_for(validation), "rows": len(tables.deliveries), "held_out": len(test)}
        self.training_ids_ = id_hashes(tables.deliveries[USER].to_numpy()[train])
        self.trained_until_ = tables.time[np.concatenate([train, valid])].max().item()
        self.kept_contexts_ = context_values(tables.deliveries.iloc[train[draw_contexts(len(train), KEPT_CONTEXTS)]],
                                             tables.context_spec.features)
        self.encoders_ = InputEncoders.fit(tables, self.max_len, rows=train, graph=self.reads_graph)
        train_rows = self.encoders_.rows(tables, train)
        self.amount_start_ = AmountStart.of(train_rows["v"], train_rows["convert"])
        self.net_ = self.build_net().attach(self.encoders_.nodes(tables))
        self._attached = tables
        valid_rows = self.encoders_.rows(tables, valid) if len(valid) else None
        if not self.is_neural:
            self.history_ = self.net_.fit(train_rows, valid_rows, self.train_config.seed,
                                          progress=self.train_config.progress)
        else:
            config = self.train_config if valid_rows is not None else replace(self.train_config, monitor="loss")
            self.history_ = Trainer(config, checkpoint_dir).fit(self.net_, train_rows, valid_rows, resume,
                                                                metrics=self.validation_metrics(valid_rows),
                                                                on_epoch=on_epoch)
        self.report_ = FitReport(len(train), len(valid), len(test))
        warn_validation_leak(self.history_)
        return refit_after_selection(self, tables, test)

    #: What fitting learns (:func:`~promokit.training.refit.refit_after_selection` takes it from the refit model);
    #: ``history_``, ``report_`` and ``holdout_`` stay the selection's.
    FITTED = ("feature_specs_", "encoders_", "amount_start_", "net_", "_attached", "training_ids_", "trained_until_",
              "kept_contexts_", "model_params_")
    AUTO_CANDIDATES = ("hurdle", "esdpm-ncg", "esdpm")
    AUTO_METRIC = "auc"

    def validation_evaluation(self, data, validation=None) -> Evaluation:
        """The fitted model's metrics on the deliveries :meth:`fit` validated on, given what fit was given
        (``data``, ``validation``); before a refit, deliveries it had not learnt from."""
        valid = self.split_rows(data, validation)[1]
        if not len(valid):
            raise DataError("validation: no validation deliveries to score (model='auto' chooses on them)")
        return self.evaluate(data, rows=valid)

    def held_out_frame(self, data) -> pd.DataFrame:
        """The deliveries of ``data`` that :meth:`fit` held out for evaluation, as a table (what
        :meth:`held_out_evaluation` knows them by)."""
        return self._tables(data, require_labels=False).deliveries.iloc[self.held_out(data)]

    def build_net(self) -> ESDPM | Hurdle:
        """A new network for the fitted encoders, its amount towers started at :attr:`amount_start_` (or the floor's
        boosters); training over parts (:mod:`promokit.value.parts`) builds each worker's with it."""
        if not self.is_neural:
            return Hurdle(self.encoders_, **self.model_params_)
        net = ESDPM(self.encoders_.sizes(), **self.model_params_)
        net.init_amount(self.amount_start_)
        return net

    def validation_metrics(self, valid: dict | None) -> dict | None:
        """The validation metric recorded each epoch (and monitored with ``monitor="auc"``), given the validation
        rows' tensors: the AUC of pCTCVR; None without validation rows."""
        return {"auc": auc_metric("p_ctcvr", "convert")} if valid is not None else None

    # ---- Training over a dataset's parts (promokit.value.parts): what fit does, from sums over the parts. The
    # encoders are reduced from the parts' counts (InputEncoders.from_counts), the labels counted here part by
    # part, and the network (promokit.training.shard_loop) trains on the tensors of one part at a time.

    @staticmethod
    def label_counts(tables: ValueTables, roles: np.ndarray) -> dict:
        """One part's sums that :meth:`fit_counts` needs: its deliveries and conversions per role, the moments of
        v = log(1 + amount) over its converted and over all its training deliveries (the amount start), and the
        hashes of its training deliveries' users."""
        train = roles == TRAIN
        v = tables.log_amount
        trained = tables.time[roles != TEST]
        drawn = np.flatnonzero(train)[draw_contexts(int(train.sum()), KEPT_CONTEXTS)]
        return {"rows": np.bincount(roles, minlength=3).tolist(),
                "latest": trained.max().item() if len(trained) else None,
                "contexts": context_values(tables.deliveries.iloc[drawn], tables.context_spec.features),
                "subjects": id_hashes(tables.deliveries[USER].to_numpy()[train]),
                "converted": np.bincount(roles, weights=tables.convert, minlength=3).astype(int).tolist(),
                "v_converted": NumericEncoder.moments(pd.Series(v[train & (tables.convert > 0)])),
                "v": NumericEncoder.moments(pd.Series(v[train]))}

    def fit_counts(self, specs: dict[str, FeatureSpec], encoders: InputEncoders, counts: list[dict],
                   holdout: dict) -> None:
        """Become what :meth:`fit` makes before the network trains, from the encoders reduced over the parts of a
        dataset (the feature ``specs`` they were counted with), every part's :meth:`label_counts` and the split
        they were counted with (``holdout``, :meth:`holdout_for`): the same checks, the same amount start and the
        same training subjects."""
        rows, converted = (np.sum([c[key] for c in counts], axis=0) for key in ("rows", "converted"))
        check_conversions(int(converted.sum()), int(rows.sum()))
        for name, role in (("training", TRAIN), ("validation", VALID)):
            if rows[role]:
                _check_learnable(name, int(rows[role]), int(converted[role]))
        self.feature_specs_, self.encoders_, self._attached, self.recalibration_ = specs, encoders, None, None
        self.holdout_ = {**holdout, "rows": int(rows.sum()), "held_out": int(rows[TEST])}
        self.amount_start_ = AmountStart.from_moments([c["v_converted"] for c in counts], [c["v"] for c in counts])
        self.training_ids_ = np.unique(np.concatenate([c["subjects"] for c in counts]))
        self.trained_until_ = max((c["latest"] for c in counts if c["latest"] is not None), default=None)
        kept = pd.concat([pd.DataFrame(c["contexts"]) for c in counts], ignore_index=True)
        self.kept_contexts_ = context_values(kept.iloc[draw_contexts(len(kept), KEPT_CONTEXTS)],
                                             specs["context"].features)

    def predict(self, data, *, rows: np.ndarray | None = None) -> pd.DataFrame:
        """``user_id`` and ``fund`` of every delivery of ``data`` (:class:`ValueTables`, a dataset folder, or a
        mapping of table name → DataFrame or path; labels not needed), or of the delivery rows ``rows``, then the
        named outputs: p_ctcvr and etv, and p_ctr, p_cvr, mu, sigma, v_hat, amount_if_convert where the model has
        them. One row per delivery, in order, with a fresh RangeIndex. With a :meth:`recalibrate`-d model, p_ctcvr
        is recalibrated and so is the ETV that multiplies it (:meth:`recalibrated`), the model's own beside them as
        ``p_ctcvr_raw`` and ``etv_raw`` (p_ctr, p_cvr and the amounts stay the model's own); a recalibration by fund
        maps each delivery by its fund, and warns (one line) of the deliveries of funds it did not see, which get its
        overall map."""
        self._check_fitted()
        tables = self._tables(data, require_labels=False)
        self._attach(tables)
        out = Trainer(self.train_config).predict(self.net_, self.encoders_.rows(tables, rows))
        out = {k: out[k].numpy().astype(np.float64) for k in OUTPUTS if k in out}
        chosen = slice(None) if rows is None else rows
        keys = {key: tables.deliveries[key].to_numpy()[chosen] for key in (USER, FUND)}
        frame = pd.DataFrame({**keys, **out})
        if self.recalibration_ is not None:
            funds = np.asarray(tables.fund_names, dtype=object)[tables.fund[chosen]]
            self._warn_new_funds(funds, "deliveries")
            frame["p_ctcvr"], frame["etv"] = self.recalibrated(out["p_ctcvr"], out["etv"], funds)
            frame["p_ctcvr_raw"], frame["etv_raw"] = out["p_ctcvr"], out["etv"]
        return frame

    def recalibrated(self, p_ctcvr: np.ndarray, etv: np.ndarray,
                     funds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The model's own ``p_ctcvr`` and ``etv`` through :attr:`recalibration_` (as they are without one): p' =
        the map of p, and an ETV that is p times an amount (:attr:`etv_uses_p`; eq. 13) scaled by p' / p, so it
        stays p' times the same amount. ``funds``: each value's fund (its name, as ``fund_names`` gives it), by
        which a recalibration by fund maps it (required for one)."""
        if self.recalibration_ is None:
            return p_ctcvr, etv
        if isinstance(self.recalibration_, GroupRecalibration):
            if funds is None:
                raise ValueError("the recalibration is by fund: give each value's fund")
            recalibrated = self.recalibration_.apply(p_ctcvr, funds)
        else:
            recalibrated = self.recalibration_.apply(p_ctcvr)
        if not self.etv_uses_p:
            return recalibrated, etv
        return recalibrated, etv * np.divide(recalibrated, p_ctcvr, out=np.zeros_like(recalibrated),
                                             where=p_ctcvr > 0)

    def _warn_new_funds(self, funds, what: str, rows: int = 1) -> None:
        """Warn (one line) of the ``funds`` (one per score, ``rows`` scores each) the recalibration by fund did not
        see."""
        if isinstance(self.recalibration_, GroupRecalibration):
            new = {fund: count * rows for fund, count in self.recalibration_.new_groups(funds).items()}
            message = new_groups_warning(new, len(funds) * rows, what, self.recalibration_.by)
            if message:
                warnings.warn(message, stacklevel=3)

    def recalibrate(self, data, *, method: str = DEFAULT_METHOD, rows=None, base_rate: float | None = None,
                    by: str | None = None) -> ValueModel:
        """Fit a :class:`~promokit.training.recalibration.Recalibration` of the model's pCTCVR on the labelled
        deliveries ``rows`` of ``data`` (read as :meth:`evaluate` reads it; default: every delivery) — the latest
        labelled period, after the training one — against their conversions, and keep it: :meth:`predict`,
        :meth:`evaluate` and the ETV tables (:meth:`score_matrix`) apply it, :meth:`save` writes it
        (``recalibration.json``). ``method``: ``isotonic`` (default), ``platt`` or ``prior-shift`` (``base_rate``:
        the training base rate; None: the model's mean pCTCVR on ``rows``). ``by="fund"``: a
        :class:`~promokit.training.recalibration.GroupRecalibration` by the deliveries' fund instead, one map per fund
        shrunk toward the overall one (a fund with few deliveries leans on the overall map, one unseen gets it). It
        replaces an earlier recalibration; :meth:`fit` drops it. Returns the model."""
        self._check_fitted()
        if by not in (None, FUND):
            raise DataError(f"`by`: a value model recalibrates by {FUND!r} (one map per fund) or not by group; got "
                            f"{by!r}")
        recalibration = Recalibration(method) if by is None else GroupRecalibration(method, by=by)
        tables = self._tables(data, require_labels=True)
        n = len(tables.deliveries)
        rows = np.arange(n) if rows is None else check_rows(rows, n, "rows", "deliveries")
        self._attach(tables)
        p = Trainer(self.train_config).predict(self.net_, self.encoders_.rows(tables, rows))["p_ctcvr"]
        if by is None:
            self.recalibration_ = recalibration.fit(p.numpy().astype(np.float64), tables.convert[rows],
                                                    base_rate=base_rate)
        else:
            funds = np.asarray(tables.fund_names, dtype=object)[tables.fund[rows]]
            self.recalibration_ = recalibration.fit(p.numpy().astype(np.float64), tables.convert[rows], funds,
                                                    base_rate=base_rate)
        return self

    def evaluate(self, data, *, held_out: bool = False, rows: np.ndarray | None = None) -> Evaluation:
        """Metrics on the labelled deliveries of ``data`` (as :meth:`predict` reads it), every one, those :meth:`fit`
        held out of it with ``held_out=True`` (``held_out(data)``; a model refit on every delivery has learnt from
        them: :meth:`held_out_evaluation` gives what they said before), or the rows ``rows``, by
        :func:`~promokit.value.evaluate.value_metrics`: AUC and logloss of pCTCVR, MSE, MAE and normalised Gini of
        the ETV, THC, THA, ``best_differs``, ``uplift_spread``, ``etv_bias``, ``deliveries`` and the calibration of
        pCTCVR (``mean_predicted``, ``mean_observed``, ``calibration_ratio``, ``ece``; a warning beyond the ratio);
        its tables ``decile_calibration`` and ``calibration_per_fund`` (the ETV), ``calibration`` and
        ``calibration_by_fund`` (pCTCVR, the worst fund first; with a column ``new`` when the model is recalibrated
        by fund: True for the funds the recalibration did not see)."""
        self._check_fitted()
        check_held_out(held_out, rows)
        tables = self._tables(data, require_labels=True)
        if held_out:
            rows = self.held_out(tables)
        rows = np.arange(len(tables.deliveries)) if rows is None else np.asarray(rows)
        metrics, calibration = value_metrics(self, tables, rows)
        return Evaluation(f"Value model {self.model_name}", metrics, tables=calibration)

    def _tables(self, data, require_labels: bool) -> ValueTables:
        """``data`` as tables with this model's features (extra columns may be there), its labels read from the
        columns ``labels`` names when they are needed (scoring reads none)."""
        return value_tables(data, require_labels=require_labels, specs=self.feature_specs_,
                            labels=self.labels if require_labels else None)

    def score_matrix(self, tables, at=None, users: np.ndarray | None = None,
                     contexts: int = SCORE_CONTEXTS, seed: int = 0, chunk: int = 2048,
                     context_rows: pd.DataFrame | None = None) -> np.ndarray:
        """ETV of every user (or the user rows ``users``) × fund of ``tables`` as ``(n_users, n_funds)``, as if the
        fund were shown at time ``at`` (default: just after the latest delivery, so every behaviour counts).

        A pair has no delivery context yet: its ETV is the mean over ``contexts`` context rows drawn (seeded) from
        the deliveries of ``tables`` (:func:`draw_contexts`) — the ETV of showing the fund on a typical occasion;
        with a :meth:`recalibrate`-d model, the recalibrated ETV (:meth:`recalibrated`; by fund: each fund's column by
        its map, a fund the recalibration did not see by the overall one, with a one-line warning).
        ``context_rows`` gives those rows instead (a part of a dataset in parts is scored with the rows drawn from
        every part's deliveries). ``tables``: what :meth:`predict` takes (the deliveries may be absent)."""
        self._check_fitted()
        tables = self._tables(tables, require_labels=False)
        self._attach(tables)
        users = np.arange(len(tables.users)) if users is None else np.asarray(users, dtype=np.int64)
        n_users, n_funds = len(users), len(tables.funds)
        at = scoring_time(event_times(tables), at)
        if context_rows is None:
            drawn_from = tables.deliveries if len(tables.deliveries) else kept_contexts(self.kept_contexts_,
                                                                                        self.feature_specs_["context"])
            context_rows = drawn_from.iloc[draw_contexts(len(drawn_from), contexts, seed)]
        context = self.encoders_.context.transform(context_rows)
        ctx_cat, ctx_num = torch.from_numpy(context.categorical), torch.from_numpy(context.numeric)
        self.net_.eval()
        scores = np.empty((n_users, n_funds))
        funds = np.asarray(tables.fund_names, dtype=object)
        self._warn_new_funds(funds, "user × fund scores", n_users)
        by_fund = isinstance(self.recalibration_, GroupRecalibration)
        pair_funds = np.repeat(funds, len(context_rows))  # user-major, then fund, then context (pair_outputs)
        sequences = self.encoders_.sequences(_at(tables, users, at), np.arange(n_users))
        with running_on(self.net_, resolve_device(self.train_config.device)) as device:
            for start in range(0, n_users, chunk):
                part = users[start:start + chunk]
                inputs = to_device((torch.from_numpy(part), torch.from_numpy(sequences[start:start + chunk]), ctx_cat,
                                    ctx_num), device)
                out = to_cpu(self.net_.pair_outputs(*inputs, n_funds))
                etv = self.recalibrated(*(out[k].numpy().astype(np.float64) for k in ("p_ctcvr", "etv")),
                                        np.tile(pair_funds, len(part)) if by_fund else None)[1]
                scores[start:start + len(part)] = etv.reshape(len(part), n_funds, -1).mean(axis=2)
        return scores

    def score_table(self, tables, at=None, contexts: int = SCORE_CONTEXTS, seed: int = 0,
                    context_rows: pd.DataFrame | None = None, users: np.ndarray | None = None) -> pd.DataFrame:
        """The ETV table in the wide layout ``allocate quota --scores`` (``pk.plan_quota``) reads: ``user_id``,
        ``score_<fund>`` per fund and the users' ``tolerance`` when the users table has one, for every user or the
        user rows ``users`` of ``tables`` (what :meth:`predict` takes; see :meth:`score_matrix`)."""
        self._check_fitted()
        tables = self._tables(tables, require_labels=False)
        users = np.arange(len(tables.users)) if users is None else np.asarray(users, dtype=np.int64)
        scores = self.score_matrix(tables, at, users, contexts=contexts, seed=seed, context_rows=context_rows)
        frame = pd.DataFrame({USER: tables.users[USER].to_numpy()[users]})
        for j, fund in enumerate(tables.fund_names):
            frame[f"score_{fund}"] = scores[:, j]
        tolerance = tables.tolerance()
        if tolerance is not None:
            frame[TOLERANCE] = tolerance[users]
        return frame

    def _attach(self, tables: ValueTables) -> None:
        """Give the network the node inputs (features, graph) of ``tables``, unless it already holds them: predict
        and score_matrix on one table set encode it once."""
        if tables is self._attached:
            return
        if self.reads_graph and tables.consumption is None:
            raise DataError(f"model {self.model_name!r} reads the consumption graph: give the consumption table")
        self.net_.attach(self.encoders_.nodes(tables))
        self._attached = tables

    def use_consumption_states(self, tables: ValueTables, states: list[torch.Tensor]) -> None:
        """Score ``tables`` — a part of a dataset whose payment graph it holds only a part of — with its users' e_c
        given: ``states``, one per GNN of the network, a row per user of ``tables``, computed over the whole graph
        (:mod:`promokit.value.consumption`)."""
        self._attach(tables)
        for encoder, users in zip([e for e in self.net_.encoders if e.graph], states, strict=True):
            encoder.use_states(users)

    def save(self, path: str | os.PathLike) -> None:
        self._check_fitted()
        config = {"promokit": __version__, "task": "value", "model": self.model_name,
                  "params": {**self.model_params_, "max_len": self.max_len}, "train": self.train_config.to_dict(),
                  "specs": {name: spec.to_dict() for name, spec in self.feature_specs_.items()}, "split": self.holdout_,
                  "trained_until": self.trained_until_, "contexts": self.kept_contexts_, "labels": self.labels,
                  "allow_leaky": self.allow_leaky, "refit": self.refit}
        history = None if self.history_ is None else self.history_.to_dict()
        extra = {} if self.recalibration_ is None else {RECALIBRATION_FILE: self.recalibration_.to_dict()}
        write_model_dir(path, config, self.encoders_.to_dict(), self.net_, history, extra,
                        training_ids=self.training_ids_)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ValueModel:
        """The model saved in ``path``, with the label columns it was trained with and its recalibration
        (``recalibration.json``, when it has one); a directory saved under a model's former name (``two-part``)
        loads as the model it is now (``hurdle``)."""
        config = read_model_config(path, "value")
        holdout = config["split"]
        model = cls(RENAMED.get(config["model"], config["model"]), config["params"], TrainConfig.loaded(config["train"]),
                    split=holdout["how"], test_fraction=holdout["test_fraction"], labels=config.get("labels"),
                    allow_leaky=config.get("allow_leaky"),
                    refit=config.get("refit", False))  # a format-1 directory without ``refit`` was not refit
        model.feature_specs_ = {name: FeatureSpec.from_dict(spec) for name, spec in config["specs"].items()}
        model.holdout_, model.model_params_, model.report_ = holdout, dict(model._model_params), FitReport()
        model.amount_start_ = None  # the towers' start is in the weights
        model.history_, model.training_ids_ = History.read(path), read_training_ids(path)
        model.trained_until_, model.kept_contexts_ = config.get("trained_until"), config.get("contexts")
        model.encoders_ = InputEncoders.from_dict(read_json(path, "encoder.json"))
        model.recalibration_ = read_recalibration(path)
        if not model.is_neural:
            model.net_ = Hurdle(model.encoders_, **model.model_params_).load_texts(
                path, FORMER_PREFIX if config["model"] in RENAMED else PREFIX)
            return model
        model.net_ = ESDPM(model.encoders_.sizes(), **model.model_params_)
        load_weights(model.net_, path)
        model.net_.eval()
        return model


def _validation(validation) -> Validation:
    """``fit(validation=…)`` read as every domain reads it (:func:`~promokit.data.split.parse_validation`)."""
    return parse_validation(validation, default=VALIDATION_FRACTION, tables=(ValueTables, Mapping),
                            model="a value model",
                            takes={FRACTION: "a fraction in [0, 1) of the deliveries", TIME: "a time (the deliveries "
                                   "from it on)", ROWS: "delivery rows of data"},
                            refuses={TABLE: "the network holds the users, funds and behaviours of one dataset, so the "
                                            "validation deliveries belong in data: give their rows or the time they "
                                            "start from"})


def _check_learnable(name: str, rows: int, converted: int) -> None:
    if converted in (0, rows):
        raise DataError(f"deliveries: the {rows} {name} rows need conversions and non-conversions; use more "
                        "deliveries or other fractions")


def net_defaults(net_class: type = ESDPM) -> dict:
    """The keyword settings of ``net_class`` (:class:`ESDPM` or :class:`Hurdle`) and their defaults (lists for
    JSON)."""
    signature = inspect.signature(net_class.__init__)
    return {name: list(p.default) if isinstance(p.default, tuple) else p.default
            for name, p in signature.parameters.items() if name not in ("self", "sizes", "encoders")}


def draw_contexts(n_deliveries: int, contexts: int = SCORE_CONTEXTS, seed: int = 0) -> np.ndarray:
    """The delivery rows (of ``n_deliveries``) whose contexts a user × fund pair is scored in: ``contexts`` rows
    drawn without replacement from the seeded stream, in the order drawn."""
    check_contexts(contexts)
    return np.random.default_rng(seed).choice(n_deliveries, size=min(contexts, n_deliveries), replace=False)


def check_contexts(contexts) -> None:
    """``contexts``, the delivery contexts a pair is scored in, is a whole number of at least 1."""
    if not isinstance(contexts, Integral) or isinstance(contexts, bool) or contexts < 1:
        raise DataError(f"`contexts` must be at least 1, got {contexts!r}")


def scoring_time(time: np.ndarray, at=None, argument: str = "at") -> int | float:
    """The time pairs are scored at, like the deliveries' ``time`` (int64 ns or float64): ``at`` (a date or a
    number; ``argument``: its name in an error), default just after the latest of ``time`` (any time when there is
    none)."""
    if at is None:
        return time.max() + (1 if time.dtype.kind == "i" else 1e-9) if len(time) else time.dtype.type(0)
    try:
        return pd.Timestamp(at).value if time.dtype.kind == "i" else float(at)
    except (ValueError, TypeError):
        kind = "a date" if time.dtype.kind == "i" else "a number"
        raise DataError(f"{argument} must be {kind}, like the deliveries' times; got {at!r}") from None


def _at(tables: ValueTables, users: np.ndarray, at) -> ValueTables:
    """``tables`` with one delivery per user of ``users`` at time ``at`` (for :meth:`InputEncoders.sequences`)."""
    return replace(tables, user=users, time=np.full(len(users), at, dtype=tables.time.dtype))

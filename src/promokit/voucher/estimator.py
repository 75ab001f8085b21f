"""VoucherModel: the voucher tables in → fitted model → redemption probabilities and metrics out, saved as a
model directory (config.json, encoder.json, weights.safetensors or gbdt.txt, history.json, DMBGN's
graph_vocabulary.json; no pickle). The directory is self-contained: it scores any tables, training sessions or not."""

from __future__ import annotations

import numbers
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from promokit import __version__
from promokit.data import DataError, EncodedFeatures, FeatureSpec, TableEncoder
from promokit.data.datasets import check_rows
from promokit.data.ids import id_hashes
from promokit.data.leakage import allowed_columns, find_leaks, leak_warning, validation_leak_warning
from promokit.data.spec import DEFAULT_MIN_COUNT, missing_column_message
from promokit.data.split import (
    FRACTION,
    ROWS,
    TABLE,
    TEST_FRACTION,
    TIME,
    Validation,
    at_or_after,
    parse_validation,
    split_at_time,
)
from promokit.metrics import auc, calibration_report, gauc, logloss
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
    take,
    write_model_dir,
)
from promokit.training.estimator import (
    Estimator,
    Evaluation,
    check_common_params,
    check_held_out,
    check_refit,
    check_same_data,
    check_test_fraction,
)
from promokit.training.params import saved_params
from promokit.training.auto import AUTO, fit_auto
from promokit.training.shard_loop import checkpoint_folder
from promokit.training.refit import REFIT, refit_after_selection, refit_carry, refit_next
from promokit.training.recalibration import (
    DEFAULT_METHOD,
    RECALIBRATION_FILE,
    GroupRecalibration,
    Recalibration,
    new_groups_warning,
    read_recalibration,
)
from promokit.training.seed import seed_everything
from promokit.voucher.contract import (
    ID_COLUMNS,
    VoucherTables,
    agreed_options,
    read_tables,
    table_options,
)
from promokit.voucher.defaults import DEFAULT_MODEL, DEFAULT_TRAIN
from promokit.voucher.history import as_time, hold_out_latest, redeemed_history
from promokit.voucher.item_embedding import (
    ESTIMATOR_KEYS,
    METAPATH2VEC,
    check_item_params,
)
from promokit.voucher.models import MODELS, FieldLayout

#: The key columns of a prediction, those the sessions carry: the contract's ids, AmExpert's campaign.
KEYS = (*ID_COLUMNS, "campaign_id")
#: The share of the training sessions held out for validation by default (the latest, by collection time).
VALIDATION_FRACTION = 0.1
#: Columns that are never features: keys, times and everything known only after the outcome. The tables'
#: whitelist (``VoucherTables.categorical`` / ``numeric``) already excludes them; this is the second lock.
NOT_FEATURES = ("session_id", "collect_time", "outcome_time", "redeemed")
POST_OUTCOME = re.compile(r"redeem|outcome|expire|_time", re.IGNORECASE)
VOUCHER_NUMERIC = ("min_spend", "discount")
GRAPH_VOCABULARY = "graph_vocabulary.json"
#: DMBGN parameters of its graphs (``UVGStore.build``): ``z`` nearest items the voucher links to per zone (6) and
#: ``max_pre_events`` pre-collection events kept per session (50; items per voucher without a behaviour log).
GRAPH_PARAMS = ("z", "max_pre_events")
#: Parameters the estimator uses itself rather than passing to the model class (see ``net_params``).
ESTIMATOR_OWN = ("pretrain", "min_count", *ESTIMATOR_KEYS, *GRAPH_PARAMS)
#: DMBGN's parameters of the UVG encoder, which its pre-training (eq. 6) shares.
UVG_PARAMS = ("emb_dim", "uvg_dim", "gnn_layers", "ratio", "encoder", "directed", "freeze_items", "item_dim")
#: What picks the epoch on the validation sessions: AUC (the paper's metric, default) or the logloss.
MONITORS = ("auc", "loss")


@dataclass
class FitReport:
    """What ``fit`` counted: the sessions it trained on, validated on and held out (the training history is the
    model's ``history_``)."""

    n_train: int = 0
    n_valid: int = 0
    n_test: int = 0


class VoucherModel(Estimator):
    """A voucher-redemption model by name (``lr``, ``gbdt``, ``dnn``, ``wdl``, ``din``, ``dmbgn`` …).

    Example::

        model = VoucherModel("din").fit(tables)      # the latest 10 % held out, the latest 10 % of the rest validates
        test = model.held_out(tables)                # the sessions collected from the hold-out's cut on
        model.evaluate(tables, rows=test)            # Evaluation: auc, logloss, n, positives …
        model.predict(tables, rows=test)             # session_id, user_id, voucher_id, p_redeem
        model.save("din_model"); VoucherModel.load("din_model")

    Parameters: ``model`` (a name of :data:`~promokit.voucher.models.MODELS`), ``params`` (overrides of the
    model's parameters, plus the estimator's own: see :attr:`net_params`), ``train`` (a :class:`TrainConfig`;
    None: :data:`DEFAULT_TRAIN`), ``max_history`` (the redeemed sessions in a user's history), ``test_fraction``
    (the share of the sessions :meth:`fit` holds out for evaluation, the latest by ``collect_time``:
    :data:`TEST_FRACTION`; 0: none), ``test_from`` (a time: hold out the sessions collected from it on instead) and
    ``allow_leaky`` (feature columns, a list or comma-separated names, the label-leak guard leaves alone: see
    :meth:`fit`) and ``refit`` (:data:`~promokit.training.refit.REFIT`: once the epoch, the trees or LR's strength
    are chosen, fit again on every session with them fixed, :mod:`promokit.training.refit`; the held-out metrics
    of the selected model, scored before, are ``held_out_evaluation(data)``). They are stored as given;
    ``train_config`` is derived. What fitting learns ends in ``_`` (docs/conventions.md, one contract):
    ``feature_spec_``, ``table_options_`` and ``labels_`` (how the training tables were read: their
    ``VoucherTables.options`` and label column), ``encoder_``, ``net_``, ``store_`` (DMBGN's UVGStore of the
    tables last scored, holding the training vocabulary; None for the other models), ``model_params_`` (the
    model's defaults merged with ``params``, with what validation chose), ``history_``, ``report_`` (the sessions
    counted), ``holdout_`` (what it held out, and the refit) and ``training_ids_`` (the hashes of the training
    sessions' user ids); :meth:`recalibrate`, ``recalibration_``.

    Features are the tables' whitelist (``VoucherTables.categorical`` / ``numeric``: user_id, voucher_id,
    min_spend, discount and the named profile columns), encoded by a :class:`TableEncoder` fitted on the
    training sessions only. The user's history is the last ``max_history`` sessions they redeemed whose outcome was
    known before the target's collection (``redeemed_history``), so no label leaks forward in time.
    """

    def __init__(self, model: str = DEFAULT_MODEL, params: dict | None = None, train: TrainConfig | None = None,
                 max_history: int = 6, test_fraction: float = TEST_FRACTION, test_from=None, allow_leaky=None,
                 refit: bool = REFIT):
        self.model = model
        self.params = params
        self.train = train
        self.max_history = max_history
        self.test_fraction = test_fraction
        self.test_from = test_from
        self.allow_leaky = allow_leaky
        self.refit = refit
        self._configure()
        self._cache: tuple[object, dict[str, torch.Tensor]] | None = None  # the inputs of the tables last seen

    def _configure(self) -> None:
        train_config = check_common_params(self.model, self.params, self.train, models=MODELS, monitors=MONITORS,
                                           default_train=DEFAULT_TRAIN)
        whole = isinstance(self.max_history, numbers.Integral) and not isinstance(self.max_history, bool)
        if not whole or self.max_history < 1:
            raise DataError(f"max_history must be a whole number ≥ 1, got {self.max_history!r}")
        check_test_fraction(self.test_fraction)
        check_refit(self.refit)
        self.test_cut = None if self.test_from is None else as_time("test_from", self.test_from)
        self.allowed_leaks = allowed_columns(self.allow_leaky)
        merged = check_item_params({**MODELS[self.configured_model][1], **(self.params or {})}, self.uses_graphs, self.configured_model)
        graph_params = [k for k in GRAPH_PARAMS if k in merged]
        if graph_params and not self.uses_graphs:
            raise DataError(f"{graph_params[0]} applies to DMBGN models only (they build graphs); model "
                            f"{self.model_name!r} has none")
        check_model_params(self.configured_model, self.model_class, merged, own=ESTIMATOR_OWN)
        self._model_params, self.train_config = merged, train_config

    def _start_fit(self) -> None:
        """What every fit (:meth:`fit`, over parts :func:`~promokit.voucher.train_parts.train_parts`) starts from: the
        settings the parameters give as ``model_params_`` (a refit chooses LR's L2 and DMBGN's item_dim again), no
        network, store, history, cached inputs or recalibration yet."""
        self._configure()
        self.model_params_ = dict(self._model_params)
        self.net_, self.store_, self.history_, self._cache, self.recalibration_ = None, None, None, None, None

    @property
    def model_class(self):
        return MODELS[self.configured_model][0]

    @property
    def is_neural(self) -> bool:
        return issubclass(self.model_class, nn.Module)

    @property
    def uses_graphs(self) -> bool:
        return hasattr(self.model_class, "attach")  # a model that reads the UVGStore attached to it

    @property
    def net_params(self) -> dict:
        """``model_params_`` minus the estimator's own keys: ``min_count`` (the vocabulary's, see
        :class:`~promokit.data.FeatureSpec`), ``pretrain`` (pre-train the UVG encoder, eq. 6),
        ``item_embeddings`` (``"metapath2vec"`` or a table's path, section 3.4.2), ``item_pretrain`` (its
        MetaPath2Vec options) and the graph settings :data:`GRAPH_PARAMS`."""
        return {k: v for k, v in self.model_params_.items() if k not in ESTIMATOR_OWN}

    @property
    def uvg_params(self) -> dict:
        """The parameters of DMBGN's UVG encoder that its pre-training (eq. 6, :func:`pretrain_uvg`) shares."""
        return {k: v for k, v in self.net_params.items() if k in UVG_PARAMS}

    # ---- features -------------------------------------------------------------------------------------
    def _feature_spec(self, tables) -> FeatureSpec:
        features = [*tables.categorical, *tables.numeric]
        leaking = [c for c in features if c in NOT_FEATURES or POST_OUTCOME.search(str(c))]
        if leaking:
            raise DataError(f"feature columns {leaking} are keys, times or known only after the outcome; "
                            "they cannot be features")
        if "voucher_id" not in tables.categorical:
            raise DataError(f"voucher_id must be a categorical feature; got {list(tables.categorical)}")
        columns = list(tables.sessions.columns)
        for name in self.allowed_leaks:
            if name not in columns:
                raise DataError(missing_column_message(name, columns, "allowed to leak, `allow_leaky`",
                                                     len(tables.sessions)))
            if name not in features:
                raise DataError(f"`allow_leaky` names {name!r}, which is not a feature; the features are {features}")
        return FeatureSpec(categorical=list(tables.categorical), numeric=list(tables.numeric), group_key=None,
                           min_count=self._model_params.get("min_count", DEFAULT_MIN_COUNT),
                           allow_leaky=list(self.allowed_leaks))

    def layout(self) -> FieldLayout:
        widths = [enc.width for enc in self.encoder_.numeric.values()]
        starts = np.cumsum([0, *widths])
        voucher_numeric = [i for name, s, w in zip(self.encoder_.numeric, starts, widths)
                           if name in VOUCHER_NUMERIC for i in range(s, s + w)]
        categorical = list(self.encoder_.categorical)
        return FieldLayout(cardinalities=tuple(self.encoder_.cardinalities), n_numeric=self.encoder_.numeric_width,
                           id_fields=tuple(categorical.index(c) for c in ("user_id", "voucher_id") if c in categorical),
                           voucher_fields=(categorical.index("voucher_id"),),
                           voucher_numeric=tuple(int(i) for i in voucher_numeric))

    def inputs(self, tables, fit_rows=None, encoded: EncodedFeatures | None = None) -> dict[str, torch.Tensor]:
        """The batch dict of every session of ``tables`` (row order = session index), built once per tables.

        ``fit_rows`` (training only): the sessions DMBGN's graph vocabulary is fitted on; ``encoded``: the
        sessions' features, encoded already (:meth:`tensors`)."""
        if self._cache is not None and self._cache[0] is tables:
            return self._cache[1]
        tensors = self.tensors(tables, encoded)
        if self.uses_graphs:
            self._attach_store(tables, fit_rows)
        self._cache = (tables, tensors)
        return tensors

    @property
    def reads_history(self) -> bool:
        """Whether the model reads the user's redeemed history (DIN, DMBGN): only then is it built."""
        return getattr(self.model_class, "reads_history", False)

    def tensors(self, tables, encoded: EncodedFeatures | None = None) -> dict[str, torch.Tensor]:
        """The batch dict of every session of ``tables`` (row order = session index) with the fitted encoder (or
        ``encoded``, its features encoded already): the encoded features, the labels and, for a model that reads
        it (:attr:`reads_history`), the redeemed history (row positions, :func:`redeemed_history`) and its voucher
        fields; DMBGN reads the graphs of ``session`` and ``history`` from its store."""
        sessions = tables.sessions
        x = self.encoder_.transform(sessions) if encoded is None else encoded
        tensors = {"cat": torch.from_numpy(x.categorical), "num": torch.from_numpy(x.numeric),
                   "session": torch.arange(len(sessions), dtype=torch.long)}
        if self.reads_history:
            layout = self.layout()
            history = redeemed_history(sessions, self.max_history)
            padded = history < 0
            safe = np.where(padded, 0, history)
            hist_cat = x.categorical[:, list(layout.voucher_fields)][safe]
            hist_num = x.numeric[:, list(layout.voucher_numeric)][safe]
            hist_cat[padded], hist_num[padded] = 0, 0.0
            tensors.update({"history": torch.from_numpy(np.ascontiguousarray(history, dtype=np.int64)),
                            "hist_cat": torch.from_numpy(np.ascontiguousarray(hist_cat)),
                            "hist_num": torch.from_numpy(np.ascontiguousarray(hist_num))})
        tensors["redeemed"] = torch.from_numpy(_labels(sessions).copy())
        return tensors

    def _attach_store(self, tables, fit_rows=None) -> None:
        """Build the UVGs of ``tables``: fitting the graph vocabulary on ``fit_rows`` (training), else reusing the
        current store's (the training one), so unseen items and vouchers get the OOV code."""
        from promokit.voucher.graph import UVGStore

        vocabulary = None if fit_rows is not None else self.store_.vocabulary()
        settings = {k: self.model_params_[k] for k in GRAPH_PARAMS if k in self.model_params_}
        self.store_ = UVGStore.build(tables, **settings, fit_rows=fit_rows, vocabulary=vocabulary)
        if self.net_ is not None:
            self.net_.attach(self.store_)

    # ---- fit / predict ----------------------------------------------------------------------------------
    def fit(self, data, *, rows=None, validation=None, checkpoint_dir: str | os.PathLike | None = None,
            resume: bool = False, on_epoch=None) -> VoucherModel:
        """Fit on the training sessions; select the epoch (or the number of trees, or LR's L2 strength) on the
        validation sessions, never on any other.

        ``data``: :class:`~promokit.voucher.contract.VoucherTables`, or what
        :func:`~promokit.voucher.contract.read_tables` reads with :func:`check_tables`' defaults (a mapping of
        table name → DataFrame or path, or a folder of tables); for profile columns or other options, read the
        tables with ``read_tables(data, categorical=…)`` first. ``rows``: the sessions fit may use (row indices
        of ``data.sessions``; default every one), of which it holds out those :meth:`split_rows` holds out for
        evaluation and validates on ``validation``, read as in every domain
        (:func:`~promokit.data.split.parse_validation`):

        - ``None`` (default): the latest 10 % of the rest by ``collect_time`` (those collected at or after the
          90 % quantile of their times); when all share one collection time, a random 10 % drawn with
          ``train.seed`` (:func:`~promokit.voucher.history.hold_out_latest`);
        - a fraction in [0, 1): that share of the rest, by the same rule; 0: no validation (every epoch, tree or
          the default L2 strength is kept);
        - a time (``"2024-06-01"``, a Timestamp): the sessions of ``rows`` collected from it on that are not held
          out; it must leave training and validation sessions;
        - row indices: those sessions, which must be neither training sessions (``rows``) nor held out.

        Tables given apart are refused in one line: a user's history and DMBGN's graphs are built from the sessions
        of one set of tables, so the validation sessions belong in ``data`` (give their rows, or the time they
        start from).

        ``checkpoint_dir`` / ``resume`` / ``on_epoch`` are passed to :meth:`Trainer.fit` (neural models).

        Before training, a feature that alone predicts the label of the training sessions almost perfectly (a label
        leak: a column measured after the redemption, such as the order's amount) is warned of, naming it with its
        univariate AUC (:func:`~promokit.data.leakage.find_leaks`, above :data:`~promokit.data.leakage.LEAK_AUC`),
        unless ``allow_leaky`` names it; after training, so is a validation AUC above
        :data:`~promokit.data.leakage.VALIDATION_LEAK_AUC`."""
        checkpoint_folder(checkpoint_dir)  # a local folder: a URI is refused before anything is read
        _validation(validation)  # a bad `validation` is refused before anything changes
        if self.model == AUTO:
            return fit_auto(self, read_tables(data), validation=validation,
                            fit_args={} if rows is None else {"rows": rows})
        self._start_fit()
        source = self.model_params_.get("item_embeddings")
        if source not in (None, METAPATH2VEC) and not os.path.exists(source):
            raise DataError(f"`item_embeddings` {source}: no such file (or pass {METAPATH2VEC!r})")
        tables = read_tables(data)
        train_rows, valid_rows, test_rows = self.split_rows(tables, rows, validation)
        self.holdout_ = self._holdout(tables, test_rows)
        seed_everything(self.train_config.seed)
        sessions = tables.sessions
        self.feature_spec_ = self._feature_spec(tables)
        self.table_options_, self.labels_ = tables.options, tables.labels
        self.encoder_, encoded = TableEncoder.fit_transform(sessions, self.feature_spec_, train_rows)
        self.training_ids_ = id_hashes(sessions["user_id"].to_numpy()[train_rows])
        inputs = self.inputs(tables, fit_rows=train_rows, encoded=encoded)
        for name, part in (("training", train_rows), ("validation", valid_rows)):
            unknown = np.isnan(inputs["redeemed"].numpy()[part]) if part is not None else np.zeros(0, bool)
            if unknown.any():
                raise DataError(f"{int(unknown.sum())} of the {len(part)} {name} sessions have no 'redeemed' label, "
                                f"e.g. session_id {sessions['session_id'].iloc[part[unknown][0]]!r}")
        positives = int(inputs["redeemed"].numpy()[train_rows].sum())
        if positives in (0, len(train_rows)):
            raise DataError(f"training needs redeemed and unredeemed sessions; {positives} of the {len(train_rows)} "
                            f"training sessions are redeemed (column 'redeemed' is {int(positives > 0)} on all of "
                            "them): a classifier cannot learn from one class")
        if valid_rows is not None and self.is_neural and self.train_config.monitor == "auc":
            positives = int(inputs["redeemed"].numpy()[valid_rows].sum())
            if positives in (0, len(valid_rows)):
                raise DataError(f"early stopping on validation AUC needs redeemed and unredeemed validation sessions; "
                                f"{positives} of the {len(valid_rows)} are redeemed (use monitor='loss' or more "
                                "validation sessions)")
        self.warn_leaks(sessions, inputs["redeemed"].numpy(), np.isin(np.arange(len(sessions)), train_rows))
        self.report_ = FitReport(n_train=len(train_rows), n_valid=0 if valid_rows is None else len(valid_rows),
                                 n_test=len(test_rows))
        train = take(inputs, torch.from_numpy(train_rows))
        valid = None if valid_rows is None else take(inputs, torch.from_numpy(valid_rows))
        if self.is_neural:
            items = self._item_embeddings(tables, train_rows)
            self.net_ = self.build_net(self._pretrained(tables, train_rows, items), items)
            if hasattr(self.net_, "solve"):  # a convex model, solved to its optimum (LR)
                self.history_ = self.net_.solve(train, valid, self.train_config.progress, carry=refit_carry(self),
                                                refit_next=refit_next(self))
                self.model_params_.update(self.net_.chosen_params)
            else:
                self.history_ = Trainer(self.train_config, checkpoint_dir).fit(
                    self.net_, train, valid, resume, metrics={"auc": auc_metric("p_redeem", "redeemed")},
                    on_epoch=on_epoch)
        else:
            self.net_ = self.model_class(self.layout(), **{"seed": self.train_config.seed, **self.net_params})
            self.net_.fit(*_arrays(train), None if valid is None else _arrays(valid),
                          progress=self.train_config.progress)
        if valid_rows is not None:
            self.warn_validation_leak(inputs["redeemed"].numpy()[valid_rows], self._scores(tables, valid_rows))
        return refit_after_selection(self, tables, test_rows, rows=rows)

    #: What fitting learns (:func:`~promokit.training.refit.refit_after_selection` takes it from the refit model).
    FITTED = ("feature_spec_", "table_options_", "labels_", "encoder_", "training_ids_", "net_", "store_", "_cache",
              "model_params_")
    AUTO_CANDIDATES = ("lr", "gbdt", "dmbgn")
    AUTO_METRIC = "auc"

    def validation_evaluation(self, data, validation=None, rows=None) -> Evaluation:
        """The fitted model's metrics on the sessions :meth:`fit` validated on, given what fit was given (``data``,
        ``rows``, ``validation``); before a refit, sessions it had not learnt from."""
        tables = self.read(data)
        valid = self.split_rows(tables, rows, validation)[1]
        if valid is None or not len(valid):
            raise DataError("validation: no validation sessions to score (model='auto' chooses on them)")
        return self.evaluate(tables, rows=valid)

    def held_out_frame(self, data) -> pd.DataFrame:
        tables = self.read(data)
        return tables.sessions.iloc[self.held_out(tables)]

    def warn_leaks(self, sessions: pd.DataFrame, redeemed: np.ndarray, trained: np.ndarray) -> None:
        """Warn of the features of ``feature_spec_`` (less its ``allow_leaky``) that alone predict ``redeemed`` (0/1,
        one per row of ``sessions``) on the training sessions (``trained``: a mask over the rows) almost perfectly
        (:func:`~promokit.data.leakage.find_leaks`): a column measured after the redemption, such as its order's
        amount, would let the model read the label instead of predicting it."""
        spec, label = self.feature_spec_, (self.labels_ or {}).get("redeemed", "redeemed")
        message = leak_warning(find_leaks(sessions, spec.categorical, spec.numeric, {label: (redeemed, trained)},
                                          spec.allow_leaky))
        if message:
            warnings.warn(message, stacklevel=3)

    def warn_validation_leak(self, redeemed: np.ndarray, p_redeem: np.ndarray) -> None:
        """Warn when the fitted model's AUC on the validation sessions (their labels ``redeemed``, its scores
        ``p_redeem``) is near perfect (:func:`~promokit.data.leakage.validation_leak_warning`); no verdict when they
        hold one class."""
        if redeemed.sum() in (0, len(redeemed)):
            return
        message = validation_leak_warning({"auc": auc(redeemed, p_redeem)})
        if message:
            warnings.warn(message, stacklevel=3)

    def split_rows(self, data, rows=None, validation=None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """The sessions :meth:`fit` trains on, validates on (None when there is no validation) and holds out for
        evaluation, given its ``rows`` and ``validation``: held out of ``rows`` (default every session) those
        collected from ``test_from`` on, or else the latest ``test_fraction`` of them
        (:func:`~promokit.voucher.history.hold_out_latest`, a seeded random share when they share one time);
        ``validation`` as :meth:`fit` takes it."""
        choice = _validation(validation)
        tables = read_tables(data)
        n = len(tables.sessions)
        usable = np.arange(n) if rows is None else _rows(rows, n, "rows")
        if self.test_cut is not None:
            held = tables.sessions["collect_time"].to_numpy()[usable] >= np.datetime64(self.test_cut, "ns")
            usable, test = usable[~held], np.sort(usable[held])
        elif self.test_fraction:
            usable, test = hold_out_latest(tables.sessions, usable, self.test_fraction, self.train_config.seed,
                                           "test_fraction")
        else:
            test = np.empty(0, dtype=np.int64)
        if choice.form == TIME:
            return (*self._validation_from(tables, usable, choice.value, len(test)), test)
        if choice.form == FRACTION:
            if choice.fraction == 0:
                return usable, None, test
            return (*hold_out_latest(tables.sessions, usable, choice.fraction, self.train_config.seed), test)
        valid_rows = _rows(choice.value, n, "validation")
        held = np.intersect1d(test, valid_rows)
        if len(held):
            raise DataError(f"validation: {len(held)} of the {len(valid_rows)} validation sessions are held out for "
                            f"evaluation (test_fraction={self.test_fraction}, test_from={self.test_from}), e.g. row "
                            f"{int(held[0])}; validate on other sessions, or hold none out with test_fraction=0")
        if rows is None:
            return np.setdiff1d(usable, valid_rows), valid_rows, test
        shared = np.intersect1d(usable, valid_rows)
        if len(shared):
            raise DataError(f"validation: {len(shared)} of the {len(valid_rows)} validation sessions are also "
                            f"training sessions (rows), e.g. row {int(shared[0])}; they must be apart")
        return usable, valid_rows, test

    def _validation_from(self, tables, usable: np.ndarray, start, held: int) -> tuple[np.ndarray, np.ndarray]:
        """The sessions ``usable`` for training split at the time ``start``: those collected from it on validate
        (``held``: the sessions held out for evaluation, which the error counts)."""
        later = at_or_after(tables.sessions["collect_time"], start)
        return split_at_time(later, usable, start, "sessions", held)

    def _holdout(self, tables, test: np.ndarray) -> dict:
        """What fit held out: by time, the sessions collected from ``cut`` on (the first collection time held out,
        when every session from it on is); else the seeded draw, recomputed on the same sessions."""
        collect = tables.sessions["collect_time"]
        cut = collect.iloc[test].min() if len(test) else None
        by_time = self.test_cut is not None or (cut is not None and len(test) == int((collect >= cut).sum()))
        return {"test_fraction": float(self.test_fraction),
                "test_from": None if self.test_from is None else str(self.test_cut),
                "how": "time" if by_time else "random", "cut": None if cut is None else str(cut),
                "seed": self.train_config.seed, "rows": len(collect), "held_out": len(test)}

    def held_out(self, data) -> np.ndarray:
        """The sessions of ``data`` (read as :meth:`predict` reads it) that :meth:`fit` held out for evaluation:
        those collected from the hold-out's cut on (any tables: the training ones, or later ones with more
        sessions), or, for a seeded draw among sessions sharing one time, the same draw on the same sessions."""
        self._check_fitted()
        holdout = self.holdout_ or {}
        tables = self.read(data)
        collect = tables.sessions["collect_time"]
        if not holdout.get("held_out"):
            return np.empty(0, dtype=np.int64)
        if holdout["how"] == "time":
            return np.flatnonzero((collect >= pd.Timestamp(holdout["test_from"] or holdout["cut"])).to_numpy())
        check_same_data(holdout, len(collect), "sessions")
        return hold_out_latest(tables.sessions, np.arange(len(collect)), holdout["test_fraction"], holdout["seed"],
                               "test_fraction")[1]

    def _item_embeddings(self, tables, train_rows: np.ndarray) -> torch.Tensor | None:
        """DMBGN's initial item embeddings (section 3.4.2), aligned to the training store's item codes, when
        ``params["item_embeddings"]``: MetaPath2Vec on the training sessions only (``"metapath2vec"``, options
        ``params["item_pretrain"]``) or a user table's path. Records their width as ``model_params_["item_dim"]``, so
        :meth:`load` rebuilds the net without them (the saved weights hold the table)."""
        source = self.model_params_.get("item_embeddings")
        if not self.uses_graphs or not source:
            return None
        from promokit.voucher.item_embedding import (
            METAPATH2VEC,
            pretrain_item_embeddings,
            read_item_embeddings,
        )

        if source == METAPATH2VEC:
            options = {"seed": self.train_config.seed, "progress": self.train_config.progress,
                       **(self.model_params_.get("item_pretrain") or {})}
            table = pretrain_item_embeddings(tables, train_rows, self.store_, **options)
        else:
            table = read_item_embeddings(source, self.store_)
        self.model_params_["item_dim"] = int(table.shape[1])
        return table

    def _pretrained(self, tables, train_rows: np.ndarray, item_embeddings: torch.Tensor | None = None):
        """The UVG encoder pre-trained by eq. (6) on the training sessions only, when ``params["pretrain"]``,
        starting from (and, with ``freeze_items``, keeping) the item embeddings."""
        if not self.model_params_.get("pretrain"):
            return None
        from promokit.voucher.pretrain import pretrain_uvg

        labels = _labels(tables.sessions)[train_rows]
        result = pretrain_uvg(self.store_, train_rows, labels, **self.uvg_params,
                              item_embeddings=item_embeddings, epochs=int(self.model_params_["pretrain"]),
                              batch_size=self.train_config.batch_size, lr=self.train_config.lr,
                              seed=self.train_config.seed, device=self.train_config.device)
        return result.state

    def build_net(self, pretrained=None, item_embeddings: torch.Tensor | None = None) -> nn.Module:
        """A new network of this model sized by the fitted encoder (and DMBGN's by its store), from the pre-trained UVG
        encoder's state ``pretrained`` and the initial ``item_embeddings`` when given; initialised by the torch seed."""
        if self.uses_graphs:
            return self.model_class(self.layout(), self.store_, history_len=self.max_history, pretrained=pretrained,
                                    item_embeddings=item_embeddings, **self.net_params)
        return self.model_class(self.layout(), **self.net_params)

    def predict(self, data, *, rows=None) -> pd.DataFrame:
        """The key columns the sessions carry (:data:`KEYS`: ``session_id``, ``user_id``, ``voucher_id`` [,
        ``campaign_id``]) and ``p_redeem``, for the sessions ``rows`` of ``data`` (all when omitted); with a
        :meth:`recalibrate`-d model, ``p_redeem`` recalibrated and the model's own score as ``p_redeem_raw``; a
        recalibration by group maps each session by its value of the column it was fitted by, and warns (one line)
        of the sessions whose value it did not see, which get its overall map.
        ``data``: :class:`~promokit.voucher.contract.VoucherTables`, or tables read as the training tables were
        (their profile columns, terms and item features; labels may be missing)."""
        self._check_fitted()
        tables = self.read(data)
        n = len(tables.sessions)
        rows = np.arange(n) if rows is None else _rows(rows, n, "rows")
        p = self._scores(tables, rows)
        keys = [c for c in KEYS if c in tables.sessions.columns]
        out = tables.sessions[keys].iloc[rows].reset_index(drop=True)
        if self.recalibration_ is None:
            out["p_redeem"] = p
        else:
            out["p_redeem"], out["p_redeem_raw"] = self._recalibrated(tables, rows, p), p
        return out

    def _recalibrated(self, tables: VoucherTables, rows: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The scores ``p`` of the sessions ``rows`` through the recalibration; one by group maps each by its group."""
        if not isinstance(self.recalibration_, GroupRecalibration):
            return self.recalibration_.apply(p)
        keys = self._recalibration_groups(tables, rows)
        message = new_groups_warning(self.recalibration_.new_groups(keys), len(rows), "sessions",
                                     self.recalibration_.by)
        if message:
            warnings.warn(message, stacklevel=3)
        return self.recalibration_.apply(p, keys)

    def _recalibration_groups(self, tables: VoucherTables, rows: np.ndarray) -> np.ndarray:
        """The sessions ``rows``' values of the column the recalibration is by."""
        by = self.recalibration_.by
        if by not in tables.sessions.columns:
            raise DataError(f"the recalibration is by {by!r}, a column the sessions lack; columns are "
                            f"{list(tables.sessions.columns)}")
        return tables.sessions[by].to_numpy()[rows]

    def _scores(self, tables: VoucherTables, rows: np.ndarray) -> np.ndarray:
        """The model's own p_redeem of the sessions ``rows`` of ``tables``, before any recalibration."""
        if not len(rows):
            return np.zeros(0)
        batch = take(self.inputs(tables), torch.from_numpy(rows))
        if self.is_neural:
            p = Trainer(self.train_config).predict(self.net_, batch)["p_redeem"].numpy()
        else:
            p = self.net_.predict(_arrays(batch)[0])["p_redeem"]
        return np.asarray(p, dtype=np.float64)

    def recalibrate(self, data, *, method: str = DEFAULT_METHOD, rows=None, base_rate: float | None = None,
                    by: str | None = None) -> VoucherModel:
        """Fit a :class:`~promokit.training.recalibration.Recalibration` of the model's scores on the labelled
        sessions ``rows`` of ``data`` (read as in :meth:`predict`, labels required; default: every session) — the
        latest labelled period, after the training one — and keep it: :meth:`predict` and :meth:`evaluate` apply
        it, :meth:`save` writes it (``recalibration.json``). ``method``: ``isotonic`` (default), ``platt`` or
        ``prior-shift`` (``base_rate``: the training base rate; None: the model's mean score on ``rows``). ``by``:
        a sessions column the tables keep (an id or a feature, e.g. AmExpert's ``campaign_id``) to fit a
        :class:`~promokit.training.recalibration.GroupRecalibration` by instead, one map per value shrunk toward
        the overall one (a value with few sessions leans on the overall map, an unseen one gets it). It replaces
        an earlier recalibration; :meth:`fit` drops it. Returns the model."""
        self._check_fitted()
        recalibration = Recalibration(method) if by is None else GroupRecalibration(method, by=by)
        tables = self.read(data, require_labels=True)
        if by is not None and by not in tables.sessions.columns:
            raise DataError(f"`by`: no column {by!r} in sessions (they keep the ids, times, label and features); "
                            f"columns are {list(tables.sessions.columns)}")
        n = len(tables.sessions)
        rows = np.arange(n) if rows is None else _rows(rows, n, "rows")
        y = _labels(tables.sessions)[rows]
        if np.isnan(y).any():
            raise DataError(f"{int(np.isnan(y).sum())} of the {len(y)} sessions to recalibrate on have no 'redeemed' "
                            "label")
        scores = self._scores(tables, rows)
        if by is None:
            self.recalibration_ = recalibration.fit(scores, y, base_rate=base_rate)
        else:
            self.recalibration_ = recalibration.fit(scores, y, tables.sessions[by].to_numpy()[rows],
                                                    base_rate=base_rate)
        return self

    def evaluate(self, data, *, held_out: bool = False, rows=None, group_by: str | None = None) -> Evaluation:
        """AUC and logloss (DMBGN section 4.3), ``n``, ``positives``, ``mean_p_redeem`` and ``redemption_rate`` of
        every labelled session of ``data`` (read as in :meth:`predict`, labels required), of those :meth:`fit` held
        out of it with ``held_out=True`` (``held_out(data)``; a model refit on every session has learnt from them:
        :meth:`held_out_evaluation` gives what they said before), or of the sessions ``rows``; with
        ``group_by`` (a sessions column, e.g. ``campaign_id``) also ``gauc``, the AUC within each group weighted by
        its sessions (``promokit.metrics.gauc``), which ignores how groups differ from each other, and
        ``gauc_groups`` / ``gauc_skipped_groups``, the groups scored and those with one class. The calibration of
        ``p_redeem`` (:func:`~promokit.metrics.calibration.calibration_report`, which warns beyond its ratio):
        ``mean_predicted``, ``mean_observed``, ``calibration_ratio``, ``ece`` and the tables ``calibration`` (by
        decile) and ``calibration_by_<group_by>``, by default by ``campaign_id`` when the sessions have it, the
        worst group first, with a column ``new`` when the model is recalibrated by that column (True for the values
        the recalibration did not see)."""
        self._check_fitted()
        check_held_out(held_out, rows)
        tables = self.read(data, require_labels=True)
        if held_out:
            rows = self.held_out(tables)
        if group_by is not None and group_by not in tables.sessions.columns:
            raise DataError(f"group_by: no column {group_by!r} in sessions; columns are {list(tables.sessions.columns)}")
        n = len(tables.sessions)
        rows = np.arange(n) if rows is None else _rows(rows, n, "rows")
        y = _labels(tables.sessions)[rows]
        if np.isnan(y).any():
            raise DataError(f"{int(np.isnan(y).sum())} of the {len(y)} evaluated sessions have no 'redeemed' label")
        p = self.predict(tables, rows=rows)["p_redeem"].to_numpy()
        metrics = {"auc": auc(y, p), "logloss": logloss(y, p), "n": int(len(y)), "positives": int(y.sum()),
                   "mean_p_redeem": float(p.mean()), "redemption_rate": float(y.mean())}
        if group_by is not None:
            grouped = gauc(y, p, tables.sessions[group_by].to_numpy()[rows])
            metrics.update(gauc=grouped.value, gauc_groups=grouped.n_scored, gauc_skipped_groups=grouped.n_skipped)
        by = group_by or ("campaign_id" if "campaign_id" in tables.sessions.columns else None)
        groups = None if by is None else tables.sessions[by].to_numpy()[rows]
        by_group = isinstance(self.recalibration_, GroupRecalibration) and self.recalibration_.by == by
        calibration = calibration_report(p, y, f"voucher model {self.model_name} p_redeem", by=by, groups=groups,
                                         new_groups=list(self.recalibration_.new_groups(groups)) if by_group else None)
        metrics.update(calibration.metrics)
        return Evaluation(f"voucher model {self.model_name}", metrics, tables=calibration.tables)

    def read(self, data, *, require_labels: bool = False, validity=None, labels: dict | None = None,
             **options) -> VoucherTables:
        """``data`` as :class:`~promokit.voucher.contract.VoucherTables` (as they are, when they are) read as the
        training tables were: their profile columns, terms and item features (``options`` given — ``categorical``,
        ``numeric``, ``terms``, ``item_features`` — must agree: :func:`~promokit.voucher.contract.agreed_options`)
        and their label's column (``labels`` maps another, as in :func:`check_tables`); ``validity`` describes the
        data, not the model."""
        self._check_fitted()
        return read_tables(data, require_labels=require_labels, validity=validity, labels=labels or self.labels_,
                           **agreed_options(self.table_options_, **options))

    # ---- model directory -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        self._check_fitted()
        config = {"promokit": __version__, "task": "voucher", "model": self.model_name, "params": self.model_params_,
                  "spec": self.feature_spec_.to_dict(), "tables": self.table_options_,
                  "train": self.train_config.to_dict(), "max_history": self.max_history, "refit": self.refit,
                  "holdout": self.holdout_, "labels": self.labels_}
        history = None if self.history_ is None else self.history_.to_dict()
        extra = {GRAPH_VOCABULARY: self.store_.vocabulary()} if self.uses_graphs else {}
        if self.recalibration_ is not None:
            extra[RECALIBRATION_FILE] = self.recalibration_.to_dict()
        write_model_dir(path, config, self.encoder_.to_dict(), self.net_, history, extra, self.training_ids_)

    @classmethod
    def load(cls, path: str | os.PathLike) -> VoucherModel:
        """A model directory written by :meth:`save`. A DMBGN net is sized by the saved graph vocabulary (and
        ``params["item_dim"]``: item embeddings are neither re-read nor re-trained, the weights hold them); the
        graphs of the tables it scores are built with that vocabulary at ``predict`` / ``evaluate``."""
        config = read_model_config(path, "voucher")
        holdout = config.get("holdout") or {}  # a format-1 directory without ``holdout`` held nothing out
        model = cls(config["model"], saved_params(MODELS.get(config["model"], (None,))[0], config["params"]),
                    TrainConfig.loaded(config["train"]), config["max_history"], holdout.get("test_fraction", 0.0),
                    holdout.get("test_from"), config["spec"].get("allow_leaky") or None, config.get("refit", False))
        model.holdout_, model.labels_ = config.get("holdout"), config.get("labels")
        model.model_params_, model.report_ = dict(model._model_params), FitReport()  # the counts are not saved
        model.history_, model.training_ids_ = History.read(path), read_training_ids(path)
        model.feature_spec_ = FeatureSpec.from_dict(config["spec"])
        model.recalibration_ = read_recalibration(path)
        model.encoder_ = TableEncoder.from_dict(read_json(path, "encoder.json"))
        vocabulary = read_json(path, GRAPH_VOCABULARY) if model.uses_graphs else None
        # a format-1 directory without the table options (``tables``): the profile columns and terms from the
        # features, DMBGN's item features from its graph vocabulary (unknown for the others, which do not read them)
        model.table_options_ = config.get("tables") or table_options(
            model.feature_spec_.categorical, model.feature_spec_.numeric, vocabulary and vocabulary["item_features"])
        model.store_ = None
        if model.uses_graphs:
            from promokit.voucher.graph import UVGStore

            model.store_ = UVGStore.empty(vocabulary)
        if model.is_neural:
            model.net_ = model.build_net()
            load_weights(model.net_, path)
            model.net_.eval()
        else:
            model.net_ = model.model_class(model.layout(), **model.net_params).load_texts(path)
        return model


def _labels(sessions: pd.DataFrame) -> np.ndarray:
    if "redeemed" not in sessions.columns:
        return np.full(len(sessions), np.nan, dtype=np.float32)
    return pd.to_numeric(sessions["redeemed"], errors="coerce").to_numpy(dtype=np.float32, na_value=np.nan)


def _validation(validation) -> Validation:
    """``fit(validation=…)`` read as every domain reads it (:func:`~promokit.data.split.parse_validation`)."""
    return parse_validation(validation, default=VALIDATION_FRACTION, tables=(VoucherTables, Mapping),
                            model="a voucher model",
                            takes={FRACTION: "a fraction in [0, 1) of the sessions (the latest)",
                                   TIME: "a time (the sessions collected from it on)", ROWS: "session rows of data"},
                            refuses={TABLE: "a user's history and DMBGN's graphs are built from the sessions of one "
                                            "set of tables, so the validation sessions belong in data: give their rows "
                                            "or the time they start from"})


def _rows(rows, n: int, name: str) -> np.ndarray:
    return check_rows(rows, n, name, "sessions")


def _arrays(batch: dict[str, torch.Tensor]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    x = {k: batch[k].numpy() for k in ("cat", "num")}
    return x, ({"redeemed": batch["redeemed"].numpy()} if "redeemed" in batch else {})

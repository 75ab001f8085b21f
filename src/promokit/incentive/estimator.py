"""``IncentiveModel``: fit a response model on an incentive experiment, score every value, save, load."""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from promokit import __version__
from promokit.data.errors import DataError
from promokit.data.ids import id_fractions, id_hashes
from promokit.data.leakage import allowed_columns, find_leaks, leak_warning, validation_leak_warning
from promokit.data.spec import FeatureSpec
from promokit.data.datasets import check_rows
from promokit.data.split import FRACTION, ROWS, TABLE, TEST_FRACTION, TIME, Validation, parse_validation, random_split
from promokit.incentive.contract import CUSTOMER, GRAPH_TABLES, MERCHANT, IncentiveTables, read_tables
from promokit.incentive.defaults import DEFAULT_MODEL, DEFAULT_TRAIN, DEFAULT_VALIDATION
from promokit.incentive.inputs import GraphInputs, InputEncoders
from promokit.incentive.models._curve import response_nll
from promokit.incentive.models.linear import FLOOR_PARAMS, check_floor_params, head_weights, solve_floor
from promokit.incentive.models.network import IncentiveNet
from promokit.incentive.offline_metrics import Responses, curve_figure, evaluate as evaluate_responses, off_pyplot
from promokit.metrics import auc
from promokit.metrics.uplift import uplift_figure
from promokit.training import (
    History,
    TrainConfig,
    Trainer,
    check_model_params,
    read_json,
    load_weights,
    read_model_config,
    read_training_ids,
    seed_everything,
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
from promokit.training.recalibration import (
    DEFAULT_METHOD,
    RECALIBRATION_FILE,
    GroupRecalibration,
    Recalibration,
    new_groups_warning,
    read_recalibration,
)
from promokit.training.auto import AUTO, fit_auto
from promokit.training.refit import REFIT, refit_after_selection, selected_model
from promokit.training.shard_loop import checkpoint_folder
from promokit.training.shards import TEST, TRAIN, VALID

#: name → (representation, customer head): the linear floor, the paper's model, its Table 2 baselines (hazard
#: head on other representations) and its Table 3 baselines (other heads on the same GNN).
MODELS = {"lr": ("linear", "hazard"), "gnn-hazard": ("gnn", "hazard"), "dnn": ("dnn", "hazard"),
          "dnn-h": ("dnn-h", "hazard"), "sbbm": ("gnn", "sbbm"), "cox": ("gnn", "cox"), "dssm-c": ("gnn", "dssm-c")}
#: The models that train on customers alone (no merchants, no edges): their representation needs no graph.
GRAPHLESS = tuple(name for name, (representation, _) in MODELS.items() if representation != "gnn")
MONITORS = ("loss", "customer_loglik", "auc_c")
#: The wide score table that ``promokit.allocation`` reads (``allocate budget``): the ids as ``user_id``, then one
#: ``score_<level>`` column per value.
SCORE_KEY, SCORE_PREFIX = "user_id", "score_"


@dataclass
class NodeSplit:
    """Customer and merchant rows for training, validation (early stopping) and test (held out)."""

    train_customers: np.ndarray
    valid_customers: np.ndarray
    test_customers: np.ndarray
    train_merchants: np.ndarray
    valid_merchants: np.ndarray
    test_merchants: np.ndarray


def node_split(n_customers: int, n_merchants: int, test_fraction: float = TEST_FRACTION,
               valid_fraction: float = DEFAULT_VALIDATION,
               seed: int = 0) -> NodeSplit:
    """Section 5's split by node: a random ``test_fraction`` of the customers and of the merchants is held out (the
    paper holds out 15 %; every promokit model's default is :data:`~promokit.data.split.TEST_FRACTION`);
    ``valid_fraction`` of the rest picks the epoch."""
    for name, value in (("test_fraction", test_fraction), ("valid_fraction", valid_fraction)):
        if not 0 <= value < 1:
            raise DataError(f"{name} must be in [0, 1), got {value}")
    fractions = ((1 - test_fraction) * (1 - valid_fraction), (1 - test_fraction) * valid_fraction, test_fraction)
    return NodeSplit(*random_split(n_customers, fractions, seed), *random_split(n_merchants, fractions, seed + 1))


#: ``holdout["rule"]`` of a model trained over a graph in parts: its customers' roles drawn by :func:`hashed_roles`
HASHED = "hashed"


def hashed_roles(ids, test_fraction: float, valid_fraction: float, seed: int) -> np.ndarray:
    """Each customer's role (:data:`TRAIN`, :data:`VALID` or :data:`TEST`) in the split of :func:`node_split`'s
    fractions drawn from a hash of its id and ``seed`` (:func:`~promokit.data.ids.id_fractions`): the split of a
    graph in parts, drawn in each part alone."""
    u = id_fractions(ids, seed)
    return np.where(u < test_fraction, TEST, np.where(u < test_fraction + (1 - test_fraction) * valid_fraction,
                                                       VALID, TRAIN))


@dataclass
class FitReport:
    """What :meth:`IncentiveModel.fit` counted: the labelled customers it trained on, validated on (picked the epoch
    or the strengths) and held out for evaluation (the training history is the model's ``history_``)."""

    n_train: int = 0
    n_valid: int = 0
    n_test: int = 0


class IncentiveModel(Estimator):
    """A response model by name (:data:`MODELS`) on a customer–merchant graph.

    Parameters, stored as given: ``model`` (the name), ``params`` (overrides of :class:`IncentiveNet`'s settings:
    ``conv``, ``width``, ``fanouts``, ``hidden``, ``fused_lasso`` …; for ``lr`` also ``l2_customers`` and
    ``l2_merchants``), ``train`` (a :class:`TrainConfig`, default :data:`DEFAULT_TRAIN`) and ``test_fraction``,
    the share of the labelled customers and of the merchants :meth:`fit` holds out for evaluation, drawn at random
    with the training seed (:data:`~promokit.data.split.TEST_FRACTION`; 0: none), and ``allow_leaky``, customer
    feature columns (a list, or comma-separated names) the label-leak guard of :meth:`fit` leaves alone, and ``refit``
    (:data:`~promokit.training.refit.REFIT`): once the epoch (``lr``: the L2 strengths) is chosen, fit again on every
    labelled customer and merchant with it fixed (:mod:`promokit.training.refit`; the held-out metrics of the
    selected model, scored before, are ``held_out_evaluation(data)``). What they imply: ``train_config``. What
    fitting learns ends in ``_`` (docs/conventions.md, one contract): ``levels_`` (the value list),
    ``customer_spec_``, ``merchant_spec_`` and ``item_spec_`` (the items' features on a customer–item graph, else
    None), ``labels_`` (the label mapping the tables were read with, which reading tables again applies; None: the
    roles' own names), ``graph_`` (the graph fit read: ``merchants``, ``items``, ``customers`` or ``none``) and
    ``customers_only_`` (fit on customers alone, which it scores alone), ``encoders_``, ``net_``,
    ``model_params_`` (every network setting, with the strengths ``lr`` chose, written to the model directory so
    that a later change of a default cannot change what a saved model is), ``history_`` and ``report_`` (of the
    selection, before a refit), ``training_ids_`` (the hashes of the ids of the customers and merchants trained on)
    and ``holdout_`` (what it held out, the validation fraction among it, and the refit); :meth:`recalibrate`,
    ``recalibration_``.

    ``data`` is :class:`IncentiveTables`, a mapping of ``customers``, ``merchants`` and ``edges`` to DataFrames or
    table paths, or a folder of the three (:func:`~promokit.incentive.contract.read_tables`; ``item_edges`` with
    ``items``, or ``customer_edges``, in place of merchants and edges: a customer–item or customer–customer graph,
    whose customers alone are scored); a fitted model reads tables with its own value list, feature columns, label
    mapping and kind of graph (:meth:`read`). Example::

        model = IncentiveModel("gnn-hazard").fit(tables)   # selects on 90 % of the nodes, then refits on all
        scores = model.predict(tables)              # customer_id, score_<level>: f_c at every value
        report = model.held_out_evaluation(tables)  # AUC_c, MAE_c, … on the held-out nodes, before the refit
        later_report = model.evaluate(later)        # every labelled node of a new experiment
        model.recalibrate(later)                    # f_c's level fitted on a later experiment (predict applies it)
        responses = model.responses(tables)         # f_c, f_m (and the hazard) as arrays
        customers, merchants = model.score_tables(tables)   # both sides in the `allocate budget` layout
        model.save("model/"); IncentiveModel.load("model/")
    """

    def __init__(self, model: str = DEFAULT_MODEL, params: dict | None = None, train: TrainConfig | None = None,
                 test_fraction: float = TEST_FRACTION, allow_leaky=None, refit: bool = REFIT):
        self.model = model
        self.params = params
        self.train = train
        self.test_fraction = test_fraction
        self.allow_leaky = allow_leaky
        self.refit = refit
        self._configure()

    def _configure(self) -> None:
        self.train_config = check_common_params(self.model, self.params, self.train, models=MODELS,
                                                monitors=MONITORS, default_train=DEFAULT_TRAIN)
        check_test_fraction(self.test_fraction)
        check_refit(self.refit)
        self.allowed_leaks = allowed_columns(self.allow_leaky)
        representation, head = MODELS[self.configured_model]
        given = dict(self.params or {})
        floor = FLOOR_PARAMS if representation == "linear" else {}
        check_model_params(self.configured_model, IncentiveNet, given, own=floor)
        check_floor_params(given)
        self._model_params = {**net_defaults(), **floor, "representation": representation, "head": head, **given}

    # ---- fit ------------------------------------------------------------------------------------------
    def fit(self, data, *, validation=None, checkpoint_dir: str | os.PathLike | None = None,
            resume: bool = False, on_epoch=None) -> IncentiveModel:
        """Train on the labelled customers and merchants of ``data`` except a held-out ``test_fraction`` of each
        (:meth:`split` gives the rows; ``evaluate(data, held_out=True)`` scores them). ``validation``, read as in
        every domain (:func:`~promokit.data.split.parse_validation`), chooses the nodes that pick the epoch (``lr``:
        its L2 strengths): a fraction of the rest, in [0, 1), of the labelled customers and of the merchants (None for
        10 %, 0 for none: the epochs run to the end), or customer rows of ``data`` (labelled, none held out; every
        merchant not held out then trains). A table given apart or a time is refused in one line: the customers and
        merchants live in one graph, and have no time. ``data`` read here takes the labels under their roles' names:
        read tables whose label columns have other names with :func:`~promokit.incentive.contract.read_tables`
        (``labels=…``, which the model then keeps). Features and edges of every node are used, unlabelled customers'
        included: they pass messages but are in no loss or validation metric (transductive, as the paper trains on
        85 % of the nodes of one graph). ``checkpoint_dir`` keeps the epoch checkpoint there (``resume``: continue
        from it); ``on_epoch`` is passed to :meth:`Trainer.fit`. It drops an earlier :meth:`recalibrate`.

        Before training, a customer feature that alone predicts the training customers' redemption almost perfectly
        (a label leak: a column measured after the response, such as the amount redeemed) is warned of, naming it
        with its univariate AUC (:func:`~promokit.data.leakage.find_leaks`, above
        :data:`~promokit.data.leakage.LEAK_AUC`), unless ``allow_leaky`` names it; after training, so is an AUC_c on
        the validation customers above :data:`~promokit.data.leakage.VALIDATION_LEAK_AUC`.

        With ``refit`` (the default) and nodes held out for validation or evaluation, the held-out customers and
        merchants are then scored (:meth:`held_out_evaluation` gives it back) and the model fit again on every
        labelled customer and merchant with the epochs (``lr``: the L2 strengths) it chose
        (:func:`~promokit.training.refit.refit_after_selection`): ``history_`` and ``report_`` stay the selection's,
        ``holdout_["refit"]`` says what the refit learnt from. Training over a graph in parts
        (:mod:`promokit.incentive.parts_training`) refits from the records of every labelled node, keeping no held-out
        metrics (the held-out nodes are not scored first)."""
        checkpoint_folder(checkpoint_dir)  # a local folder: a URI is refused before anything is read
        choice = _validation(validation)  # a bad `validation` is refused before anything changes
        if self.model == AUTO:
            return fit_auto(self, read_tables(data), validation=validation)
        self._configure()  # prepare() sets model_params_ afresh: what an earlier fit of lr chose is no parameter
        self.recalibration_ = None
        valid_fraction = choice.fraction
        validating = bool(valid_fraction) or choice.form == ROWS
        tables = read_tables(data)
        self.customers_only_ = tables.customers_only
        if tables.customers_only and self._model_params["representation"] == "gnn":
            raise DataError(f"model {self.model_name!r} needs a graph (merchants and edges, item_edges or customer_edges); "
                            f"with customers only, use one of {list(GRAPHLESS)}")
        if not len(tables.labelled_customers):
            raise DataError(f"customers: training needs the 'level' and 'redeemed' columns; none of the "
                            f"{len(tables.customers)} customers has a label")
        cfg = self.train_config
        split = self._drawn(tables, valid_fraction)
        if choice.form == ROWS:
            split = self._validate_on(split, tables, choice.value)
        self.holdout_ = {"test_fraction": float(self.test_fraction),
                         "valid_fraction": None if choice.form == ROWS else valid_fraction,
                         "seed": cfg.seed, "rows": len(tables.labelled_customers),
                         "held_out": len(split.test_customers), "merchants": len(tables.merchants),
                         "held_out_merchants": len(split.test_merchants)}
        if not tables.has_merchant_labels:
            split.train_merchants = split.valid_merchants = np.empty(0, dtype=np.int64)
        for name, rows in (("training", split.train_customers), ("validation", split.valid_customers)):
            if validating and len(np.unique(tables.redeemed[rows])) < 2:
                raise DataError(f"customers: the {len(rows)} {name} customers need redemptions and non-redemptions; "
                                "use more customers or other fractions")
        allowed = self._allowed_leaks(tables)
        seed_everything(cfg.seed)
        self.training_ids_ = id_hashes(np.concatenate([tables.customers[CUSTOMER].to_numpy()[split.train_customers],
                                                      tables.merchants[MERCHANT].to_numpy()[split.train_merchants]]))
        self.prepare(tables)
        self.customer_spec_ = replace(self.customer_spec_, allow_leaky=allowed)
        self.warn_leaks(tables, split.train_customers)
        train_rows = labelled_rows(tables, split.train_customers, split.train_merchants)
        valid_rows = labelled_rows(tables, split.valid_customers, split.valid_merchants) if validating else None
        if self.model_params_["representation"] == "linear":
            self.history_ = solve_floor(self.net_, train_rows, valid_rows, cfg.monitor, progress=cfg.progress,
                                        start=self._floor_start(), **{k: self.model_params_[k] for k in FLOOR_PARAMS})
            self.model_params_.update(self.net_.chosen_params)
        else:
            metrics = validation_metrics() if valid_rows else None
            self.history_ = Trainer(cfg if valid_rows else replace(cfg, monitor="loss"), checkpoint_dir).fit(
                self.net_, train_rows, valid_rows, resume, metrics=metrics, on_epoch=on_epoch)
        self.report_ = FitReport(len(split.train_customers), len(split.valid_customers) if validating else 0,
                                 len(split.test_customers))
        if valid_rows:
            self.warn_validation_leak(tables, split.valid_customers)
        held = (split.test_customers, split.test_merchants) if len(split.test_customers) else None
        return refit_after_selection(self, tables, held)

    #: What fitting learns (:func:`~promokit.training.refit.refit_after_selection` takes it from the refit model);
    #: ``history_``, ``report_`` and ``holdout_`` stay the selection's.
    FITTED = ("levels_", "customer_spec_", "merchant_spec_", "labels_", "customers_only_", "graph_", "item_spec_",
              "encoders_", "net_", "training_ids_", "model_params_")
    AUTO_CANDIDATES = ("lr", "gnn-hazard")
    AUTO_METRIC = "auc_c"

    def validation_evaluation(self, data, validation=None) -> Evaluation:
        """The fitted model's metrics on the customers and merchants :meth:`fit` validated on (``validation``, as fit
        was given it); before a refit, nodes it had not learnt from."""
        choice = _validation(validation)
        split = self.split_rows(data, validation)
        if choice.form != ROWS and (not choice.fraction or not len(split.valid_customers)):
            raise DataError("validation: no validation customers to score (model='auto' chooses on them)")
        return self.evaluate(data, rows=(split.valid_customers, split.valid_merchants))

    def _validate_on(self, split: NodeSplit, tables: IncentiveTables, rows) -> NodeSplit:
        """``split`` (drawn without validation) with the customer rows ``rows`` (``fit(validation=rows)``) moved from
        training to validation: each a labelled customer of ``tables``, none held out; else a one-line error."""
        rows = check_rows(rows, len(tables.customers), "`validation`", "customers")
        unlabelled = np.setdiff1d(rows, tables.labelled_customers)
        if len(unlabelled):
            raise DataError(f"`validation`: {len(unlabelled)} of the {len(rows)} validation customers have no label "
                            f"('level' and 'redeemed'), e.g. row {int(unlabelled[0])}; validate on labelled customers")
        held = np.intersect1d(rows, split.test_customers)
        if len(held):
            raise DataError(f"`validation`: {len(held)} of the {len(rows)} validation customers are held out for "
                            f"evaluation (test_fraction={self.test_fraction}), e.g. row {int(held[0])}; validate on "
                            "other customers, or hold none out with test_fraction=0")
        split.train_customers, split.valid_customers = np.setdiff1d(split.train_customers, rows), rows
        return split

    def held_out_frame(self, data) -> pd.DataFrame:
        """The rows of the customers and then of the merchants of ``data`` that :meth:`fit` held out for evaluation,
        in one table, each table's columns under its name (``customers.level``, ``merchants.shares`` …): what
        :meth:`held_out_evaluation` knows them by."""
        tables = self.read(data)
        customers, merchants = self.held_out(tables)
        return pd.concat([tables.customers.iloc[customers].add_prefix("customers."),
                          tables.merchants.iloc[merchants].add_prefix("merchants.")], ignore_index=True)

    def _allowed_leaks(self, tables: IncentiveTables) -> list[str]:
        """``allow_leaky``'s columns, each a customer feature of ``tables``, else a one-line error."""
        features = [*tables.customer_spec.categorical, *tables.customer_spec.numeric]
        for name in self.allowed_leaks:
            if name not in features:
                raise DataError(f"`allow_leaky` names {name!r}, which is not a customer feature; the customer features "
                                f"are {features}")
        return list(self.allowed_leaks)

    def _floor_start(self) -> dict[str, np.ndarray] | None:
        """Where a refit's floor starts its solves: the selected floor's weights (:func:`head_weights`; both fitted
        their encoders on the same tables, so the columns match); None outside a refit, or where the heads' shapes
        differ."""
        selected = selected_model(self)
        if selected is None or selected.net_ is None:
            return None
        start, fresh = head_weights(selected.net_), head_weights(self.net_)
        return start if all(start[side].shape == fresh[side].shape for side in start) else None

    def warn_leaks(self, tables: IncentiveTables, rows: np.ndarray) -> None:
        """Warn of the customer features (less the spec's ``allow_leaky``) that alone predict the redemption of the
        customers ``rows`` of ``tables`` (the training customers) almost perfectly
        (:func:`~promokit.data.leakage.find_leaks`): a column measured after the response would let the model read
        the label instead of predicting it."""
        spec, label = self.customer_spec_, (self.labels_ or {}).get("redeemed", "redeemed")
        leaks = find_leaks(tables.customers.iloc[rows], spec.categorical, spec.numeric,
                           {label: (tables.redeemed[rows], None)}, spec.allow_leaky)
        message = leak_warning(leaks)
        if message:
            warnings.warn(message, stacklevel=3)

    def warn_validation_leak(self, tables: IncentiveTables, rows: np.ndarray) -> None:
        """Warn when the fitted model's AUC_c (f_c at the offered value against the redemption) on the validation
        customers ``rows`` of ``tables`` is near perfect (:func:`~promokit.data.leakage.validation_leak_warning`);
        no verdict when they hold one class."""
        y = tables.redeemed[rows]
        if y.sum() in (0, len(y)):
            return
        f_c = self._raw_responses(tables).customers[rows]
        message = validation_leak_warning({"auc_c": auc(y, f_c[np.arange(len(rows)), tables.customer_level[rows]])})
        if message:
            warnings.warn(message, stacklevel=3)

    def prepare(self, tables: IncentiveTables) -> GraphInputs:
        """What :meth:`fit` sets before it trains: the value list, the feature specs, the label mapping and the input
        encoders of ``tables``, and an untrained network with their encoded inputs attached, its weights drawn from the
        training seed, built by the settings the parameters give (``model_params_``). Returns those inputs."""
        seed_everything(self.train_config.seed)
        self.model_params_, self.recalibration_ = dict(self._model_params), None
        self.levels_, self.customer_spec_ = tables.levels, tables.customer_spec
        self.merchant_spec_ = tables.merchant_spec
        self.labels_, self.customers_only_ = tables.labels or None, tables.customers_only
        self.graph_, self.item_spec_ = tables.graph, tables.item_spec
        self.encoders_ = InputEncoders.fit(tables)
        inputs = self.encoders_.transform(tables)
        self.net_ = self.build_net().attach(inputs)
        return inputs

    def prepare_encoded(self, levels, customer_spec: FeatureSpec, merchant_spec: FeatureSpec,
                        encoders: InputEncoders) -> IncentiveModel:
        """What :meth:`prepare` sets, from a customer–merchant graph's value list, feature specs and encoders fitted
        elsewhere (over a graph in parts, :mod:`promokit.incentive.parts_training`): no inputs attached."""
        seed_everything(self.train_config.seed)
        self.model_params_, self.recalibration_ = dict(self._model_params), None
        self.levels_, self.customer_spec_, self.merchant_spec_ = np.asarray(levels, np.float64), customer_spec, \
            merchant_spec
        self.labels_, self.customers_only_, self.graph_, self.item_spec_ = None, False, "merchants", None
        self.encoders_ = encoders
        self.net_ = self.build_net()
        return self

    def build_net(self) -> IncentiveNet:
        """An untrained :class:`IncentiveNet` of the encoders' widths (weights from torch's generator as it is)."""
        encoders = self.encoders_
        return IncentiveNet(encoders.customers.cardinalities, encoders.customers.numeric_width,
                            encoders.customer_structure.numeric_width, partner_cardinalities(encoders, self.graph_),
                            encoders.merchants.numeric_width, encoders.merchant_structure.numeric_width,
                            self.levels_.tolist(), **network_params(self.model_params_))

    def split_rows(self, data, validation=None) -> NodeSplit:
        """The rows this model trains, validates and is tested on (seeded by the training seed): the labelled
        customers (all of them when every customer has a label) and the merchants, given ``validation`` as
        :meth:`fit` takes it, as every domain's ``split_rows`` does: None, the split fit drew (its
        ``holdout_["valid_fraction"]``; before fit, :data:`~promokit.incentive.defaults.DEFAULT_VALIDATION`); a
        fraction of the rest that validates (0: none); or the validation customers' rows, moved out of training (a
        fit given them records no fraction and drew its split without validation: given None here, they show as
        training rows)."""
        choice = _validation(validation)
        tables = self.read(data)
        if choice.form == ROWS:
            return self._validate_on(self._drawn(tables, 0.0), tables, choice.value)
        return self._drawn(tables, None if validation is None else choice.fraction)

    def _drawn(self, tables: IncentiveTables, valid_fraction: float | None) -> NodeSplit:
        """:meth:`split_rows` of ``tables`` with ``valid_fraction`` of the rest validating (None: fit's)."""
        labelled = tables.labelled_customers
        holdout = getattr(self, "holdout_", None) or {}
        if valid_fraction is None:
            valid_fraction = holdout.get("valid_fraction", DEFAULT_VALIDATION) or 0.0
        if holdout.get("rule") == HASHED:  # trained over parts: roles drawn from the ids
            fractions = self.test_fraction, valid_fraction, self.train_config.seed
            roles = hashed_roles(tables.customers[CUSTOMER].to_numpy()[labelled], *fractions)
            merchants = np.arange(len(tables.merchants)) if self.merchants_trained else np.empty(0, np.int64)
            merchant_roles = hashed_roles(tables.merchants[MERCHANT].to_numpy()[merchants], *fractions)
            return NodeSplit(*(labelled[roles == role] for role in (TRAIN, VALID, TEST)),
                             *(merchants[merchant_roles == role] for role in (TRAIN, VALID, TEST)))
        split = node_split(len(labelled), len(tables.merchants), self.test_fraction, valid_fraction,
                           self.train_config.seed)
        split.train_customers, split.valid_customers, split.test_customers = (
            labelled[rows] for rows in (split.train_customers, split.valid_customers, split.test_customers))
        return split

    def held_out(self, data) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the customers and of the merchants of ``data`` that :meth:`fit` held out for evaluation,
        recomputed by :meth:`split`: ``data`` is the graph fit was given (as many labelled customers and merchants)."""
        self._check_fitted()
        tables = self.read(data)
        check_same_data(self.holdout_, len(tables.labelled_customers), "labelled customers")
        holdout = self.holdout_ or {}
        merchants = {"rows": holdout.get("merchants"), "held_out": holdout.get("held_out_merchants")}
        check_same_data(merchants, len(tables.merchants), "merchants")
        split = self.split_rows(tables)
        return split.test_customers, split.test_merchants

    # ---- predict ----------------------------------------------------------------------------------------
    def predict(self, data) -> pd.DataFrame:
        """One row per customer of ``data``, in its order: ``customer_id``, then ``score_<level>``, the predicted
        response f_c at each value of the model's list. This is the customers' score table of ``allocate budget``
        (wide layout, keyed by ``customer_id``); :meth:`score_tables` gives the merchants' too. Labels may be
        absent. A :meth:`recalibrate`-d model scores the recalibrated f_c: the table holds no other column, so that
        ``allocate budget`` reads it as it is (the model's own curve: :attr:`Responses.customers_raw`)."""
        self._check_fitted()
        tables = self.read(data, require_labels=False)
        return wide_scores(tables.customers[CUSTOMER], self.responses(tables).customers, self.levels_, key=CUSTOMER)

    def responses(self, data) -> Responses:
        """f_c and f_m of every customer and merchant of ``data`` at every value of the model's list; with a
        :meth:`recalibrate`-d model, f_c recalibrated (:meth:`recalibrated`) and the model's own as
        ``customers_raw``. f_m is never recalibrated (a share ratio, not a probability)."""
        raw = self._raw_responses(data)
        if self.recalibration_ is None:
            return raw
        return replace(raw, customers=self.recalibrated(raw.customers), customers_raw=raw.customers)

    def recalibrated(self, f_c: np.ndarray) -> np.ndarray:
        """The model's own f_c, ``(N_c, K)`` (every customer at every value of the model's list), through
        :attr:`recalibration_` (as it is without one): its one monotone map applied at every value, so each curve
        still rises with the value; by level, each value's column by that value's map (a value the recalibration
        did not see by its overall map, with a one-line warning), which keeps the customers' order at each value but
        not every curve rising where the values' maps cross."""
        if self.recalibration_ is None:
            return f_c
        if not isinstance(self.recalibration_, GroupRecalibration):
            return self.recalibration_.apply(f_c).reshape(f_c.shape)
        n = len(f_c)
        message = new_groups_warning({level: n for level in self.recalibration_.new_groups(self.levels_)},
                                     n * len(self.levels_), "customer × level scores", self.recalibration_.by)
        if message and n:
            warnings.warn(message, stacklevel=3)
        return self._by_level(f_c)

    def _by_level(self, f_c: np.ndarray) -> np.ndarray:
        """``f_c`` ``(N_c, K)`` through the recalibration by level, each value's column by that value's map."""
        return np.stack([self.recalibration_.apply(f_c[:, j], np.full(len(f_c), level))
                         for j, level in enumerate(self.levels_)], axis=1).reshape(f_c.shape)

    @property
    def merchants_trained(self) -> bool:
        """Whether the merchant term of eq. 7 trained the merchant head. False for a model trained from training
        records without merchant records (no labelled merchant in the parts): its f_m is NaN, not an untrained
        head's output."""
        holdout = getattr(self, "holdout_", None) or {}
        return holdout.get("merchants_trained", holdout.get("records") is None and holdout.get("rule") != HASHED)

    def _raw_responses(self, data) -> Responses:
        """The model's own responses (:meth:`responses` before any recalibration)."""
        self._check_fitted()
        tables = self.read(data, require_labels=False)
        self._check_levels(tables)
        self.net_.attach(self.encoders_.transform(tables))
        n_c, n_m = len(tables.customers), len(tables.merchants)
        rows = {"node": torch.cat([torch.arange(n_c), torch.arange(n_m)]),
                "customer": torch.cat([torch.ones(n_c), torch.zeros(n_m)])}
        out = Trainer(self.train_config).predict(self.net_, rows)
        response = out["response"].numpy().astype(np.float64)
        if not self.merchants_trained:
            response[n_c:] = np.nan
        hazard = out["hazard"][:n_c].numpy().astype(np.float64) if "hazard" in out else None
        return Responses(self.levels_, response[:n_c], response[n_c:], hazard)

    def score_tables(self, data) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The customers' and merchants' score tables as ``incentive predict`` writes them for ``allocate budget``
        (its scores and merchants tables): the node id as ``user_id`` and one ``score_<level>`` column per value."""
        self._check_fitted()
        tables = self.read(data, require_labels=False)
        r = self.responses(tables)
        return (wide_scores(tables.customers[CUSTOMER], r.customers, r.levels),
                wide_scores(tables.merchants[MERCHANT], r.merchants, r.levels))

    def recalibrate(self, data, *, method: str = DEFAULT_METHOD, base_rate: float | None = None,
                    by: str | None = None) -> IncentiveModel:
        """Fit a :class:`~promokit.training.recalibration.Recalibration` of f_c on the labelled customers of ``data``
        — a later experiment period, each customer with the value offered and the response — and keep it:
        :meth:`responses` (so :meth:`predict`, :meth:`score_tables` and :meth:`evaluate`) applies it, :meth:`save`
        writes it (``recalibration.json``). One map is fitted on (f_c at the offered value, redeemed) and applied at
        every value: being monotone, it keeps each curve rising with the value and the customers' order at each
        value. ``method``: ``isotonic`` (default), ``platt`` or ``prior-shift`` (``base_rate``: the training
        redemption rate; None: the model's mean f_c at the offered values). ``by="level"``: a
        :class:`~promokit.training.recalibration.GroupRecalibration` by the offered value instead, one map per value
        fitted on the customers offered it and shrunk toward the overall one (a value offered to few customers leans
        on the overall map, one offered to none gets it), each applied at its own value (:meth:`recalibrated`); it
        warns (one line) when the values' maps cross so that some of these customers' curves no longer rise with the
        value. It replaces an earlier recalibration; :meth:`fit` drops it. Returns the model."""
        self._check_fitted()
        if by not in (None, "level"):
            raise DataError(f"`by`: an incentive model recalibrates by 'level' (one map per offered value) or not by "
                            f"group; got {by!r}")
        recalibration = Recalibration(method) if by is None else GroupRecalibration(method, by=by)
        tables = self.read(data, require_labels=False)  # the customers' labels alone: merchants' may be absent
        rows = tables.labelled_customers
        if not len(rows):
            raise DataError(f"customers: recalibrating needs the 'level' and 'redeemed' columns; none of the "
                            f"{len(tables.customers)} customers has a label")
        f_c = self._raw_responses(tables).customers[rows]
        offered = f_c[np.arange(len(rows)), tables.customer_level[rows]]
        if by is None:
            recalibration.fit(offered, tables.redeemed[rows], base_rate=base_rate)
            maps = [recalibration]
        else:
            recalibration.fit(offered, tables.redeemed[rows], self.levels_[tables.customer_level[rows]],
                              base_rate=base_rate)
            maps = [recalibration.overall, *(g["map"] for g in recalibration.groups.values() if g["map"] is not None)]
        if any(np.any(np.diff(m.apply(np.linspace(0.0, 1.0, 201))) < 0) for m in maps):
            raise DataError(f"the {method} map fitted on {len(rows)} customers decreases in f_c (it would bend the "
                            "response curves down): f_c ranks these customers' redemptions backwards; use isotonic or "
                            "prior-shift")
        self.recalibration_ = recalibration
        if by is not None:
            falls = [(np.diff(curves, axis=1) < -1e-6).any(axis=1) for curves in (f_c, self._by_level(f_c))]
            falling = float((falls[1] & ~falls[0]).mean())  # curves that rose before and fall now
            if falling > 0:
                warnings.warn(f"recalibrated by level, the curves of {falling:.1%} of the {len(rows):,} customers "
                              "fitted on fall somewhere as the value rises (the values' maps cross)", stacklevel=2)
        return self

    # ---- evaluate ---------------------------------------------------------------------------------------
    def evaluate(self, data, *, held_out: bool = False, truth: np.ndarray | None = None, rows=None) -> Evaluation:
        """The paper's offline metrics on labelled ``data`` (:func:`~promokit.incentive.offline_metrics.evaluate`):
        ``auc_c``, ``mae_c``, ``mse_c``, ``mae_m``, ``mse_m``, ``monotone_violations``, ``auuc``, ``qini`` and, with
        ``truth`` (a synthetic world's true response curves, one row per customer of ``data`` in its order × the
        model's values), ``curve_mae_c``. Scored, as in every domain, on every labelled node of ``data`` (its
        ``customers`` count them); with ``held_out=True`` on the nodes :meth:`split` held out of training; or on
        ``rows``: the customer and merchant rows as :meth:`held_out` gives them, a pair of arrays. A refit model has
        learnt from the held-out nodes too: :meth:`held_out_evaluation` gives what they said of the selected model,
        scored before the refit. Tables:
        ``response_curve`` (Figure 5),
        ``uplift_by_quintile`` (Figure 4), ``uplift_by_level`` (each value against the lowest) and the calibration of
        f_c at the offered value (``mean_predicted``, ``mean_observed``, ``calibration_ratio``, ``ece``; tables
        ``calibration`` and ``calibration_by_level``, the worst value first, a warning beyond the ratio), of the
        recalibrated f_c for a :meth:`recalibrate`-d model (recalibrated by level: with a column ``new``, True for
        the values its recalibration did not see); figures:
        ``response_curves`` and ``uplift_curves``."""
        self._check_fitted()
        check_held_out(held_out, rows)
        tables = self.read(data)
        if rows is not None:
            customer_rows, merchant_rows = _node_rows(rows, tables)
        elif held_out:
            customer_rows, merchant_rows = self.held_out(tables)
        else:
            customer_rows, merchant_rows = tables.labelled_customers, np.arange(len(tables.merchants))
        if not self.merchants_trained:
            merchant_rows = merchant_rows[:0]
        if truth is not None:
            truth = np.asarray(truth, dtype=np.float64)
            if truth.shape != (len(tables.customers), len(self.levels_)):
                raise DataError(f"truth: shape {truth.shape}, but the tables have {len(tables.customers)} customers "
                                f"and the model {len(self.levels_)} values")
        by_level = isinstance(self.recalibration_, GroupRecalibration)
        result = evaluate_responses(self.responses(tables), tables, customer_rows, merchant_rows, truth,
                                    new_levels=list(self.recalibration_.new_groups(self.levels_)) if by_level else None)
        figures = {"response_curves": curve_figure({self.model_name: result.curve}),
                   "uplift_curves": off_pyplot(uplift_figure(result.uplift_curves, f"{self.model_name}: each value "
                                                             f"against {self.levels_[0]:g} (dashed: random)"))}
        return Evaluation(f"incentive {self.model_name}", result.metrics, figures=figures,
                          tables={"response_curve": result.curve, "uplift_by_quintile": result.uplift,
                                  "uplift_by_level": result.level_uplift, **result.calibration})

    def read(self, data, *, require_labels: bool = True, labels: dict[str, str] | None = None) -> IncentiveTables:
        """``data`` as tables (tables already read are returned as they are); a fitted model reads them with its value
        list, feature columns and label mapping, which ``labels`` (label role → column) replaces."""
        if getattr(self, "net_", None) is None:
            return read_tables(data, require_labels=require_labels, labels=labels)
        tables = read_tables(data, levels=self.levels_, require_labels=require_labels, labels=labels or self.labels_,
                             customer_features=self.customer_spec_, merchant_features=self.merchant_spec_,
                             item_features=self.item_spec_)
        if tables.graph != self.graph_:
            fit_on = {"none": "customers only", "merchants": "a graph", "items": "a customer–item graph",
                      "customers": "a customer–customer graph"}[self.graph_]
            raise DataError(f"the model was fit on {fit_on}: give {GRAPH_TABLES[self.graph_]}")
        return tables

    def _check_levels(self, tables: IncentiveTables) -> None:
        if tables.levels.tolist() != self.levels_.tolist() and len(tables.customer_level):
            unknown = np.setdiff1d(tables.levels, self.levels_)
            if len(unknown):
                raise DataError(f"the tables offer levels {unknown.tolist()} that the model was not trained on "
                                f"(its value list is {self.levels_.tolist()})")

    # ---- model directory --------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        self._check_fitted()
        config = {"promokit": __version__, "task": "incentive", "model": self.model_name, "params": self.model_params_,
                  "levels": self.levels_.tolist(), "train": self.train_config.to_dict(),
                  "split": self.holdout_, "refit": self.refit, "labels": self.labels_,
                  "customers_only": self.customers_only_,
                  "graph": self.graph_, "item_spec": None if self.item_spec_ is None else self.item_spec_.to_dict(),
                  "customer_spec": self.customer_spec_.to_dict(), "merchant_spec": self.merchant_spec_.to_dict()}
        history = None if self.history_ is None else self.history_.to_dict()
        extra = None if self.recalibration_ is None else {RECALIBRATION_FILE: self.recalibration_.to_dict()}
        write_model_dir(path, config, self.encoders_.to_dict(), self.net_, history, extra, self.training_ids_)

    @classmethod
    def load(cls, path: str | os.PathLike) -> IncentiveModel:
        config = read_model_config(path, "incentive")
        holdout = config["split"]
        model = cls(config["model"], config["params"], TrainConfig.loaded(config["train"]), holdout["test_fraction"],
                    config["customer_spec"].get("allow_leaky") or None,
                    config.get("refit", False))  # a format-1 directory without ``refit`` was not refit
        model.levels_ = np.asarray(config["levels"], dtype=np.float64)
        model.labels_ = config.get("labels")  # None in a format-1 directory without ``labels``
        model.customers_only_ = config.get("customers_only", False)
        model.graph_ = config.get("graph", "none" if model.customers_only_ else "merchants")
        model.item_spec_ = None if config.get("item_spec") is None else FeatureSpec.from_dict(config["item_spec"])
        model.holdout_, model.model_params_, model.report_ = holdout, dict(model._model_params), FitReport()
        model.history_, model.training_ids_ = History.read(path), read_training_ids(path)
        model.customer_spec_ = FeatureSpec.from_dict(config["customer_spec"])
        model.merchant_spec_ = FeatureSpec.from_dict(config["merchant_spec"])
        model.recalibration_ = read_recalibration(path)
        model.encoders_ = InputEncoders.from_dict(read_json(path, "encoder.json"))
        model.net_ = model.build_net()
        load_weights(model.net_, path)
        model.net_.eval()
        return model


def _node_rows(rows, tables: IncentiveTables) -> tuple[np.ndarray, np.ndarray]:
    """``evaluate(rows=…)``: the customer and merchant rows (a pair of integer arrays, as ``held_out`` gives them)
    checked against ``tables``, else a one-line error."""
    if not isinstance(rows, (tuple, list)) or len(rows) != 2:
        raise DataError("rows: give the customer rows and the merchant rows, a pair of arrays (as held_out(data) "
                        f"gives them), got {type(rows).__name__}")
    checked = []
    for name, given, n in (("customer", rows[0], len(tables.customers)), ("merchant", rows[1], len(tables.merchants))):
        given = np.asarray(given)
        if given.size and (given.dtype.kind not in "iu" or given.min() < 0 or given.max() >= n):
            raise DataError(f"rows: the {name} rows must be row positions in [0, {n}), got {given[:5].tolist()}…")
        checked.append(given.astype(np.int64).reshape(-1))
    return checked[0], checked[1]


def partner_cardinalities(encoders: InputEncoders, graph: str) -> list[int] | None:
    """The categories of the other end of the customers' edges for :class:`IncentiveNet`: None on a customer–customer
    graph, whose other end is the customers themselves (one embedding, a homogeneous GNN)."""
    return None if graph == "customers" else encoders.merchants.cardinalities


def _validation(validation) -> Validation:
    """``fit(validation=…)`` read as every domain reads it (:func:`~promokit.data.split.parse_validation`)."""
    return parse_validation(validation, default=DEFAULT_VALIDATION, tables=(IncentiveTables, Mapping),
                            model="an incentive model",
                            takes={FRACTION: "a fraction in [0, 1) of the labelled customers and merchants",
                                   ROWS: "customer rows of data"},
                            refuses={TABLE: "the customers and merchants live in one graph, which messages pass over, "
                                            "so the validation customers belong in data: give their rows",
                                     TIME: "the customers and merchants have no time to split them by"})


def validation_fraction(validation) -> float:
    """``fit(validation=…)`` as the share of the nodes left after the test nodes that picks the epoch, in [0, 1)
    (None for :data:`~promokit.incentive.defaults.DEFAULT_VALIDATION`): what training over a graph in parts takes,
    its customers' roles drawn by id; any other form is a one-line error."""
    choice = _validation(validation)
    if choice.form != FRACTION:
        raise choice.refused("over a graph in parts (and in the train workflow) the validation customers are drawn by "
                             "id: give a fraction")
    return choice.fraction


def net_defaults() -> dict:
    """:class:`IncentiveNet`'s keyword settings and their defaults (lists for JSON)."""
    signature = inspect.signature(IncentiveNet.__init__).parameters
    return {name: list(p.default) if isinstance(p.default, tuple) else p.default
            for name, p in signature.items() if p.default is not inspect.Parameter.empty}


def network_params(params: dict) -> dict:
    """The model's parameters without the linear floor's own (its L2 strengths, not network settings)."""
    return {k: v for k, v in params.items() if k not in FLOOR_PARAMS}


def labelled_rows(tables: IncentiveTables, customers: np.ndarray, merchants: np.ndarray) -> dict[str, torch.Tensor]:
    """The training rows of eq. 7: customers with their offered level and redemption, merchants with theirs
    and the normalised shares."""
    target = tables.merchant_target()
    return {"node": torch.as_tensor(np.concatenate([customers, merchants]), dtype=torch.long),
            "customer": torch.cat([torch.ones(len(customers)), torch.zeros(len(merchants))]),
            "level": torch.as_tensor(np.concatenate([tables.customer_level[customers],
                                                     tables.merchant_level[merchants] if len(merchants) else []]),
                                     dtype=torch.long),
            "label": torch.as_tensor(np.concatenate([tables.redeemed[customers], target[merchants]]),
                                     dtype=torch.float32)}


def validation_metrics() -> dict:
    """What the trainer records on the validation nodes each epoch (and may monitor)."""
    return {"auc_c": customer_auc, "customer_loglik": customer_loglik}


def customer_auc(outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> float:
    """AUC_c: the response at the offered value against the redemption, over the customer rows."""
    rows = batch["customer"].bool()
    at = outputs["response"][rows].gather(1, batch["level"][rows].unsqueeze(1)).squeeze(1)
    return auc(batch["label"][rows].numpy(), at.numpy())


def customer_loglik(outputs: dict[str, torch.Tensor], batch: dict[str, torch.Tensor]) -> float:
    """The customers' mean log-likelihood of eq. 9 at their offered values (higher is better)."""
    rows = batch["customer"].bool()
    nll = response_nll({k: outputs[k][rows] for k in ("log_response", "log_no_response")}, batch["level"][rows],
                       batch["label"][rows])
    return float(-nll.mean())


def wide_scores(keys: pd.Series, scores: np.ndarray, levels: np.ndarray, key: str = SCORE_KEY) -> pd.DataFrame:
    """The ids as ``key`` and one ``score_<level>`` column per value: the wide layout of ``allocate budget``."""
    columns = {f"{SCORE_PREFIX}{level:g}": scores[:, j] for j, level in enumerate(levels)}
    return pd.DataFrame({key: keys.to_numpy(), **columns})

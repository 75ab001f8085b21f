"""ConversionModel: table in → fitted model → predictions and metrics out, saved as a model directory."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from torch import nn

from promokit import __version__
from promokit.conversion.contract import (
    OPTIONAL_LABELS,
    REQUIRED_LABELS,
    LabelReport,
    check_labels,
    check_learnable,
    check_micro_behaviors,
    micro_behavior_columns,
    post_click_counts,
    post_click_warning,
)
from promokit.conversion.defaults import DEFAULT_MODEL, DEFAULT_TRAIN, REPAIR_LABELS, VALIDATION_FRACTION
from promokit.conversion.evaluate import conversion_calibration, conversion_metrics
from promokit.conversion.models import MODELS
from promokit.conversion.parts import held_out_draw
from promokit.conversion.pmg import concurrence_probability
from promokit.conversion.recalibration import apply_recalibrations, fit_recalibrations
from promokit.data import (
    DataError,
    EncodedFeatures,
    FeatureSpec,
    TableEncoder,
    holdout_split,
)
from promokit.data.datasets import as_table, check_rows
from promokit.data.encoders import check_numeric_columns
from promokit.data.ids import id_hashes
from promokit.data.leakage import find_leaks, leak_warning, validation_leak_warning
from promokit.data.parts import is_partitioned, list_parts, parquet_rows
from promokit.data.spec import missing_column_message, missing_label_message
from promokit.data.split import (
    FRACTION,
    ROWS,
    TABLE,
    TEST_FRACTION,
    TIME,
    Validation,
    at_or_after,
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
from promokit.training.refit import REFIT, refit_after_selection, refit_carry, refit_next
from promokit.training.recalibration import DEFAULT_METHOD, RECALIBRATION_FILE, Recalibration, read_recalibrations
from promokit.training.seed import seed_everything
from promokit.training.shard_loop import checkpoint_folder

OUTPUT_COLUMNS = ("p_ctr", "p_cvr", "p_ctavr", "p_ctcvr")
#: The ESM² paper's Table 2 optimiser (Adam, lr 0.0005, batch 1000, no weight decay).
PAPER_TRAIN = TrainConfig(epochs=10, batch_size=1000, lr=5e-4, patience=2, embedding_decay=0.0, decay_rows=0)
#: What can pick the epoch on the validation rows: the loss, or an AUC (output, label, rows given).
MONITORS = {"loss": None, "ctr_auc": ("p_ctr", "click", None), "cvr_auc": ("p_cvr", "purchase", "click"),
            "ctcvr_auc": ("p_ctcvr", "purchase", None)}


@dataclass
class FitReport:
    """What ``fit`` counted: the rows it trained on, validated on and held out, and the label repairs (the training
    history is the model's ``history_``)."""

    n_train: int = 0
    n_valid: int = 0
    n_test: int = 0
    labels: LabelReport = field(default_factory=LabelReport)


class ConversionModel(Estimator):
    """A conversion model by name (``esm2``, ``esmm``, ``dnn``, ``dnn-os``, ``gbdt``, ``lr``, ``gmcm`` and its
    baselines and ablations: see :data:`~promokit.conversion.models.MODELS`) with its encoders and, for the
    micro-behaviour models, the PMG prior.

    Parameters, stored as given: ``model`` (the name), ``params`` (overrides of the model's defaults; a
    ``min_count`` among them sets the spec's vocabulary threshold), ``train`` (a :class:`TrainConfig`, default
    :data:`DEFAULT_TRAIN`), ``spec`` (a :class:`FeatureSpec`, inferred from the table when None) and
    ``repair_labels`` (zero post-click labels on unclicked rows instead of failing) and ``test_fraction``, the
    share of the rows :meth:`fit` holds out for evaluation, never trained or validated on (:data:`TEST_FRACTION`;
    0: none): the latest by the spec's ``time_key`` when it names one, else each row with that probability,
    seeded by the training seed; ``refit`` (:data:`~promokit.training.refit.REFIT`): once the epoch, the L2 strength
    or the trees are chosen, fit again on every row with them fixed (:mod:`promokit.training.refit`; the held-out
    metrics of the selected model, scored before, are ``held_out_evaluation(data)``). What they imply:
    ``train_config`` and ``declared_spec``. What fitting learns ends in ``_`` (docs/conventions.md, one contract):
    ``feature_spec_`` (the spec resolved against the training table), ``encoder_``, ``net_``, ``pmg_`` (the
    micro-behaviours' concurrence prior, or None), ``model_params_`` (the model's settings, with what validation
    chose), ``history_``, ``report_`` (the rows counted and the labels repaired), ``holdout_`` (what it held out,
    and the refit) and ``training_ids_``; :meth:`recalibrate`, ``recalibrations_`` (by output).

    Example::

        model = ConversionModel("esm2").fit(table)   # 10 % held out, 10 % of the rest validates
        model.evaluate(table, rows=model.held_out(table))   # cvr_auc, ctcvr_auc, ctcvr_gauc, … on the held out
        model.predict(new_table)                     # user_id, item_id, p_ctr, p_cvr, p_ctavr, p_ctcvr per row
        model.recalibrate(later_table)               # the level of p_ctr, p_cvr, p_ctcvr follows the later rates
        model.save("esm2_model"); ConversionModel.load("esm2_model")
    """

    def __init__(self, model: str = DEFAULT_MODEL, params: dict | None = None, train: TrainConfig | None = None,
                 spec: FeatureSpec | None = None, repair_labels: bool = REPAIR_LABELS,
                 test_fraction: float = TEST_FRACTION, refit: bool = REFIT):
        self.model = model
        self.params = params
        self.train = train
        self.spec = spec
        self.repair_labels = repair_labels
        self.test_fraction = test_fraction
        self.refit = refit
        self._configure()

    def _configure(self) -> None:
        self.train_config = check_common_params(self.model, self.params, self.train, models=MODELS,
                                                monitors=MONITORS, default_train=DEFAULT_TRAIN)
        if self.spec is not None and not isinstance(self.spec, FeatureSpec):
            raise DataError(f"spec must be a FeatureSpec, got {type(self.spec).__name__}")
        if not isinstance(self.repair_labels, (bool, np.bool_)):
            raise DataError(f"repair_labels must be True or False, got {self.repair_labels!r}")
        check_test_fraction(self.test_fraction)
        check_refit(self.refit)
        params = {**MODELS[self.configured_model][1], **(self.params or {})}
        spec = self.spec or FeatureSpec()
        if "min_count" in params:  # a vocabulary setting, kept in the spec (tune writes it among the params)
            spec = replace(spec, min_count=params.pop("min_count"))
        check_model_params(self.configured_model, self.model_class, params)
        self._model_params = params
        #: the spec before fitting: ``spec`` (or an empty one) with the vocabulary's ``min_count`` from ``params``
        self.declared_spec = spec

    def _start_fit(self) -> None:
        """What every fit (:meth:`fit`, over parts :func:`~promokit.conversion.parts.fit_parts`) starts from: the
        settings the parameters give as ``model_params_`` (what an earlier fit chose, LR's L2, is no parameter), no
        recalibration, no PMG prior and no history yet."""
        self._configure()
        self.model_params_ = dict(self._model_params)
        self.recalibrations_, self.pmg_, self.history_ = {}, None, None

    @property
    def model_class(self):
        return MODELS[self.configured_model][0]

    @property
    def is_neural(self) -> bool:
        return issubclass(self.model_class, nn.Module)

    def fit(self, data, *, validation=None, validation_split: str | None = None, executor=None,
            checkpoint_dir: str | os.PathLike | None = None, resume: bool = False, on_epoch=None) -> ConversionModel:
        """Fit on ``data`` (a DataFrame or a table path) less the ``test_fraction`` held out for evaluation
        (:meth:`held_out`), and pick the epoch on the validation rows.

        ``validation`` (:func:`~promokit.data.split.parse_validation`, as in every domain) is None
        (:data:`VALIDATION_FRACTION` of the rest), a fraction of the rest in [0, 1) (0: no validation), a validation
        table given apart (a DataFrame or a path), a time (``"2024-06-01"``, a Timestamp: the rows not held out from
        it on, by the spec's ``time_key``) or row positions of ``data`` (none of them held out). A fraction of the
        rows cut from ``data`` is the latest by the spec's ``time_key`` when it names one, else random;
        ``validation_split`` (``"random"`` or ``"time:<column>"``) chooses otherwise, and names the column a time
        splits by. ``checkpoint_dir`` keeps the neural models' epoch checkpoint there
        (``resume``: continue from it); ``on_epoch`` is passed to :meth:`Trainer.fit`.

        ``executor`` (``promokit.scale.make_executor``'s, passed in; None: none) trains a network by epochs over the
        parts of ``data`` (and of a ``validation`` path) without reading them whole
        (:func:`~promokit.conversion.parts.fit_parts`, which says how the rows are held out there): always on Ray,
        and on the local executor when either table is in parts. A model not trained by epochs is fitted on the
        table read whole on the local executor (with a warning when it is in parts), and refused on Ray."""
        checkpoint_folder(checkpoint_dir)  # a local folder: a URI is refused before anything is read
        choice = _validation(validation)  # a bad `validation` is refused before anything changes
        _check_validation_split(choice, validation_split)
        if self.model == AUTO:
            return self._fit_auto(data, validation, validation_split, executor)
        self._start_fit()
        valid, fraction = choice.table, choice.fraction
        if self._over_parts(data, valid, executor):
            if choice.form in (TIME, ROWS):
                raise choice.refused("over a table's parts, a conversion model validates on a fraction of the rows or "
                                     "a table given apart")
            from promokit.conversion.parts import fit_parts

            fit_parts(self, data, executor, valid, fraction, validation_split, checkpoint_dir, resume)
            self.warn_validation_leak()
            held = self.held_out(data) if self.report_.n_test else None
            return refit_after_selection(self, data, held, executor=executor)
        table = whole = as_table(data, "data")
        valid = None if valid is None else as_table(valid, "validation")
        spec = self.feature_spec_ = self.resolve_spec(table)
        seed_everything(self.train_config.seed)
        labels, label_report = self._labels(table)
        leak = post_click_warning([post_click_counts(table, _guarded(spec), labels["click"])], len(table),
                                  int(labels["click"].sum()), spec.labels["click"])
        if leak:
            warnings.warn(leak, stacklevel=2)
        self.holdout_ = self.holdout_for(spec, len(table))
        held = held_out_rows(table, self.holdout_)
        self.holdout_["held_out"] = len(held)
        if len(held) == len(table):
            raise DataError(f"test_fraction {self.test_fraction} holds out all {len(table)} rows "
                            f"({self.holdout_['how']}); a smaller fraction or a larger table leaves rows to train on")
        if len(held):
            kept = np.setdiff1d(np.arange(len(table)), held)
            table, labels = table.iloc[kept], {k: v[kept] for k, v in labels.items()}
        valid_labels = None
        if valid is not None:
            valid_labels, valid_report = self._labels(valid)
            for role, count in valid_report.repaired.items():
                label_report.repaired[role] = label_report.repaired.get(role, 0) + count
        elif choice.form in (TIME, ROWS):  # positions of `whole`, none held out, as positions of `table`
            kept = np.setdiff1d(np.arange(len(whole)), held)
            train_rows, valid_rows = (np.searchsorted(kept, rows) for rows in self.validation_rows(whole, held, choice,
                                                                                               validation_split))
            table, valid = table.iloc[train_rows], table.iloc[valid_rows]
            labels, valid_labels = ({k: v[rows] for k, v in labels.items()} for rows in (train_rows, valid_rows))
        elif fraction > 0:
            how = validation_split or (f"time:{spec.time_key}" if spec.time_key else "random")
            train_rows, valid_rows = holdout_split(table, fraction, how, self.train_config.seed)
            table, valid = table.iloc[train_rows], table.iloc[valid_rows]
            labels, valid_labels = ({k: v[rows] for k, v in labels.items()} for rows in (train_rows, valid_rows))
        for message in check_learnable(labels, spec.labels, spec.micro_behaviors):
            warnings.warn(message, stacklevel=2)
        self.warn_leaks(table, labels)
        if spec.micro_behaviors:  # the PMG prior, from the clicked training rows only (GMCM section 3)
            self.pmg_ = concurrence_probability(labels["micro"], labels["click"])
        self.encoder_, train_x = TableEncoder.fit_transform(table, spec)
        self.training_ids_ = id_hashes(table[spec.group_key]) if spec.group_key else None
        valid_part = None if valid is None else (self.encoder_.transform(valid), valid_labels)
        self.report_ = FitReport(n_train=len(table), n_valid=0 if valid is None else len(valid), n_test=len(held),
                                 labels=label_report)
        if self.is_neural:
            self.net_ = self.build_net()
            train_tensors = _tensors(train_x, labels)
            valid_tensors = None if valid_part is None else _tensors(*valid_part)
            if hasattr(self.net_, "solve"):  # a convex model, solved to its optimum (LR)
                self.history_ = self.net_.solve(train_tensors, valid_tensors, self.train_config.progress,
                                                carry=refit_carry(self), refit_next=refit_next(self))
                self.model_params_.update(self.net_.chosen_params)
            else:
                trainer = Trainer(self.train_config, checkpoint_dir)
                self.history_ = trainer.fit(self.net_, train_tensors, valid_tensors, resume=resume,
                                            metrics=self.validation_metrics(valid_tensors), on_epoch=on_epoch)
        else:
            self.net_ = self.model_class(**{"seed": self.train_config.seed, **self.model_params_})
            self.net_.fit(train_x, labels, valid_part, progress=self.train_config.progress)
        self.warn_validation_leak()
        every = pd.concat([whole, valid], ignore_index=True) if choice.form == TABLE else None
        return refit_after_selection(self, whole, held, every=every, validation_split=validation_split)

    #: What fitting learns (:func:`~promokit.training.refit.refit_after_selection` takes it from the refit model).
    FITTED = ("feature_spec_", "encoder_", "pmg_", "net_", "training_ids_", "model_params_")
    AUTO_CANDIDATES = ("lr", "gbdt", "esmm", "esm2")
    AUTO_METRIC = "ctcvr_auc"

    def _fit_auto(self, data, validation, validation_split, executor) -> ConversionModel:
        """``model="auto"`` (:func:`~promokit.training.auto.fit_auto`) on a table read whole."""
        valid = _validation(validation).table
        in_parts = any(isinstance(t, (str, os.PathLike)) and is_partitioned(t) for t in (data, valid))
        if in_parts or (executor is not None and executor.name != "local"):
            raise DataError("model='auto' chooses on a table read whole; over parts or on Ray, name the model "
                            "(pk.compare on a sample says which)")
        every = None if valid is None else pd.concat([as_table(data, "data"), as_table(valid, "validation")],
                                                     ignore_index=True)
        return fit_auto(self, as_table(data, "data"), validation=validation, every=every,
                        fit_args={} if validation_split is None else {"validation_split": validation_split})

    def validation_evaluation(self, data, validation=None, validation_split: str | None = None) -> Evaluation:
        """The fitted model's metrics on the rows :meth:`fit` validated on, given what fit was given: ``data``,
        ``validation`` (a table: that table) and ``validation_split``. Scored as the model is now: before a refit,
        those are rows it had not learnt from."""
        choice = _validation(validation)
        if choice.form == TABLE:
            return self.evaluate(choice.table)
        if choice.form == FRACTION and not choice.fraction:
            raise DataError("validation: 0 leaves no validation rows to score (model='auto' chooses on them)")
        table = as_table(data, "data")
        held = self.held_out(table)
        if choice.form != FRACTION:
            return self.evaluate(table, rows=self.validation_rows(table, held, choice, validation_split)[1])
        kept = np.setdiff1d(np.arange(len(table)), held)
        how = validation_split or (f"time:{self.feature_spec_.time_key}" if self.feature_spec_.time_key else "random")
        return self.evaluate(table, rows=kept[holdout_split(table.iloc[kept], choice.fraction, how,
                                                            self.train_config.seed)[1]])

    def validation_rows(self, table: pd.DataFrame, held: np.ndarray, validation,
                        validation_split: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(training rows, validation rows) of ``table`` (the table fit is given; ``held``: the rows it holds out)
        that a time or row positions given as ``validation`` choose: the rows given, none of them held out, or the
        rows not held out from the time on by the spec's ``time_key`` (``validation_split`` ``"time:<column>"``: by
        that column)."""
        choice = _validation(validation)
        kept = np.setdiff1d(np.arange(len(table)), held)
        if choice.form == ROWS:
            rows = check_rows(choice.value, len(table), "`validation`", "rows")
            overlap = np.intersect1d(rows, held)
            if len(overlap):
                raise DataError(f"`validation`: {len(overlap)} of the {len(rows)} validation rows are held out for "
                                f"evaluation (test_fraction={self.test_fraction}), e.g. row {int(overlap[0])}; "
                                "validate on other rows, or hold none out with test_fraction=0")
            train = np.setdiff1d(kept, rows)
            if not len(train):
                raise DataError(f"`validation`: the {len(rows):,} rows given leave none of the {len(kept):,} rows not "
                                "held out to train on")
            return train, rows
        if choice.form != TIME:
            raise DataError(f"validation_rows: `validation` is a time or row positions, got a {choice.form}")
        by_column = validation_split is not None and str(validation_split).startswith("time:")
        column = validation_split.split(":", 1)[1] if by_column else self.feature_spec_.time_key
        if column is None:
            raise choice.refused("a time splits the rows by their time column, and the spec names no time_key "
                                 "(FeatureSpec(time_key=…), or validation_split='time:<column>')")
        if column not in table.columns:
            raise DataError(missing_column_message(column, list(table.columns), "time column", len(table)))
        later = at_or_after(table[column], choice.value)
        if later is None:
            raise choice.refused(f"the time column {column!r} holds {table[column].dtype} values, not times")
        return split_at_time(later, kept, choice.value, "rows", len(held))

    def held_out_frame(self, data) -> pd.DataFrame:
        return as_table(data, "data").iloc[self.held_out(data)]

    def warn_leaks(self, table: pd.DataFrame, labels: dict[str, np.ndarray] | None = None) -> None:
        """Warn of the features of ``feature_spec_`` (less its ``allow_leaky``) that alone predict a label of the
        training rows ``table`` (their arrays ``labels`` by role, read from ``table`` when None) almost perfectly
        (:func:`~promokit.data.leakage.find_leaks`): the click over every row, the DAction and the purchase over the
        clicked rows, where they are defined."""
        labels = self._labels(table)[0] if labels is None else labels
        spec, clicked = self.feature_spec_, labels["click"] == 1
        judged = {spec.labels["click"]: (labels["click"], None)}
        judged.update({f"{spec.labels[role]} (on clicked rows)": (labels[role], clicked)
                       for role in ("daction", "purchase") if role in labels})
        message = leak_warning(find_leaks(table, spec.categorical, spec.numeric, judged, spec.allow_leaky))
        if message:
            warnings.warn(message, stacklevel=3)

    def warn_validation_leak(self) -> None:
        """Warn when a validation AUC of the kept epoch (or chosen candidate) is near perfect
        (:func:`~promokit.data.leakage.validation_leak_warning`)."""
        history = self.history_
        kept = [r for r in (history.epochs if history else ())
                if r.get("chosen") or (history.unit == "epoch" and r.get("epoch") == history.best_epoch)]
        aucs = {k.removeprefix("valid_"): v for r in kept[-1:] for k, v in r.items()
                if k.startswith("valid_") and k.endswith("_auc") and isinstance(v, float)}
        message = validation_leak_warning(aucs)
        if message:
            warnings.warn(message, stacklevel=3)

    def holdout_for(self, spec: FeatureSpec, rows: int) -> dict:
        """What :meth:`fit` holds out of a table of ``rows`` rows with the resolved ``spec``: ``test_fraction``,
        ``how`` (``"time:<time_key>"``, or ``"random"``: each row with probability ``test_fraction``, part k of a
        table in parts drawn by the seed ``(seed, k, 1)``, their sizes kept as ``parts``), ``seed``, ``rows`` and
        ``held_out`` (None until cut)."""
        how = f"time:{spec.time_key}" if spec.time_key else "random"
        return {"test_fraction": float(self.test_fraction), "how": how, "seed": self.train_config.seed, "rows": rows,
                "held_out": None}

    def held_out(self, data) -> np.ndarray:
        """The row positions of ``data`` that :meth:`fit` held out for evaluation (none with ``test_fraction=0``):
        ``data`` is the table fit was given (a DataFrame or a path; a table in parts as its parts in order), which
        the rows are recomputed on by the rule in ``holdout_``."""
        self._check_fitted()
        holdout = self.holdout_
        if not holdout or not holdout["test_fraction"]:
            return np.empty(0, dtype=np.int64)
        drawn_by_part = holdout["how"] == "random" and "parts" in holdout  # fitted over parts: each drew its own
        if drawn_by_part and isinstance(data, (str, os.PathLike)) and is_partitioned(data):
            sizes, table = [parquet_rows(part) or 0 for part in list_parts(data)], None
        else:
            table = as_table(data, "data")
            sizes = [len(table)]
        check_same_data(holdout, sum(sizes), "rows")
        if drawn_by_part and sizes != holdout["parts"]:
            raise DataError(f"held_out: the model drew the rows it held out part by part, from parts of "
                            f"{holdout['parts']} rows; give the table in the parts fit was given (here {sizes})")
        return _random_held_out(sizes, holdout) if table is None else held_out_rows(table, holdout)

    def resolve_spec(self, table: pd.DataFrame) -> FeatureSpec:
        """The declared spec resolved against ``table`` (a training table, or one part of it) and checked for this
        model: its labels, its numeric columns and, for a micro-behaviour model, its micro-behaviours. ``fit``
        keeps it as ``feature_spec_``; training over parts (:mod:`promokit.conversion.parts`) resolves it on one
        part."""
        spec = self.declared_spec.resolve(table, REQUIRED_LABELS, OPTIONAL_LABELS)
        check_numeric_columns(table, spec.numeric)  # before the split, so an error counts the table's rows
        if self.uses_micro and not spec.micro_behaviors:
            raise DataError(f"model {self.model_name!r} learns from micro-behaviour labels, and the table of {len(table)} "
                            "rows has none declared: name its 0/1 post-click columns with `micro_behaviors` or in the "
                            "spec (micro_behaviors: [cart, favorite, …])")
        needed = [role for role in self.model_class.labels if role not in spec.labels and role != "micro"]
        if needed:
            raise DataError(f"model {self.model_name!r} needs the {needed} label(s), which the table of {len(table)} rows "
                            f"does not have; add the column or map it in the spec (labels: {{{needed[0]}: <column>}})")
        return spec

    # ---- Training over a table's parts (promokit.conversion.parts): what fit does, from sums over the parts. The spec is
    # resolved on one part (``resolve_spec``) and set as ``feature_spec_``, the encoder built by
    # TableEncoder.from_counts, the labels checked and summed here part by part; the network trains on tensors of
    # one part at a time.
    @property
    def trains_by_epochs(self) -> bool:
        """A network trained by epochs of mini-batches (not solved like LR, nor a GBDT): what trains over parts."""
        return self.is_neural and not hasattr(self.model_class, "solve")

    def _over_parts(self, data, valid, executor) -> bool:
        """Whether :meth:`fit` trains over the parts of ``data`` on ``executor`` (see there)."""
        if executor is None:
            return False
        local = executor.name == "local"
        if local and not any(isinstance(t, (str, os.PathLike)) and is_partitioned(t) for t in (data, valid)):
            return False
        if self.trains_by_epochs:
            return True
        if not local:
            raise DataError(f"model {self.model_name!r} is not trained by epochs of mini-batches, so it cannot train over "
                            f"a table's parts with `executor` {executor.name}: train it with `executor` local (the "
                            "table read whole), or choose a network (esmm, esm2, dnn, gmcm …)")
        warnings.warn(f"model {self.model_name!r} is fitted on the whole table, not by epochs over its parts: the parts "
                      "are read into one frame", stacklevel=3)
        return False

    def label_counts(self, table: pd.DataFrame) -> dict:
        """The label sums of one part's training rows that :meth:`fit_counts` needs (the learnability checks of
        ``fit`` and GMCM's PMG prior), with the rows repaired, and the hashes of their ``group_key`` ids; the
        part's labels are checked as ``fit`` checks them."""
        labels, report = self._labels(table)
        click = labels["click"] == 1
        counts = {"rows": len(table), "click": int(click.sum()), "purchase": int(labels["purchase"][click].sum()),
                  "repaired": dict(report.repaired),
                  "post_click": post_click_counts(table, _guarded(self.feature_spec_), labels["click"])}
        if self.feature_spec_.group_key:
            counts["subjects"] = id_hashes(table[self.feature_spec_.group_key])
        if "daction" in labels:
            counts["daction"] = int(labels["daction"][click].sum())
        if "micro" in labels:
            fired = labels["micro"][click].astype(np.float64)
            counts["micro"] = fired.sum(axis=0)
            counts["concurrence"] = fired.T @ fired
        return counts

    def fit_counts(self, encoder: TableEncoder, counts: list[dict], valid_counts: list[dict]) -> None:
        """Become what :meth:`fit` makes before the network trains, from the training rows' ``encoder`` (built from
        the parts' counts) and the :meth:`label_counts` of every training and validation part: the same errors and
        warnings, the PMG prior, the report, the training subjects."""
        n = sum(c["rows"] for c in counts)
        clicks, purchases = sum(c["click"] for c in counts), sum(c["purchase"] for c in counts)
        columns = self.feature_spec_.labels
        if clicks in (0, n):
            raise DataError(f"label {columns['click']!r} (click) is {int(clicks > 0)} on all {n} training rows: CTR "
                            "needs clicked and unclicked impressions")
        if purchases in (0, clicks):
            raise DataError(f"label {columns['purchase']!r} (purchase) is {int(purchases > 0)} on all {clicks} "
                            f"clicked rows of the {n} training rows: CVR needs clicked rows with and without a "
                            "purchase")
        leak = post_click_warning([c["post_click"] for c in counts], n, clicks, columns["click"])
        if leak:
            warnings.warn(leak, stacklevel=2)
        fired = {columns["daction"]: sum(c["daction"] for c in counts)} if "daction" in counts[0] else {}
        if self.feature_spec_.micro_behaviors:
            micro = sum(c["micro"] for c in counts)
            fired.update({name: int(micro[j]) for j, name in enumerate(self.feature_spec_.micro_behaviors)})
            concurrence = sum(c["concurrence"] for c in counts)
            np.fill_diagonal(concurrence, 0.0)  # as promokit.conversion.pmg.concurrence_probability
            totals = concurrence.sum(axis=1, keepdims=True)
            self.pmg_ = np.divide(concurrence, totals, out=np.zeros_like(concurrence), where=totals > 0)
        for column, count in fired.items():
            if count in (0, clicks):
                warnings.warn(f"label {column!r} is {int(count > 0)} on all {clicks} clicked training rows: it teaches "
                              "nothing and its AUC is undefined", stacklevel=2)
        monitor = self.train_config.monitor
        if monitor != "loss":  # the check validation_metrics makes on the validation tensors, from their counts
            if not valid_counts:
                raise DataError(f"monitor {monitor!r} needs validation rows; give a validation table or a validation "
                                "fraction > 0")
            _, label, given = MONITORS[monitor]
            rows = sum(c["click"] if given else c["rows"] for c in valid_counts)
            positives = sum(c[label] for c in valid_counts)  # purchases happen on clicked rows only
            if not 0 < positives < rows:
                raise DataError(f"monitor {monitor!r} needs both classes of {label!r} among the {rows} validation rows"
                                f"{' with ' + given + ' = 1' if given else ''}; they have {positives} positives "
                                "(monitor 'loss', or validate on more rows)")
        repaired: dict[str, int] = {}
        for c in [*counts, *valid_counts]:
            for role, k in c["repaired"].items():
                repaired[role] = repaired.get(role, 0) + k
        self.encoder_ = encoder
        self.report_ = FitReport(n_train=n, n_valid=sum(c["rows"] for c in valid_counts),
                                 labels=LabelReport(repaired))
        subjects = self.feature_spec_.group_key
        self.training_ids_ = np.unique(np.concatenate([c["subjects"] for c in counts])) if subjects else None

    def part_tensors(self, table: pd.DataFrame) -> dict[str, torch.Tensor]:
        """The network's input and labels for the rows of ``table`` (one part), with the fitted encoder."""
        labels, _ = self._labels(table)
        return _tensors(self.encoder_.transform(table), labels)

    @property
    def uses_micro(self) -> bool:
        return "micro" in getattr(self.model_class, "labels", ())

    def _labels(self, table: pd.DataFrame, spec: FeatureSpec | None = None
                ) -> tuple[dict[str, np.ndarray], LabelReport]:
        """The label arrays by role (of ``spec``, default ``feature_spec_``), with the micro-behaviours as one
        ``(rows, N)`` array under ``micro``."""
        spec = spec or self.feature_spec_
        labels, report = check_labels(table, {r: c for r, c in spec.labels.items() if c in table.columns},
                                      self.repair_labels)
        if spec.micro_behaviors and set(spec.micro_behaviors) <= set(table.columns):
            labels["micro"] = check_micro_behaviors(table, spec.micro_behaviors, labels["click"], spec.labels["click"],
                                                    self.repair_labels, report)
        return labels, report

    def validation_metrics(self, valid: dict[str, torch.Tensor] | None) -> dict:
        """The validation AUCs to record each epoch (name → :func:`auc_metric`), given the validation rows' label
        tensors: those whose rows hold both classes. The monitored one must (else a DataError); no rows, none."""
        if valid is None:
            return {}
        metrics = {}
        for name, (output, label, given) in ((k, v) for k, v in MONITORS.items() if v is not None):
            y = valid[label] if given is None else valid[label][valid[given] == 1]
            if 0 < int(y.sum()) < len(y):
                metrics[name] = auc_metric(output, label, given)
            elif name == self.train_config.monitor:
                raise DataError(f"monitor {name!r} needs both classes of {label!r} among the {len(y)} validation rows"
                                f"{' with ' + given + ' = 1' if given else ''}; they have {int(y.sum())} positives "
                                "(monitor 'loss', or validate on more rows)")
        return metrics

    def build_net(self) -> nn.Module:
        """A new network of this model, its input sizes from the fitted encoder (and, for a micro-behaviour model,
        its graph from ``feature_spec_`` and the PMG prior); initialised by the current torch seed."""
        graph = {"nodes": self.feature_spec_.micro_behaviors, "pmg": self.pmg_} if self.uses_micro else {}
        return self.model_class(self.encoder_.cardinalities, self.encoder_.numeric_width, **graph, **self.model_params_)

    def predict(self, data, *, keep: list[str] | None = None) -> pd.DataFrame:
        """The key columns of ``data`` (a DataFrame or a table path) — ``keep``, by default user_id and item_id
        where present — then the outputs: p_ctr, p_cvr, p_ctcvr (+ p_ctavr for ESM², + p_node_<name> per
        micro-behaviour for GMCM and the MCM ablations); with a :meth:`recalibrate`-d model, p_ctr, p_cvr and
        p_ctcvr recalibrated and the model's own as p_ctr_raw, p_cvr_raw, p_ctcvr_raw. One row per input row, with
        the input's index."""
        self._check_fitted()
        table = as_table(data, "data")
        keys = keep if keep is not None else [c for c in ("user_id", "item_id") if c in table.columns]
        absent = [c for c in keys if c not in table.columns]
        if absent:
            raise DataError(f"keep: columns {absent} are not in the table of {len(table)} rows; columns: "
                            f"{list(table.columns)[:20]}")
        columns = self._outputs(table)
        if self.recalibrations_:
            columns = apply_recalibrations(columns, self.recalibrations_)
        return pd.concat([table[keys], pd.DataFrame(columns, index=table.index)], axis=1)

    def _outputs(self, table: pd.DataFrame) -> dict[str, np.ndarray]:
        """The model's own probabilities of the rows of ``table`` by output name, before any recalibration."""
        x = self.encoder_.transform(table)
        if self.is_neural:
            outputs = {k: v.numpy() for k, v in Trainer(self.train_config).predict(self.net_, _tensors(x)).items()}
        else:
            outputs = self.net_.predict(x)
        columns = {k: np.asarray(outputs[k], dtype=np.float64) for k in OUTPUT_COLUMNS if k in outputs}
        if "p_node" in outputs:  # one column per micro-behaviour node the model predicts
            nodes = np.asarray(outputs["p_node"], dtype=np.float64)
            columns.update({f"p_node_{name}": nodes[:, j] for j, name in enumerate(self.net_.nodes)})
        return columns

    def recalibrate(self, data, *, method: str = DEFAULT_METHOD, rows=None,
                    labels: dict[str, str] | None = None) -> ConversionModel:
        """Fit a :class:`~promokit.training.recalibration.Recalibration` of p_ctcvr against click & purchase and
        one of p_ctr against the click, over the labelled rows ``rows`` of ``data`` (a DataFrame or a table path;
        default every row) — a later period than the training one — and keep them: :meth:`predict` and
        :meth:`evaluate` apply them, p_cvr following as p_ctcvr / p_ctr
        (:mod:`promokit.conversion.recalibration`), and :meth:`save` writes them (``recalibration.json``).
        ``method``: ``isotonic`` (default), ``platt`` or ``prior-shift`` (the model's mean score on the rows
        standing for the training rate); ``labels`` (role → column) as in :meth:`evaluate`. It replaces an
        earlier recalibration; :meth:`fit` drops it. Returns the model."""
        Recalibration(method)  # a bad method fails before the table is read
        table, spec, arrays = self._labelled(data, rows, labels)
        self.recalibrations_ = fit_recalibrations(self._outputs(table), arrays, method, spec.labels)
        return self

    def evaluate(self, data, *, held_out: bool = False, rows=None, gauc_weight: str = "impressions",
                 predictions: pd.DataFrame | None = None, labels: dict[str, str] | None = None,
                 micro_behaviors=None) -> Evaluation:
        """Conversion metrics on labelled ``data`` (a DataFrame or a table path; see :func:`conversion_metrics`) and
        the calibration of the probabilities (:func:`conversion_calibration`, its tables ``calibration``,
        ``ctr_calibration`` and ``cvr_calibration``, a warning beyond the ratio) and ``n``, the rows scored: every
        row of ``data``, those :meth:`fit` held out of it with ``held_out=True`` (``held_out(data)``; a model refit on
        every row has learnt from them: :meth:`held_out_evaluation` gives what they said before), or the row
        positions ``rows``;
        ``predictions``, this model's :meth:`predict` of those rows when the caller has them already. A
        :meth:`recalibrate`-d model is scored on its recalibrated probabilities.

        ``labels`` (role → column): the table's label columns, in place of those the model was trained with.
        ``micro_behaviors`` (columns, a list or comma-separated names): the micro-behaviours whose node AUCs to
        report, in place of those the model was trained with (scored where the table has them); a model that
        predicts nodes is scored only on nodes it was trained on."""
        check_held_out(held_out, rows)
        if held_out:
            rows = self.held_out(data)
        table, spec, labels = self._labelled(data, rows, labels, micro_behaviors)
        micro = labels.pop("micro", None)  # conversion_metrics reads each node's labels as micro_<name>
        if micro is not None:
            labels.update({f"micro_{name}": micro[:, j] for j, name in enumerate(spec.micro_behaviors)})
        predictions = self.predict(table) if predictions is None else predictions
        outputs = {k: v.to_numpy() for k, v in predictions.items() if str(k).startswith("p_")}
        groups = table[spec.group_key].to_numpy() if spec.group_key else None
        metrics = conversion_metrics(labels, outputs, groups, gauc_weight)
        calibration, tables = conversion_calibration(labels, outputs, self.model_name)
        return Evaluation(f"Conversion model {self.model_name}", {**metrics, **calibration, "n": len(table)},
                          tables=tables)

    def _labelled(self, data, rows, labels: dict[str, str] | None, micro_behaviors=None
                  ) -> tuple[pd.DataFrame, FeatureSpec, dict[str, np.ndarray]]:
        """The rows ``rows`` of ``data`` (all when None), the spec they are scored with (:meth:`_scored_spec`) and
        their label arrays by role, the click and purchase labels required."""
        self._check_fitted()
        table = as_table(data, "data")
        spec = self._scored_spec(table, labels, micro_behaviors)
        if rows is not None:
            table = table.iloc[check_rows(rows, len(table), "rows", "rows")]
        for role in REQUIRED_LABELS:
            column = spec.labels.get(role, role)
            if column not in table.columns:
                raise DataError(missing_label_message(role, column, list(table.columns), len(table), spec=True))
        arrays, repairs = self._labels(table, spec)
        for role, count in repairs.repaired.items():
            warnings.warn(f"repaired {count} of the {len(table):,} rows scored, where {role}=1 without a click: set to 0, "
                          "as the model was trained with `repair_labels`", stacklevel=3)
        return table, spec, arrays

    def _scored_spec(self, table: pd.DataFrame, labels: dict[str, str] | None, micro_behaviors) -> FeatureSpec:
        """``feature_spec_`` with the label columns and micro-behaviours :meth:`evaluate` is given, checked."""
        spec = self.feature_spec_
        if labels:
            spec = replace(spec, labels={**spec.labels, **labels})
        if micro_behaviors is None:
            return spec
        names = micro_behavior_columns(micro_behaviors)
        untrained = sorted(set(names) - set(spec.micro_behaviors))
        if self.uses_micro and untrained:
            raise DataError(f"`micro_behaviors`: model {self.model_name!r} was trained on the nodes "
                            f"{list(spec.micro_behaviors)}, not {untrained}")
        for name in names:
            if name not in table.columns:
                raise DataError(missing_column_message(name, list(table.columns), "micro-behaviour label", len(table)))
        if not self.uses_micro:
            warnings.warn(f"model {self.model_name!r} predicts no micro-behaviour nodes; `micro_behaviors` adds node AUCs "
                          "only for gmcm / mcm-* models", stacklevel=3)
        return replace(spec, micro_behaviors=names)

    def save(self, path: str | os.PathLike) -> None:
        self._check_fitted()
        config = {"promokit": __version__, "task": "conversion", "model": self.model_name, "params": self.model_params_,
                  "spec": self.feature_spec_.to_dict(), "train": self.train_config.to_dict(),
                  "repair_labels": self.repair_labels, "refit": self.refit, "holdout": self.holdout_,
                  "pmg": None if self.pmg_ is None else self.pmg_.tolist()}
        history = None if self.history_ is None else self.history_.to_dict()
        extra = {RECALIBRATION_FILE: {name: r.to_dict() for name, r in self.recalibrations_.items()}}
        write_model_dir(path, config, self.encoder_.to_dict(), self.net_, history,
                        extra if self.recalibrations_ else None, self.training_ids_)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ConversionModel:
        config = read_model_config(path, "conversion")
        model = cls(config["model"], saved_params(MODELS.get(config["model"], (None,))[0], config["params"]),
                    TrainConfig.loaded(config["train"]),
                    FeatureSpec.from_dict(config["spec"]), config["repair_labels"],
                    # a format-1 directory without ``holdout`` held nothing out
                    (config.get("holdout") or {}).get("test_fraction", 0.0), config.get("refit", False))
        model.holdout_ = config.get("holdout")
        model.model_params_, model.report_ = dict(model._model_params), FitReport()  # the counts are not saved
        model.history_, model.training_ids_ = History.read(path), read_training_ids(path)
        model.feature_spec_ = model.declared_spec  # the saved spec was resolved when the model was fitted
        model.encoder_ = TableEncoder.from_dict(read_json(path, "encoder.json"))
        model.pmg_ = None if config.get("pmg") is None else np.asarray(config["pmg"], dtype=np.float64)
        model.recalibrations_ = read_recalibrations(path)
        if model.is_neural:
            model.net_ = model.build_net()
            load_weights(model.net_, path)
            model.net_.eval()
        else:
            model.net_ = model.model_class(**model.model_params_).load_texts(path)
        return model


def _validation(validation) -> Validation:
    """``fit(validation=…)`` read as every domain reads it (:func:`~promokit.data.split.parse_validation`): None
    (:data:`VALIDATION_FRACTION`), a fraction in [0, 1), a table given apart, a time or row positions."""
    return parse_validation(validation, default=VALIDATION_FRACTION, tables=(pd.DataFrame,), model="a conversion model",
                            takes={FRACTION: "a fraction in [0, 1) of the rows", TABLE: "a table given apart (a "
                                   "DataFrame or a path)", TIME: "a time (the rows from it on, by the spec's time_key)",
                                   ROWS: "row positions of data"})


def _check_validation_split(choice: Validation, validation_split: str | None) -> None:
    """``validation_split`` cuts the validation rows from ``data``: by a fraction (``"random"`` or
    ``"time:<column>"``) or from a time (``"time:<column>"``, the column); not with a table or rows given."""
    if validation_split is None:
        return
    if choice.form in (TABLE, ROWS):
        given = "table" if choice.form == TABLE else "rows given"
        raise DataError(f"`validation_split` cuts the validation rows from `data`; it cannot be used with a "
                        f"`validation` {given}")
    if validation_split != "random" and not str(validation_split).startswith("time:"):
        raise DataError(f"validation_split must be 'random' or 'time:<column>', got {validation_split!r}")
    if choice.form == TIME and validation_split == "random":
        raise DataError("`validation_split` 'random' cannot cut the rows from a time: give 'time:<column>', or none "
                        "to split by the spec's time_key")


def describe_holdout(holdout: dict) -> str | None:
    """What a fitted model held out (``ConversionModel.holdout_``) in words; None when nothing."""
    if not holdout["held_out"]:
        return None
    rule = (f"each row drawn with probability {holdout['test_fraction']:g}, seed {holdout['seed']}"
            if holdout["how"] == "random" else
            f"the latest {holdout['test_fraction']:.0%} by {holdout['how'].split(':', 1)[1]!r}")
    return f"{holdout['held_out']:,} of {holdout['rows']:,} rows ({rule})"


def held_out_rows(table: pd.DataFrame, holdout: dict) -> np.ndarray:
    """The row positions of ``table`` (one frame: a table in one part) that the rule ``holdout``
    (:meth:`ConversionModel.holdout_for`) holds out: the latest ``test_fraction`` by the time column, widened to
    every row of the boundary time, or the rows drawn at random; none for a fraction of 0."""
    if not holdout["test_fraction"]:
        return np.empty(0, dtype=np.int64)
    if holdout["how"] == "random":
        return _random_held_out([len(table)], holdout)
    return latest_split(table[holdout["how"].split(":", 1)[1]], holdout["test_fraction"])[1]


def _random_held_out(sizes: list[int], holdout: dict) -> np.ndarray:
    drawn = [held_out_draw(size, holdout, part) for part, size in enumerate(sizes)]
    return np.flatnonzero(np.concatenate(drawn)) if drawn else np.empty(0, dtype=np.int64)


def _guarded(spec: FeatureSpec) -> list[str]:
    """The features the leak warnings judge: all but those the spec allows to leak (``allow_leaky``)."""
    return [name for name in spec.features if name not in spec.allow_leaky]


def _tensors(x: EncodedFeatures, labels: dict[str, np.ndarray] | None = None) -> dict[str, torch.Tensor]:
    tensors = {"cat": torch.from_numpy(x.categorical), "num": torch.from_numpy(x.numeric)}
    for role, values in (labels or {}).items():
        tensors[role] = torch.from_numpy(values)
    return tensors

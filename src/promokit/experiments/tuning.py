"""Hyper-parameter search with Optuna for any estimator, by scikit-learn's habits: each trial clones the estimator
(:func:`sklearn.base.clone`), sets the trial's parameters with ``set_params``, fits the clone and scores it on the
validation data. TPE sampling, median pruning on the validation metric epoch by epoch, a resumable SQLite study,
reproducible from a seed. Domains supply the search space and, where their evaluation needs more than the
validation data, how to score a fitted candidate."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path

from promokit.data.errors import DataError
from promokit.extras import require_extra

#: A search space: an estimator parameter (``max_history``), or an entry of a parameter that holds a dict or the
#: training settings (``params.dropout``, ``train.lr``) → ``("log", low, high)`` (log-uniform float),
#: ``("float", low, high)``, ``("int", low, high)`` or ``("choice", [values])``; a choice of lists (tower widths) is
#: sampled by its text. Trials and the best parameters name each by its last part (``dropout``, ``lr``).
Space = Mapping[str, tuple]

#: Vocabulary minimum counts tried for every model (ids seen fewer times share the out-of-vocabulary row).
MIN_COUNTS = (1, 2, 3, 5, 10, 20)
#: Neural models: optimiser, embedding width, towers, dropout, lazy L2 on embedding rows, vocabulary.
NEURAL_SPACE: Space = {
    "train.lr": ("log", 3e-4, 1e-2),
    "params.emb_dim": ("choice", (4, 8, 16, 32)),
    "params.hidden": ("choice", ((64, 32), (128, 64, 32), (256, 128, 64), (512, 256, 128, 32))),
    "params.dropout": ("float", 0.0, 0.5),
    "train.embedding_decay": ("log", 0.1, 100.0),
    "params.min_count": ("choice", MIN_COUNTS),
}
#: Logistic regression chooses its L2 strength on the validation rows itself; the vocabulary is searched.
LINEAR_SPACE: Space = {"params.min_count": ("choice", MIN_COUNTS)}
#: LightGBM: tree size, shrinkage, leaf size, row and feature sampling, vocabulary.
GBDT_SPACE: Space = {
    "params.num_leaves": ("int", 7, 255),
    "params.learning_rate": ("log", 0.01, 0.3),
    "params.min_child_samples": ("int", 5, 200),
    "params.subsample": ("float", 0.5, 1.0),
    "params.colsample": ("float", 0.3, 1.0),
    "params.min_count": ("choice", MIN_COUNTS),
}
#: The search space of each model by name: the shallow ones their own, every neural model :data:`NEURAL_SPACE`.
SPACES = {"lr": LINEAR_SPACE, "gbdt": GBDT_SPACE}
KINDS = ("log", "float", "int", "choice")


def space_for(model: str) -> Space:
    """The search space of the model named ``model`` (:data:`SPACES`, else :data:`NEURAL_SPACE`)."""
    return SPACES.get(model, NEURAL_SPACE)


@dataclass
class TuneResult:
    """The finished (or interrupted) search: the best parameters (flat, as ``train --params`` reads them), their
    score, every trial's record and the Optuna study."""

    best_params: dict
    best_score: float
    trials: list[dict]
    study: object
    interrupted: bool = False


def tune(estimator, space: Space, data, *, validation=None, metric: str, trials: int = 30,
         timeout: float | None = None, storage: str | Path | None = None, study_name: str = "promokit",
         seed: int = 0, prune: bool = True, fit_params: Mapping | None = None,
         score: Callable[[object], float] | None = None,
         on_trial: Callable[[dict], None] | None = None) -> TuneResult:
    """Search ``space`` for the parameters of ``estimator`` (left unfitted) that maximise ``metric`` on
    ``validation``, until the study holds ``trials`` finished trials (complete or pruned) or ``timeout`` seconds pass.

    Each trial fits a clone with ``fit(data, validation=validation, **fit_params)`` and scores it by
    ``score(fitted)``, by default ``fitted.evaluate(validation)[metric]``. Where ``fit`` takes ``on_epoch``, the
    record's ``valid_<metric>`` is reported each epoch and, with ``prune``, a trial below the median of the earlier
    ones is stopped (median rule, after 5 trials, from the second epoch).

    ``storage`` is a SQLite file holding the study ``study_name`` (None: in memory): the same call continues it. The
    TPE sampler is seeded by ``seed`` and the number of trials already stored, so a fresh search is reproducible and
    a resumed one deterministic. Ctrl-C stops after recording what finished; the result says ``interrupted``.
    ``best_params`` are the estimator's own ``params`` with the best trial's values, each by its last part.
    """
    require_extra("tune", "tuning")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial's error reaches the user as it is
    if trials < 1:
        raise DataError(f"`trials` must be at least 1, got {trials}")
    _check_space(estimator, space)
    url = None
    if storage is not None:
        from promokit.data.uris import local_dir

        storage = local_dir(storage, "storage")  # a SQLite file
        storage.parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{Path(storage).resolve()}"
    pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1) if prune else optuna.pruners.NopPruner()
    study = optuna.create_study(study_name=study_name, storage=url, direction="maximize", load_if_exists=True,
                                pruner=pruner)
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    done = sum(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in study.trials)
    reports_epochs = "on_epoch" in inspect.signature(estimator.fit).parameters

    def objective(trial) -> float:
        def on_epoch(epoch: int, record: dict) -> None:
            value = record.get(f"valid_{metric}", math.nan)
            if math.isfinite(value):
                trial.report(value, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()

        candidate = with_params(estimator, sample(trial, space))
        candidate.fit(data, validation=validation, **(fit_params or {}),
                      **({"on_epoch": on_epoch} if reports_epochs else {}))
        if _interrupted(candidate):  # the trainer stopped on Ctrl-C and kept the model: stop the search too
            raise KeyboardInterrupt
        return float(candidate.evaluate(validation)[metric] if score is None else score(candidate))

    def callback(study, frozen) -> None:
        if on_trial is not None:
            on_trial(_record(space, frozen))

    interrupted = False
    if trials > done:
        try:
            study.optimize(objective, n_trials=trials - done, timeout=timeout, callbacks=[callback],
                           catch=(), gc_after_trial=True)
        except KeyboardInterrupt:
            interrupted = True
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise DataError(f"study {study_name!r}{f' in {storage}' if storage else ''} has no complete trial yet"
                        + (" (interrupted)" if interrupted else ""))
    best = max(complete, key=lambda t: t.value)
    best_params = {**(estimator.get_params(deep=False).get("params") or {}), **decode(space, best.params)}
    return TuneResult(best_params, float(best.value), [_record(space, t) for t in study.trials], study, interrupted)


def with_params(estimator, values: Mapping):
    """A clone of ``estimator`` with ``values`` set (names as in a :data:`Space`, e.g. ``params.dropout``): an
    entry replaces that entry of the parameter's dict (None: an empty one) or training settings."""
    from sklearn.base import clone

    current = estimator.get_params(deep=False)
    changes: dict = {}
    for name, value in values.items():
        parameter, _, entry = name.partition(".")
        if not entry:
            changes[parameter] = value
            continue
        held = changes.get(parameter, current[parameter])
        if is_dataclass(held):
            if entry not in {f.name for f in fields(held)}:
                raise DataError(f"space: {name!r}: {parameter} has no setting {entry!r}")
            changes[parameter] = replace(held, **{entry: value})
        else:
            changes[parameter] = {**(held or {}), entry: value}
    return clone(estimator).set_params(**changes)


def _check_space(estimator, space: Space) -> None:
    """A space whose names the estimator has, with known kinds and distinct short names; its first values are set
    on a clone, so a parameter the estimator refuses fails before any trial."""
    parameters = estimator.get_params(deep=False)
    short: dict[str, str] = {}
    for name, (kind, *_) in space.items():
        if name.partition(".")[0] not in parameters:
            raise DataError(f"space: {name!r} names no parameter of {type(estimator).__name__}; its parameters are "
                            f"{sorted(parameters)}")
        if kind not in KINDS:
            raise DataError(f"space: {name!r} has the unknown kind {kind!r}; the kinds are {list(KINDS)}")
        other = short.setdefault(_short(name), name)
        if other != name:
            raise DataError(f"space: {other!r} and {name!r} would both be written as {_short(name)!r}")
    with_params(estimator, {name: args[0][0] if kind == "choice" else args[0] for name, (kind, *args) in space.items()})


def sample(trial, space: Space) -> dict:
    """One candidate from ``space`` through an Optuna trial, by the space's names."""
    params = {}
    for name, (kind, *args) in space.items():
        key = _short(name)
        if kind == "log":
            params[name] = trial.suggest_float(key, args[0], args[1], log=True)
        elif kind == "float":
            params[name] = trial.suggest_float(key, args[0], args[1])
        elif kind == "int":
            params[name] = trial.suggest_int(key, args[0], args[1])
        else:
            values = list(args[0])
            labels = [_label(v) for v in values]
            params[name] = values[labels.index(trial.suggest_categorical(key, labels))]
    return params


def decode(space: Space, stored: dict) -> dict:
    """Parameters of a stored trial (by short name) in their sampled form (tower widths back to lists)."""
    params = dict(stored)
    for name, (kind, *args) in space.items():
        key = _short(name)
        if kind == "choice" and key in params:
            values = list(args[0])
            params[key] = values[[_label(v) for v in values].index(params[key])]
    return params


def _short(name: str) -> str:
    """What the study and ``train --params`` call a space's name: its last part (``train.lr`` → ``lr``)."""
    return name.rpartition(".")[2]


def _label(value):
    """Optuna stores categorical choices as plain values: lists (tower widths) by their text."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value


def _interrupted(estimator) -> bool:
    history = getattr(estimator, "history_", None)
    return getattr(history, "stopped", None) == "interrupted"


def _record(space: Space, trial) -> dict:
    return {"trial": trial.number, "state": trial.state.name.lower(), "value": trial.value,
            "epochs": len(trial.intermediate_values), **decode(space, trial.params),
            "seconds": trial.duration.total_seconds() if trial.duration else None}

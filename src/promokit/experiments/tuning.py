"""Hyper-parameter search with Optuna: TPE sampling, median pruning on a validation metric per epoch, a
resumable SQLite study, reproducible from a seed. Domains supply the search space and a scoring function."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from promokit.data.errors import DataError
from promokit.extras import require_extra

#: A search space: parameter name → ``("log", low, high)`` (log-uniform float), ``("float", low, high)``,
#: ``("int", low, high)`` or ``("choice", [values])``; a choice of lists (tower widths) is sampled by its text.
Space = Mapping[str, tuple]

#: Vocabulary minimum counts tried for every model (ids seen fewer times share the out-of-vocabulary row).
MIN_COUNTS = (1, 2, 3, 5, 10, 20)
#: Neural models: optimiser, embedding width, towers, dropout, lazy L2 on embedding rows, vocabulary.
NEURAL_SPACE: Space = {
    "lr": ("log", 3e-4, 1e-2),
    "emb_dim": ("choice", (4, 8, 16, 32)),
    "hidden": ("choice", ((64, 32), (128, 64, 32), (256, 128, 64), (512, 256, 128, 32))),
    "dropout": ("float", 0.0, 0.5),
    "embedding_decay": ("log", 0.1, 100.0),
    "min_count": ("choice", MIN_COUNTS),
}
#: Logistic regression chooses its L2 strength on the validation rows itself; the vocabulary is searched.
LINEAR_SPACE: Space = {"min_count": ("choice", MIN_COUNTS)}
#: LightGBM: tree size, shrinkage, leaf size, row and feature sampling, vocabulary.
GBDT_SPACE: Space = {
    "num_leaves": ("int", 7, 255),
    "learning_rate": ("log", 0.01, 0.3),
    "min_child_samples": ("int", 5, 200),
    "subsample": ("float", 0.5, 1.0),
    "colsample": ("float", 0.3, 1.0),
    "min_count": ("choice", MIN_COUNTS),
}

#: Fits one candidate and returns its validation score (higher is better); ``report(epoch, value)`` is called
#: with the monitored validation value after each epoch and raises to prune the trial.
Scorer = Callable[[dict, Callable[[int, float], None]], float]


@dataclass
class TuneResult:
    """The finished (or interrupted) search: the best parameters, their score and every trial's record."""

    best_params: dict
    best_score: float
    trials: list[dict]
    interrupted: bool = False


def sample(trial, space: Space) -> dict:
    """One candidate from ``space`` through an Optuna trial."""
    params = {}
    for name, (kind, *args) in space.items():
        if kind == "log":
            params[name] = trial.suggest_float(name, args[0], args[1], log=True)
        elif kind == "float":
            params[name] = trial.suggest_float(name, args[0], args[1])
        elif kind == "int":
            params[name] = trial.suggest_int(name, args[0], args[1])
        elif kind == "choice":
            values = list(args[0])
            labels = [_label(v) for v in values]
            params[name] = values[labels.index(trial.suggest_categorical(name, labels))]
        else:
            raise ValueError(f"search space {name!r}: unknown kind {kind!r}")
    return params


def _label(value):
    """Optuna stores categorical choices as plain values: lists (tower widths) by their text."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else value


def decode(space: Space, stored: dict) -> dict:
    """Parameters of a stored trial in their sampled form (tower widths back to lists)."""
    params = dict(stored)
    for name, (kind, *args) in space.items():
        if kind == "choice" and name in params:
            values = list(args[0])
            params[name] = values[[_label(v) for v in values].index(params[name])]
    return params


def tune(score: Scorer, space: Space, storage: str | Path, study_name: str, trials: int,
         timeout: float | None = None, seed: int = 0, prune: bool = True,
         on_trial: Callable[[dict], None] | None = None) -> TuneResult:
    """Run (or continue) the study ``study_name`` in the SQLite file ``storage`` until it holds ``trials``
    finished trials (complete or pruned) or ``timeout`` seconds pass.

    TPE sampler seeded by ``seed`` and the number of trials already stored, so a fresh search is reproducible
    and a resumed one deterministic; median pruning (after 5 trials, from the second epoch) on the values
    ``score`` reports. Ctrl-C stops after recording what finished; the result says ``interrupted`` and the same
    call continues the search.
    """
    require_extra("tune", "tuning")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial's error reaches the user as it is
    if trials < 1:
        raise DataError(f"--trials must be at least 1, got {trials}")
    url = f"sqlite:///{Path(storage).resolve()}"
    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    probe = optuna.create_study(study_name=study_name, storage=url, direction="maximize", load_if_exists=True)
    done = sum(t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) for t in probe.trials)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1) if prune else optuna.pruners.NopPruner()
    study = optuna.load_study(study_name=study_name, storage=url,
                              sampler=optuna.samplers.TPESampler(seed=seed + len(probe.trials)), pruner=pruner)

    def objective(trial) -> float:
        def report(epoch: int, value: float) -> None:
            if math.isfinite(value):
                trial.report(value, epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()

        return score(sample(trial, space), report)

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
        raise DataError(f"study {study_name!r} in {storage} has no complete trial yet"
                        + (" (interrupted)" if interrupted else ""))
    best = max(complete, key=lambda t: t.value)
    return TuneResult(decode(space, best.params), float(best.value), [_record(space, t) for t in study.trials],
                      interrupted)


def _record(space: Space, trial) -> dict:
    return {"trial": trial.number, "state": trial.state.name.lower(), "value": trial.value,
            "epochs": len(trial.intermediate_values), **decode(space, trial.params),
            "seconds": trial.duration.total_seconds() if trial.duration else None}

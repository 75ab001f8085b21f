"""Refit after selection: the final model learns from every row ``fit`` was given.

``fit`` holds rows out twice: the test hold-out (``test_fraction``, scored by ``evaluate``) and the validation rows
that choose the epoch, the L2 strength or the trees. Both are usually the latest rows, the most like the rows the
model will score, and a model that never learns from them loses more than the paper models gain over the floor
(KuaiRand-Pure, AmExpert: benchmarks/training.md#refit-on-every-row). So, as scikit-learn's search tools do with
``refit=True``, once the settings are chosen the estimator fits again on every row with them fixed: the epochs kept
(:func:`refit_train`), the strengths or trees chosen (the domain's ``model_params_``), no validation and no test
hold-out. What the held-out rows said of the selected model is scored before the refit and kept
(:func:`refit_record`): the refit model has learnt from them, so scoring it there again would flatter it, and
``held_out_evaluation(data)`` gives those metrics back for the same held-out rows.

Each domain's estimator ends its ``fit`` with :func:`refit_after_selection`; the model directory records the hold-out,
the selection and the refit under one key, ``holdout`` (the model's ``holdout_``).
"""

from __future__ import annotations

import hashlib
import json
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from promokit.data.errors import DataError
from promokit.data.leakage import judged_already
from promokit.training.config import TrainConfig

if TYPE_CHECKING:
    from promokit.training.trainer import History

#: ``refit``'s default in every domain: the final model is refit on every row.
REFIT = True


def refit_train(config: TrainConfig, history: History | None) -> TrainConfig:
    """The settings a refit trains with: ``config`` with the epochs the selected model was kept at (a history by
    epochs: its best epoch + 1; else ``config``'s) and the loss monitored (there are no validation rows to score a
    metric on)."""
    epochs = config.epochs
    if history is not None and history.unit == "epoch" and history.best_epoch >= 0:
        epochs = history.best_epoch + 1
    return replace(config, epochs=epochs, monitor="loss")


def refit_twin(estimator, data, *, params: dict, history: History | None, fit=None, **fit_args):
    """A clone of ``estimator`` fitted on every row of ``data`` with what its fit selected fixed: ``params`` (the
    model parameters chosen, e.g. an L2 strength), the epochs of ``history`` (:func:`refit_train`), no test hold-out
    (``test_fraction`` 0, and ``test_from`` None where the estimator has one) and no validation. ``fit_args`` go to
    its ``fit`` as they went to the selecting fit (an executor, for a table in parts); ``fit(twin)``, when given,
    fits the clone in place instead (a domain's training over parts, told to validate on nothing)."""
    from sklearn.base import clone

    no_holdout = {"test_fraction": 0.0, **({"test_from": None} if "test_from" in estimator.get_params() else {})}
    twin = clone(estimator).set_params(params=params, train=refit_train(estimator.train_config, history),
                                       refit=False, **no_holdout)
    twin._selected = estimator  # a linear floor's solve starts from the selected weights (refit_carry)
    try:
        if fit is None:
            return twin.fit(data, validation=0.0, **fit_args)
        fit(twin)
        return twin
    finally:
        del twin._selected


def selected_model(estimator):
    """The model whose selection a refit (:func:`refit_twin`'s ``estimator``, while it fits) fixes; None outside a
    refit."""
    return getattr(estimator, "_selected", None)


def refit_carry(estimator) -> tuple | None:
    """What the linear floor of a refit (:func:`refit_twin`'s model, while it fits) starts its solve from: the selected
    model's network, its categorical encoders and the refit's, for
    :func:`~promokit.training.logistic.carried_start`; None outside a refit, or where the two table encoders differ in
    their fields or numeric width (the solve then starts from the intercept alone)."""
    selected = selected_model(estimator)
    if selected is None:
        return None
    solved, encoder = selected.encoder_, estimator.encoder_
    if list(solved.categorical) != list(encoder.categorical) or solved.numeric_width != encoder.numeric_width:
        return None
    return selected.net_, list(solved.categorical.values()), list(encoder.categorical.values())


def refit_next(estimator) -> bool:
    """Whether the model ``estimator`` is fitting now serves only to start a refit on every row: its ``refit`` is on
    and its ``report_`` counts validation rows but no test rows, so nothing scores the selected model before the
    refit replaces it (a linear floor then leaves its chosen solution at the search's tolerance,
    :func:`~promokit.training.logistic.fit_logistic`; should the refit fail, that solution is the model kept)."""
    report = estimator.report_
    return bool(estimator.refit and report.n_valid and not report.n_test)


def refit_after_selection(estimator, data, held, *, every=None, fit=None, **fit_args):
    """``estimator`` (just fitted on ``data``, its ``report_`` counting the validation and test rows held out) refit
    on every row when its ``refit`` is on and it held rows out: the held-out rows ``held`` scored first (its
    ``evaluate(data, rows=held)``, kept with their :func:`fingerprint`), then :func:`refit_twin`'s model, fitted on
    ``every`` (every row fit was given, when that is more than ``data``: a validation table given apart; default
    ``data``; ``fit(twin)`` fits it where the domain's ``fit`` does not, :func:`refit_twin`), adopted (the estimator's
    ``FITTED`` attributes) and the refit recorded in ``holdout_["refit"]``. With ``held`` None no held-out metrics are
    kept (a table in parts, not read whole to score them). A refit that fails (an
    executor gone, a table changed under it) warns in one line and keeps the selected model. Returns
    ``estimator``."""
    report = estimator.report_
    if not estimator.refit or not (report.n_valid or report.n_test):
        return estimator
    evaluation = None
    if held is not None and len(held):
        with warnings.catch_warnings():  # calibration warnings belong to evaluate, not to fit
            warnings.simplefilter("ignore")
            evaluation = estimator.evaluate(data, rows=held)
    chosen = dict(getattr(estimator.net_, "chosen_params", {}))  # an L2 strength, trees: what validation chose
    try:
        with warnings.catch_warnings(), judged_already():  # the selecting fit warned of these data already
            warnings.simplefilter("ignore")
            twin = refit_twin(estimator, data if every is None else every, params={**(estimator.params or {}), **chosen},
                              history=estimator.history_, fit=fit, **fit_args)
    except (DataError, OSError, RuntimeError, ValueError) as exc:
        warnings.warn(f"the refit on every row failed, so the selected model is kept: {exc}", stacklevel=3)
        return estimator
    estimator.adopt(twin, estimator.FITTED)
    estimator.holdout_["refit"] = refit_record(twin.report_.n_train, estimator.history_, chosen, evaluation,
                                               estimator.held_out_frame(data) if evaluation else None)
    return estimator


def unscored_refit(holdout: dict | None) -> str | None:
    """What ``evaluate`` warns of a model whose ``holdout_`` says it was refit on every row without its held-out rows
    scored first (a table in parts, not read whole to score them), since scoring them now flatters it; None for any
    other model."""
    refit = (holdout or {}).get("refit")
    if not refit or refit.get("evaluation"):
        return None
    return ("the model was refit on every row, the held-out ones too, over parts that were not read whole to score "
            "them first: these metrics flatter it (train with --no-refit, refit=False, to score them)")


def held_out_before_refit(model, data, rescored: Sequence[str] = ()):
    """What an evaluation of a refit ``model`` on the held-out rows of ``data`` reports: the metrics those rows gave
    the selected model, scored before the refit (``model.held_out_evaluation(data)``), since the refit model has
    learnt from them. None when the rows are to be scored as usual: the model was not refit; the held-out rows of
    ``data`` are not those fit scored; they were not scored before the refit (a warning, :func:`unscored_refit`);
    or ``rescored`` names what the stored metrics lack (other metrics or label columns asked for: a warning that
    the refit model, which scores them, learnt from these rows)."""
    if not (model.holdout_ or {}).get("refit"):
        return None
    unscored = unscored_refit(model.holdout_)
    if unscored:
        warnings.warn(unscored, stacklevel=2)
        return None
    stored = model.held_out_evaluation(data)
    if stored is None:  # other rows than fit held out and scored: score them
        return None
    if rescored:
        warnings.warn(f"{' and '.join(rescored)}: scored by the refit model, which learnt from these held-out rows, "
                      "so the metrics flatter it; without them evaluate reports the held-out metrics scored before "
                      "the refit (a model fitted with refit=False is the selected one)", stacklevel=2)
        return None
    return stored


def refit_record(rows: int, history: History | None, params: dict, evaluation, held_out: pd.DataFrame | None) -> dict:
    """What the ``holdout`` record keeps of a refit: the rows it learnt from, what the selection chose (``epochs``
    for a network, the model ``params`` validation chose), the held-out ``evaluation`` of the selected model (an
    :class:`~promokit.training.estimator.Evaluation`: its metrics and tables), made before the refit (None when
    nothing was held out for evaluation), and the :func:`fingerprint` of the rows it scored
    (``held_out``), by which ``held_out_evaluation`` knows them again."""
    epochs = history.best_epoch + 1 if history is not None and history.unit == "epoch" else None
    return {"rows": rows, "epochs": epochs, "params": params,
            "evaluation": None if evaluation is None else {k: _plain(v) for k, v in evaluation.items()},
            "tables": {} if evaluation is None else {name: json.loads(table.to_json(orient="records"))
                                                     for name, table in evaluation.tables.items()},
            "fingerprint": None if held_out is None else fingerprint(held_out)}


def fingerprint(frame: pd.DataFrame) -> str:
    """A digest of a table's columns and values (not its index): equal for the same rows read again."""
    digest = hashlib.blake2b(repr(list(frame.columns)).encode(), digest_size=16)
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def _plain(value):
    """A metric as JSON keeps it: a count as an int, any other number as a float."""
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value) if isinstance(value, numbers.Real) else value

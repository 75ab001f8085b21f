"""``model="auto"``: the estimator fits each of its domain's candidates (the floor, LightGBM, the paper models) on
the same split, keeps the one whose headline metric on the validation rows is highest, refits it on every row
(:mod:`promokit.training.refit`) and says which it chose and why.

Every candidate is a clone of the estimator with its ``model`` set and ``refit=False``: the same seed, the same test
hold-out and the same validation rows, so their validation metrics are comparable. A candidate the data do not suit
(a one-line :class:`~promokit.data.DataError` of its fit: a graph model on customers-only data) is passed over with
that line. The choice is recorded in the model's ``holdout_["auto"]``: the metric, every candidate's value on the
validation rows (or why it was passed over), the model chosen and the reason in words. A candidate chosen by a
difference within the noise of the validation rows is still the highest there: ``pk.compare`` gives the intervals.
"""

from __future__ import annotations

import numbers
import time
import warnings
from collections.abc import Mapping

from sklearn.base import clone

from promokit.console import get_console
from promokit.data.errors import DataError
from promokit.training.refit import refit_after_selection

#: The value of an estimator's ``model`` that chooses among its domain's ``AUTO_CANDIDATES``.
AUTO = "auto"


def fit_auto(estimator, data, *, validation=None, fit_args: Mapping | None = None, every=None):
    """Fit ``estimator`` (``model="auto"``) on ``data``: each of its ``AUTO_CANDIDATES`` fitted as selected
    (``refit=False``) with ``validation`` and ``fit_args`` as its ``fit`` takes them, scored on its validation rows
    (``validation_evaluation(data, validation, **fit_args)``, the estimator's ``AUTO_METRIC``), the highest kept,
    refit on every row when ``estimator.refit`` (``every``: every row when that is more than ``data``, as
    :func:`~promokit.training.refit.refit_after_selection` takes it) and adopted: the estimator then is that model,
    its parameters unchanged (``model`` stays ``"auto"``; ``model_choice_`` and ``model_name`` name the choice).
    Returns ``estimator``."""
    if isinstance(validation, numbers.Real) and not isinstance(validation, bool) and validation == 0:
        raise DataError("validation: model='auto' chooses on the validation rows; give a fraction > 0 or the rows")
    fit_args = dict(fit_args or {})
    estimator.__dict__.pop("model_choice_", None)
    scores, passed_over, fitted = {}, {}, {}
    console = get_console() if estimator.train_config.progress else None
    for name in estimator.AUTO_CANDIDATES:
        candidate = clone(estimator).set_params(model=name, refit=False)
        started = time.perf_counter()
        try:
            candidate.fit(data, validation=validation, **fit_args)
            with warnings.catch_warnings():  # calibration warnings belong to evaluate
                warnings.simplefilter("ignore")
                scores[name] = float(candidate.validation_evaluation(data, validation, **fit_args)[estimator.AUTO_METRIC])
        except DataError as exc:
            passed_over[name] = str(exc).strip().splitlines()[0]
            continue
        finally:
            if console is not None:
                said = f"{estimator.AUTO_METRIC} {scores[name]:.4f}" if name in scores else "passed over"
                console.print(f"auto: {name} validation {said} ({time.perf_counter() - started:.1f} s)",
                              highlight=False)
        fitted[name] = candidate
    if not scores:
        raise DataError(f"model='auto': none of {list(estimator.AUTO_CANDIDATES)} could be fitted on these data: "
                        + "; ".join(f"{name}: {why}" for name, why in passed_over.items()))
    chosen = max(scores, key=scores.get)  # the first (simplest) of equal scores
    model = fitted[chosen]
    record = {"metric": estimator.AUTO_METRIC, "scores": scores, "passed_over": passed_over, "chosen": chosen,
              "reason": reason(chosen, scores, passed_over, estimator.AUTO_METRIC, model.report_.n_valid)}
    if estimator.refit:
        model.refit = True  # a checked parameter of the estimator, set on its own clone
        held = model.held_out(data) if model.report_.n_test else None
        refit_after_selection(model, data, held, every=every, **fit_args)
    model.holdout_["auto"] = record
    keep = estimator.get_params(deep=False)
    estimator.__dict__.update({k: v for k, v in vars(model).items() if k not in keep})
    estimator.model_choice_ = chosen
    return estimator


def reason(chosen: str, scores: dict[str, float], passed_over: dict[str, str], metric: str, rows: int) -> str:
    """Why ``chosen`` was kept, in one sentence: every candidate's validation ``metric`` and those passed over."""
    others = ", ".join(f"{name} {value:.4f}" for name, value in scores.items() if name != chosen)
    text = f"{chosen} has the highest validation {metric} ({scores[chosen]:.4f} on {rows:,} rows"
    text += f"; {others})" if others else ")"
    if passed_over:
        text += "; passed over: " + "; ".join(f"{name} ({why})" for name, why in passed_over.items())
    return text


def check_auto_params(model: str, params) -> None:
    """``params`` cannot go with ``model="auto"``: each candidate keeps its own defaults."""
    if model == AUTO and params:
        raise DataError("params: model='auto' fits each candidate with its own defaults; give params with a named "
                        "model")

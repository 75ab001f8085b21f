"""Recalibrating a conversion model's probabilities on a later labelled period
(:meth:`ConversionModel.recalibrate <promokit.conversion.estimator.ConversionModel.recalibrate>`), so that their
level follows the latest click and conversion rates.

Two maps are fitted (:class:`~promokit.training.recalibration.Recalibration`, one method for both), each against its
own outcome over every impression: ``p_ctcvr`` against click & purchase (the probability a budget plan sums), and
``p_ctr`` against the click. ``p_cvr`` is not fitted a third time: it follows from the two,
``p_cvr = p_ctcvr / p_ctr`` (ESMM's ``pCTCVR = pCTR · pCVR``), so the recalibrated outputs still compose, with
``p_ctcvr`` capped at ``p_ctr`` (a click and a purchase are never likelier than the click) and the model's own
``p_cvr`` kept where ``p_ctr`` maps to 0. ``p_ctavr`` (ESM²) and the micro-behaviour nodes are left as predicted.
"""

from __future__ import annotations

import numpy as np

from promokit.data.errors import DataError
from promokit.training.recalibration import Recalibration

#: The probabilities fitted, each against the label of this role over every impression.
FITTED = {"p_ctcvr": "purchase", "p_ctr": "click"}
#: The outputs a recalibration changes: ``predict`` keeps the model's own as ``<name>_raw``.
RECALIBRATED = ("p_ctr", "p_cvr", "p_ctcvr")


def fit_recalibrations(outputs: dict[str, np.ndarray], labels: dict[str, np.ndarray], method: str,
                       columns: dict[str, str]) -> dict[str, Recalibration]:
    """One :class:`Recalibration` by ``method`` per probability of :data:`FITTED`, fitted on the model's
    ``outputs`` (name → probabilities) and the 0/1 ``labels`` (role → outcomes) of the same rows; ``columns``
    (role → column) names the labels in the errors."""
    fitted = {}
    for name, role in FITTED.items():
        try:
            fitted[name] = Recalibration(method).fit(outputs[name], labels[role])
        except DataError as exc:
            column = columns.get(role, role)
            raise DataError(f"recalibrating {name} against the {role} label {column!r}: {exc}") from None
    return fitted


def apply_recalibrations(outputs: dict[str, np.ndarray],
                         recalibrations: dict[str, Recalibration]) -> dict[str, np.ndarray]:
    """``outputs`` (name → probabilities) with ``p_ctr`` and ``p_ctcvr`` mapped by ``recalibrations``, ``p_cvr``
    their ratio (module docstring) and the model's own of :data:`RECALIBRATED` as ``<name>_raw``."""
    ctr = recalibrations["p_ctr"].apply(outputs["p_ctr"])
    ctcvr = np.minimum(recalibrations["p_ctcvr"].apply(outputs["p_ctcvr"]), ctr)
    cvr = np.divide(ctcvr, ctr, out=np.array(outputs["p_cvr"], dtype=np.float64), where=ctr > 0)
    raw = {f"{name}_raw": outputs[name] for name in RECALIBRATED}
    return {**outputs, "p_ctr": ctr, "p_cvr": cvr, "p_ctcvr": ctcvr, **raw}

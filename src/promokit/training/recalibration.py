"""Recalibrate predicted probabilities on a later labelled period, so that their level follows the latest base rate.

A ranking model can order sessions well (AUC) and still be off in level when the base rate moves between periods:
a budget plan that sums probabilities then expects far more or far less than it will realise. A
:class:`Recalibration` is fitted on held-out labelled rows (``fit(p, y)``: the model's probabilities and the
outcomes) and maps any probability afterwards (``apply``); it is plain JSON (``to_dict`` / ``from_dict``) so a
model directory can keep it (a model of several probabilities keeps one per probability: :func:`write_recalibrations`).
Methods:

- ``"isotonic"``: the monotone step fit of ``y`` on ``p`` (pool adjacent violators; Zadrozny & Elkan 2002),
  linear between its thresholds and clipped to their range outside it. Keeps the order of the scores, so the AUC
  changes only where it ties scores that differed.
- ``"platt"``: ``p' = σ(a·logit(p) + b)``, the logistic regression of ``y`` on the score's logit (Platt 1999),
  solved by maximum likelihood. Strictly monotone for ``a > 0``: the AUC is unchanged.
- ``"prior-shift"``: the base rate changed, the class-conditional scores did not (Elkan 2001, theorem 2; Saerens,
  Latinne & Decaestecker 2002, eq. 2.4): the odds are scaled by the new base rate's odds over the training base
  rate's, ``p'/(1-p') = p/(1-p) · [π'/(1-π')] / [π/(1-π)]``, with ``π'`` the rate observed on the rows fitted on
  and ``π`` the training base rate (``base_rate``; default: the mean of ``p`` on those rows, the rate the model
  believes there). One number, so it needs the fewest labels; it is monotone too.

The module is domain-free (numpy and scipy/scikit-learn only): a domain's estimator passes its probabilities.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from promokit.data.errors import DataError
from promokit.data.io import write_json

METHODS = ("isotonic", "platt", "prior-shift")
DEFAULT_METHOD = "isotonic"
#: The file of a model directory that holds its recalibration (:func:`write_recalibration`).
RECALIBRATION_FILE = "recalibration.json"
#: The fewest labelled rows a recalibration is fitted on.
MIN_ROWS = 10
#: Probabilities are kept this far from 0 and 1 before taking logits (a score of exactly 0 or 1 has none).
EPS = 1e-7


class Recalibration:
    """A map of probabilities fitted on labelled rows by ``method`` (:data:`METHODS`; module docstring)."""

    def __init__(self, method: str = DEFAULT_METHOD):
        if method not in METHODS:
            raise DataError(f"`method` must be one of {', '.join(METHODS)}; got {method!r}")
        self.method = method
        self.params: dict | None = None
        #: rows, positives, rate (the observed base rate), mean_p and mean_p_after (recalibrated) of the rows fitted on
        self.fitted_on: dict | None = None

    def fit(self, p, y, *, base_rate: float | None = None) -> Recalibration:
        """Fit on the probabilities ``p`` and the 0/1 outcomes ``y`` of the same rows; ``base_rate``: the training
        base rate (``"prior-shift"`` only; None: the mean of ``p``)."""
        p = _probabilities(p, "p")
        y = np.asarray(y, dtype=np.float64).ravel()
        if len(y) != len(p):
            raise DataError(f"p and y must have one value per row; got {len(p)} and {len(y)}")
        if np.isnan(y).any() or not np.isin(y, (0.0, 1.0)).all():
            raise DataError(f"y must be 0/1 outcomes without NaN; got values {np.unique(y)[:5].tolist()}")
        if len(y) < MIN_ROWS:
            raise DataError(f"recalibration needs at least {MIN_ROWS} labelled rows; got {len(y)}")
        positives = int(y.sum())
        if positives in (0, len(y)):
            raise DataError(f"recalibration needs both outcomes; all {len(y)} rows have y = {int(y[0])}")
        if base_rate is not None and self.method != "prior-shift":
            raise DataError(f"`base_rate` applies to method 'prior-shift' only; method is {self.method!r}")
        self.fitted_on = {"rows": len(y), "positives": positives, "mean_p": float(p.mean()), "rate": float(y.mean())}
        if self.method == "isotonic":
            self.params = _isotonic(p, y)
        elif self.method == "platt":
            self.params = _platt(p, y)
        else:
            prior = float(p.mean()) if base_rate is None else float(base_rate)
            if not 0 < prior < 1:
                raise DataError(f"`base_rate` must be in (0, 1); got {base_rate!r}")
            self.params = {"base_rate": prior, "new_rate": float(y.mean())}
        self.fitted_on["mean_p_after"] = float(self.apply(p).mean())
        return self

    def apply(self, p) -> np.ndarray:
        """The recalibrated probabilities of ``p`` (any shape's values, returned flat as float64)."""
        if self.params is None:
            raise RuntimeError("the recalibration is not fitted: call fit() or Recalibration.from_dict()")
        p = _probabilities(p, "p")
        if self.method == "isotonic":
            return np.interp(p, self.params["x"], self.params["y"])
        if self.method == "platt":
            return _sigmoid(self.params["a"] * _logit(p) + self.params["b"])
        return _sigmoid(_logit(p) + _logit(self.params["new_rate"]) - _logit(self.params["base_rate"]))

    def to_dict(self) -> dict:
        """Plain JSON: the method, its parameters (isotonic: its thresholds) and what it was fitted on."""
        if self.params is None:
            raise RuntimeError("the recalibration is not fitted: call fit() first")
        return {"method": self.method, "params": self.params, "fitted_on": self.fitted_on}

    @classmethod
    def from_dict(cls, data: dict) -> Recalibration:
        """The recalibration :meth:`to_dict` wrote; a DataError when ``data`` is not one."""
        keys = {"isotonic": ("x", "y"), "platt": ("a", "b"), "prior-shift": ("base_rate", "new_rate")}
        if not isinstance(data, dict) or data.get("method") not in keys:
            raise DataError(f"not a recalibration: expected a method among {', '.join(METHODS)}")
        params = data.get("params")
        if not isinstance(params, dict) or any(k not in params for k in keys[data["method"]]):
            raise DataError(f"recalibration {data['method']!r}: params must hold {', '.join(keys[data['method']])}")
        out = cls(data["method"])
        out.params, out.fitted_on = params, data.get("fitted_on")
        return out

    def __repr__(self) -> str:
        return f"Recalibration({self.method!r}, fitted={self.params is not None})"


def write_recalibration(model_dir: str | os.PathLike, recalibration: Recalibration | None) -> None:
    """Write ``recalibration`` into the model directory ``model_dir`` as :data:`RECALIBRATION_FILE`, atomically
    (None: remove the file, so the directory scores raw again). The rest of the directory is left as it is."""
    path = Path(model_dir) / RECALIBRATION_FILE
    if recalibration is None:
        path.unlink(missing_ok=True)
    else:
        write_json(recalibration.to_dict(), path)


def read_recalibration(model_dir: str | os.PathLike) -> Recalibration | None:
    """The recalibration of the model directory ``model_dir`` (:data:`RECALIBRATION_FILE`), or None without one."""
    return _read(model_dir, Recalibration.from_dict)


def write_recalibrations(model_dir: str | os.PathLike, recalibrations: dict[str, Recalibration]) -> None:
    """Write the recalibrations of a model with several probabilities, one entry per probability's name
    (``{"p_ctr": …, "p_ctcvr": …}``), into the model directory ``model_dir`` as :data:`RECALIBRATION_FILE`,
    atomically (none: remove the file). The rest of the directory is left as it is."""
    path = Path(model_dir) / RECALIBRATION_FILE
    if recalibrations:
        write_json({name: r.to_dict() for name, r in recalibrations.items()}, path)
    else:
        path.unlink(missing_ok=True)


def read_recalibrations(model_dir: str | os.PathLike) -> dict[str, Recalibration]:
    """The recalibrations by probability :func:`write_recalibrations` wrote into ``model_dir`` ({} without one)."""
    return _read(model_dir, _by_name) or {}


def _read(model_dir: str | os.PathLike, parse):
    path = Path(model_dir) / RECALIBRATION_FILE
    if not path.exists():
        return None
    try:
        return parse(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, DataError) as exc:
        raise DataError(f"{path}: not a recalibration ({exc})") from None


def _by_name(data) -> dict[str, Recalibration]:
    if not isinstance(data, dict) or not data or "method" in data:
        raise DataError("expected one recalibration per probability, by name")
    return {name: Recalibration.from_dict(entry) for name, entry in data.items()}


def _probabilities(p, name: str) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64).ravel()
    if np.isnan(p).any():
        raise DataError(f"{name} has {int(np.isnan(p).sum())} NaN of {len(p)} probabilities")
    if len(p) and (p.min() < 0 or p.max() > 1):
        raise DataError(f"{name} must be probabilities in [0, 1]; got values from {p.min():g} to {p.max():g}")
    return p


def _logit(p) -> np.ndarray:
    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def _sigmoid(z) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=np.float64)))


def _isotonic(p: np.ndarray, y: np.ndarray) -> dict:
    from sklearn.isotonic import IsotonicRegression

    fitted = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p, y)
    return {"x": fitted.X_thresholds_.tolist(), "y": fitted.y_thresholds_.tolist()}


def _platt(p: np.ndarray, y: np.ndarray) -> dict:
    """Maximum likelihood of ``y ~ Bernoulli(σ(a·logit(p) + b))`` (convex: L-BFGS from the identity map)."""
    from scipy.optimize import minimize

    z = _logit(p)

    def loss(w):
        s = w[0] * z + w[1]
        residual = _sigmoid(s) - y
        return float(np.mean(np.logaddexp(0.0, s) - y * s)), np.array([np.mean(residual * z), np.mean(residual)])

    result = minimize(loss, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B")
    return {"a": float(result.x[0]), "b": float(result.x[1])}

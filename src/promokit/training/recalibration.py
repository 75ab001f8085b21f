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

Per group (:class:`GroupRecalibration`: a campaign, a fund, an incentive level): one overall map fitted on every row
and one map per group fitted on that group's rows, each by ``method``. The overall map can be right on average only
because the groups' errors cancel (one campaign predicted half its rate, another twice it), so a budget spent per
group is wrong both ways; a group's own map fixes its level, but a small group's map is noise. A row of group ``g``
gets the two maps' probabilities mixed by the credibility weight of Bühlmann & Straub (1970, "Glaubwürdigkeit für
Schadensätze"), the linear empirical-Bayes estimate of a group's mean from its own rows and the pooled ones:

    p' = w_g · map_g(p) + (1 − w_g) · map(p),   w_g = n_g / (n_g + k),   k = σ² / τ²,

with ``n_g`` the group's rows, σ² the variance of one row's outcome within its group and τ² the variance of the
groups' rates, both estimated from the rows fitted on (Bühlmann–Straub's unbiased estimators, with ``r_g`` a group's
observed rate, ``r`` the overall one, ``n`` the rows and ``G`` the groups):

    σ² = Σ_g n_g r_g (1 − r_g) / (n − G),   τ² = (Σ_g n_g (r_g − r)² − (G − 1) σ²) / (n − Σ_g n_g² / n).

So ``k`` rows is the group size at which the group's own map and the overall one weigh equally: groups whose rates
differ far beyond their noise get a small ``k`` (each leans on its own map), groups that differ no more than noise
(τ² ≤ 0, or a single group) get none (``k`` infinite, stored as None: every row has the overall map). ``shrinkage``
fixes ``k`` instead. A group with fewer than :data:`MIN_ROWS` rows or a single outcome has no map of its own (w =
0), nor has a group unseen at fit time: both get the overall map, and :meth:`GroupRecalibration.new_groups` names the
unseen ones with their rows (:func:`new_groups_warning` words the one-line warning a domain gives for them). Group
keys are strings or numbers (numpy scalars are read as Python ones, so 27 and 27.0 are one key); missing keys (None,
NaN) form a group of their own, as in :func:`promokit.metrics.calibration.calibration_by`.

The module is domain-free (numpy and scipy/scikit-learn only): a domain's estimator passes its probabilities.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path

import numpy as np
import pandas as pd

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


class GroupRecalibration:
    """An overall :class:`Recalibration` and one per group of rows by ``method`` (:data:`METHODS`), each group's
    shrunk toward the overall one by ``k`` rows: estimated from the groups (``shrinkage`` None) or ``shrinkage``
    (module docstring, "Per group"). ``by`` names the grouping (e.g. a column) for the caller; the maps do not
    read it."""

    def __init__(self, method: str = DEFAULT_METHOD, *, by: str | None = None, shrinkage: float | None = None):
        self.overall = Recalibration(method)
        if shrinkage is not None and (not isinstance(shrinkage, numbers.Real) or isinstance(shrinkage, bool)
                                      or not 0 <= shrinkage < math.inf):
            raise DataError(f"`shrinkage` must be a number of rows ≥ 0 or None; got {shrinkage!r}")
        self.method, self.by, self.shrinkage = method, by, shrinkage
        #: key → {"rows", "positives", "map"} of each group fitted on ("map": its Recalibration, None without one)
        self.groups: dict | None = None
        #: the rows at which a group's map and the overall one weigh equally (None: infinite, no group's map counts)
        self.k: float | None = None
        #: the overall map's fitted_on, with ``groups``, ``own_maps`` and ``mean_p_after`` of the group maps
        self.fitted_on: dict | None = None

    def fit(self, p, y, groups, *, base_rate: float | None = None) -> GroupRecalibration:
        """Fit on the probabilities ``p``, the 0/1 outcomes ``y`` and the group keys ``groups`` of the same rows;
        ``base_rate``: the training base rate of every map (``"prior-shift"`` only; None: the mean of ``p`` on the
        rows each map is fitted on)."""
        self.overall.fit(p, y, base_rate=base_rate)
        p, y = _probabilities(p, "p"), np.asarray(y, dtype=np.float64).ravel()
        codes, keys = _group_keys(groups, len(p))
        self.k = _credibility_rows(codes, y) if self.shrinkage is None else float(self.shrinkage)
        self.groups = {key: _group_map(self.method, p[codes == i], y[codes == i], base_rate)
                       for i, key in enumerate(keys)}
        own = sum(entry["map"] is not None for entry in self.groups.values())
        self.fitted_on = {**self.overall.fitted_on, "groups": len(keys), "own_maps": own,
                          "mean_p_after": float(self.apply(p, groups).mean())}
        return self

    def weight(self, key) -> float:
        """The weight ``n_g / (n_g + k)`` of the group ``key``'s own map; 0 for a group without one or unseen."""
        self._check_fitted()
        entry = self.groups.get(_key(key))
        if entry is None or entry["map"] is None or self.k is None:
            return 0.0
        return entry["rows"] / (entry["rows"] + self.k)

    def apply(self, p, groups) -> np.ndarray:
        """The recalibrated probabilities of ``p`` (returned flat as float64), each row by its key in ``groups``:
        ``w_g · map_g(p) + (1 − w_g) · map(p)``; the overall map for a group without a map of its own or unseen."""
        self._check_fitted()
        p = _probabilities(p, "p")
        codes, keys = _group_keys(groups, len(p))
        out = self.overall.apply(p)
        for i, key in enumerate(keys):
            w = self.weight(key)
            if w > 0:
                rows = codes == i
                out[rows] = w * self.groups[key]["map"].apply(p[rows]) + (1 - w) * out[rows]
        return out

    def new_groups(self, groups) -> dict:
        """The distinct keys of ``groups`` the recalibration was not fitted on (they get the overall map), each with
        its count of rows, in the order they first occur."""
        self._check_fitted()
        codes, keys = _group_keys(groups)
        rows = np.bincount(codes, minlength=len(keys))
        return {key: int(rows[i]) for i, key in enumerate(keys) if key not in self.groups}

    def to_dict(self) -> dict:
        """Plain JSON: the method, ``by``, ``shrinkage``, ``k``, the overall map and each group's key, rows, positives
        and map (:meth:`Recalibration.to_dict`; None without one), and what it was fitted on."""
        self._check_fitted()
        return {"method": self.method, "by": self.by, "shrinkage": self.shrinkage, "k": self.k,
                "overall": self.overall.to_dict(), "fitted_on": self.fitted_on,
                "groups": [{"key": key, "rows": entry["rows"], "positives": entry["positives"],
                            "map": None if entry["map"] is None else entry["map"].to_dict()}
                           for key, entry in self.groups.items()]}

    @classmethod
    def from_dict(cls, data: dict) -> GroupRecalibration:
        """The group recalibration :meth:`to_dict` wrote; a DataError when ``data`` is not one."""
        fields = ("method", "k", "overall", "groups")
        if not isinstance(data, dict) or any(f not in data for f in fields) or not isinstance(data["groups"], list):
            raise DataError(f"not a group recalibration: expected {', '.join(fields)} (groups a list)")
        out = cls(data["method"], by=data.get("by"), shrinkage=data.get("shrinkage"))
        out.overall, out.k, out.fitted_on = Recalibration.from_dict(data["overall"]), data["k"], data.get("fitted_on")
        if any(not isinstance(g, dict) or any(f not in g for f in ("key", "rows", "map")) for g in data["groups"]):
            raise DataError("group recalibration: each of its groups must hold key, rows and map")
        out.groups = {_key(g["key"]): {"rows": g["rows"], "positives": g.get("positives"),
                                       "map": None if g["map"] is None else Recalibration.from_dict(g["map"])}
                      for g in data["groups"]}
        return out

    def _check_fitted(self) -> None:
        if self.groups is None:
            raise RuntimeError("the group recalibration is not fitted: call fit() or GroupRecalibration.from_dict()")

    def __repr__(self) -> str:
        groups = "unfitted" if self.groups is None else f"{len(self.groups)} groups"
        return f"GroupRecalibration({self.method!r}, by={self.by!r}, {groups})"


def new_groups_warning(new: dict, rows: int, what: str, by: str | None) -> str | None:
    """The one line a domain warns with when some of its rows get the overall map of a :class:`GroupRecalibration`
    because their group is new to it: ``new`` (:meth:`GroupRecalibration.new_groups`: each unseen key → its rows)
    among ``rows`` ``what`` (e.g. ``"sessions"``) in all, the groups named by ``by`` (the recalibration's ``by``),
    the first three keys shown; None when ``new`` is empty."""
    if not new:
        return None
    shown = ", ".join(map(repr, list(new)[:3])) + (", …" if len(new) > 3 else "")
    return (f"{sum(new.values()):,} of {rows:,} {what} are in {len(new)} {by} values the recalibration was not "
            f"fitted on ({shown}): they get its overall map")


def recalibration_from_dict(data: dict) -> Recalibration | GroupRecalibration:
    """The :class:`Recalibration` or :class:`GroupRecalibration` (a dict with ``groups``) ``to_dict`` wrote."""
    if isinstance(data, dict) and "groups" in data:
        return GroupRecalibration.from_dict(data)
    return Recalibration.from_dict(data)


def write_recalibration(model_dir: str | os.PathLike,
                        recalibration: Recalibration | GroupRecalibration | None) -> None:
    """Write ``recalibration`` into the model directory ``model_dir`` as :data:`RECALIBRATION_FILE`, atomically
    (None: remove the file, so the directory scores raw again). The rest of the directory is left as it is."""
    path = Path(model_dir) / RECALIBRATION_FILE
    if recalibration is None:
        path.unlink(missing_ok=True)
    else:
        write_json(recalibration.to_dict(), path)


def read_recalibration(model_dir: str | os.PathLike) -> Recalibration | GroupRecalibration | None:
    """The recalibration, overall or by group, of the model directory ``model_dir`` (:data:`RECALIBRATION_FILE`), or
    None without one."""
    return _read(model_dir, recalibration_from_dict)


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


def _group_map(method: str, p: np.ndarray, y: np.ndarray, base_rate: float | None) -> dict:
    """A group's rows, positives and own map (None with fewer than :data:`MIN_ROWS` rows or a single outcome)."""
    positives = int(y.sum())
    fits = len(y) >= MIN_ROWS and 0 < positives < len(y)
    return {"rows": len(y), "positives": positives,
            "map": Recalibration(method).fit(p, y, base_rate=base_rate) if fits else None}


def _credibility_rows(codes: np.ndarray, y: np.ndarray) -> float | None:
    """Bühlmann–Straub's ``k = σ² / τ²`` of the 0/1 outcomes ``y`` in the groups ``codes`` (module docstring); None
    (infinite) when the groups' rates differ no more than their noise (τ² ≤ 0), or with one group or one row per
    group."""
    rows = np.bincount(codes).astype(np.float64)
    n, count = rows.sum(), len(rows)
    if count < 2 or n <= count:
        return None
    rates = np.bincount(codes, weights=y) / rows
    within = float(np.sum(rows * rates * (1 - rates)) / (n - count))
    between = float((np.sum(rows * (rates - y.mean()) ** 2) - (count - 1) * within) / (n - np.sum(rows ** 2) / n))
    return within / between if between > 0 else None


def _group_keys(groups, n: int | None = None) -> tuple[np.ndarray, list]:
    """Each row's code into the distinct keys of ``groups`` (Python scalars, None for a missing key), in the order
    they first occur; a one-line DataError when ``n`` (the rows) differs from the keys given or a key is neither a
    string nor a number."""
    keys = groups if isinstance(groups, (np.ndarray, pd.Series)) else list(groups)
    codes, uniques = pd.factorize(pd.Series(keys, copy=False), use_na_sentinel=False)
    if n is not None and len(codes) != n:
        raise DataError(f"groups must have one key per row of p; got {len(codes)} keys for {n} rows")
    return codes, [_key(key) for key in uniques]


def _key(key):
    """``key`` as a JSON scalar: a numpy scalar as its Python value, a missing key (None, NaN) as None."""
    if isinstance(key, np.generic):
        key = key.item()
    if key is None or (isinstance(key, float) and math.isnan(key)):
        return None
    if not isinstance(key, (str, numbers.Real)):
        raise DataError(f"groups: a key must be a string or a number; got {type(key).__name__} {key!r}")
    return key


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

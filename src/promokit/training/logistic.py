"""Logistic regression solved to its optimum, with the L2 strength chosen on validation rows."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import cache, partial

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from scipy.special import expit, log_expit
from threadpoolctl import ThreadpoolController
from torch import Tensor

from promokit.console import get_console
from promokit.metrics import auc
from promokit.nn.linear import LinearLogit
from promokit.nn.wide import WideTerm
from promokit.training.solve_progress import SolveProgress

#: L2 strengths searched (penalty (l2 / 2)·‖w‖² on the mean logloss), from strongest to weakest.
L2_GRID = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6)
#: The search starts at the strength ``PRIOR_L2_ROWS / n`` for n training rows: on the mean logloss, a Gaussian prior
#: of variance 1 / PRIOR_L2_ROWS on each weight (scikit-learn's default C = 1 is 1 / n). It is also the strength
#: without validation rows. On KuaiRand-Pure the chosen strengths were 2.6 / n (the click) and 3 / n (the follow).
PRIOR_L2_ROWS = 3.0
#: A solve stops at a gradient (max-norm) of this times its strength (or 1e-4 if smaller); the strengths a search
#: ranks are solved to ``SEARCH_TOLERANCE`` times theirs (their validation AUCs agree to the fourth digit), the kept
#: one then to this. Stopped at ``SEARCH_TOLERANCE``, AmExpert's floor scored later rows 0.003 off its optimum's AUC.
TOLERANCE = 0.1
SEARCH_TOLERANCE = 1.0
#: A Newton step's conjugate gradients stop at a residual of √‖g‖·‖g‖ for the gradient g, √‖g‖ kept within these
#: bounds: loose far from the optimum, and never so tight that float32 products stall them near it.
FORCING = (0.1, 0.5)
MAX_NEWTON_STEPS, MAX_CG_STEPS = 100, 200


def design_matrix(cat: Tensor, num: Tensor, cardinalities) -> sp.csr_matrix:
    """The one-hot design of ``cat`` (one column per category of every field, OOV included) beside ``num``,
    in the column order of :class:`~promokit.nn.LinearLogit`'s weights, in float32 (the solver's products read
    half the memory of float64's, and the weights are float32). Every row stores its ``num`` entries, zeros too."""
    (n, fields), width = cat.shape, cat.shape[1] + num.shape[1]
    n_cat = int(sum(cardinalities))
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]]).astype(np.int64)
    columns = np.empty((n, width), dtype=np.int32 if n_cat + width < 2**31 else np.int64)
    columns[:, :fields] = cat.numpy() + offsets
    columns[:, fields:] = n_cat + np.arange(width - fields)
    values = np.ones((n, width), dtype=np.float32)
    values[:, fields:] = num.numpy()
    return sp.csr_matrix((values.ravel(), columns.ravel(), np.arange(0, n * width + 1, width)),
                         shape=(n, n_cat + width - fields))


@cache
def _blas() -> ThreadpoolController:
    """The process's BLAS libraries, found once (each ``threadpool_limits`` scans the loaded libraries again: 3 ms)."""
    return ThreadpoolController()


def one_blas_thread():
    """A context in which BLAS runs on one thread: a solver's dot products are too small to share, and on a busy
    machine the spinning threads made each one sixty times slower."""
    return _blas().limit(limits=1, user_api="blas")


def prior_l2(rows: int) -> float:
    """The strength the L2 search starts from, and the strength without validation rows: ``PRIOR_L2_ROWS / rows``."""
    return PRIOR_L2_ROWS / max(rows, 1)


def search_l2(solve, rows: int, *, fixed: float | None = None, validated: bool = True, grid=L2_GRID,
              report=None, start=None) -> tuple[object, list[dict]]:
    """The solution kept and the records of an L2 search: ``solve(strength, start)`` returns ``(solution, score)``
    (the score on validation rows, higher better, NaN without them), ``start`` being the solution to warm-start
    from, or None.

    ``fixed`` is solved alone, as is :func:`prior_l2` of ``rows`` without validation rows (``validated=False``);
    ``start`` warm-starts the first solve (a refit's, from the weights its selection solved).
    Else the strength of ``grid`` nearest the prior is solved first, then the search steps one strength stronger
    while the score improves; when the first stronger step does not improve, it steps weaker from the start
    instead, while the score improves. A validation score is unimodal along the path in practice, so this finds the
    grid's best in three or four solves where the whole path takes up to nine; stronger strengths are tried first
    because they solve in fewer Newton steps.
    ``report(record)`` is called after each solve. Records, in the order solved: ``l2``, ``score``, ``chosen`` and
    ``seconds`` (the solve's wall time)."""
    records = []

    def step(strength, start):
        began = time.perf_counter()
        solution, score = solve(strength, start)
        records.append({"l2": strength, "score": float(score), "chosen": False,
                        "seconds": time.perf_counter() - began})
        if report is not None:
            report(records[-1])
        return solution, score

    if fixed is not None or not validated:
        solution, _ = step(fixed if fixed is not None else prior_l2(rows), start)
        records[0]["chosen"] = True
        return solution, records
    grid = sorted(grid, reverse=True)
    first = int(np.argmin(np.abs(np.log(grid) - np.log(prior_l2(rows)))))
    best = (first, *step(grid[first], start))  # (index, solution, score)
    for direction in (-1, 1):  # stronger, then (if that never improved) weaker
        index = best[0] + direction
        while 0 <= index < len(grid):
            solution, score = step(grid[index], best[1])
            if not score > best[2]:
                break
            best, index = (index, solution, score), index + direction
        if best[0] != first:
            break
    next(r for r in records if r["l2"] == grid[best[0]])["chosen"] = True
    return best[1], records


def fit_logistic(model: LinearLogit, cat: Tensor, num: Tensor, y: Tensor,
                 valid: tuple[Tensor, Tensor, Tensor] | None = None, l2: float | None = None,
                 grid=L2_GRID, progress: bool = False, name: str = "logistic regression",
                 start: np.ndarray | None = None, refit_next: bool = False) -> list[dict]:
    r"""Set ``model``'s weights to the minimiser of :math:`\frac{1}{n}\sum_i \ell(y_i, z_i) + \frac{l2}{2}\lVert w
    \rVert^2` (logloss ℓ, intercept not penalised), solved by :func:`newton_cg` on the sparse one-hot design
    (:func:`design_matrix`) to a gradient tolerance of ``l2`` × :data:`TOLERANCE` (at most 1e-4), on one BLAS thread.

    With ``l2=None`` the strength is searched on ``grid`` by the AUC on ``valid`` (``cat, num, y``), each solve
    warm-started from the best so far (:func:`search_l2`); without validation rows (or with one class among them) it
    is :func:`prior_l2`. A given ``l2`` (a refit's, the one its search chose) is solved alone, from ``start`` when
    given (θ: the column weights, then the intercept; :func:`carried_start`). A searched strength is solved on to
    :data:`TOLERANCE` once chosen, unless ``refit_next``: a refit on every row follows and nothing scores this
    solution, which only starts the refit's solve (:func:`~promokit.training.refit.refit_next`). ``progress`` prints a
    line per strength solved (its AUC and seconds) and, within a solve of more than a few seconds, its iterations
    (:class:`~promokit.training.solve_progress.SolveProgress`). Returns one record per strength solved: ``l2``,
    ``valid_auc`` (NaN without validation), ``chosen`` and ``seconds``.
    """
    y_np = y.numpy()
    if len(np.unique(y_np)) < 2:
        raise ValueError(f"logistic regression needs both classes; the {len(y_np)} training rows have one")
    if l2 is not None and not l2 > 0:
        raise ValueError(f"the L2 strength must be > 0 (or None: searched), got {l2!r}")
    cardinalities = model.weights.cardinalities
    loss = Logloss(design_matrix(cat, num, cardinalities), y_np, cardinalities)
    x_valid = None if valid is None else design_matrix(valid[0], valid[1], cardinalities)
    if valid is not None and len(np.unique(valid[2].numpy())) < 2:
        x_valid = None  # no AUC on one class

    def solve(strength, start, tolerance=TOLERANCE):
        stop = min(1e-4, strength * tolerance)
        theta = newton_cg(loss, strength, stop, start, SolveProgress(name, strength, stop) if progress else None)
        return theta, auc(valid[2].numpy(), _logits(x_valid, theta)) if x_valid is not None else np.nan

    def report(record):
        scored = "" if np.isnan(record["score"]) else f", valid AUC {record['score']:.4f}"
        get_console().print(f"{name}: l2 {record['l2']:.1e}{scored} ({record['seconds']:.1f} s)", highlight=False)

    searched = l2 is None and x_valid is not None
    with one_blas_thread():
        theta, records = search_l2(partial(solve, tolerance=SEARCH_TOLERANCE) if searched else solve, len(y_np),
                                   fixed=l2, validated=x_valid is not None, grid=grid,
                                   report=report if progress else None, start=start)
        if searched and not refit_next:  # the kept strength, from where the search left it, to the final tolerance
            theta, _ = solve(next(r["l2"] for r in records if r["chosen"]), theta)
    n_cat = int(sum(cardinalities))
    with torch.no_grad():
        model.weights.table.weight[:n_cat, 0] = torch.from_numpy(theta[:n_cat]).float()
        model.numeric.weight[0] = torch.from_numpy(theta[n_cat:-1]).float()
        model.numeric.bias.fill_(float(theta[-1]))
    return [{"l2": r["l2"], "valid_auc": r["score"], "chosen": r["chosen"], "seconds": r["seconds"]} for r in records]


def carried_start(solved: LinearLogit, solved_fields, fields) -> np.ndarray:
    """θ (the column weights, then the intercept) of a design whose categorical fields are encoded by ``fields``
    (:class:`~promokit.data.encoders.CategoryEncoder`), carrying ``solved``'s weights (a logit solved over the same
    fields encoded by ``solved_fields``) to each category by its value: a refit's vocabulary holds the held-out rows'
    categories too, which take ``solved``'s out-of-vocabulary weight. The numeric weights and the intercept are
    carried as they are: the refit's numeric encoders standardise over more rows, close enough to start from."""
    table = solved.weights.table.weight.detach().numpy()[:, 0].astype(np.float64)
    offsets = np.concatenate([[0], np.cumsum(solved.weights.cardinalities)[:-1]]).astype(np.int64)
    parts = []
    for offset, old, new in zip(offsets, solved_fields, fields):
        codes = old.transform(pd.Series(new.vocabulary, dtype="int64" if new.kind == "int" else "string"))
        parts.append(table[offset + np.concatenate([[0], codes])])
    numeric = solved.numeric.weight.detach().numpy()[0].astype(np.float64)
    return np.concatenate([*parts, numeric, [float(solved.numeric.bias)]])


class Logloss:
    """The mean logloss of a design (:func:`design_matrix`'s: one-hot fields of the given ``cardinalities``, then
    numeric columns) with labels ``y``, and the products :func:`newton_cg` needs. Parameters are one vector θ: the
    column weights, then the intercept. The design's products run in float32, everything else in float64."""

    def __init__(self, x: sp.csr_matrix, y: np.ndarray, cardinalities):
        self.x = x
        #: the transposes of the design and of its entries squared, CSC views built once (scipy builds one per ``.T``)
        self.x_t = x.T
        self.squared_t = sp.csr_matrix((x.data * x.data, x.indices, x.indptr), shape=x.shape).T
        self.y = np.asarray(y, dtype=np.float64)
        self.sign = 2.0 * self.y - 1.0
        #: the field of each one-hot column
        self.field = np.repeat(np.arange(len(cardinalities)), cardinalities)
        self.cardinalities = np.asarray(cardinalities, dtype=np.float64)

    def start(self) -> np.ndarray:
        """θ of the intercept alone: every weight 0, the intercept at the labels' log-odds."""
        rate = self.y.mean()
        return np.append(np.zeros(self.x.shape[1]), np.log(rate / (1.0 - rate)))

    def value(self, z: np.ndarray, theta: np.ndarray, l2: float) -> float:
        """The objective at θ, whose logits are ``z``."""
        return float(-log_expit(self.sign * z).mean() + 0.5 * l2 * theta[:-1] @ theta[:-1])

    def gradient(self, z: np.ndarray, theta: np.ndarray, l2: float) -> tuple[np.ndarray, np.ndarray]:
        """The objective's gradient at θ (logits ``z``), and the rows' curvature weights p(1 − p) / n."""
        p = expit(z)
        return self.transposed(self.x_t, (p - self.y) / len(z)) + _penalised(theta, l2), p * (1.0 - p) / len(z)

    def hessian_product(self, weights: np.ndarray, l2: float, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The design times ``s`` and the Hessian (curvature ``weights``) times ``s``."""
        xs = _logits(self.x, s)
        return xs, self.transposed(self.x_t, weights * xs) + _penalised(s, l2)

    @staticmethod
    def transposed(matrix_t: sp.csc_matrix, v: np.ndarray) -> np.ndarray:
        """``matrix_t``·v (a transposed design times v), then the sum of v (the intercept's column)."""
        return np.append(matrix_t @ v.astype(np.float32), v.sum())

    def preconditioner(self, weights: np.ndarray, l2: float):
        r"""An approximate inverse of the Hessian (curvature ``weights``), r ↦ D⁻¹r + Z E⁻¹ Zᵀr: its diagonal D, and
        the exact inverse on the span of Z, whose columns shift one field's weights, or the intercept, together.

        A field's one-hot columns sum to the intercept's column, so moving its weights up and the intercept down
        leaves the loss unchanged: only the penalty curves along these directions, l2 against the loss's
        curvature elsewhere, and without the correction conjugate gradients crawl along them at weak strengths.
        Z's columns all map to ones through the design, so E = ZᵀHZ = (Σ weights)·𝟙𝟙ᵀ + l2·diag(cardinalities, 0)."""
        diagonal = self.transposed(self.squared_t, weights) + _penalised(np.ones(self.x.shape[1] + 1), l2)
        fields, n_cat = len(self.cardinalities), len(self.field)
        coarse = np.linalg.inv(np.full((fields + 1, fields + 1), weights.sum())
                               + np.diag(np.append(l2 * self.cardinalities, 0.0)))

        def apply(r):
            shift = coarse @ np.append(np.bincount(self.field, weights=r[:n_cat], minlength=fields), r[-1])
            q = r / diagonal
            q[:n_cat] += shift[self.field]
            q[-1] += shift[-1]
            return q

        return apply


def newton_cg(loss: Logloss, l2: float, tolerance: float, start: np.ndarray | None = None,
              progress: Callable[[float], None] | None = None) -> np.ndarray:
    """θ minimising ``loss`` + (l2 / 2)·‖w‖² to a gradient max-norm of ``tolerance``, by Newton's method from
    ``start`` (default :meth:`Logloss.start`): each step by preconditioned conjugate gradients (:func:`_newton_step`),
    then a backtracking line search. At most :data:`MAX_NEWTON_STEPS` steps, each followed by ``progress(gradient)``
    (the gradient's max-norm after it; a :class:`~promokit.training.solve_progress.SolveProgress`) when given."""
    theta = loss.start() if start is None else start.copy()
    z = _logits(loss.x, theta)
    value = loss.value(z, theta, l2)
    for step in range(MAX_NEWTON_STEPS):
        g, weights = loss.gradient(z, theta, l2)
        gradient = np.abs(g).max()
        if progress is not None and step:
            progress(gradient)
        if gradient <= tolerance:
            break
        s, xs = _newton_step(loss, weights, l2, g)
        t, value = _line_search(loss, z, theta, l2, value, g @ s, s, xs)
        theta += t * s
        z += t * xs
    return theta


def _newton_step(loss: Logloss, weights: np.ndarray, l2: float, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s ≈ −H⁻¹g by conjugate gradients preconditioned by :meth:`Logloss.preconditioner`, to a residual of
    :data:`FORCING`, and the design times s (the logits' change)."""
    precondition = loss.preconditioner(weights, l2)
    norm = np.sqrt(g @ g)
    stop = norm * min(max(np.sqrt(norm), FORCING[0]), FORCING[1])
    s, xs, r = np.zeros_like(g), np.zeros(loss.x.shape[0]), -g
    q = precondition(r)
    d, rho = q, r @ q
    for _ in range(MAX_CG_STEPS):
        xd, hd = loss.hessian_product(weights, l2, d)
        alpha = rho / (d @ hd)
        s += alpha * d
        xs += alpha * xd
        r -= alpha * hd
        if np.sqrt(r @ r) <= stop:
            break
        q = precondition(r)
        rho, previous = r @ q, rho
        d = q + (rho / previous) * d
    return s, xs


def _line_search(loss: Logloss, z, theta, l2, value, slope, s, xs) -> tuple[float, float]:
    """The step along ``s`` (the logits moving by ``xs``), halved from 1 until the objective falls by a 10⁻⁴ share
    of what its ``slope`` promises, and the objective there."""
    t = 1.0
    while True:
        new = loss.value(z + t * xs, theta + t * s, l2)
        if new <= value + 1e-4 * t * slope or t < 1e-8:
            return t, new
        t /= 2


def _logits(x: sp.csr_matrix, theta: np.ndarray) -> np.ndarray:
    """The design's logits under θ (column weights, then the intercept), in float64."""
    return (x @ theta[:-1].astype(np.float32)).astype(np.float64) + theta[-1]


def _penalised(theta: np.ndarray, l2: float) -> np.ndarray:
    """l2·θ with the intercept's entry 0: the penalty's gradient, and its Hessian times θ."""
    out = l2 * theta
    out[-1] = 0.0
    return out


def solve_wide(model: torch.nn.Module, train: dict[str, Tensor], valid: dict[str, Tensor] | None = None,
               progress: bool = False) -> list[dict]:
    """Solve every ``offset`` :class:`~promokit.nn.WideTerm` of ``model`` to the floor: each logit's
    :class:`LinearLogit` by :func:`fit_logistic` on the rows its target names (the L2 strength chosen on the
    matching validation rows), as the domain's ``lr`` solves the same logit. Returns one record per logit: its
    name, the chosen ``l2`` and that strength's ``valid_auc``. A model whose batches do not hold the wide term's
    ``cat`` and ``num`` themselves builds them with its ``wide_inputs(batch)``. ``progress``: a line per strength
    solved (:func:`fit_logistic`).

    The last few floors solved in this process are kept by the content of their rows: a bench fits the same
    training rows for every seed and model, and the floor of one logit on them is the same every time."""
    terms = [m for m in model.modules() if isinstance(m, WideTerm) and m.mode == "offset"]
    if not terms:
        return []
    if hasattr(model, "wide_inputs"):
        train = {**train, **model.wide_inputs(train)}
        valid = None if valid is None else {**valid, **model.wide_inputs(valid)}
    records = []
    for term in terms:
        for name, (label, given) in term.targets.items():
            linear = term.logits[name]
            rows = _rows(train, label, given), None if valid is None else _rows(valid, label, given)
            if len(torch.unique(rows[0][2])) < 2:  # every training row one class (CDNOW: every delivery a click)
                records.append(_constant_floor(linear, name, rows[0][2]))
                continue
            key = _fingerprint(linear, *rows[0], *(rows[1] or ()))
            if key not in _SOLVED:
                path = fit_logistic(linear, *rows[0], rows[1], progress=progress, name=f"floor of {name}")
                _SOLVED[key] = ({k: v.clone() for k, v in linear.state_dict().items()},
                                next(r for r in path if r["chosen"]))
                while len(_SOLVED) > SOLVED_KEPT:
                    _SOLVED.popitem(last=False)
            weights, chosen = _SOLVED[key]
            linear.load_state_dict(weights)
            records.append({"logit": name, "l2": chosen["l2"], "valid_auc": chosen["valid_auc"]})
    return records


def _constant_floor(linear: LinearLogit, name: str, labels: Tensor) -> dict:
    """A logit whose training rows hold one class has no floor to solve: its offset is the constant logit of the
    smoothed rate, (positives + ½) / (rows + 1), every weight zero."""
    linear.reset_parameters()
    rate = (float(labels.sum()) + 0.5) / (len(labels) + 1)
    with torch.no_grad():
        linear.numeric.bias.fill_(float(np.log(rate / (1 - rate))))
    return {"logit": name, "l2": None, "valid_auc": float("nan"), "constant": rate}


#: How many solved floors :func:`solve_wide` keeps.
SOLVED_KEPT = 16
_SOLVED: OrderedDict[bytes, tuple[dict, dict]] = OrderedDict()


def _fingerprint(linear: LinearLogit, *tensors: Tensor) -> bytes:
    digest = hashlib.blake2b(repr((linear.weights.cardinalities, linear.numeric.in_features)).encode(), digest_size=16)
    for tensor in tensors:
        digest.update(repr(tuple(tensor.shape)).encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.digest()


def _rows(tensors: dict[str, Tensor], label: str, given) -> tuple[Tensor, Tensor, Tensor]:
    """``cat``, ``num`` and ``label`` of the rows where every ``given`` column holds its value."""
    rows = torch.ones(len(tensors[label]), dtype=torch.bool)
    for column, value in given.items():
        rows &= tensors[column] == value
    return tensors["cat"][rows], tensors["num"][rows], tensors[label][rows]

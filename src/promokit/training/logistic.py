"""Logistic regression solved to its optimum, with the L2 strength chosen on validation rows."""

from __future__ import annotations

import hashlib
import time
import warnings
from collections import OrderedDict
from functools import partial

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from promokit.console import get_console
from promokit.metrics import auc
from promokit.nn.linear import LinearLogit
from promokit.nn.wide import WideTerm

#: L2 strengths searched (penalty (l2 / 2)·‖w‖² on the mean logloss), from strongest to weakest.
L2_GRID = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6)
#: The search starts at the strength ``PRIOR_L2_ROWS / n`` for n training rows: on the mean logloss, a Gaussian prior
#: of variance 1 / PRIOR_L2_ROWS on each weight (scikit-learn's default C = 1 is 1 / n). It is also the strength
#: without validation rows. On KuaiRand-Pure the chosen strengths were 2.6 / n (the click) and 3 / n (the follow).
PRIOR_L2_ROWS = 3.0
#: A solve stops at a gradient (max-norm) of this times its strength; the strengths a search ranks are solved to
#: ``SEARCH_TOLERANCE`` times theirs (their validation AUCs agree to the fourth digit), the kept one then to this.
TOLERANCE = 0.1
SEARCH_TOLERANCE = 1.0


def design_matrix(cat: Tensor, num: Tensor, cardinalities) -> sp.csr_matrix:
    """The one-hot design of ``cat`` (one column per category of every field, OOV included) beside ``num``,
    in the column order of :class:`~promokit.nn.LinearLogit`'s weights, in float32 (the solver's products read
    half the memory of float64's, and the weights are float32)."""
    n, fields = cat.shape
    if fields == 0:
        return sp.csr_matrix(num.numpy().astype(np.float32))
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]]).astype(np.int64)
    columns = (cat.numpy() + offsets).ravel()
    one_hot = sp.csr_matrix((np.ones(n * fields, dtype=np.float32), columns, np.arange(0, n * fields + 1, fields)),
                            shape=(n, int(sum(cardinalities))))
    return sp.hstack([one_hot, sp.csr_matrix(num.numpy().astype(np.float32))], format="csr")


def prior_l2(rows: int) -> float:
    """The strength the L2 search starts from, and the strength without validation rows: ``PRIOR_L2_ROWS / rows``."""
    return PRIOR_L2_ROWS / max(rows, 1)


def search_l2(solve, rows: int, *, fixed: float | None = None, validated: bool = True, grid=L2_GRID,
              report=None) -> tuple[object, list[dict]]:
    """The solution kept and the records of an L2 search: ``solve(strength, start)`` returns ``(solution, score)``
    (the score on validation rows, higher better, NaN without them), ``start`` being the solution to warm-start
    from, or None.

    ``fixed`` is solved alone, as is :func:`prior_l2` of ``rows`` without validation rows (``validated=False``).
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
        solution, _ = step(fixed if fixed is not None else prior_l2(rows), None)
        records[0]["chosen"] = True
        return solution, records
    grid = sorted(grid, reverse=True)
    first = int(np.argmin(np.abs(np.log(grid) - np.log(prior_l2(rows)))))
    best = (first, *step(grid[first], None))  # (index, solution, score)
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
                 grid=L2_GRID, progress: bool = False, name: str = "logistic regression") -> list[dict]:
    r"""Set ``model``'s weights to the minimiser of :math:`\frac{1}{n}\sum_i \ell(y_i, z_i) + \frac{l2}{2}\lVert w
    \rVert^2` (logloss ℓ, intercept not penalised), solved by scikit-learn's Newton-CG (``C = 1 / (n·l2)``) on the
    sparse one-hot design (:func:`design_matrix`), to a gradient tolerance of ``l2`` × :data:`TOLERANCE`.

    With ``l2=None`` the strength is searched on ``grid`` by the AUC on ``valid`` (``cat, num, y``), each solve
    warm-started from the last (:func:`search_l2`); without validation rows (or with one class among them) it is
    :func:`prior_l2`. ``progress`` prints a line per strength solved (its AUC and seconds). Returns one record per
    strength solved: ``l2``, ``valid_auc`` (NaN without validation), ``chosen`` and ``seconds``.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    y_np = y.numpy()
    if len(np.unique(y_np)) < 2:
        raise ValueError(f"logistic regression needs both classes; the {len(y_np)} training rows have one")
    cardinalities = model.weights.cardinalities
    x = design_matrix(cat, num, cardinalities)
    x_valid = None if valid is None else design_matrix(valid[0], valid[1], cardinalities)
    if valid is not None and len(np.unique(valid[2].numpy())) < 2:
        x_valid = None  # no AUC on one class

    def solve(strength, start, tolerance=TOLERANCE):
        solver = LogisticRegression(C=1.0 / (len(y_np) * strength), solver="newton-cg",
                                    tol=min(1e-4, strength * tolerance), max_iter=100, warm_start=start is not None)
        if start is not None:
            solver.coef_, solver.intercept_ = start.coef_.copy(), start.intercept_.copy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=ConvergenceWarning)
            solver.fit(x, y_np)
        score = auc(valid[2].numpy(), solver.decision_function(x_valid)) if x_valid is not None else np.nan
        return solver, score

    def report(record):
        get_console().print(f"{name}: l2 {record['l2']:.1e}, valid AUC {record['score']:.4f} "
                            f"({record['seconds']:.1f} s)", highlight=False)

    searched = l2 is None and x_valid is not None
    solver, records = search_l2(partial(solve, tolerance=SEARCH_TOLERANCE) if searched else solve, len(y_np),
                                fixed=l2, validated=x_valid is not None, grid=grid, report=report if progress else None)
    if searched:  # the kept strength, from where the search left it, to the final tolerance
        solver, _ = solve(next(r["l2"] for r in records if r["chosen"]), solver)
    coef, intercept = solver.coef_[0].astype(np.float64), float(solver.intercept_[0])
    n_cat = int(sum(cardinalities))
    with torch.no_grad():
        model.weights.table.weight[:n_cat, 0] = torch.from_numpy(coef[:n_cat]).float()
        model.numeric.weight[0] = torch.from_numpy(coef[n_cat:]).float()
        model.numeric.bias.fill_(intercept)
    return [{"l2": r["l2"], "valid_auc": r["score"], "chosen": r["chosen"], "seconds": r["seconds"]} for r in records]


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

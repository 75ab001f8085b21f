"""Logistic regression solved to its optimum, with the L2 strength chosen on validation rows."""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from promokit.metrics import auc
from promokit.nn.linear import LinearLogit
from promokit.nn.wide import WideTerm

#: The L2 strength without validation rows to choose one on.
DEFAULT_L2 = 1e-4
#: L2 strengths tried from strongest to weakest (penalty (l2 / 2)·‖w‖² on the mean logloss).
L2_GRID = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6)


def design_matrix(cat: Tensor, num: Tensor, cardinalities) -> sp.csr_matrix:
    """The one-hot design of ``cat`` (one column per category of every field, OOV included) beside ``num``,
    in the column order of :class:`~promokit.nn.LinearLogit`'s weights."""
    n, fields = cat.shape
    if fields == 0:
        return sp.csr_matrix(num.numpy().astype(np.float64))
    offsets = np.concatenate([[0], np.cumsum(cardinalities)[:-1]]).astype(np.int64)
    columns = (cat.numpy() + offsets).ravel()
    one_hot = sp.csr_matrix((np.ones(n * fields), columns, np.arange(0, n * fields + 1, fields)),
                            shape=(n, int(sum(cardinalities))))
    return sp.hstack([one_hot, sp.csr_matrix(num.numpy().astype(np.float64))], format="csr")


def fit_logistic(model: LinearLogit, cat: Tensor, num: Tensor, y: Tensor,
                 valid: tuple[Tensor, Tensor, Tensor] | None = None, l2: float | None = None,
                 grid=L2_GRID, patience: int = 2) -> list[dict]:
    r"""Set ``model``'s weights to the minimiser of :math:`\frac{1}{n}\sum_i \ell(y_i, z_i) + \frac{l2}{2}\lVert w
    \rVert^2` (logloss ℓ, intercept not penalised), solved by L-BFGS in scikit-learn (``C = 1 / (n·l2)``).

    With ``l2=None`` the strengths of ``grid`` are solved from the strongest down (each warm-started from the
    last) and the one with the best AUC on ``valid`` (``cat, num, y``) is kept; the path stops after
    ``patience`` strengths without a better AUC. Returns one record per strength solved: ``l2``,
    ``valid_auc`` (NaN without validation) and ``chosen``.
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
        x_valid = None  # no AUC on one class: fall back to the first (strongest) strength
    strengths = [l2] if l2 is not None else list(grid) if x_valid is not None else [DEFAULT_L2]
    solver = LogisticRegression(C=1.0, max_iter=1000, tol=1e-5, warm_start=True)  # 1e-4 stopped the path early
    records, best, best_auc, bad = [], None, -np.inf, 0
    for strength in strengths:
        solver.set_params(C=1.0 / (len(y_np) * strength))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=ConvergenceWarning)  # weak strengths stop at max_iter
            solver.fit(x, y_np)
        score = auc(valid[2].numpy(), solver.decision_function(x_valid)) if x_valid is not None else np.nan
        records.append({"l2": strength, "valid_auc": float(score), "chosen": False})
        if best is None or score > best_auc:
            best, best_auc, bad = (solver.coef_[0].copy(), float(solver.intercept_[0]), len(records) - 1), score, 0
        else:
            bad += 1
            if bad >= patience:
                break
    coef, intercept, index = best
    records[index]["chosen"] = True
    n_cat = int(sum(cardinalities))
    with torch.no_grad():
        model.weights.table.weight[:n_cat, 0] = torch.from_numpy(coef[:n_cat]).float()
        model.numeric.weight[0] = torch.from_numpy(coef[n_cat:]).float()
        model.numeric.bias.fill_(intercept)
    return records


def solve_wide(model: torch.nn.Module, train: dict[str, Tensor], valid: dict[str, Tensor] | None = None) -> list[dict]:
    """Solve every ``offset`` :class:`~promokit.nn.WideTerm` of ``model`` to the floor: each logit's
    :class:`LinearLogit` by :func:`fit_logistic` on the rows its target names (the L2 strength chosen on the
    matching validation rows), as the domain's ``lr`` solves the same logit. Returns one record per logit: its
    name, the chosen ``l2`` and that strength's ``valid_auc``. A model whose batches do not hold the wide term's
    ``cat`` and ``num`` themselves builds them with its ``wide_inputs(batch)``.

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
                path = fit_logistic(linear, *rows[0], rows[1])
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

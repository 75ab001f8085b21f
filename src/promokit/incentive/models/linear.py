"""The linear floor ``lr``: one-hot inputs read by the hazard and merchant heads without a tower, solved to the
optimum of its L2-penalised likelihood by L-BFGS instead of trained by Adam to an epoch limit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch
from scipy.optimize import minimize
from scipy.special import expit
from torch import Tensor, nn

from promokit.console import get_console
from promokit.data.errors import DataError
from promokit.incentive.models._curve import MAX_LOG_HAZARD
from promokit.metrics import auc
from promokit.training import History
from promokit.training.logistic import TOLERANCE, design_matrix, one_blas_thread, search_l2
from promokit.training.solve_progress import SolveProgress

#: The floor's own parameters: the L2 strengths of its customer and merchant heads (``None``: chosen on validation).
FLOOR_PARAMS = {"l2_customers": None, "l2_merchants": None}


#: Corrections L-BFGS keeps (scipy's default is 10): the hazards' weakly determined pieces curve little, and with 30 a
#: solve took 25–50 % fewer evaluations on the synthetic world (benchmarks/floor_speed.py).
LBFGS_MEMORY = 30


def check_floor_params(params: dict) -> None:
    """The floor's strengths: ``None`` (chosen on validation) or a number ≥ 0, else a one-line error."""
    for name in FLOOR_PARAMS:
        value = params.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
            raise DataError(f"{name} must be a number ≥ 0 (or null: chosen on the validation nodes), got {value!r}")


class OneHotFeatures(nn.Module):
    """A node's categorical fields one-hot (a column per category of every field, the OOV slot included) beside its
    numeric block: the inputs of the linear floor, called as :class:`~promokit.nn.FeatureEmbedding` is.

    A building block, not from the papers (the joint-incentive paper, ``joint-incentive-hazard-allocation.txt``, has
    no linear floor): x = [onehot(c_1) ‖ … ‖ onehot(c_F) ‖ x_num], with no weights.

    Args:
        cardinalities: columns per categorical field (code 0 of each is its out-of-vocabulary slot).
        n_numeric: width D of the numeric block.

    Shapes:
        - **input:** ``x["cat"]`` ``(B, F)`` int64 codes, ``x["num"]`` ``(B, D)``
        - **output:** ``(B, sum(cardinalities) + D)`` (:attr:`output_dim`)
    """

    def __init__(self, cardinalities: Sequence[int], n_numeric: int):
        super().__init__()
        self.cardinalities = list(cardinalities)
        offsets = torch.tensor([0, *self.cardinalities[:-1]], dtype=torch.long).cumsum(0)
        self.register_buffer("offsets", offsets, persistent=False)
        self.output_dim = sum(self.cardinalities) + n_numeric

    def forward(self, x: dict[str, Tensor]) -> Tensor:
        cat, num = x["cat"], x["num"]
        hot = torch.zeros(len(cat), sum(self.cardinalities)).scatter_(1, cat + self.offsets, 1.0)
        return torch.cat([hot, num], dim=1)


def solve_floor(net, train: dict[str, Tensor], valid: dict[str, Tensor] | None, monitor: str,
                l2_customers: float | None = None, l2_merchants: float | None = None,
                progress: bool = False, start: dict[str, np.ndarray] | None = None) -> History:
    r"""Set the heads of a ``linear`` :class:`~promokit.incentive.models.network.IncentiveNet` (inputs attached) to
    the minimisers of its two separable objectives over the rows of ``train`` (``labelled_rows``' layout):

    - customers: the mean censored negative log-likelihood of eq. 9 under log-linear piecewise hazards
      λ_j = exp(w_j·x + b_j) (exponents capped at ``MAX_LOG_HAZARD`` as in the network) + (l2 / 2)·Σ_j ‖w_j‖²;
    - merchants: the mean squared error of f_m = softplus(w_g·x + c_g)·r_k / r_K + softplus(w_i·x + c_i) against
      the normalised shares + (l2 / 2)·(‖w_g‖² + ‖w_i‖²);

    intercepts unpenalised, each by scipy's L-BFGS-B with the exact gradient, to a gradient max-norm of the strength
    × :data:`~promokit.training.logistic.TOLERANCE` as the logistic floors (at most 1e-4, at least 1e-8: a strength
    of 0), on one BLAS thread as :func:`~promokit.training.fit_logistic`. A strength not given is chosen on
    ``valid`` as :func:`~promokit.training.fit_logistic` chooses it (:func:`_l2_path`): the customers' on AUC_c
    with ``monitor="auc_c"``, else on their log-likelihood; the merchants' on their squared error. The merchant
    objective is not convex (softplus of a linear map): L-BFGS finds a stationary point. Returns the paths as a
    :class:`History` (one record per strength, the kept ones ``chosen``), and sets the strengths kept as the
    network's ``chosen_params`` (:func:`chosen_strengths`). ``progress`` prints a line per strength solved (its
    validation metric and seconds) and, within a solve of more than a few seconds, its iterations
    (:class:`~promokit.training.solve_progress.SolveProgress`). ``start`` (a refit's: :func:`head_weights` of the
    selected floor) warm-starts each side's first solve."""
    values = net.customer_head.values
    score = customer_auc if monitor == "auc_c" else customer_loglik
    records = []
    for side, objective, metric, fixed, head in (
            ("customers", customer_objective, score, l2_customers, net.customer_head),
            ("merchants", merchant_objective, merchant_mse, l2_merchants, net.merchant_head)):
        rows = _rows(net, train, side)
        if rows is None:
            continue
        held = _rows(net, valid, side) if valid is not None else None
        rows, held = (None if r is None else offered(side, *r, values) for r in (rows, held))
        with one_blas_thread():
            theta, path = _l2_path(objective, metric, rows, held, fixed, side, progress, (start or {}).get(side))
        _assign(side, head, theta, rows[0].shape[1], len(values.width))
        records += path
    net.eval()
    history = History(epochs=records, best_epoch=-1, monitor=monitor, unit="l2 strength")
    net.chosen_params = chosen_strengths(history)  # what a refit on every row fixes (promokit.training.refit)
    return history


def _l2_path(objective, metric, rows, held, fixed: float | None, side: str, progress: bool = False,
             start: np.ndarray | None = None):
    """The solution kept and the path: the strengths :func:`~promokit.training.logistic.search_l2` searches (from
    the prior strength for the side's rows, each solution warm-starting the next, the first from ``start`` when
    given) by the validation ``metric`` (the largest AUC or log-likelihood, the smallest squared error); ``fixed``
    alone, or the prior strength without validation rows. Each record also holds the solve's ``seconds``;
    ``progress``: :func:`solve_floor`'s."""
    sign = -1.0 if metric is merchant_mse else 1.0
    name = f"valid_{metric.__name__}"
    label = f"lr {side}"

    def solve(strength, start):
        theta = np.zeros(_size(side, *rows[:2])) if start is None else start
        stop = max(min(1e-4, strength * TOLERANCE), 1e-8)
        shown, gradient = SolveProgress(label, strength, stop) if progress else None, [np.inf]

        def evaluated(*args):  # the gradient of the latest evaluation: the iterate's once an iteration ends
            value, grad = objective(*args)
            gradient[0] = np.abs(grad).max()
            return value, grad

        theta = minimize(evaluated, theta, args=(*rows, strength), jac=True, method="L-BFGS-B",
                         callback=None if shown is None else lambda _: shown(gradient[0]),
                         options={"maxiter": 5000, "ftol": 0.0,  # the gradient alone stops it
                                  "gtol": stop, "maxcor": LBFGS_MEMORY}).x
        return theta, sign * metric(theta, *held) if held is not None else np.nan

    def report(record):
        scored = "" if np.isnan(record["score"]) else f", {name} {sign * record['score']:.4f}"
        get_console().print(f"{label}: l2 {record['l2']:.1e}{scored} ({record['seconds']:.1f} s)", highlight=False)

    theta, records = search_l2(solve, rows[0].shape[0], fixed=fixed, validated=held is not None,
                               report=report if progress else None, start=start)
    return theta, [{"part": side, "l2": r["l2"], name: sign * r["score"], "chosen": r["chosen"],
                    "seconds": r["seconds"]} for r in records]


def chosen_strengths(history: History) -> dict[str, float]:
    """``l2_customers`` / ``l2_merchants`` as :func:`solve_floor` chose them (for the model's parameters)."""
    return {f"l2_{r['part']}": r["l2"] for r in history.epochs if r["chosen"]}


def _rows(net, rows: dict[str, Tensor], side: str) -> tuple[sp.csr_matrix | np.ndarray, np.ndarray, np.ndarray] | None:
    """The design matrix (the one-hot categories, then the numeric block the network reads after them: own
    numbers, structure, neighbours' history), offered level index and label of the ``side`` rows of ``rows``;
    None without any. A design that stores at least a third of its entries (a few categories beside the numeric
    block) is dense, in float64: no larger than the sparse one, and its products by BLAS took a third of the sparse
    ones' time (the whole objective 2.9 ms against 4.6 on the synthetic world's 18,000 customers)."""
    mine = rows["customer"] == (side == "customers")
    if not mine.any():
        return None
    nodes, features = ((net.inputs.customers, net.customer_features) if side == "customers" else
                       (net.inputs.merchants, net.merchant_features))
    index = rows["node"][mine]
    numeric = torch.cat([nodes.num[index], nodes.structure[index], nodes.history[index]], dim=1)
    x = design_matrix(nodes.cat[index], numeric, features.cardinalities)
    if 3 * x.nnz >= x.shape[0] * x.shape[1]:
        x = x.toarray().astype(np.float64)
    return x, rows["level"][mine].numpy(), rows["label"][mine].double().numpy()


def offered(side: str, x: sp.csr_matrix | np.ndarray, level: np.ndarray, y: np.ndarray, values) -> tuple:
    """The ``side``'s rows as its objective reads them: the design, what the offered ``level`` (index into the
    network's ``values``, :class:`~promokit.incentive.models._curve.ValueGrid`) means there, and the label. For
    customers, ``(n, K)``: δ_j on the pieces up to the offered value, 0 beyond (computed once here, not at every
    evaluation); for merchants, ``(n,)``: r_k / r_K of the offered commission."""
    if side == "customers":
        width = values.width.double().numpy()
        return x, (np.arange(len(width)) <= level[:, None]) * width, y
    return x, values.scaled.double().numpy()[level], y


def _size(side: str, x: sp.csr_matrix, reach: np.ndarray) -> int:
    p = x.shape[1]
    return reach.shape[1] * (p + 1) if side == "customers" else 2 * (p + 1)


def customer_objective(theta, x, reached, y, l2) -> tuple[float, np.ndarray]:
    """Mean NLL of eq. 9 + (l2 / 2)·‖W‖² and its gradient in θ = (W row by row, b); ``reached`` is
    :func:`offered`'s ``(n, K)`` widths of the pieces up to each row's offered value."""
    n, k = reached.shape
    p = x.shape[1]
    weight = theta[:k * p].reshape(k, p)
    z = x @ weight.T
    z += theta[k * p:]
    below = z < MAX_LOG_HAZARD
    hazard = np.exp(np.minimum(z, MAX_LOG_HAZARD, out=z), out=z)  # z's buffer, reused
    hazard *= reached
    cumulative = hazard.sum(1)
    redeemed = y > 0.5
    at_risk = np.maximum(cumulative[redeemed], 1e-12)
    nll = cumulative[~redeemed].sum() - np.log(-np.expm1(-at_risk)).sum()
    slope = np.ones(n)
    with np.errstate(over="ignore"):  # a hazard certain to redeem: expm1 → inf, its slope → 0, as it should
        slope[redeemed] = -1.0 / np.expm1(at_risk)
    hazard *= (slope / n)[:, None]
    hazard *= below
    grad = np.concatenate([(x.T @ hazard).T.ravel() + l2 * weight.ravel(), hazard.sum(0)])
    return float(nll / n + 0.5 * l2 * (weight ** 2).sum()), grad


def customer_auc(theta, x, reached, y) -> float:
    """AUC_c of f_c at the offered value."""
    k, p = reached.shape[1], x.shape[1]
    z = x @ theta[:k * p].reshape(k, p).T + theta[k * p:]
    return auc(y, -np.expm1(-(np.exp(np.minimum(z, MAX_LOG_HAZARD)) * reached).sum(1)))


def customer_loglik(theta, x, reached, y) -> float:
    """The customers' mean log-likelihood of eq. 9."""
    return -customer_objective(theta, x, reached, y, 0.0)[0]


def _merchant_maps(theta, x):
    p = x.shape[1]
    w_g, c_g, w_i, c_i = theta[:p], theta[p], theta[p + 1:2 * p + 1], theta[2 * p + 1]
    return w_g, w_i, x @ w_g + c_g, x @ w_i + c_i


def merchant_objective(theta, x, r, target, l2) -> tuple[float, np.ndarray]:
    """Mean squared error of f_m at the offered commission (``r``: its r_k / r_K, :func:`offered`) + (l2 / 2)·(‖w_g‖²
    + ‖w_i‖²), and its gradient in θ = (w_g, c_g, w_i, c_i)."""
    w_g, w_i, a, c = _merchant_maps(theta, x)
    error = np.logaddexp(0.0, a) * r + np.logaddexp(0.0, c) - target
    d_a, d_c = 2 * error * expit(a) * r / len(target), 2 * error * expit(c) / len(target)
    grad = np.concatenate([x.T @ d_a + l2 * w_g, [d_a.sum()], x.T @ d_c + l2 * w_i, [d_c.sum()]])
    return float((error ** 2).mean() + 0.5 * l2 * (w_g @ w_g + w_i @ w_i)), grad


def merchant_mse(theta, x, r, target) -> float:
    """The merchants' mean squared error at the offered commission."""
    return merchant_objective(theta, x, r, target, 0.0)[0]


def head_weights(net) -> dict[str, np.ndarray]:
    """θ of each head of a solved ``linear`` network, laid out as :func:`solve_floor` solves it (the inverse of
    :func:`_assign`): what a refit on every row starts its solves from."""
    head, curve = net.customer_head, net.merchant_head.curve
    flat = [param.detach().double().numpy().ravel() for param in
            (curve.gradient.weight, curve.gradient.bias, curve.intercept.weight, curve.intercept.bias)]
    return {"customers": np.concatenate([head.weight.detach().double().numpy().ravel(),
                                         head.bias.detach().double().numpy()]),
            "merchants": np.concatenate(flat)}


def _assign(side: str, head: nn.Module, theta: np.ndarray, p: int, k: int) -> None:
    """Copy a solution into the head's weights (float32, the network's precision)."""
    def put(param, values):
        param.copy_(torch.as_tensor(np.asarray(values).reshape(param.shape), dtype=param.dtype))

    with torch.no_grad():
        if side == "customers":
            put(head.weight, theta[:k * p])
            put(head.bias, theta[k * p:])
        else:
            curve = head.curve
            put(curve.gradient.weight, theta[:p])
            put(curve.gradient.bias, theta[p])
            put(curve.intercept.weight, theta[p + 1:2 * p + 1])
            put(curve.intercept.bias, theta[2 * p + 1])

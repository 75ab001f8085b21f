"""Metrics of predicted customer value (expected transaction value, ETV) and of value-based allocation.

* :func:`normalized_gini` — how well a value prediction ranks customers (ZILN, Wang, Liu & Miao 2019).
* :func:`decile_table` / :func:`decile_figure` — calibration of the prediction by decile of the prediction.
* :func:`hit_metrics` — total hit conversions and amount, EOCA (Weng et al.) eqs. (15)–(16).
* :func:`per_mille` — conversions or amount per mille deliveries, EOCA eqs. (17)–(18).
* :func:`order_of_magnitude_share` — the share of predictions off by a factor of ten or more.
* :func:`fund_personalisation` — how much a user × fund value table tells users apart: whose best fund is not
  everyone's, and how much the differences between funds vary over users.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from promokit.metrics._validation import as_binary_1d, as_float_1d
from promokit.metrics.ranking import MetricWarning, _average_ranks_within

def normalized_gini(y_true, y_pred) -> float:
    """The normalised Gini coefficient of a value prediction: Gini(y_true ordered by y_pred) divided by
    Gini(y_true ordered by itself). 1 = the prediction ranks customers perfectly, 0 = no better than random,
    negative = worse than random.

    The Gini of an ordering is twice the area between its gain (Lorenz) curve — the share of the total true
    value held by the top k rows, k = 0..n, joined by straight lines — and the diagonal of a random ordering.
    With rows at 1-based ascending rank r_i of the prediction, n rows and total Y = Σ y_i, twice that area is

        Gini = Σ_i y_i (2 r_i - n - 1) / (n Y).

    Tied predictions get their average rank, which is the Gini averaged over every order of the tied rows: a
    deterministic result that favours no row, and exactly 0 for a constant prediction. Only the order of
    ``y_pred`` matters, so any strictly increasing transform of it leaves the value unchanged.

    ``y_true`` must be finite, non-negative and not all zero; ``y_pred`` finite. NaN with a ``MetricWarning``
    if ``y_true`` is constant (every ordering is then perfect and the denominator is 0).
    """
    y, p = _pair(y_true, y_pred, pred_nonnegative=False)
    total = y.sum()
    if not total > 0:
        raise ValueError(f"y_true must not be all zero; its {len(y)} values sum to 0, so the Gini is undefined")
    model = _gini(y, p, total)
    best = _gini(y, y, total)
    if best == 0:
        warnings.warn(f"normalized Gini is undefined: all {len(y)} y_true values equal {_show(y[0])}; "
                      "returning NaN", MetricWarning, stacklevel=2)
        return float("nan")
    return float(model / best)


def decile_table(y_true, y_pred, bins: int = 10) -> pd.DataFrame:
    """Rows sorted by ``y_pred`` (ascending) into ``bins`` equal-count groups; in each, the mean prediction and
    the mean observed value.

    Columns: ``decile`` (1 = lowest predictions), ``rows``, ``mean_predicted``, ``mean_observed`` and ``ratio``
    = mean_predicted / mean_observed (NaN when mean_observed is 0). Group sizes differ by at most one row: the
    first n mod ``bins`` groups hold one row more. Ties are broken by a stable sort (equal predictions keep their
    input order), so a tied block may straddle two groups. ``y_true`` must be finite and non-negative, ``y_pred``
    finite. For several models, concatenate their tables with a ``model`` column for :func:`decile_figure`.
    """
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {_show(bins)}")
    y, p = _pair(y_true, y_pred, pred_nonnegative=False)
    n = len(y)
    if n < bins:
        raise ValueError(f"need at least {bins} rows for {bins} bins, got {n}")
    order = np.argsort(p, kind="stable")
    sizes = np.full(bins, n // bins)
    sizes[: n % bins] += 1
    group = np.repeat(np.arange(bins), sizes)
    mean_pred = np.bincount(group, weights=p[order], minlength=bins) / sizes
    mean_obs = np.bincount(group, weights=y[order], minlength=bins) / sizes
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mean_obs > 0, mean_pred / np.where(mean_obs > 0, mean_obs, 1.0), np.nan)
    return pd.DataFrame({"decile": np.arange(1, bins + 1), "rows": sizes, "mean_predicted": mean_pred,
                         "mean_observed": mean_obs, "ratio": ratio})


def decile_figure(table: pd.DataFrame, title: str):
    """A matplotlib Figure of mean predicted vs mean observed value per decile, as grouped bars.

    ``table`` is a :func:`decile_table` (at least ``decile``, ``mean_predicted`` and ``mean_observed``). With a
    ``model`` column it may hold several models: one panel per model (each model's deciles hold other rows),
    predicted and observed means side by side on a symmetric-log scale.
    """
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"table must be a pandas DataFrame, got {type(table).__name__}")
    missing = [c for c in ("decile", "mean_predicted", "mean_observed") if c not in table.columns]
    if missing:
        raise ValueError(f"table is missing the columns {missing}; pass a decile_table")
    if table.empty:
        raise ValueError("table has no rows; pass a decile_table")
    frame = table if "model" in table.columns else table.assign(model="predicted")
    n_missing = int(frame["model"].isna().sum())
    if n_missing:
        raise ValueError(f"table's model column has {n_missing} missing values; every row needs a model")
    duplicated = frame.duplicated(["model", "decile"])
    if duplicated.any():
        first = frame.loc[duplicated].iloc[0]
        raise ValueError(f"table has {int(duplicated.sum())} repeated (model, decile) rows, "
                         f"e.g. model {_show(first['model'])} decile {_show(first['decile'])}")
    models = list(pd.unique(frame["model"]))
    predicted = frame.pivot(index="decile", columns="model", values="mean_predicted")[models]
    observed = frame.pivot(index="decile", columns="model", values="mean_observed")[models]

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deciles = predicted.index.to_numpy()
    x = np.arange(len(deciles))
    columns = min(3, len(models))
    rows = -(-len(models) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False, sharey=True)
    for ax, model in zip(axes.flat, models):
        ax.bar(x - 0.2, predicted[model].to_numpy(), 0.4, color="tab:blue", label="mean predicted")
        ax.bar(x + 0.2, observed[model].to_numpy(), 0.4, color="#888888", label="mean observed")
        ax.set_xticks(x, [str(d) for d in deciles])
        ax.set_yscale("symlog", linthresh=1.0)  # means span orders of magnitude across deciles, zeros included
        ax.set_title(str(model) if "model" in table.columns else title, fontsize="medium")
        ax.set_xlabel("decile of the prediction (1 = lowest)")
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    axes[0, 0].set_ylabel("mean value (symlog)")
    axes[0, 0].legend(loc="upper left", fontsize="small")
    if "model" in table.columns:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def hit_metrics(user_ids, scores: np.ndarray, funds: Sequence[str], outcome_users, outcome_funds,
                outcome_convert, outcome_amount) -> dict:
    """Total hit conversions (THC) and total hit amount (THA), EOCA eqs. (15)–(16).

    User ``user_ids[i]`` is put in the group of fund ``funds[j]`` with the highest predicted ETV
    ``scores[i, j]`` (ties go to the first such fund). The outcome rows (``outcome_users``, ``outcome_funds``,
    ``outcome_convert`` 0/1, ``outcome_amount`` ≥ 0) whose fund is their user's chosen fund are the hit rows:

    * ``thc`` = Σ convert over the hit rows (eq. 15 sums y_ij): a user with several converting rows of the
      chosen fund counts once per converting row; with one row per (user, fund) it is the number of users who
      converted on their chosen fund.
    * ``tha`` = Σ amount over the hit rows (eq. 16 sums PA_ij). Every hit row's amount is added whatever its
      convert flag, so non-converting rows are expected to carry amount 0.
    * ``users`` = how many users were scored; ``hit_users`` = users with at least one outcome row (converting
      or not) of their chosen fund.

    Outcome rows whose user is not in ``user_ids`` are ignored. ``user_ids`` must be unique, ``scores`` a finite
    (len(user_ids), len(funds)) array, ``funds`` unique; an outcome fund not in ``funds`` is a ``ValueError``.
    """
    users = _keys(user_ids, "user_ids")
    fund_index = _keys(funds, "funds")
    if len(fund_index) == 0:
        raise ValueError("funds must name at least one fund")
    s = np.asarray(scores)
    if s.dtype.kind not in "biuf":
        raise ValueError(f"scores must be numeric, got dtype {s.dtype}")
    if s.shape != (len(users), len(fund_index)):
        raise ValueError(f"scores must have shape (len(user_ids), len(funds)) = ({len(users)}, {len(fund_index)}), "
                         f"got {s.shape}")
    bad_rows = ~np.isfinite(s).all(axis=1) if s.dtype.kind == "f" else np.zeros(len(users), dtype=bool)
    if bad_rows.any():
        first = int(np.flatnonzero(bad_rows)[0])
        raise ValueError(f"scores must be finite; {int(bad_rows.sum())} of {len(users)} users have NaN or inf "
                         f"scores, e.g. user {_show(users[first])}: {s[first].tolist()}")
    o_users, o_funds = _column(outcome_users, "outcome_users"), _column(outcome_funds, "outcome_funds")
    convert = as_binary_1d(outcome_convert, "outcome_convert")
    amount = _amounts(outcome_amount, "outcome_amount")
    if not len(o_users) == len(o_funds) == len(convert) == len(amount):
        raise ValueError(f"outcome_users, outcome_funds, outcome_convert and outcome_amount must have one length, "
                         f"got {len(o_users)}, {len(o_funds)}, {len(convert)}, {len(amount)}")
    fund_of_row = _positions(fund_index, o_funds)
    unknown = fund_of_row < 0
    if unknown.any():
        example = o_funds[int(np.flatnonzero(unknown)[0])]
        raise ValueError(f"outcome_funds has {int(unknown.sum())} rows of funds not in funds, "
                         f"e.g. {_show(example)}; known funds: {list(fund_index)}")
    user_of_row = _positions(users, o_users)
    chosen = np.argmax(s, axis=1) if len(users) else np.zeros(0, dtype=np.intp)
    known = user_of_row >= 0
    hit = known.copy()
    hit[known] = fund_of_row[known] == chosen[user_of_row[known]]
    hit_user = np.zeros(len(users), dtype=bool)
    hit_user[user_of_row[hit]] = True
    return {"thc": int(convert[hit].sum()), "tha": float(amount[hit].sum()), "users": len(users),
            "hit_users": int(hit_user.sum())}


def per_mille(total, deliveries) -> float:
    """``total`` per thousand deliveries: total / deliveries × 1000.

    With ``total`` = the number of conversions this is CPMD (EOCA eq. 17); with ``total`` = the summed purchase
    amount it is TAPMD (eq. 18). ``total`` must be a finite number ≥ 0, ``deliveries`` a finite number > 0.
    """
    t, d = _scalar(total, "total"), _scalar(deliveries, "deliveries")
    if t < 0:
        raise ValueError(f"total must be non-negative, got {_show(total)}")
    if d <= 0:
        raise ValueError(f"deliveries must be positive, got {_show(deliveries)}")
    return t / d * 1000


def order_of_magnitude_share(y_true, y_pred) -> float:
    """The share of rows whose prediction is off by an order of magnitude or more, on the (1 + value) scale:

        |log10((1 + y_pred) / (1 + y_true))| ≥ 1,

    i.e. 1 + y_pred is at least ten times 1 + y_true or at most a tenth of it. The 1 + keeps zero values (most
    customers spend nothing) defined: a zero is off by an order of magnitude only against a value ≥ 9. The test
    is evaluated as max(1 + y_pred, 1 + y_true) ≥ 10 · min(…), free of logarithm rounding at the boundary.

    Both inputs must be finite and non-negative amounts. NaN with a ``MetricWarning`` on empty input.
    """
    y, p = _pair(y_true, y_pred, pred_nonnegative=True)
    if len(y) == 0:
        warnings.warn("order_of_magnitude_share is undefined on empty input; returning NaN", MetricWarning,
                      stacklevel=2)
        return float("nan")
    a, b = 1 + p, 1 + y
    return float(np.mean(np.maximum(a, b) >= 10 * np.minimum(a, b)))


def fund_personalisation(scores) -> dict:
    """How much a users × funds table of values (ETV) personalises the choice of fund.

    * ``best_differs``: the share of users whose highest-value fund (the first on ties) is not the population's
      best fund, the one with the highest mean value over the users. 0 when the table would give everyone the same
      fund — a model whose value is a user part plus (or times) a fund part, however well it ranks users.
    * ``uplift_spread``: how much the difference between two funds' values varies over users — the standard
      deviation over users of s_ij − s_ik, root-mean-squared over every pair of funds j ≠ k — divided by the mean
      value, so tables on other scales (a pCTCVR, an amount) compare. 0 when every user's values differ from
      everyone else's by one constant; NaN with a single fund or a mean value that is not positive.

    ``scores`` must be a 2-D finite array with at least one user and one fund.
    """
    s = np.asarray(scores)
    if s.ndim != 2 or s.dtype.kind not in "biuf" or 0 in s.shape:
        raise ValueError(f"scores must be a numeric (users, funds) array with at least one of each, got "
                         f"{s.dtype} of shape {s.shape}")
    s = s.astype(np.float64)
    if not np.isfinite(s).all():
        raise ValueError(f"scores must be finite; {int((~np.isfinite(s)).sum())} of {s.size} values are not")
    mean, n_funds = s.mean(), s.shape[1]
    best_differs = float(np.mean(s.argmax(axis=1) != s.mean(axis=0).argmax()))
    if n_funds < 2 or not mean > 0:
        return {"best_differs": best_differs, "uplift_spread": float("nan")}
    # the user × fund interaction r (s without its user and fund means): var over users of s_ij − s_ik is the mean
    # over users of (r_ij − r_ik)², whose mean over the pairs j ≠ k is 2J/(J − 1) times the mean of r², as the rows
    # and columns of r sum to 0 — without the cancellation of a covariance formula
    centred = s - s.mean(axis=0)
    interaction = centred - centred.mean(axis=1, keepdims=True)
    spread = np.sqrt(2 * n_funds / (n_funds - 1) * np.mean(interaction ** 2))
    return {"best_differs": best_differs, "uplift_spread": float(spread / mean)}


def _gini(y: np.ndarray, order_by: np.ndarray, total: float) -> float:
    n = len(y)
    ranks = _average_ranks_within(np.zeros(n, dtype=np.intp), order_by)
    return float(np.dot(y, 2 * ranks - (n + 1)) / (n * total))


def _pair(y_true, y_pred, pred_nonnegative: bool) -> tuple[np.ndarray, np.ndarray]:
    y = _amounts(y_true, "y_true")
    p = _amounts(y_pred, "y_pred", nonnegative=pred_nonnegative)
    if len(y) != len(p):
        raise ValueError(f"y_true and y_pred must have the same length, got {len(y)} and {len(p)}")
    return y, p


def _amounts(values, name: str, nonnegative: bool = True) -> np.ndarray:
    """``values`` as a finite (and, for amounts, non-negative) 1-D float64 array, else a one-line error."""
    array = as_float_1d(values, name)
    bad = ~np.isfinite(array)
    if bad.any():
        raise ValueError(f"{name} must be finite; {int(bad.sum())} of {len(array)} values are not, "
                         f"e.g. {_show(array[bad][0])}")
    if nonnegative:
        negative = array < 0
        if negative.any():
            raise ValueError(f"{name} must be non-negative; {int(negative.sum())} of {len(array)} values are "
                             f"negative, e.g. {_show(array[negative][0])}")
    return array


def _keys(values, name: str) -> pd.Index:
    """``values`` as a 1-D index of unique, non-missing keys, else a one-line error."""
    if isinstance(values, (str, bytes)) or np.ndim(values) != 1:
        raise ValueError(f"{name} must be a 1-D sequence of keys, got {type(values).__name__} "
                         f"of shape {np.shape(values)}")
    index = pd.Index(values if isinstance(values, (np.ndarray, pd.Index, pd.Series)) else list(values))
    missing = index.isna()
    if missing.any():
        raise ValueError(f"{name} has {int(missing.sum())} missing keys of {len(index)}; every key must be set")
    duplicated = index.duplicated()
    if duplicated.any():
        raise ValueError(f"{name} must be unique; {int(duplicated.sum())} of {len(index)} are repeats, "
                         f"e.g. {_show(index[duplicated][0])}")
    return index


def _column(values, name: str):
    """``values`` (keys that may repeat) as a 1-D array, Series or Index, else a one-line error."""
    if isinstance(values, (str, bytes)) or np.ndim(values) != 1:
        raise ValueError(f"{name} must be 1-D, got shape {np.shape(values)}")
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True)
    return values if isinstance(values, (np.ndarray, pd.Index)) else pd.Index(list(values))


def _positions(keys: pd.Index, values) -> np.ndarray:
    """The position of each of ``values`` in the unique ``keys``, -1 where absent (or missing).

    Hashes the distinct values once and looks only those up in ``keys``. A NumPy string array is compared with
    each of a few string keys instead, which avoids converting millions of fixed-width strings to objects.
    """
    if (isinstance(values, np.ndarray) and values.dtype.kind in "US" and len(keys) <= 32
            and all(isinstance(k, str if values.dtype.kind == "U" else bytes) for k in keys)):
        positions = np.full(len(values), -1, dtype=np.intp)
        for j, key in enumerate(keys):
            positions[values == key] = j
        return positions
    codes, uniques = pd.factorize(values)
    return np.r_[keys.get_indexer(uniques), -1].astype(np.intp)[codes]


def _show(value) -> str:
    """``repr`` of a key or number for an error message, numpy scalars shown as plain Python values."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _scalar(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {_show(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {_show(value)}")
    return value

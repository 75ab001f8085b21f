"""Metrics of the value domain (EOCA §5.1): conversion (AUC, logloss of pCTCVR), transaction value over the
entire space (MSE, MAE, normalised Gini, decile calibration, order-of-magnitude misses) and the hit metrics THC
and THA (eqs. 15–16); how much the ETV personalises the choice of fund, and its calibration per fund.

Scale of MSE and MAE: the predicted ETV against the observed amount of every delivery (zeros included), both
divided by the mean amount of the evaluated deliveries that converted — "in average purchases", so the figures
compare across currencies and datasets. Note that the expected value is what MSE rewards; MAE is smallest for the
median, which is 0 on zero-inflated data, so MAE favours models that under-predict (the bench's oracle row shows
how much).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.metrics import auc, logloss, rela_impr
from promokit.metrics.value import decile_table, fund_personalisation, hit_metrics, normalized_gini

#: The floor every value model has to beat, shown beside it by evaluate and trained first in every bench.
FLOOR = "hurdle"


#: The metrics that compare funds, left out of :func:`value_metrics` with one fund (THC and THA would count every
#: conversion, best_differs be 0 and uplift_spread NaN).
SEVERAL_FUNDS = ("thc", "tha", "users", "hit_users", "best_differs", "uplift_spread")


def amount_scale(convert: np.ndarray, amount: np.ndarray) -> float:
    """The mean amount of the converted deliveries, the unit of MSE and MAE."""
    converted = amount[convert > 0]
    return float(converted.mean()) if len(converted) else 1.0


def delivery_metrics(convert: np.ndarray, amount: np.ndarray, p_ctcvr: np.ndarray, etv: np.ndarray) -> dict:
    """AUC and logloss of pCTCVR; MSE, MAE (in average purchases) and normalised Gini of ETV."""
    scale = amount_scale(convert, amount)
    error = (etv - amount) / scale
    return {"auc": auc(convert, p_ctcvr), "logloss": logloss(convert, p_ctcvr),
            "mse": float(np.mean(error ** 2)), "mae": float(np.mean(np.abs(error))),
            "gini": normalized_gini(amount, etv)}


def hits(scores: np.ndarray, user_ids, funds, outcomes: pd.DataFrame) -> dict:
    """THC and THA (eqs. 15–16): every user in the group of its highest-ETV fund, counted / summed where the
    ``outcomes`` (``user_id``, ``fund``, ``convert``, ``amount``) show it bought that fund."""
    return hit_metrics(user_ids, scores, list(funds), outcomes["user_id"].to_numpy(), outcomes["fund"].to_numpy(),
                       outcomes["convert"].to_numpy(), outcomes["amount"].to_numpy())


def calibration(amount: np.ndarray, etv: np.ndarray, bins: int = 10) -> pd.DataFrame:
    """Mean predicted ETV and mean observed amount per decile of the prediction."""
    return decile_table(amount, etv, bins)


def fund_calibration(fund_names, fund: np.ndarray, predicted: np.ndarray, observed: np.ndarray) -> pd.DataFrame:
    """Per fund with deliveries (``fund``: each delivery's row in ``fund_names``): ``deliveries``, the mean
    ``predicted`` ETV, the mean ``observed`` value (the amount, or a synthetic world's true ETV) and ``ratio`` =
    predicted / observed (NaN where the fund's deliveries bought nothing)."""
    n = len(fund_names)
    count = np.bincount(fund, minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_predicted = np.bincount(fund, weights=predicted, minlength=n) / count
        mean_observed = np.bincount(fund, weights=observed, minlength=n) / count
        ratio = np.where(mean_observed > 0, mean_predicted / mean_observed, np.nan)
    table = pd.DataFrame({"fund": list(fund_names), "deliveries": count, "mean_predicted": mean_predicted,
                          "mean_observed": mean_observed, "ratio": ratio})
    return table[count > 0].reset_index(drop=True)


def value_metrics(model, tables, rows: np.ndarray) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Metrics of a fitted :class:`~promokit.value.estimator.ValueModel` on the delivery ``rows`` of ``tables``, its
    decile table and its :func:`fund_calibration` against the amounts. THC, THA and the personalisation
    (:func:`~promokit.metrics.value.fund_personalisation`: ``best_differs``, ``uplift_spread``) score every user of
    those rows on every fund as of the first of their times (the behaviours known then); THC and THA count what the
    rows show each user bought; with one fund (:data:`SEVERAL_FUNDS`) they are left out, as every user's best fund is
    that one. ``etv_bias`` is the mean ETV over the mean amount, minus 1."""
    predictions = model.predict(tables, rows=rows)
    convert, amount = tables.convert[rows].astype(np.float64), tables.amount[rows]
    etv = predictions["etv"].to_numpy()
    metrics = delivery_metrics(convert, amount, predictions["p_ctcvr"].to_numpy(), etv)
    if len(tables.funds) > 1:
        users = np.unique(tables.user[rows])
        scores = model.score_matrix(tables, at=tables.time[rows].min(), users=users)
        outcomes = pd.DataFrame({"user_id": tables.user[rows], "fund": tables.fund[rows],
                                 "convert": convert, "amount": amount})
        metrics.update(hits(scores, users, range(len(tables.funds)), outcomes))
        metrics.update(fund_personalisation(scores))
    metrics["etv_bias"] = float(etv.mean() / amount.mean() - 1) if amount.mean() > 0 else float("nan")
    metrics["deliveries"] = len(rows)
    return metrics, calibration(amount, etv), fund_calibration(tables.fund_names, tables.fund[rows], etv, amount)


def beside_floor(metrics: dict, floor: dict | None) -> pd.DataFrame:
    """A model's ``metrics`` as ``metric`` and ``value`` rows; with the ``floor``'s metrics (``hurdle``, on the same
    deliveries) a ``floor`` column beside and a last row ``relaimpr_vs_floor``: RelaImpr (DMBGN eq. 11, %) of the
    model's AUC against the floor's."""
    table = pd.DataFrame({"metric": list(metrics), "value": [float(v) for v in metrics.values()]})
    if floor is None:
        return table
    table["floor"] = [float(floor.get(m, np.nan)) for m in metrics]
    relaimpr = {"metric": "relaimpr_vs_floor", "value": rela_impr(metrics["auc"], floor["auc"]), "floor": 0.0}
    return pd.concat([table, pd.DataFrame([relaimpr])], ignore_index=True)

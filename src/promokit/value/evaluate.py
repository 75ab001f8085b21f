"""Metrics of the value domain (EOCA §5.1): conversion (AUC, logloss of pCTCVR), transaction value over the
entire space (MSE, MAE, normalised Gini, decile calibration, order-of-magnitude misses) and the hit metrics THC
and THA (eqs. 15–16).

Scale of MSE and MAE: the predicted ETV against the observed amount of every delivery (zeros included), both
divided by the mean amount of the evaluated deliveries that converted — "in average purchases", so the figures
compare across currencies and datasets. Note that the expected value is what MSE rewards; MAE is smallest for the
median, which is 0 on zero-inflated data, so MAE favours models that under-predict (the bench's oracle row shows
how much).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from promokit.metrics import auc, logloss
from promokit.metrics.value import decile_table, hit_metrics, normalized_gini


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


def evaluate(model, tables, rows: np.ndarray) -> tuple[dict, pd.DataFrame]:
    """Metrics of a fitted :class:`~promokit.value.estimator.ValueModel` on the delivery ``rows`` of ``tables`` and
    its decile table. THC and THA score every user of those rows on every fund as of the first of their times (the
    behaviours known then), and count what the rows show each user bought."""
    predictions = model.predict(tables, rows)
    convert, amount = tables.convert[rows].astype(np.float64), tables.amount[rows]
    etv = predictions["etv"].to_numpy()
    metrics = delivery_metrics(convert, amount, predictions["p_ctcvr"].to_numpy(), etv)
    users = np.unique(tables.user[rows])
    scores = model.score_matrix(tables, at=tables.time[rows].min(), users=users)
    outcomes = pd.DataFrame({"user_id": tables.user[rows], "fund": tables.fund[rows],
                             "convert": convert, "amount": amount})
    metrics.update(hits(scores, users, range(len(tables.funds)), outcomes))
    metrics["deliveries"] = len(rows)
    return metrics, calibration(amount, etv)

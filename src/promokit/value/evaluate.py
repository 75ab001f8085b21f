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

from promokit.metrics import auc, calibration_by, calibration_report, logloss, rela_impr
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
    predicted / observed (NaN where the fund's deliveries bought nothing) and the fund's ``ece``
    (:func:`~promokit.metrics.calibration.calibration_by`), in the order of ``fund_names``."""
    table = calibration_by(predicted, observed, fund, name="fund").rename(columns={"rows": "deliveries"})
    table["fund"] = np.asarray(list(fund_names), dtype=object)[table["fund"].to_numpy()]
    return table


def value_metrics(model, tables, rows: np.ndarray) -> tuple[dict, dict[str, pd.DataFrame]]:
    """Metrics of a fitted :class:`~promokit.value.estimator.ValueModel` on the delivery ``rows`` of ``tables`` and
    its tables: ``decile_calibration`` and ``calibration_per_fund`` (:func:`fund_calibration`) of the ETV against the
    amounts, ``calibration`` (by decile) and ``calibration_by_fund`` of pCTCVR against the conversions (with a
    column ``new`` for a model recalibrated by fund: the funds its recalibration did not see)
    (:func:`~promokit.metrics.calibration.calibration_report`, which adds ``mean_predicted``, ``mean_observed``,
    ``calibration_ratio`` and ``ece`` to the metrics and warns beyond its ratio). THC, THA and the personalisation
    (:func:`~promokit.metrics.value.fund_personalisation`: ``best_differs``, ``uplift_spread``) score every user of
    those rows on every fund as of the first of their times (the behaviours known then); THC and THA count what the
    rows show each user bought; with one fund (:data:`SEVERAL_FUNDS`) they are left out, as every user's best fund is
    that one. ``etv_bias`` is the mean ETV over the mean amount, minus 1."""
    predictions = model.predict(tables, rows=rows)
    convert, amount = tables.convert[rows].astype(np.float64), tables.amount[rows]
    etv, p_ctcvr = predictions["etv"].to_numpy(), predictions["p_ctcvr"].to_numpy()
    metrics = delivery_metrics(convert, amount, p_ctcvr, etv)
    if len(tables.funds) > 1:
        users = np.unique(tables.user[rows])
        scores = model.score_matrix(tables, at=tables.time[rows].min(), users=users)
        outcomes = pd.DataFrame({"user_id": tables.user[rows], "fund": tables.fund[rows],
                                 "convert": convert, "amount": amount})
        metrics.update(hits(scores, users, range(len(tables.funds)), outcomes))
        metrics.update(fund_personalisation(scores))
    metrics["etv_bias"] = float(etv.mean() / amount.mean() - 1) if amount.mean() > 0 else float("nan")
    metrics["deliveries"] = len(rows)
    funds = np.asarray(list(tables.fund_names), dtype=object)[tables.fund[rows]]
    by_fund = getattr(model.recalibration_, "by", None) == "fund"
    conversion = calibration_report(p_ctcvr, convert, f"value model {model.model} pCTCVR (against convert)",
                                    groups=funds, by="fund",
                                    new_groups=list(model.recalibration_.new_groups(funds)) if by_fund else None)
    metrics.update(conversion.metrics)
    return metrics, {"decile_calibration": calibration(amount, etv),
                     "calibration_per_fund": fund_calibration(tables.fund_names, tables.fund[rows], etv, amount),
                     **conversion.tables}


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

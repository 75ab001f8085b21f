"""The paper's offline metrics (section 5) on held-out customers and merchants, Figure 4's uplift by
sensitivity quintile, Figure 5's response and hazard curves, and the uplift and Qini curves of each value
against the lowest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from promokit.incentive.contract import IncentiveTables
from promokit.metrics import UpliftCurves, auc, calibration_report, mae, mse, squared_error, uplift_by_quantile
from promokit.metrics.uplift import DEFINITIONS
from promokit.report import Report

if TYPE_CHECKING:
    from promokit.training.estimator import Evaluation

ORACLE = "oracle"  # the true curves, named as a model among the models' curves and allocations


@dataclass
class Responses:
    """Every node's predicted response at every value: ``customers`` ``(N_c, K)`` f_c, ``merchants``
    ``(N_m, K)`` f_m, and the customers' hazard per unit of r / r_K for the hazard heads (else ``None``). For a
    :meth:`~promokit.incentive.IncentiveModel.recalibrate`-d model, ``customers`` is recalibrated and
    ``customers_raw`` the model's own f_c (else ``None``); the hazard stays the model's own."""

    levels: np.ndarray
    customers: np.ndarray
    merchants: np.ndarray
    hazard: np.ndarray | None
    customers_raw: np.ndarray | None = None


@dataclass
class ResponseMetrics:
    metrics: dict[str, float]
    curve: pd.DataFrame    # per value: observed rate, mean predicted response (and hazard, and truth)
    uplift: pd.DataFrame   # Figure 4: per sensitivity quintile
    level_uplift: pd.DataFrame   # per value above the lowest: AUUC and Qini coefficient against the lowest
    uplift_curves: dict[str, UpliftCurves]   # … their curves, by value
    calibration: dict[str, pd.DataFrame]   # f_c at the offered value against the redemption: by decile, by value


def evaluate(responses: Responses, tables: IncentiveTables, customer_rows: np.ndarray, merchant_rows: np.ndarray,
             customer_truth: np.ndarray | None = None, new_levels=None) -> ResponseMetrics:
    """Score ``responses`` on the labelled ``customer_rows`` / ``merchant_rows`` (the held-out nodes).

    - AUC_c, MAE_c, MSE_c: f_c at the offered value against the redemption; MAE_m, MSE_m: f_m at the offered
      commission against shares / max(prior_shares, 1);
    - ``monotone_violations``: the share of customers whose predicted curve decreases somewhere;
    - with ``customer_truth`` (a synthetic world): ``curve_mae_c``, the mean |f_c − f_true| over every value;
    - ``curve``: per value, the observed redemption rate of the customers offered it, the mean predicted
      response over all held-out customers (Figure 5), the mean hazard per unit value for the hazard heads and
      the mean true response;
    - ``uplift``: customers sorted by the model's sensitivity f_c(r_K) − f_c(r_1) into five groups, with the
      observed uplift between the highest and the lowest value (Figure 4), the predicted one and the true one;
    - ``level_uplift`` and ``uplift_curves``: each value against the lowest (:func:`uplift_against_lowest`), and
      their means over the values as ``auuc`` and ``qini``;
    - the calibration of f_c at the offered value against the redemption
      (:func:`~promokit.metrics.calibration.calibration_report`, which warns beyond its ratio): ``mean_predicted``,
      ``mean_observed``, ``calibration_ratio``, ``ece`` and the tables ``calibration`` (by decile) and
      ``calibration_by_level`` (by offered value, the worst first; with ``new_levels``, the values a recalibration
      by level did not see, a column ``new`` marking them).
    """
    levels, f_c = responses.levels, responses.customers[customer_rows]
    offered = tables.customer_level[customer_rows]
    y = tables.redeemed[customer_rows]
    at = f_c[np.arange(len(offered)), offered]
    metrics = {"auc_c": auc(y, at), "mae_c": mae(y, at), "mse_c": mse(y, np.clip(at, 0, 1)),
               "customers": int(len(customer_rows)), "redemptions": int(y.sum()),
               "monotone_violations": float((np.diff(f_c, axis=1) < -1e-6).any(axis=1).mean())}
    if len(merchant_rows) and tables.has_merchant_labels:
        target = tables.merchant_target()[merchant_rows]
        at_m = responses.merchants[merchant_rows, tables.merchant_level[merchant_rows]]
        metrics.update(mae_m=mae(target, at_m), mse_m=squared_error(target, at_m), merchants=int(len(merchant_rows)))
    truth = None if customer_truth is None else customer_truth[customer_rows]
    if truth is not None:
        metrics["curve_mae_c"] = float(np.abs(f_c - truth).mean())
    hazard = None if responses.hazard is None else responses.hazard[customer_rows] / levels[-1]
    level_uplift, curves = uplift_against_lowest(levels, offered, y, f_c, truth)
    metrics.update(auuc=float(level_uplift["auuc"].mean()), qini=float(level_uplift["qini_coefficient"].mean()))
    calibration = calibration_report(at, y, "incentive response f_c at the offered value", groups=levels[offered],
                                     by="level", new_groups=new_levels)
    metrics.update(calibration.metrics)
    return ResponseMetrics(metrics, response_curve(levels, offered, y, f_c, hazard, truth),
                      sensitivity_uplift(levels, offered, y, f_c, truth), level_uplift, curves, calibration.tables)


def response_curve(levels, offered, y, f_c, hazard=None, truth=None) -> pd.DataFrame:
    """Figure 5's data: per value, the observed redemption rate, the mean predicted response and hazard per
    unit value (hazard heads), and the mean true response (synthetic worlds)."""
    observed = pd.Series(y).groupby(offered).agg(["mean", "size"]).reindex(range(len(levels)))
    curve = pd.DataFrame({"level": levels, "offered": observed["size"].fillna(0).astype(int).to_numpy(),
                          "observed_rate": observed["mean"].to_numpy(), "predicted": f_c.mean(axis=0)})
    if hazard is not None:
        curve["hazard_per_unit"] = hazard.mean(axis=0)
    if truth is not None:
        curve["true"] = truth.mean(axis=0)
    return curve


def sensitivity_uplift(levels, offered, y, f_c, truth=None, groups: int = 5) -> pd.DataFrame:
    """Figure 4: customers sorted by predicted sensitivity f_c(r_K) − f_c(r_1) into ``groups`` groups."""
    sensitivity = f_c[:, -1] - f_c[:, 0]
    table = uplift_by_quantile(sensitivity, offered, y, high=len(levels) - 1, low=0, groups=groups)
    order = np.array_split(np.argsort(-sensitivity, kind="stable"), groups)
    table = table.rename(columns={"mean_score": "predicted_uplift"})
    if truth is not None:
        table["true_uplift"] = [float((truth[part, -1] - truth[part, 0]).mean()) for part in order]
    return table


def uplift_against_lowest(levels, offered, y, f_c, truth=None) -> tuple[pd.DataFrame, dict[str, UpliftCurves]]:
    """Each value r_j above the lowest against r_1, on the customers offered one of the two (the randomized levels
    make them an experiment): ranked by the predicted uplift f_c(r_j) − f_c(r_1) and judged by scikit-uplift's
    uplift and Qini curves (:class:`~promokit.metrics.UpliftCurves`: AUUC, Qini coefficient, Qini area). Per value
    also the customers offered it (``treated``) and the lowest (``control``), the observed uplift (the difference
    of their redemption rates), the mean predicted one and, with ``truth``, the AUUC and Qini coefficient of the
    true uplift's ranking on the same outcomes — what a perfect model would score. A value without customers in
    one of the groups gets NaN; its curves are left out."""
    truth_names = [] if truth is None else ["true_auuc", "true_qini_coefficient"]
    names = ["auuc", "qini_coefficient", "qini_area", *truth_names]
    rows, curves = [], {}
    for j in range(1, len(levels)):
        pair = np.flatnonzero((offered == j) | (offered == 0))
        treated = (offered[pair] == j).astype(np.float64)
        predicted = f_c[pair, j] - f_c[pair, 0]
        row = {"level": levels[j], "treated": int(treated.sum()), "control": int(len(pair) - treated.sum()),
               "observed_uplift": np.nan, "predicted_uplift": float(predicted.mean()) if len(pair) else np.nan,
               **dict.fromkeys(names, np.nan)}
        if row["treated"] and row["control"]:
            curves[f"{levels[j]:g}"] = judged = UpliftCurves.of(predicted, treated, y[pair])
            row.update(observed_uplift=float(y[pair][treated == 1].mean() - y[pair][treated == 0].mean()),
                       **judged.areas())
            if truth is not None:
                ideal = UpliftCurves.of(truth[pair, j] - truth[pair, 0], treated, y[pair]).areas()
                row.update(true_auuc=ideal["auuc"], true_qini_coefficient=ideal["qini_coefficient"])
        rows.append(row)
    return pd.DataFrame(rows), curves


def change_point(curve: pd.DataFrame) -> tuple[float, float] | None:
    """The piece (r_{j−1}, r_j] whose mean hazard per unit value rises most over the previous piece's: where
    the response starts to climb faster (Figure 5's change points). ``None`` without a hazard column."""
    if "hazard_per_unit" not in curve or len(curve) < 3:
        return None
    rate = curve["hazard_per_unit"].to_numpy()
    j = int(np.argmax(np.diff(rate[1:]))) + 2  # pieces from the second on: the first piece is (0, r_1]
    return float(curve["level"].iloc[j - 1]), float(curve["level"].iloc[j])


def evaluation_report(evaluation: Evaluation, title: str) -> Report:
    """The report of :meth:`~promokit.incentive.estimator.IncentiveModel.evaluate`'s ``evaluation``: the metrics with
    the hazard's change point (:func:`change_point`), Figure 5's response per value, Figure 4's uplift by sensitivity
    quintile, and each value's AUUC and Qini coefficient against the lowest, with the figures."""
    curve, uplift, level_uplift = (evaluation.tables[name] for name in
                                   ("response_curve", "uplift_by_quintile", "uplift_by_level"))
    metrics = dict(evaluation.metrics)
    found = change_point(curve)
    if found is not None:
        metrics["change_point"] = f"{found[0]:g}–{found[1]:g}"
    report = Report(title, data={"metrics": metrics, "curve": curve.to_dict(orient="records"),
                                 "uplift": uplift.to_dict(orient="records"),
                                 "uplift_by_level": level_uplift.to_dict(orient="records")},
                    figures=dict(evaluation.figures))
    report.add("Metrics", "; ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    report.add("Response per value (Figure 5)", curve.set_index("level"))
    report.add("Uplift by sensitivity quintile (Figure 4)", uplift.set_index("group"))
    report.add(f"Each value against the lowest ({curve['level'].iloc[0]:g}): uplift and Qini curves",
               f"{DEFINITIONS} Customers offered the value or the lowest one, ranked by the predicted uplift "
               "f_c(r_j) − f_c(r_1).")
    report.add("AUUC and Qini coefficient per value", level_uplift.set_index("level"))
    if "calibration_by_level" in evaluation.tables:
        report.add("Calibration per offered value (f_c against the redemption)",
                   evaluation.tables["calibration_by_level"].set_index("level"))
    return report


def curve_figure(curves: dict[str, pd.DataFrame]):
    """Figure 5: the mean predicted response per value of each model against the observed redemption rate,
    and the hazard per unit value of the hazard heads. A :class:`matplotlib.figure.Figure` outside pyplot's
    registry: nothing keeps it once its report is written."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.8))
    left, right = fig.subplots(1, 2)
    first = next(iter(curves.values()))
    left.plot(first["level"], first["observed_rate"], "ko", label="observed rate")
    for name, curve in curves.items():
        style = "--" if name == ORACLE else "-"
        left.plot(curve["level"], curve["true"] if name == ORACLE else curve["predicted"], style, label=name)
        if "hazard_per_unit" in curve:
            right.step(curve["level"], curve["hazard_per_unit"], where="pre", label=name)
    left.set(xlabel="incentive value", ylabel="response", title="mean response per value")
    right.set(xlabel="incentive value", ylabel="hazard per unit value", title="mean hazard (pieces end at each value)")
    left.legend(fontsize=7)
    if right.lines:
        right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def off_pyplot(figure):
    """``figure``, made by pyplot, out of its registry (it still draws and saves): pyplot keeps every figure it made
    until it is closed, and a loop of evaluations would pile them up."""
    import matplotlib.pyplot as plt

    plt.close(figure)
    return figure

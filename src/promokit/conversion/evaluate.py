"""The conversion metrics of the ESM² paper (Tables 3–5) and the GMCM paper (section 5.3, Tables 2–3), each
computed once over the evaluation set."""

from __future__ import annotations

import warnings

import numpy as np

from promokit.metrics import (
    auc,
    calibration_report,
    gauc,
    gauc_coverage_warning,
    logloss,
    mse,
    precision_recall_f1_at_top,
)

TOP_FRACTIONS = (0.001, 0.006, 0.01)


def conversion_metrics(labels: dict[str, np.ndarray], predictions: dict[str, np.ndarray], groups=None,
                       gauc_weight: str = "impressions") -> dict[str, float]:
    """Metrics of one model on one table.

    - ``ctr_auc``: p_ctr vs click over all impressions;
    - ``cvr_auc``: p_cvr vs purchase on clicked impressions only (CVR is defined given a click);
    - ``ctcvr_auc``: p_ctcvr vs purchase over all impressions;
    - ``ctavr_auc``: p_ctavr vs daction over all impressions (ESM² only);
    - ``ctcvr_gauc``: ESM² eq. (13) grouped by ``groups`` (default user), single-class groups skipped
      (``ctcvr_gauc_skipped`` counts them), with a warning when it scores under
      :data:`~promokit.metrics.ranking.GAUC_MIN_SHARE` of the groups;
    - logloss and MSE of p_ctr, p_cvr (clicked rows) and p_ctcvr (all rows): ``cvr_mse`` is GMCM's CVR MSE,
      eq. (21) over the observed (clicked) pairs, ``ctcvr_mse`` its CTCVR MSE over all impressions;
    - precision / recall / F1 at the top 0.1 %, 0.6 % and 1 % for CVR (clicked rows) and CTCVR (all rows);
    - ``node_auc_<name>``: for each micro-behaviour node (GMCM) with a prediction ``predictions["p_node_<name>"]``
      and a 0/1 label ``labels["micro_<name>"]`` (the key convention for micro-behaviour labels: ``micro_``
      and the node's name, one array per node over all rows), the AUC of the node's probability against its
      label on clicked rows, where micro-behaviours are observed. A node whose clicked rows hold a single class
      has no AUC and no key; a prediction without its label (or a label without its prediction) is ignored.
    """
    click = labels["click"] == 1
    purchase = labels["purchase"]
    out: dict[str, float] = {}
    scored = {"ctr": (labels["click"], predictions["p_ctr"]),
              "cvr": (purchase[click], predictions["p_cvr"][click]),
              "ctcvr": (purchase, predictions["p_ctcvr"])}
    if "p_ctavr" in predictions and "daction" in labels:
        scored["ctavr"] = (labels["daction"], predictions["p_ctavr"])
    for task, (y, p) in scored.items():
        out[f"{task}_auc"] = auc(y, p)
        out[f"{task}_logloss"] = logloss(y, p)
        out[f"{task}_mse"] = mse(y, p)
    if groups is not None:
        result = gauc(purchase, predictions["p_ctcvr"], groups, weight=gauc_weight)
        out["ctcvr_gauc"] = result.value
        out["ctcvr_gauc_skipped"] = result.n_skipped
        out["ctcvr_gauc_groups"] = result.n_groups
        caution = gauc_coverage_warning(result, "CTCVR GAUC", "groups")
        if caution:
            warnings.warn(caution, stacklevel=2)
    for task in ("cvr", "ctcvr"):
        y, p = scored[task]
        for fraction in TOP_FRACTIONS:
            top = precision_recall_f1_at_top(y, p, fraction)
            tag = f"{task}@{fraction * 100:g}%"
            out[f"{tag}_precision"], out[f"{tag}_recall"], out[f"{tag}_f1"] = top.precision, top.recall, top.f1
    for name, (y, p) in _node_pairs(labels, predictions, click).items():
        if 0 < y.sum() < len(y):
            out[f"node_auc_{name}"] = auc(y, p)
    return out


def conversion_calibration(labels: dict[str, np.ndarray], predictions: dict[str, np.ndarray],
                           model: str) -> tuple[dict[str, float], dict]:
    """The calibration of ``model``'s probabilities (:func:`~promokit.metrics.calibration.calibration_report`, which
    warns beyond its ratio): p_ctcvr against purchase over all impressions, what spend is planned by (``mean_predicted``,
    ``mean_observed``, ``calibration_ratio``, ``ece``, table ``calibration``), p_ctr against click (``ctr_…``) and
    p_cvr against purchase on clicked impressions (``cvr_…``). Returns the metrics and the tables."""
    click = labels["click"] == 1
    pairs = {"": ("p_ctcvr", labels["purchase"], slice(None), "purchase"),
             "ctr_": ("p_ctr", labels["click"], slice(None), "click"),
             "cvr_": ("p_cvr", labels["purchase"], click, "purchase on clicked rows")}
    metrics, tables = {}, {}
    for prefix, (name, y, rows, against) in pairs.items():
        report = calibration_report(predictions[name][rows], y[rows], f"conversion model {model} {name} (against "
                                    f"{against})", prefix=prefix)
        metrics.update(report.metrics)
        tables.update(report.tables)
    return metrics, tables


def _node_pairs(labels: dict[str, np.ndarray], predictions: dict[str, np.ndarray],
                click: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(label, probability) on clicked rows per micro-behaviour node that has both, in prediction order."""
    nodes = [key.removeprefix("p_node_") for key in predictions if key.startswith("p_node_")]
    return {name: (np.asarray(labels[f"micro_{name}"])[click], np.asarray(predictions[f"p_node_{name}"])[click])
            for name in nodes if f"micro_{name}" in labels}

"""The label-leak guard (:mod:`promokit.data.leakage`) on a value dataset: every feature a delivery carries — its
context columns, its user's and its fund's — judged by itself against the transaction label before training, and
the validation AUC of pCTCVR after.

The transaction label is ``convert``, which the contract makes the same as "spent anything" (``amount`` > 0 exactly
when ``convert`` = 1), judged over every training delivery (pCTCVR's space); the click too, where it is not the same
column (a customer-value table clicks every delivery). A feature column of two tables is named ``table.column``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.leakage import MAX_ROWS, find_leaks, leak_warning, validation_leak_warning

#: The tables whose features a delivery carries, by the name of their spec in a value model's ``feature_specs_``.
FEATURE_TABLES = {"context": "deliveries", "users": "users", "funds": "funds"}


def delivery_features(tables, rows: np.ndarray, specs: dict) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The features of the deliveries ``rows`` of ``tables`` as one frame (a row per delivery, its user's and fund's
    columns beside its own) with its categorical and its numeric columns, by the feature ``specs`` of a model."""
    sources = {"context": tables.deliveries.iloc[rows], "users": tables.users.iloc[tables.user[rows]],
               "funds": tables.funds.iloc[tables.fund[rows]]}
    columns, categorical, numeric = {}, [], []
    for spec_name, table in FEATURE_TABLES.items():
        spec = specs[spec_name]
        for column in spec.features:
            name = f"{table}.{column}" if any(column in specs[s].features for s in specs if s != spec_name) else column
            columns[name] = sources[spec_name][column].to_numpy()
            (categorical if column in spec.categorical else numeric).append(name)
    return pd.DataFrame(columns), categorical, numeric


def warn_leaks(tables, rows: np.ndarray, specs: dict, allow: list[str], label_names: dict | None = None) -> None:
    """Warn of the features of the training deliveries ``rows`` (at most :data:`MAX_ROWS`, drawn seeded) whose
    univariate AUC against ``convert`` (and the click, where it differs) exceeds
    :data:`~promokit.data.leakage.LEAK_AUC`, less those of ``allow`` (a DataError for a name that is no feature).
    ``label_names``: the columns that hold the labels, by role (the model's ``labels``)."""
    if len(rows) > MAX_ROWS:
        rows = np.sort(np.random.default_rng(0).choice(rows, MAX_ROWS, replace=False))
    frame, categorical, numeric = delivery_features(tables, rows, specs)
    unknown = [name for name in allow if name not in frame.columns]
    if unknown:
        raise DataError(f"`allow_leaky` names {unknown[0]!r}, which is no feature of the deliveries, users or funds; "
                        f"the features are {list(frame.columns)}")
    names = {"click": "click", "convert": "convert", **(label_names or {})}
    labels = {names["convert"]: (tables.convert[rows], None)}
    if (tables.click[rows] != tables.convert[rows]).any():
        labels[names["click"]] = (tables.click[rows], None)
    message = leak_warning(find_leaks(frame, categorical, numeric, labels, allow))
    if message:
        warnings.warn(message, stacklevel=3)


def warn_validation_leak(history) -> None:
    """Warn when the validation AUC of pCTCVR that the kept epoch (or the floor's boosted conversion) reached is
    near perfect (:func:`~promokit.data.leakage.validation_leak_warning`)."""
    if history is None:
        return
    kept = [r for r in history.epochs
            if r.get("chosen") or (history.unit == "epoch" and r.get("epoch") == history.best_epoch)]
    aucs = [r["valid_auc"] for r in kept if "valid_auc" in r]
    message = validation_leak_warning({"pCTCVR AUC": aucs[-1]} if aucs else {})
    if message:
        warnings.warn(message, stacklevel=3)

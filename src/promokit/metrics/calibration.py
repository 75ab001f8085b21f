"""Calibration: whether predicted probabilities (or expected values) match what was observed, on average.

A model can rank well (high AUC) and still predict a mean redemption of 0.010 where 0.070 was observed; whatever
spends by the predictions (a budget, an expected count of redemptions) is then off by as much. Every domain's
``evaluate`` reports it with :func:`calibration_report`:

* :func:`calibration_table` — mean predicted against mean observed per decile of the prediction;
* :func:`calibration_by` — the same per group (campaign, fund, incentive level), with each group's ECE;
  :func:`worst_first` orders it from the group furthest off;
* :func:`expected_calibration_error` — the row-weighted mean gap between the two over equal-count bins;
* :func:`calibration_warning` — one line when the overall means differ by more than :data:`CALIBRATION_RATIO`.

Each takes a finite prediction ``p`` (a probability, or an expected value) and the observed outcome ``y`` (finite,
non-negative: a 0/1 label, or an amount).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from promokit.metrics.value import _amounts, decile_table

#: How far the mean prediction may stray from the observed mean, as a ratio either way, before evaluate warns.
#: A budget allocated by predicted redemptions spends ratio × what it planned: 1.25 lets a forecast be a quarter
#: off, about what a promotion's budget absorbs, and flags anything worse (the issue's voucher models are 7× low).
#: It is also well above sampling noise once :data:`CALIBRATION_MIN_EVENTS` events are observed: the relative
#: standard error of an observed rate is about 1 / √events, 10 % at 100 events, so a 1.25× gap (log 0.22) is more
#: than two standard errors of the log rate.
CALIBRATION_RATIO = 1.25
#: Fewer observed events (positive outcomes) than this and the observed mean is too noisy to warn about (see above).
CALIBRATION_MIN_EVENTS = 100


class CalibrationWarning(UserWarning):
    """The mean prediction differs from the observed mean by more than :data:`CALIBRATION_RATIO`."""


@dataclass(frozen=True)
class CalibrationReport:
    """What :func:`calibration_report` found: ``metrics`` (name → number) and ``tables`` (name → DataFrame), both
    named for an :class:`~promokit.training.estimator.Evaluation`, and the ``warning`` it gave (None if none)."""

    metrics: dict[str, float]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    warning: str | None = None


def calibration_table(p, y, bins: int = 10) -> pd.DataFrame:
    """Rows sorted by the prediction ``p`` into ``bins`` equal-count groups (deciles by default); in each the
    ``rows``, ``mean_predicted``, ``mean_observed`` (for 0/1 outcomes the observed rate) and ``ratio`` =
    mean_predicted / mean_observed (NaN where nothing was observed), with ``decile`` numbering the groups from the
    lowest predictions. The table of :func:`promokit.metrics.value.decile_table` (same grouping and ties), with the
    prediction first as everywhere in this module. Needs at least ``bins`` rows."""
    p, y = _checked(p, y)
    return decile_table(y, p, bins)


def calibration_by(p, y, groups, name: str = "group", bins: int = 10) -> pd.DataFrame:
    """Per group of ``groups`` (one key per row: a campaign, a fund, an incentive level), in sorted key order: the
    key (column ``name``), ``rows``, ``mean_predicted``, ``mean_observed``, ``ratio`` = mean_predicted /
    mean_observed (NaN where the group observed nothing) and ``ece``, the group's
    :func:`expected_calibration_error` over ``bins`` equal-count bins (one per row in a smaller group). Rows without
    a key form a group of their own, last. :func:`worst_first` orders it by the ratio instead."""
    p, y = _checked(p, y)
    codes, keys = pd.factorize(pd.Series(groups, copy=False), sort=True, use_na_sentinel=False)
    if len(codes) != len(p):
        raise ValueError(f"groups must have the same length as p, got {len(codes)} and {len(p)}")
    rows = np.bincount(codes, minlength=len(keys))
    mean_predicted = np.bincount(codes, weights=p, minlength=len(keys)) / rows
    mean_observed = np.bincount(codes, weights=y, minlength=len(keys)) / rows
    members = np.split(np.argsort(codes, kind="stable"), np.cumsum(rows)[:-1])
    ece = [expected_calibration_error(p[m], y[m], min(bins, len(m))) for m in members]
    return pd.DataFrame({name: keys, "rows": rows, "mean_predicted": mean_predicted, "mean_observed": mean_observed,
                         "ratio": _ratio(mean_predicted, mean_observed), "ece": ece})


def worst_first(table: pd.DataFrame) -> pd.DataFrame:
    """The groups of a :func:`calibration_by` table, the furthest from calibrated first: by |log ratio|, so that a
    group predicted at half its observed mean ranks with one predicted at twice it (a ratio of 0 first of all);
    groups without a ratio (nothing observed) last, ties in the table's order. The rows are renumbered."""
    with np.errstate(divide="ignore"):
        distance = np.abs(np.log(table["ratio"].to_numpy(dtype=np.float64)))
    order = np.lexsort((np.arange(len(table)), -np.nan_to_num(distance, nan=-1.0)))
    return table.iloc[order].reset_index(drop=True)


def expected_calibration_error(p, y, bins: int = 10) -> float:
    """The expected calibration error (ECE) of Naeini, Cooper & Hauskrecht (AAAI 2015, "Obtaining well calibrated
    probabilities using Bayesian binning"), written as eq. (3) of Guo et al. (ICML 2017, "On calibration of modern
    neural networks"):

        ECE = Σ_b (n_b / n) · |ō_b − p̄_b|,

    over the bins b of the prediction, with n_b rows, mean observed outcome ō_b and mean prediction p̄_b. The bins
    hold equal counts of rows (:func:`calibration_table`'s deciles), the adaptive binning of Nixon et al. (CVPR
    workshops 2019, "Measuring calibration in deep learning"): a rare event's probabilities (a redemption rate of
    a few per cent) would crowd into the first of ten equal-width bins and leave the others empty. In the
    outcome's units (a probability for 0/1 outcomes); 0 when every bin's means agree. Needs at least ``bins`` rows.
    """
    table = calibration_table(p, y, bins)
    weights = table["rows"].to_numpy() / table["rows"].sum()
    return float(np.sum(weights * np.abs(table["mean_observed"].to_numpy() - table["mean_predicted"].to_numpy())))


def calibration_warning(mean_p: float, mean_y: float, what: str, limit: float = CALIBRATION_RATIO,
                        events: int | None = None) -> str | None:
    """One line saying that ``what`` (e.g. "voucher p_redeem") predicts a mean ``mean_p`` where ``mean_y`` was
    observed, when the two differ by more than the ratio ``limit`` either way (:data:`CALIBRATION_RATIO`: see there
    why 1.25). None when they agree within it, when nothing was observed (``mean_y`` 0: no ratio), or when
    ``events`` (the observed positive outcomes, if given) are under :data:`CALIBRATION_MIN_EVENTS`."""
    if not limit > 1:
        raise ValueError(f"limit must be a ratio above 1, got {limit!r}")
    if not mean_y > 0 or not np.isfinite(mean_p) or (events is not None and events < CALIBRATION_MIN_EVENTS):
        return None
    ratio = mean_p / mean_y
    if 1 / limit <= ratio <= limit:
        return None
    off = f"{ratio:.2g}× high" if ratio > 1 else f"{1 / ratio:.2g}× low" if ratio > 0 else "predicting 0"
    return (f"{what} is not calibrated: mean predicted {mean_p:.4g} against {mean_y:.4g} observed ({off}, beyond "
            f"{limit:g}×); it ranks, but expected counts and spend computed from it are off by as much")


def calibration_report(p, y, what: str, *, groups=None, by: str = "group", bins: int = 10, prefix: str = "",
                       new_groups=None) -> CalibrationReport:
    """The calibration of the prediction ``p`` against the outcome ``y`` that an ``evaluate`` reports, named with
    ``prefix`` (e.g. ``"ctr_"``): metrics ``mean_predicted``, ``mean_observed``, ``calibration_ratio`` (their ratio,
    NaN when nothing was observed) and ``ece`` (:func:`expected_calibration_error`, over ``bins`` equal-count bins or
    one per row with fewer rows); tables ``calibration`` (:func:`calibration_table`) and, with ``groups`` (one key
    per row), ``calibration_by_<by>`` (:func:`calibration_by`, each group's ECE over ``bins`` bins, the worst group
    first: :func:`worst_first`), with a column ``new`` when ``new_groups`` is given: True for the groups among those
    keys (e.g. those a recalibration by group did not see, so they had the overall map). Beyond
    :data:`CALIBRATION_RATIO` it warns (:class:`CalibrationWarning`, the :func:`calibration_warning` line naming
    ``what``). No rows: NaN metrics and no tables."""
    p, y = _checked(p, y)
    if not len(p):
        return CalibrationReport(dict.fromkeys((f"{prefix}{name}" for name in
                                                ("mean_predicted", "mean_observed", "calibration_ratio", "ece")),
                                               float("nan")))
    mean_p, mean_y = float(p.mean()), float(y.mean())
    bins = min(bins, len(p))
    metrics = {f"{prefix}mean_predicted": mean_p, f"{prefix}mean_observed": mean_y,
               f"{prefix}calibration_ratio": float(_ratio(np.array([mean_p]), np.array([mean_y]))[0]),
               f"{prefix}ece": expected_calibration_error(p, y, bins)}
    tables = {f"{prefix}calibration": calibration_table(p, y, bins)}
    if groups is not None:
        table = calibration_by(p, y, groups, by, bins)
        if new_groups is not None:
            table["new"] = table[by].isin(list(new_groups))
        tables[f"{prefix}calibration_by_{by}"] = worst_first(table)
    warning = calibration_warning(mean_p, mean_y, what, events=int((y > 0).sum()))
    if warning:
        warnings.warn(warning, CalibrationWarning, stacklevel=2)
    return CalibrationReport(metrics, tables, warning)


def _checked(p, y) -> tuple[np.ndarray, np.ndarray]:
    """``p`` and ``y`` as finite float arrays of one length, ``y`` non-negative, else a one-line error naming them."""
    p, y = _amounts(p, "p", nonnegative=False), _amounts(y, "y")
    if len(p) != len(y):
        raise ValueError(f"p and y must have the same length, got {len(p)} and {len(y)}")
    return p, y


def _ratio(predicted: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """predicted / observed, NaN where observed is 0."""
    return np.divide(predicted, observed, out=np.full(len(predicted), np.nan), where=observed > 0)

"""Uplift read off a randomized experiment: by quantile of a predicted sensitivity, and the uplift and Qini curves
with their areas as scikit-uplift defines them (``sklift.metrics`` 0.5).

The curves rank n subjects by a predicted uplift s (descending) and, after the first k of them, count

    N_T(k), N_C(k)   treated and control subjects,  Y_T(k), Y_C(k)   their summed outcomes,

at every k that ends a run of tied scores, with the point (0, 0) before the first. A ratio whose group is still
empty counts as 0 (so the curves start where the first group appears), as in scikit-uplift. The random line joins
(0, 0) to the curve's last point, which the ranking does not move: it is what targeting the first k subjects at
random earns on average."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.integrate import trapezoid

from promokit.metrics._validation import as_binary_1d, as_float_1d

#: How a report states what its curves and areas are.
DEFINITIONS = ("Subjects ranked by the predicted uplift; after the first k: uplift curve U(k) = (Y_T/N_T − Y_C/N_C)·k, "
               "Qini curve Q(k) = Y_T − Y_C·N_T/N_C (scikit-uplift 0.5's uplift_curve and qini_curve). AUUC and Qini "
               "coefficient: the area between the curve and the random line over the same area of the perfect curve "
               "(scikit-uplift's uplift_auc_score and qini_auc_score: 1 perfect, 0 random, < 0 worse than random). "
               "qini_area: the area between the Qini curve and the random line with both axes per subject, the mean "
               "gain over random targeting in outcome per subject.")


def uplift_by_quantile(score, treatment, outcome, high: float, low: float, groups: int = 5) -> pd.DataFrame:
    """Rows sorted by ``score`` (descending) into ``groups`` equal groups; in each, the mean ``outcome`` of the
    rows given the ``high`` treatment minus that of the rows given the ``low`` one. Under randomized treatment
    this is the group's uplift (the joint-incentive paper's Figure 4 groups customers by their "gradient").

    Columns: ``group`` (1 = highest scores), ``rows``, ``n_high``, ``n_low``, ``observed_uplift`` (NaN when a
    group has no row of either treatment), ``mean_score``.
    """
    s, t, y = as_float_1d(score, "score"), as_float_1d(treatment, "treatment"), as_float_1d(outcome, "outcome")
    if not len(s) == len(t) == len(y):
        raise ValueError(f"score, treatment and outcome must have one length, got {len(s)}, {len(t)}, {len(y)}")
    if groups < 1 or len(s) < groups:
        raise ValueError(f"need at least {max(groups, 1)} rows for {groups} groups, got {len(s)}")
    order = np.argsort(-s, kind="stable")
    rows = []
    for g, part in enumerate(np.array_split(order, groups), start=1):
        hi, lo = part[t[part] == high], part[t[part] == low]
        uplift = y[hi].mean() - y[lo].mean() if len(hi) and len(lo) else np.nan
        rows.append({"group": g, "rows": len(part), "n_high": len(hi), "n_low": len(lo),
                     "observed_uplift": float(uplift), "mean_score": float(s[part].mean())})
    return pd.DataFrame(rows)


def uplift_curve(score, treatment, outcome) -> tuple[np.ndarray, np.ndarray]:
    """scikit-uplift's uplift curve (``sklift.metrics.uplift_curve``; Devriendt et al. 2020): the points
    (k, U(k)) with U(k) = (Y_T(k) / N_T(k) − Y_C(k) / N_C(k)) · k — the difference in mean outcome between the
    treated and the control subjects among the first k, scaled to k subjects (module docstring)."""
    k, n_t, y_t, y_c = _cumulative(*_checked(score, treatment, outcome))
    return k, _uplift_values(k, n_t, y_t, y_c)


def qini_curve(score, treatment, outcome) -> tuple[np.ndarray, np.ndarray]:
    """scikit-uplift's Qini curve (``sklift.metrics.qini_curve``; Radcliffe 2007): the points (k, Q(k)) with
    Q(k) = Y_T(k) − Y_C(k) · N_T(k) / N_C(k) — the treated outcomes among the first k minus the control outcomes
    scaled to as many treated subjects (module docstring)."""
    k, n_t, y_t, y_c = _cumulative(*_checked(score, treatment, outcome))
    return k, _qini_values(k, n_t, y_t, y_c)


def perfect_uplift_curve(treatment, outcome) -> tuple[np.ndarray, np.ndarray]:
    """scikit-uplift's optimum uplift curve (``sklift.metrics.perfect_uplift_curve``) of a 0/1 outcome y: the
    uplift curve of the score 2·[y = t] + (y if CR > TN else t), CR the control responders and TN the treated
    non-responders — treated responders and control non-responders first."""
    t, y = _binary_outcome(treatment, outcome)
    control_responders, treated_non_responders = np.sum((y == 1) & (t == 0)), np.sum((y == 0) & (t == 1))
    summand = y if control_responders > treated_non_responders else t
    return uplift_curve(2.0 * (y == t) + summand, t, y)


def perfect_qini_curve(treatment, outcome, negative_effect: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """scikit-uplift's optimum Qini curve (``sklift.metrics.perfect_qini_curve``) of a 0/1 outcome y: with
    ``negative_effect`` the Qini curve of the score y·t − y·(1 − t) (treated responders first, control responders
    last, where the treatment seems to hurt); without, the points (0, 0), (R, R), (n, R) with R = Q(n), every
    response gained with as few subjects as responses and no loss after."""
    t, y = _binary_outcome(treatment, outcome)
    if negative_effect:
        return qini_curve(y * t - y * (1 - t), t, y)
    _, end = qini_curve(np.zeros(len(y)), t, y)
    return np.array([0.0, end[-1], len(y)]), np.array([0.0, end[-1], end[-1]])


def uplift_auc_score(score, treatment, outcome) -> float:
    """scikit-uplift's normalised area under the uplift curve (``sklift.metrics.uplift_auc_score``), the AUUC
    reported here: (A(U) − A(random)) / (A(U*) − A(random)), A the trapezoid area, U* the
    :func:`perfect_uplift_curve`. 1 for the perfect ranking, 0 for random, negative below it; a 0/1 outcome."""
    return _normalised(uplift_curve(score, treatment, outcome), perfect_uplift_curve(treatment, outcome))


def qini_auc_score(score, treatment, outcome, negative_effect: bool = True) -> float:
    """scikit-uplift's Qini coefficient (``sklift.metrics.qini_auc_score``): the area between the Qini curve and
    the random line over the same area of the :func:`perfect_qini_curve`, (A(Q) − A(random)) / (A(Q*) −
    A(random)); a 0/1 outcome."""
    return _normalised(qini_curve(score, treatment, outcome), perfect_qini_curve(treatment, outcome, negative_effect))


def area_over_random(k: np.ndarray, values: np.ndarray) -> float:
    """A(curve) − A(random): the trapezoid area under the points (k, values) minus that under the random line
    from (0, 0) to their last point, k_n · v_n / 2 (in subjects × outcome)."""
    return float(trapezoid(values, k) - k[-1] * values[-1] / 2)


@dataclass(frozen=True)
class UpliftCurves:
    """One ranking judged on one randomized comparison: both curves on their common points ``subjects`` (k),
    the AUUC and the Qini coefficient (:func:`uplift_auc_score`, :func:`qini_auc_score`; ``None`` unless the
    outcome is 0/1 with both values, where the perfect curve is defined), and ``qini_area``, the area between the
    Qini curve and the random line with k as a share of the n subjects and Q(k) per subject, A / n² — the mean
    gain over random targeting, in outcome per subject, over every depth; for any outcome."""

    subjects: np.ndarray
    uplift: np.ndarray
    qini: np.ndarray
    treated: int
    control: int
    auuc: float | None
    qini_coefficient: float | None
    qini_area: float

    @classmethod
    def of(cls, score, treatment, outcome) -> UpliftCurves:
        s, t, y = _checked(score, treatment, outcome)
        k, n_t, y_t, y_c = _cumulative(s, t, y)
        uplift, qini = _uplift_values(k, n_t, y_t, y_c), _qini_values(k, n_t, y_t, y_c)
        auuc = qini_coefficient = None
        if np.isin(y, (0, 1)).all() and 0 < y.sum() < len(y):
            auuc = _normalised_if_defined((k, uplift), perfect_uplift_curve(t, y))
            qini_coefficient = _normalised_if_defined((k, qini), perfect_qini_curve(t, y))
        return cls(k, uplift, qini, int(t.sum()), int(len(t) - t.sum()), auuc, qini_coefficient,
                   area_over_random(k, qini) / len(y) ** 2)

    def areas(self) -> dict[str, float]:
        """``auuc``, ``qini_coefficient`` (NaN where undefined) and ``qini_area``, for a table's row."""
        return {"auuc": np.nan if self.auuc is None else self.auuc,
                "qini_coefficient": np.nan if self.qini_coefficient is None else self.qini_coefficient,
                "qini_area": self.qini_area}


def uplift_figure(curves: dict[str, UpliftCurves], title: str):
    """One panel per comparison (by name): the uplift and Qini curves against the share of subjects targeted,
    each with its random line (dashed), the AUUC and the Qini coefficient in the panel's title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, max(len(curves), 1))
    rows = -(-max(len(curves), 1) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False)
    for ax, (name, c) in zip(axes.flat, curves.items()):
        share = c.subjects / c.subjects[-1]
        for values, label, colour in ((c.uplift, "uplift curve", "tab:blue"), (c.qini, "Qini curve", "tab:orange")):
            ax.plot(share, values, color=colour, label=label)
            ax.plot([0, 1], [0, values[-1]], "--", color=colour, linewidth=0.8)
        scores = ", ".join(f"{label} {value:.3f}" for label, value in (("AUUC", c.auuc), ("Qini", c.qini_coefficient))
                           if value is not None)
        ax.set_title(f"{name}" + (f"\n{scores}" if scores else ""), fontsize=9)
        ax.set_xlabel("share of subjects targeted", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(curves):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("incremental outcome", fontsize=8)
    if curves:
        axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _checked(score, treatment, outcome) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite scores of the subjects of :func:`_groups`; or a one-line ValueError."""
    t, y = _groups(treatment, outcome)
    s = as_float_1d(score, "score")
    if len(s) != len(t):
        raise ValueError(f"score, treatment and outcome must have one length, got {len(s)}, {len(t)}, {len(y)}")
    _finite(s, "score")
    return s, t, y


def _groups(treatment, outcome) -> tuple[np.ndarray, np.ndarray]:
    """A 0/1 treatment with treated and control subjects and their finite outcomes; or a one-line ValueError."""
    t, y = as_binary_1d(treatment, "treatment"), as_float_1d(outcome, "outcome")
    if len(t) != len(y):
        raise ValueError(f"treatment and outcome must have one length, got {len(t)} and {len(y)}")
    _finite(y, "outcome")
    if not 0 < t.sum() < len(t):
        raise ValueError(f"treatment must hold treated (1) and control (0) subjects; all {len(t)} are "
                         f"{'treated' if t.sum() else 'control'}")
    return t, y


def _finite(values: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        raise ValueError(f"{name} must be finite; {int(bad.sum())} of {len(values)} values are NaN or infinite")


def _binary_outcome(treatment, outcome) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_groups` with a 0/1 outcome holding both values (what the perfect curves need)."""
    t, y = _groups(treatment, outcome)
    as_binary_1d(y, "outcome")
    if not 0 < y.sum() < len(y):
        raise ValueError(f"outcome must hold 0 and 1 for the perfect curve; all {len(y)} values are {y[0]:g}")
    return t, y


def _cumulative(s: np.ndarray, t: np.ndarray, y: np.ndarray):
    """k, N_T(k), Y_T(k) and Y_C(k) at the end of every run of tied scores (descending), after (0, 0, 0, 0)."""
    order = np.argsort(-s, kind="stable")
    s, t, y = s[order], t[order], y[order]
    ends = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]
    sums = (np.cumsum(t)[ends], np.cumsum(y * t)[ends], np.cumsum(y * (1 - t))[ends])
    return (np.r_[0.0, ends + 1.0], *(np.r_[0.0, total] for total in sums))


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is (a group still empty)."""
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def _uplift_values(k, n_t, y_t, y_c) -> np.ndarray:
    return (_ratio(y_t, n_t) - _ratio(y_c, k - n_t)) * k


def _qini_values(k, n_t, y_t, y_c) -> np.ndarray:
    return y_t - y_c * _ratio(n_t, k - n_t)


def _normalised_if_defined(curve: tuple[np.ndarray, np.ndarray], perfect: tuple[np.ndarray, np.ndarray]) -> float | None:
    """:func:`_normalised`, or None where the perfect curve is no better than random (a few customers, none of one
    group redeeming): undefined, as :class:`UpliftCurves` reports it."""
    return None if area_over_random(*perfect) == 0 else _normalised(curve, perfect)


def _normalised(curve: tuple[np.ndarray, np.ndarray], perfect: tuple[np.ndarray, np.ndarray]) -> float:
    best = area_over_random(*perfect)
    if best == 0:
        raise ValueError("the perfect curve is no better than random here, so the normalised area is undefined")
    return area_over_random(*curve) / best

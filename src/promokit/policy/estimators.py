r"""Off-policy estimators of a plan's mean outcome per subject, from a randomized log, with bootstrap intervals.

A log holds n subjects; subject i was given action a_i with the logging policy's probability p_i = π₀(a_i | x_i)
and showed outcome y_i. A plan is a target policy π(a | x_i) (a row of probabilities per subject; a deterministic
plan puts 1 on one action). With the importance weight w_i = π(a_i | x_i) / p_i (capped at ``clip`` when given, in
every estimator: obp's ``lambda_`` clips IPS and DR alike, but its self-normalised estimators ignore it) and a model's predicted outcome q̂(x_i, a) for every action:

.. math::
    \hat V_{DM}    &= \tfrac1n \textstyle\sum_i \sum_a π(a|x_i)\, q̂(x_i, a)

    \hat V_{IPS}   &= \tfrac1n \textstyle\sum_i w_i\, y_i

    \hat V_{SNIPS} &= \textstyle\sum_i w_i\, y_i \,/\, \sum_i w_i

    \hat V_{DR}    &= \hat V_{DM} + \tfrac1n \textstyle\sum_i w_i\, (y_i − q̂(x_i, a_i))

    \hat V_{SNDR}  &= \hat V_{DM} + \textstyle\sum_i w_i\, (y_i − q̂(x_i, a_i)) \,/\, \sum_i w_i

(Dudík et al. 2014; Swaminathan & Joachims 2015; the definitions of Open Bandit Pipeline's DirectMethod,
InverseProbabilityWeighting, SelfNormalizedInverseProbabilityWeighting, DoublyRobust and
SelfNormalizedDoublyRobust). IPS and DR are unbiased when the logging propensities are right and p_i > 0 wherever
π puts mass; DM is biased as far as q̂ is; the self-normalised forms trade a bias of order 1/n for a lower
variance and always lie within the range of the outcomes (SNIPS) or of DM's corrections (SNDR).

Every estimator is a ratio of sums over subjects of a few per-subject terms (:class:`Terms`), so a bootstrap
replicate — the subjects resampled with replacement, ``counts[b, i]`` times — is a matrix product: all plans,
outcomes and estimators of one evaluation share the same replicates, which makes their differences paired.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ESTIMATORS = ("DM", "IPS", "SNIPS", "DR", "SNDR")
WITHOUT_MODEL = ("IPS", "SNIPS")
#: the per-subject columns every estimator is a ratio of sums of
COLUMNS = ("one", "dm", "w", "wy", "wres")


@dataclass
class Terms:
    """Per-subject terms of one plan and one outcome: ``dm`` = Σ_a π q̂ (None without a model), ``w`` the
    importance weight, ``wy`` = w·y, ``wres`` = w·(y − q̂(x, a_i)) (None without a model)."""

    dm: np.ndarray | None
    w: np.ndarray
    wy: np.ndarray
    wres: np.ndarray | None

    @classmethod
    def of(cls, plan: np.ndarray, action: np.ndarray, propensity: np.ndarray, outcome: np.ndarray,
           predicted: np.ndarray | None = None, clip: float | None = None) -> Terms:
        """The terms of plan ``plan`` (n, K) on logged ``action`` (n,) indices, ``propensity`` (n,) and
        ``outcome`` (n,); ``predicted`` (n, K) is q̂ for the model-based estimators."""
        rows = np.arange(len(action))
        w = plan[rows, action] / propensity
        if clip is not None:
            w = np.minimum(w, clip)
        if predicted is None:
            return cls(None, w, w * outcome, None)
        return cls((plan * predicted).sum(axis=1), w, w * outcome, w * (outcome - predicted[rows, action]))

    @property
    def estimators(self) -> tuple[str, ...]:
        return ESTIMATORS if self.dm is not None else WITHOUT_MODEL

    def matrix(self) -> np.ndarray:
        """(n, 5) columns :data:`COLUMNS` (zeros where there is no model)."""
        zeros = np.zeros_like(self.w)
        return np.column_stack([np.ones_like(self.w), self.dm if self.dm is not None else zeros, self.w, self.wy,
                                self.wres if self.wres is not None else zeros])


def from_sums(sums: np.ndarray, estimator: str) -> np.ndarray:
    """An estimator from sums of :data:`COLUMNS` over (resampled) subjects, ``sums[..., 5]``."""
    one, dm, w, wy, wres = (sums[..., j] for j in range(len(COLUMNS)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"DM": dm / one, "IPS": wy / one, "SNIPS": wy / w, "DR": (dm + wres) / one,
                "SNDR": dm / one + wres / w}[estimator]


def estimate(terms: Terms, estimator: str) -> float:
    """The point estimate of ``estimator`` on every subject once."""
    return float(from_sums(terms.matrix().sum(axis=0), estimator))


def per_subject_sums(matrix: np.ndarray, subjects: np.ndarray | None = None) -> np.ndarray:
    """The rows of ``matrix`` summed per subject (``subjects``: each row's subject index; default a row each)."""
    if subjects is None:
        return matrix
    n = int(subjects.max()) + 1 if len(subjects) else 0
    summed = np.zeros((n, matrix.shape[1]))
    np.add.at(summed, subjects, matrix)
    return summed


def bootstrap_sums(matrix: np.ndarray, replicates: int, seed: int, subjects: np.ndarray | None = None,
                   max_cells: int = 10_000_000) -> np.ndarray:
    """(replicates, columns) sums of ``matrix`` (rows, columns) over the subjects resampled with replacement, each
    replicate drawing as many subjects as there are, each with all its rows (``subjects``: each row's subject
    index; default one subject per row). Seeded; chunks of replicates keep ``max_cells`` counts in memory."""
    per_subject = per_subject_sums(matrix, subjects)
    n = len(per_subject)
    rng = np.random.default_rng(seed)
    chunk = max(1, max_cells // max(n, 1))
    out = np.empty((replicates, matrix.shape[1]))
    for start in range(0, replicates, chunk):
        size = min(chunk, replicates - start)
        drawn = rng.integers(0, n, size=(size, n)) + np.arange(size)[:, None] * n
        counts = np.bincount(drawn.ravel(), minlength=size * n).reshape(size, n)
        out[start:start + size] = counts @ per_subject
    return out


INTERVALS = ("percentile", "bca")
#: a BCa level below this (or above 1 − it) rests on the few most extreme bootstrap replicates: a stated warning
OUTER = 0.005


def interval(values: np.ndarray, point: float | None = None, influence: np.ndarray | None = None,
             level: float = 0.95) -> tuple[float, float]:
    """The interval of bootstrap ``values`` (NaN replicates — a resample with no weight — left out): their
    percentiles at :func:`interval_levels`."""
    return percentiles(values, interval_levels(values, point, influence, level))


def interval_levels(values: np.ndarray, point: float | None = None, influence: np.ndarray | None = None,
                    level: float = 0.95) -> np.ndarray:
    """The two percentile levels of the interval of bootstrap ``values``: (1 − level)/2 and 1 − (1 − level)/2, or
    with the estimate ``point`` and its per-subject ``influence`` values, Efron's bias-corrected and accelerated
    (BCa) levels — moved by the bootstrap's median bias z₀ = Φ⁻¹(share of values below the point) and the
    acceleration a = Σu³ / (6 (Σu²)^{3/2}), which corrects a skewed estimator's interval (a heavy-tailed outcome's)
    to second order."""
    from scipy.stats import norm

    finite = values[np.isfinite(values)]
    tails = np.array([(1 - level) / 2, 1 - (1 - level) / 2])
    if influence is not None and point is not None and np.isfinite(point) and len(finite):
        below = (np.sum(finite < point) + 0.5 * np.sum(finite == point)) / len(finite)
        square = float(np.square(influence).sum())
        if 0 < below < 1 and square > 0:
            z0, z = norm.ppf(below), norm.ppf(tails)
            a = float(np.power(influence, 3).sum()) / (6 * square ** 1.5)
            tails = norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))
    return tails


def percentiles(values: np.ndarray, levels: np.ndarray) -> tuple[float, float]:
    """The percentiles of the finite ``values`` at the two ``levels`` (NaN when none is finite)."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return float("nan"), float("nan")
    low, high = np.percentile(finite, levels * 100)
    return float(low), float(high)


def in_outer_tail(levels: np.ndarray) -> bool:
    """Whether an interval's ``levels`` reach the outer :data:`OUTER` of the replicates on either side."""
    return bool(levels[0] < OUTER or levels[1] > 1 - OUTER)


def influence(statistic, per_subject: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """Each subject's empirical influence on ``statistic`` (a function of the column sums, or means, of
    ``per_subject``: its rows' sums per subject): the derivative of the statistic at the mean in the direction of
    the subject's deviation from it, by a finite ``step``."""
    mean = per_subject.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (statistic(mean + step * (per_subject - mean)) - statistic(mean)) / step


def effective_sample_size(w: np.ndarray) -> float:
    """Kish's effective sample size of the weights, (Σ w)² / Σ w² (0 when no subject has weight)."""
    square = float(np.square(w).sum())
    return float(w.sum()) ** 2 / square if square > 0 else 0.0

"""Uplift and Qini curves, AUUC and the Qini coefficient as scikit-uplift defines them: hand-computed cases
(the agreement with scikit-uplift itself is benchmarks/uplift_sklift.py's)."""

import numpy as np
import pytest

from promokit.metrics.uplift import (
    UpliftCurves,
    perfect_qini_curve,
    perfect_uplift_curve,
    qini_auc_score,
    qini_curve,
    uplift_auc_score,
    uplift_curve,
)

TREATMENT, OUTCOME = np.array([1, 0, 1, 0]), np.array([1, 0, 0, 1])
BEST, WORST = np.array([0.9, 0.8, 0.7, 0.6]), np.array([0.6, 0.7, 0.8, 0.9])


def test_curves_by_hand():
    # first k: (N_T, Y_T, N_C, Y_C) = (1,1,0,0), (1,1,1,0), (2,1,1,0), (2,1,2,1)
    k, u = uplift_curve(BEST, TREATMENT, OUTCOME)
    assert k.tolist() == [0, 1, 2, 3, 4] and u.tolist() == [0, 1, 2, 1.5, 0]
    assert qini_curve(BEST, TREATMENT, OUTCOME)[1].tolist() == [0, 1, 1, 1, 0]
    # reversed: (0,0,1,1), (1,0,1,1), (1,0,2,1), (2,1,2,1); an empty group's ratio counts as 0
    assert uplift_curve(WORST, TREATMENT, OUTCOME)[1].tolist() == [0, -1, -2, -1.5, 0]
    assert qini_curve(WORST, TREATMENT, OUTCOME)[1].tolist() == [0, 0, -1, -0.5, 0]


def test_areas_by_hand():
    # the perfect uplift score 2·[y = t] + t (CR = TN = 1) ranks as BEST; the perfect Qini curve has a tie at 0
    assert perfect_uplift_curve(TREATMENT, OUTCOME)[1].tolist() == [0, 1, 2, 1.5, 0]
    k, q = perfect_qini_curve(TREATMENT, OUTCOME)
    assert k.tolist() == [0, 1, 3, 4] and q.tolist() == [0, 1, 1, 0]
    assert uplift_auc_score(BEST, TREATMENT, OUTCOME) == 1 and qini_auc_score(BEST, TREATMENT, OUTCOME) == 1
    assert uplift_auc_score(WORST, TREATMENT, OUTCOME) == -1       # area −4.5 of 4.5
    assert qini_auc_score(WORST, TREATMENT, OUTCOME) == -0.5       # area −1.5 of 3
    k, q = perfect_qini_curve(TREATMENT, OUTCOME, negative_effect=False)
    assert k.tolist() == [0, 0, 4] and q.tolist() == [0, 0, 0]


def test_tied_scores_are_one_point_and_random():
    k, u = uplift_curve(np.ones(4), TREATMENT, OUTCOME)
    assert k.tolist() == [0, 4] and u.tolist() == [0, 0]
    assert uplift_auc_score(np.ones(4), TREATMENT, OUTCOME) == 0


def test_summary_of_binary_and_of_amount_outcomes():
    curves = UpliftCurves.of(BEST, TREATMENT, OUTCOME)
    assert (curves.treated, curves.control, curves.auuc, curves.qini_coefficient) == (2, 2, 1, 1)
    assert curves.qini_area == pytest.approx(3 / 16)
    amounts = UpliftCurves.of(BEST, TREATMENT, OUTCOME * 12.5)
    assert amounts.auuc is None and amounts.qini_coefficient is None
    assert amounts.qini_area == pytest.approx(12.5 * 3 / 16)


def test_a_good_ranking_beats_random_on_a_randomized_experiment():
    rng = np.random.default_rng(0)
    effect = rng.uniform(0, 0.4, 4000)
    t = rng.integers(0, 2, 4000)
    y = (rng.random(4000) < 0.2 + effect * t).astype(int)
    # the perfect curve sorts by the realised outcomes, so even the true effect stays far below 1 (0.14 here)
    assert uplift_auc_score(effect, t, y) > 0.1 and qini_auc_score(effect, t, y) > 0.1
    assert abs(uplift_auc_score(rng.random(4000), t, y)) < 0.03


@pytest.mark.parametrize("score, treatment, outcome, message", [
    (BEST[:3], TREATMENT, OUTCOME, "one length"),
    ([np.nan, 1, 2, 3], TREATMENT, OUTCOME, "score must be finite; 1 of 4"),
    (BEST, TREATMENT, [1, np.inf, 0, 0], "outcome must be finite"),
    (BEST, [1, 1, 1, 1], OUTCOME, "all 4 are treated"),
    (BEST, [0, 1, 2, 0], OUTCOME, "treatment must hold only 0 and 1"),
    (BEST, TREATMENT, ["a", "b", "c", "d"], "outcome must be numeric"),
    ([[1, 2], [3, 4]], TREATMENT, OUTCOME, "score must be 1-D"),
])
def test_bad_inputs_are_one_line_errors(score, treatment, outcome, message):
    with pytest.raises(ValueError, match=message) as error:
        UpliftCurves.of(score, treatment, outcome)
    assert "\n" not in str(error.value)


def test_normalised_areas_need_both_outcomes():
    with pytest.raises(ValueError, match="all 4 values are 0"):
        uplift_auc_score(BEST, TREATMENT, np.zeros(4))
    with pytest.raises(ValueError, match="outcome must hold only 0 and 1"):
        qini_auc_score(BEST, TREATMENT, OUTCOME * 2.5)
    assert UpliftCurves.of(BEST, TREATMENT, np.zeros(4)).auuc is None

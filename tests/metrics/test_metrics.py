import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.metrics import log_loss, mean_squared_error, roc_auc_score

from promokit.metrics import (
    GAUCResult,
    MetricWarning,
    TopKResult,
    auc,
    expected_auc,
    gauc,
    logloss,
    mse,
    precision_recall_f1_at_top,
    rela_impr,
)

# Scores drawn from a few values, so ties between positives and negatives are common.
labelled_scores = st.lists(st.tuples(st.integers(0, 1), st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0])),
                           min_size=2, max_size=200)


def naive_gauc(y, s, groups, weight):
    """Reference GAUC: a Python loop over groups with sklearn's AUC."""
    frame = pd.DataFrame({"y": y, "s": s, "g": groups})
    total = weights = 0.0
    for _, part in frame.groupby("g"):
        if part["y"].nunique() == 2:
            w = len(part) if weight == "impressions" else 1.0
            total += w * roc_auc_score(part["y"], part["s"])
            weights += w
    return total / weights


def random_grouped(seed, n=2000, n_groups=60):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n)
    y = (rng.random(n) < 0.3).astype(int)
    s = np.round(rng.random(n) + 0.3 * y, 1)  # rounded: many ties
    return y, s, groups


# --- auc -------------------------------------------------------------------------------------------------------

def test_auc_hand_computed():
    assert auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    # pairs (pos, neg): (0.2, 0.2) tie = 1/2, (0.2, 0.1), (0.9, 0.2), (0.9, 0.1) = 1 each -> 3.5 / 4
    assert auc([0, 1, 0, 1], [0.2, 0.2, 0.1, 0.9]) == pytest.approx(0.875)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(labelled_scores)
def test_auc_matches_sklearn_with_ties(rows):
    y, s = map(list, zip(*rows))
    assume(0 < sum(y) < len(y))
    assert auc(y, s) == pytest.approx(roc_auc_score(y, s))


def test_expected_auc_hand_computed():
    # p = (0.5, 0.2, 1.0) with scores (0.3, 0.1, 0.3); weight p_i(1 − p_j) of each ordered pair i ≠ j:
    # (0,1) 0.4 won, (0,2) 0 tied, (1,0) 0.1 lost, (1,2) 0 lost, (2,0) 0.5 tied, (2,1) 0.8 won
    # → (0.4 + 0.5/2 + 0.8) / (0.4 + 0.1 + 0.5 + 0.8) = 1.45 / 1.8
    assert expected_auc([0.5, 0.2, 1.0], [0.3, 0.1, 0.3]) == pytest.approx(1.45 / 1.8)


@settings(derandomize=True, max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), st.sampled_from([0.0, 0.2, 0.5, 0.7])),
                min_size=2, max_size=40))
def test_expected_auc_is_the_pair_sum_and_auc_on_certain_labels(rows):
    p, s = map(np.array, zip(*rows))
    weight = np.outer(p, 1 - p)
    np.fill_diagonal(weight, 0.0)
    assume(weight.sum() > 0)
    won = (s[:, None] > s[None, :]) + 0.5 * (s[:, None] == s[None, :])
    assert expected_auc(p, s) == pytest.approx((weight * won).sum() / weight.sum())
    certain = (p > 0.5).astype(float)
    if 0 < certain.sum() < len(certain):
        assert expected_auc(certain, s) == pytest.approx(auc(certain, s))


def test_expected_auc_undefined_or_bad_input():
    with pytest.warns(MetricWarning, match="expected AUC is undefined"):
        assert math.isnan(expected_auc([1.0, 1.0], [0.1, 0.2]))
    with pytest.raises(ValueError, match="probabilities in"):
        expected_auc([0.5, 1.5], [0.1, 0.2])
    with pytest.raises(ValueError, match="must be finite"):
        expected_auc([0.5, 0.5], [0.1, np.inf])


def test_auc_accepts_lists_arrays_series_and_bool_labels():
    y, s = [0, 1, 1, 0], [0.3, 0.6, 0.2, 0.1]
    expected = roc_auc_score(y, s)
    assert auc(np.array(y), np.array(s)) == pytest.approx(expected)
    assert auc(pd.Series(y), pd.Series(s, dtype="float32")) == pytest.approx(expected)
    assert auc(np.array(y, dtype=bool), s) == pytest.approx(expected)


@pytest.mark.parametrize("y", [[1, 1, 1], [0, 0], []])
def test_auc_single_class_or_empty_is_nan_with_warning(y):
    with pytest.warns(MetricWarning, match="undefined"):
        assert math.isnan(auc(y, [0.5] * len(y)))


@pytest.mark.parametrize("y, s, message", [
    ([0, 1, 1], [0.1, 0.2], "same length"),
    ([0, 2, 1], [0.1, 0.2, 0.3], "only 0 and 1"),
    ([0, np.nan, 1], [0.1, 0.2, 0.3], "only 0 and 1"),
    (["a", "b"], [0.1, 0.2], "numeric"),
    ([0, 1, 1], [0.1, np.nan, np.inf], "1 NaN and 1 inf"),
    ([[0, 1]], [[0.1, 0.2]], "1-D"),
])
def test_auc_rejects_bad_input(y, s, message):
    with pytest.raises(ValueError, match=message):
        auc(y, s)


# --- gauc ------------------------------------------------------------------------------------------------------

def hand_case():
    # group a: y=[1,0,0], s=[.9,.5,.95]   -> pos .9 beats .5, loses to .95       -> AUC 0.5,   3 rows
    # group b: y=[1,0,1,0], s=[.8,.2,.6,.6] -> 1 + 1 + 1 + tie 1/2 over 4 pairs  -> AUC 0.875, 4 rows
    # group c: y=[0,0] single class                                             -> skipped,   2 rows
    groups = ["a", "b", "c", "a", "b", "b", "c", "a", "b"]
    y = [1, 1, 0, 0, 0, 1, 0, 0, 0]
    s = [.9, .8, .4, .5, .2, .6, .7, .95, .6]
    return y, s, groups


@pytest.mark.parametrize("weight, expected", [("impressions", (3 * 0.5 + 4 * 0.875) / 7),
                                              ("uniform", (0.5 + 0.875) / 2)])
def test_gauc_hand_computed(weight, expected):
    result = gauc(*hand_case(), weight=weight)
    assert isinstance(result, GAUCResult)
    assert result.value == pytest.approx(expected)
    assert (result.n_groups, result.n_scored, result.n_skipped) == (3, 2, 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("weight", ["impressions", "uniform"])
def test_gauc_matches_naive_loop(seed, weight):
    y, s, groups = random_grouped(seed)
    result = gauc(y, s, groups, weight=weight)
    assert result.value == pytest.approx(naive_gauc(y, s, groups, weight))
    assert result.n_groups == len(np.unique(groups))


def test_gauc_string_keys_give_the_same_result():
    y, s, groups = random_grouped(3)
    as_strings = np.array([f"user-{g}" for g in groups], dtype=object)
    assert gauc(y, s, as_strings) == gauc(y, s, groups)
    assert gauc(y, s, pd.Series(as_strings)).value == pytest.approx(naive_gauc(y, s, groups, "impressions"))


def test_gauc_one_group_equals_auc():
    y, s, _ = random_grouped(4)
    assert gauc(y, s, np.zeros(len(y))).value == pytest.approx(auc(y, s))


def test_gauc_no_scorable_group_is_nan_with_warning():
    with pytest.warns(MetricWarning, match="none of the 2 groups"):
        result = gauc([1, 1, 0], [0.2, 0.3, 0.4], ["a", "a", "b"])
    assert math.isnan(result.value)
    assert (result.n_groups, result.n_scored, result.n_skipped) == (2, 0, 2)
    with pytest.warns(MetricWarning, match="none of the 0 groups"):
        assert math.isnan(gauc([], [], []).value)


@pytest.mark.parametrize("groups, weight, message", [
    (["a", "b"], "impressions", "same length"),
    (["a", None, "b"], "impressions", "1 missing"),
    (["a", "b", "b"], "clicks", "weight must be one of"),
])
def test_gauc_rejects_bad_input(groups, weight, message):
    with pytest.raises(ValueError, match=message):
        gauc([0, 1, 1], [0.1, 0.2, 0.3], groups, weight=weight)


# --- precision / recall / F1 at the top ------------------------------------------------------------------------

def test_precision_recall_f1_at_top_hand_computed():
    y = [1, 0, 1, 0, 0, 1, 0, 0, 0, 0]
    s = [.9, .8, .7, .6, .5, .4, .3, .2, .1, 0.]
    # k = ceil(0.25 * 10) = 3 -> top rows y = 1, 0, 1: TP = 2 of 3 predicted, 2 of 3 positives
    result = precision_recall_f1_at_top(y, s, 0.25)
    assert isinstance(result, TopKResult)
    assert (result.fraction, result.k) == (0.25, 3)
    assert (result.precision, result.recall, result.f1) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    # k = max(1, ceil(0.01 * 10)) = 1 -> TP = 1: P = 1, R = 1/3, F1 = 2 * (1/3) / (4/3) = 1/2
    top1 = precision_recall_f1_at_top(y, s, 0.01)
    assert (top1.k, top1.precision, top1.recall, top1.f1) == pytest.approx((1, 1.0, 1 / 3, 0.5))


def test_top_k_is_ceil_without_float_noise():
    y = np.zeros(100, dtype=int)
    y[0] = 1
    assert precision_recall_f1_at_top(y, np.linspace(1, 0, 100), 0.07).k == 7  # 0.07 * 100 = 7.000000000000001
    assert precision_recall_f1_at_top(y, np.linspace(1, 0, 100), 0.071).k == 8


def test_top_ties_at_the_cut_keep_input_order():
    result = precision_recall_f1_at_top([0, 1, 1, 0], [0.5, 0.5, 0.5, 0.5], 0.5)
    assert (result.k, result.precision, result.recall) == (2, 0.5, 0.5)


def test_top_no_true_positive_gives_zero_f1():
    result = precision_recall_f1_at_top([0, 0, 1], [0.9, 0.8, 0.1], 0.5)
    assert (result.precision, result.recall, result.f1) == (0.0, 0.0, 0.0)


def test_top_without_positives_is_nan_recall_with_warning():
    with pytest.warns(MetricWarning, match="no positives"):
        result = precision_recall_f1_at_top([0, 0, 0], [0.9, 0.8, 0.1], 0.5)
    assert result.precision == 0.0
    assert math.isnan(result.recall) and math.isnan(result.f1)


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5])
def test_top_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="fraction"):
        precision_recall_f1_at_top([0, 1], [0.1, 0.2], fraction)


# --- logloss / mse ---------------------------------------------------------------------------------------------

def test_logloss_and_mse_match_sklearn():
    rng = np.random.default_rng(5)
    p = rng.uniform(0.01, 0.99, 500)
    y = (rng.random(500) < p).astype(int)
    assert logloss(y, p) == pytest.approx(log_loss(y, p))
    assert mse(y, p) == pytest.approx(mean_squared_error(y, p))


def test_logloss_clips_probabilities():
    assert logloss([1, 0], [0.0, 1.0], eps=1e-7) == pytest.approx(-math.log(1e-7))


@pytest.mark.parametrize("metric", [logloss, mse])
def test_probabilistic_metrics_reject_bad_input(metric):
    with pytest.raises(ValueError, match="same length"):
        metric([0, 1], [0.5])
    with pytest.raises(ValueError, match="1 NaN"):
        metric([0, 1], [0.5, np.nan])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        metric([0, 1], [0.5, 1.2])


@pytest.mark.parametrize("metric", [logloss, mse])
def test_probabilistic_metrics_on_empty_input_are_nan_with_warning(metric):
    with pytest.warns(MetricWarning, match="empty"):
        assert math.isnan(metric([], []))


# --- rela_impr -------------------------------------------------------------------------------------------------

def test_rela_impr_hand_computed():
    assert rela_impr(0.75, 0.70) == pytest.approx(25.0)
    assert rela_impr(0.70, 0.70) == pytest.approx(0.0)


@pytest.mark.parametrize("auc_model, auc_base", [(0.7, 0.5), (float("nan"), 0.7), (0.7, float("nan"))])
def test_rela_impr_undefined_is_nan_with_warning(auc_model, auc_base):
    with pytest.warns(MetricWarning, match="undefined"):
        assert math.isnan(rela_impr(auc_model, auc_base))

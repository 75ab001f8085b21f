import math

import numpy as np
import pandas as pd
import pytest

from promokit.metrics import (
    MetricWarning,
    decile_figure,
    decile_table,
    hit_metrics,
    normalized_gini,
    order_of_magnitude_share,
    per_mille,
)


def lorenz_gini(y, order):
    """Reference Gini: twice the trapezoid area between the gain curve of ``order`` (best first) and the diagonal."""
    gain = np.r_[0.0, np.cumsum(np.asarray(y, dtype=float)[order]) / np.sum(y)]
    area = np.sum((gain[1:] + gain[:-1]) / 2) / len(y)
    return 2 * (area - 0.5)


# ---------------------------------------------------------------- normalized_gini

def test_gini_hand_computed():
    # y_true = [0, 2, 1, 5] (total 8), y_pred = [0.1, 0.4, 0.3, 0.2].
    # By prediction, best first: rows 1, 2, 3, 0 hold 2, 1, 5, 0 -> gain curve 0, 2/8, 3/8, 8/8, 8/8.
    #   area = 1/4 * [(0 + .25)/2 + (.25 + .375)/2 + (.375 + 1)/2 + (1 + 1)/2] = 1/4 * 2.125 = 0.53125
    #   Gini_model = 2 * (0.53125 - 0.5) = 0.0625
    # By y_true itself: 5, 2, 1, 0 -> gain 0, 5/8, 7/8, 1, 1.
    #   area = 1/4 * [.3125 + .75 + .9375 + 1] = 0.75, Gini_best = 2 * (0.75 - 0.5) = 0.5
    # Normalised: 0.0625 / 0.5 = 0.125.
    assert normalized_gini([0, 2, 1, 5], [0.1, 0.4, 0.3, 0.2]) == pytest.approx(0.125, abs=1e-15)


def test_gini_ties_average_over_tied_orders():
    # Rows 1 and 2 tie at 0.3. Ranking row 1 first gives the case above (Gini_model 2/32, normalised 0.125);
    # ranking row 2 first gives the order 2, 1, 3, 0 -> gain 0, 1/8, 3/8, 1, 1, area 1/4 * 2.0 = 0.5, Gini 0.
    # Average rank: (0.125 + 0) / 2 = 0.0625, whatever the input order of the tied rows.
    assert normalized_gini([0, 2, 1, 5], [0.1, 0.3, 0.3, 0.2]) == pytest.approx(0.0625, abs=1e-15)
    assert normalized_gini([0, 1, 2, 5], [0.1, 0.3, 0.3, 0.2]) == pytest.approx(0.0625, abs=1e-15)


def test_gini_perfect_reversed_and_constant():
    rng = np.random.default_rng(0)
    y = rng.gamma(0.5, 100, 500) * (rng.random(500) < 0.3)
    assert normalized_gini(y, y) == pytest.approx(1.0, abs=1e-12)
    assert normalized_gini(y, np.log1p(y) * 3 + 1) == pytest.approx(1.0, abs=1e-12)
    distinct = rng.permutation(np.arange(1.0, 101.0))
    assert normalized_gini(distinct, -distinct) == pytest.approx(-1.0, abs=1e-12)
    assert normalized_gini(y, np.full(500, 7.5)) == 0.0
    assert normalized_gini(y, np.zeros(500)) == 0.0


def test_gini_random_prediction_is_near_zero():
    rng = np.random.default_rng(1)
    y = rng.gamma(0.5, 100, 20_000)
    assert abs(normalized_gini(y, rng.random(20_000))) < 0.03


def test_gini_matches_lorenz_reference_without_ties():
    rng = np.random.default_rng(2)
    for _ in range(20):
        n = int(rng.integers(2, 60))
        y = rng.gamma(0.7, 10, n) * (rng.random(n) < 0.6)
        if y.sum() == 0 or np.ptp(y) == 0:
            continue
        p = rng.normal(size=n)
        expected = lorenz_gini(y, np.argsort(-p)) / lorenz_gini(y, np.argsort(-y, kind="stable"))
        assert normalized_gini(y, p) == pytest.approx(expected, abs=1e-12)


def test_gini_invariant_to_monotone_transforms():
    rng = np.random.default_rng(3)
    y = rng.gamma(0.5, 50, 300)
    p = np.round(rng.random(300), 2)  # with ties
    base = normalized_gini(y, p)
    for transformed in (np.exp(p), 3 * p + 7, p ** 3, np.log1p(p), np.arctan(10 * p)):
        assert normalized_gini(y, transformed) == pytest.approx(base, abs=1e-12)


def test_gini_constant_y_true_is_nan_with_warning():
    with pytest.warns(MetricWarning, match="all 3 y_true values equal 2.0"):
        assert math.isnan(normalized_gini([2, 2, 2], [0.1, 0.5, 0.2]))


@pytest.mark.parametrize("y_true, y_pred, match", [
    ([0, 0, 0], [1, 2, 3], "y_true must not be all zero; its 3 values sum to 0"),
    ([], [], "y_true must not be all zero; its 0 values"),
    ([1, -2, -1], [1, 2, 3], r"y_true must be non-negative; 2 of 3 values are negative, e.g. -2.0"),
    ([1, np.nan, 2], [1, 2, 3], r"y_true must be finite; 1 of 3 values are not, e.g. nan"),
    ([1, 2, 3], [1, np.inf, 3], r"y_pred must be finite; 1 of 3 values are not, e.g. inf"),
    ([1, 2, 3], [1, 2], "y_true and y_pred must have the same length, got 3 and 2"),
    ([[1, 2]], [1, 2], "y_true must be 1-D"),
    (["a", "b"], [1, 2], "y_true must be numeric"),
])
def test_gini_errors(y_true, y_pred, match):
    with pytest.raises(ValueError, match=match):
        normalized_gini(y_true, y_pred)


def test_gini_accepts_negative_scores():
    # Only the order of y_pred matters, so scores (e.g. log-scale) may be negative.
    assert normalized_gini([0, 2, 1, 5], [-0.9, -0.6, -0.7, -0.8]) == pytest.approx(0.125, abs=1e-15)


# ---------------------------------------------------------------- decile_table / decile_figure

def known_deciles():
    # Predictions 0..19 in reverse input order; y_true = 2 * prediction, except rows predicted 0 and 1 observe 0.
    pred = np.arange(20.0)[::-1]
    obs = np.where(pred < 2, 0.0, 2 * pred)
    return obs, pred


def test_decile_table_known_input():
    obs, pred = known_deciles()
    table = decile_table(obs, pred, bins=10)
    assert list(table.columns) == ["decile", "rows", "mean_predicted", "mean_observed", "ratio"]
    assert table["decile"].tolist() == list(range(1, 11))
    assert table["rows"].tolist() == [2] * 10
    # Decile d holds the predictions 2d - 2 and 2d - 1: mean 2d - 1.5, observed twice that (d >= 2).
    d = np.arange(1, 11)
    np.testing.assert_allclose(table["mean_predicted"], 2 * d - 1.5)
    np.testing.assert_allclose(table["mean_observed"], np.r_[0.0, 2 * (2 * d[1:] - 1.5)])
    assert math.isnan(table["ratio"].iloc[0])  # observed mean 0 -> NaN, not inf
    np.testing.assert_allclose(table["ratio"].iloc[1:], 0.5)


def test_decile_table_uneven_sizes_and_stable_ties():
    table = decile_table(np.arange(23.0), np.arange(23.0), bins=10)
    assert table["rows"].tolist() == [3, 3, 3, 2, 2, 2, 2, 2, 2, 2]
    np.testing.assert_allclose(table["mean_predicted"].iloc[:2], [1.0, 4.0])
    # Four tied predictions in two bins: the stable sort keeps input order, so bin 1 gets the first two rows.
    tied = decile_table([1.0, 2.0, 3.0, 4.0], [5.0, 5.0, 5.0, 5.0], bins=2)
    assert tied["mean_observed"].tolist() == [1.5, 3.5]
    assert tied["ratio"].tolist() == pytest.approx([5 / 1.5, 5 / 3.5])


def test_decile_table_one_bin_and_all_zero_observed():
    table = decile_table([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], bins=1)
    assert table["rows"].tolist() == [3]
    assert table["mean_predicted"].tolist() == [2.0]
    assert math.isnan(table["ratio"].iloc[0])


@pytest.mark.parametrize("y_true, y_pred, bins, match", [
    ([1.0] * 9, [1.0] * 9, 10, "need at least 10 rows for 10 bins, got 9"),
    ([1.0] * 9, [1.0] * 9, 0, "bins must be a positive integer, got 0"),
    ([1.0] * 9, [1.0] * 9, 2.5, "bins must be a positive integer, got 2.5"),
    ([1.0, -1.0], [1.0, 1.0], 1, "y_true must be non-negative; 1 of 2 values are negative, e.g. -1.0"),
    ([1.0, 1.0], [1.0, np.nan], 1, "y_pred must be finite; 1 of 2 values are not, e.g. nan"),
    ([1.0, 1.0], [1.0], 1, "y_true and y_pred must have the same length, got 2 and 1"),
])
def test_decile_table_errors(y_true, y_pred, bins, match):
    with pytest.raises(ValueError, match=match):
        decile_table(y_true, y_pred, bins=bins)


def bar_containers(fig):
    return fig.axes[0].containers


def test_decile_figure_single_model():
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    obs, pred = known_deciles()
    fig = decile_figure(decile_table(obs, pred), "one model")
    try:
        assert isinstance(fig, Figure)
        ax = fig.axes[0]
        assert ax.get_title() == "one model"
        assert [len(c) for c in bar_containers(fig)] == [10, 10]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["mean predicted", "mean observed"]
        heights = [bar.get_height() for bar in bar_containers(fig)[0]]
        np.testing.assert_allclose(heights, 2 * np.arange(1, 11) - 1.5)
    finally:
        plt.close(fig)


def test_decile_figure_draws_one_panel_per_model():
    import matplotlib.pyplot as plt

    obs, pred = known_deciles()
    table = pd.concat([decile_table(obs, pred, bins=5).assign(model="a"),
                       decile_table(obs, -pred, bins=5).assign(model="b")])  # other orders: other observed means
    fig = decile_figure(table, "two orders")
    try:
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in visible] == ["a", "b"]
        for ax, model in zip(visible, ("a", "b")):
            expected = table[table.model == model]
            assert [len(c) for c in ax.containers] == [5, 5]
            np.testing.assert_allclose([b.get_height() for b in ax.containers[1]], expected.mean_observed)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("table, match", [
    ([1, 2], "table must be a pandas DataFrame, got list"),
    (pd.DataFrame({"decile": [1], "mean_predicted": [1.0]}), r"table is missing the columns \['mean_observed'\]"),
    (pd.DataFrame({"decile": [], "mean_predicted": [], "mean_observed": []}), "table has no rows"),
    (pd.DataFrame({"decile": [1, 1], "mean_predicted": [1.0, 2.0], "mean_observed": [1.0, 2.0]}),
     "table has 1 repeated .model, decile. rows, e.g. model 'predicted' decile 1"),
    (pd.DataFrame({"decile": [1, 2], "mean_predicted": [1.0, 2.0], "mean_observed": [1.0, 2.0],
                   "model": ["a", None]}), "table's model column has 1 missing values"),
])
def test_decile_figure_errors(table, match):
    with pytest.raises(ValueError, match=match):
        decile_figure(table, "x")


# ---------------------------------------------------------------- hit_metrics

FUNDS = ["A", "B", "C"]
USERS = ["u1", "u2", "u3"]
SCORES = np.array([
    [0.2, 0.5, 0.1],  # u1 -> B
    [0.4, 0.4, 0.3],  # u2 -> A (tie of A and B goes to the first fund)
    [0.0, 0.0, 0.9],  # u3 -> C, no outcome rows at all
])
OUTCOME = pd.DataFrame([
    ("u1", "B", 1, 100.0),  # hit
    ("u1", "A", 1, 50.0),   # not u1's fund
    ("u1", "B", 1, 20.0),   # hit: a second converting row of the chosen fund counts again
    ("u2", "A", 0, 0.0),    # hit row without a conversion: u2 is a hit user, adds nothing
    ("u2", "B", 1, 70.0),   # B lost the tie, so no hit
    ("u9", "A", 1, 999.0),  # user not scored: ignored
], columns=["user", "fund", "convert", "amount"])


def call_hit(scores=SCORES, users=USERS, funds=FUNDS, outcome=OUTCOME):
    return hit_metrics(users, scores, funds, outcome["user"], outcome["fund"], outcome["convert"],
                       outcome["amount"])


def test_hit_metrics_hand_case():
    assert call_hit() == {"thc": 2, "tha": 120.0, "users": 3, "hit_users": 2}


def test_hit_metrics_tie_to_second_fund_when_scores_change():
    scores = SCORES.copy()
    scores[1, 1] = 0.41  # u2 now prefers B: its A row stops hitting, its B row (1 conversion, 70) hits
    assert call_hit(scores) == {"thc": 3, "tha": 190.0, "users": 3, "hit_users": 2}


def test_hit_metrics_plain_lists_and_integer_ids():
    result = hit_metrics([10, 20], [[1, 0], [0, 1]], ("x", "y"), [10, 20, 20, 30], ["x", "x", "y", "y"],
                         [1, 1, 0, 1], [5, 6, 0, 7])
    assert result == {"thc": 1, "tha": 5.0, "users": 2, "hit_users": 2}


def test_hit_metrics_no_outcome_rows():
    empty = OUTCOME.iloc[:0]
    assert call_hit(outcome=empty) == {"thc": 0, "tha": 0.0, "users": 3, "hit_users": 0}


def test_hit_metrics_matches_a_loop():
    rng = np.random.default_rng(4)
    n_users, funds = 300, ["f0", "f1", "f2", "f3"]
    users = rng.permutation(np.arange(1000, 1000 + n_users))
    scores = np.round(rng.random((n_users, 4)), 1)  # many ties
    n_rows = 900
    o_user = rng.integers(990, 1000 + n_users + 10, n_rows)  # some unknown users
    o_fund = rng.choice(funds, n_rows)
    convert = (rng.random(n_rows) < 0.4).astype(int)
    amount = convert * rng.gamma(1.0, 100, n_rows)
    chosen = {u: funds[int(np.argmax(s))] for u, s in zip(users, scores)}
    thc = tha = 0.0
    hit_users = set()
    for u, f, c, a in zip(o_user, o_fund, convert, amount):
        if chosen.get(u) == f:
            thc, tha = thc + c, tha + a
            hit_users.add(u)
    result = hit_metrics(users, scores, funds, o_user, o_fund, convert, amount)
    assert result["thc"] == thc
    assert result["tha"] == pytest.approx(tha, rel=1e-12)
    assert result["users"] == n_users
    assert result["hit_users"] == len(hit_users)


@pytest.mark.parametrize("kwargs, match", [
    ({"outcome": OUTCOME.assign(fund=["A", "Z", "B", "A", "Z", "A"])},
     r"outcome_funds has 2 rows of funds not in funds, e.g. 'Z'; known funds: \['A', 'B', 'C'\]"),
    ({"users": ["u1", "u2", "u1"]}, "user_ids must be unique; 1 of 3 are repeats, e.g. 'u1'"),
    ({"users": ["u1", None, "u3"]}, "user_ids has 1 missing keys of 3"),
    ({"funds": ["A", "B", "A"]}, "funds must be unique; 1 of 3 are repeats, e.g. 'A'"),
    ({"funds": "ABC"}, "funds must be a 1-D sequence of keys"),
    ({"funds": [], "scores": np.zeros((3, 0))}, "funds must name at least one fund"),
    ({"scores": SCORES[:, :2]}, r"scores must have shape \(len\(user_ids\), len\(funds\)\) = \(3, 3\), got \(3, 2\)"),
    ({"scores": np.where(np.eye(3) > 0, np.nan, SCORES)},
     r"scores must be finite; 3 of 3 users have NaN or inf scores, e.g. user 'u1': \[nan, 0.5, 0.1\]"),
    ({"scores": np.full((3, 3), "x")}, "scores must be numeric"),
    ({"outcome": OUTCOME.assign(convert=[1, 2, 1, 0, 1, 1])},
     "outcome_convert must hold only 0 and 1; 1 of 6 values do not, e.g. 2.0"),
    ({"outcome": OUTCOME.assign(amount=[1.0, -5.0, 1.0, 0.0, 1.0, 1.0])},
     "outcome_amount must be non-negative; 1 of 6 values are negative, e.g. -5.0"),
    ({"outcome": OUTCOME.assign(amount=[1.0, np.nan, 1.0, 0.0, 1.0, 1.0])},
     "outcome_amount must be finite; 1 of 6 values are not, e.g. nan"),
])
def test_hit_metrics_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        call_hit(**kwargs)


def test_hit_metrics_outcome_length_mismatch():
    with pytest.raises(ValueError, match="must have one length, got 6, 6, 5, 6"):
        hit_metrics(USERS, SCORES, FUNDS, OUTCOME["user"], OUTCOME["fund"], OUTCOME["convert"][:5],
                    OUTCOME["amount"])


# ---------------------------------------------------------------- per_mille

def test_per_mille():
    assert per_mille(54, 10_000) == pytest.approx(5.4)          # CPMD: 54 conversions in 10,000 deliveries
    assert per_mille(285_680.0, 10_000) == pytest.approx(28_568.0)  # TAPMD
    assert per_mille(0, 7) == 0.0
    assert per_mille(np.int64(3), np.float64(1500)) == pytest.approx(2.0)


@pytest.mark.parametrize("total, deliveries, match", [
    (5, 0, "deliveries must be positive, got 0"),
    (5, -10, "deliveries must be positive, got -10"),
    (-1, 10, "total must be non-negative, got -1"),
    (float("nan"), 10, "total must be finite, got nan"),
    (5, float("inf"), "deliveries must be finite, got inf"),
    ("5", 10, "total must be a number, got '5'"),
    (5, True, "deliveries must be a number, got True"),
])
def test_per_mille_errors(total, deliveries, match):
    with pytest.raises(ValueError, match=match):
        per_mille(total, deliveries)


# ---------------------------------------------------------------- order_of_magnitude_share

def test_order_of_magnitude_share_hand_case():
    # (1 + y_pred) / (1 + y_true) per row:
    #   10/1 = 10 (off, boundary counts) | 9/1 = 9 (not) | 20/2 = 10 (off) | 1/11 (off, under-prediction)
    #   11/101 ~ 0.109 (not)               | 1/1 (not)
    # -> 3 of 6 rows = 0.5
    y_true = [0, 0, 1, 10, 100, 0]
    y_pred = [9, 8, 19, 0, 10, 0]
    assert order_of_magnitude_share(y_true, y_pred) == 0.5


def test_order_of_magnitude_share_matches_log_definition_off_the_boundary():
    rng = np.random.default_rng(5)
    y = rng.gamma(0.3, 200, 5000) * (rng.random(5000) < 0.5)
    p = rng.gamma(0.3, 200, 5000)
    ratio = np.abs(np.log10((1 + p) / (1 + y)))
    assert not np.any(np.abs(ratio - 1) < 1e-9)
    assert order_of_magnitude_share(y, p) == pytest.approx(np.mean(ratio >= 1), abs=1e-15)


def test_order_of_magnitude_share_empty_is_nan_with_warning():
    with pytest.warns(MetricWarning, match="empty input"):
        assert math.isnan(order_of_magnitude_share([], []))


@pytest.mark.parametrize("y_true, y_pred, match", [
    ([1.0, 2.0], [1.0, -0.5], "y_pred must be non-negative; 1 of 2 values are negative, e.g. -0.5"),
    ([-1.0, 2.0], [1.0, 0.5], "y_true must be non-negative; 1 of 2 values are negative, e.g. -1.0"),
    ([1.0, np.inf], [1.0, 0.5], "y_true must be finite; 1 of 2 values are not, e.g. inf"),
    ([1.0, 2.0], [1.0], "y_true and y_pred must have the same length, got 2 and 1"),
])
def test_order_of_magnitude_share_errors(y_true, y_pred, match):
    with pytest.raises(ValueError, match=match):
        order_of_magnitude_share(y_true, y_pred)

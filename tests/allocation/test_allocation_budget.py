"""Budget allocation (joint-incentive paper, eqs. 11–20): hand-computed cases, HiGHS on small instances, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promokit.allocation import budget as budget_module
from promokit.allocation.budget import (BudgetProblem, absolute_form, decide, ratio_form, solve_budget,
                                        stack_populations)
from promokit.allocation.budget_lp import solve_budget_lp
from promokit.data import DataError

LEVELS = np.array([1.0, 2.0, 3.0])
CUSTOMERS = np.array([[0.2, 0.4, 0.7],    # customer A: f at r = 1, 2, 3
                      [0.3, 0.35, 0.4]])  # customer B


def hazard_scores(n_rows, n_levels=10, seed=0):
    """Response scores 1 − exp(−h·r^a) rising with the level (the paper's cumulative hazard, eq. 10)."""
    rng = np.random.default_rng(seed)
    levels = np.linspace(1.0, 10.0, n_levels)
    h, a = rng.gamma(2.0, 0.05, (n_rows, 1)), rng.uniform(0.6, 1.4, (n_rows, 1))
    return -np.expm1(-h * levels ** a), levels


# ------------------------------------------------------------------------------------ eqs. 19–20, by hand


def test_decide_is_eq19_on_a_hand_computed_customer():
    # f = (0.2, 0.4, 0.7) at r = (1, 2, 3), B = 2. Eq. 19 picks argmin_j f_j (λ r_j − λ B − 1):
    #   λ = 0.1: 0.2·(0.1 − 0.2 − 1) = −0.22, 0.4·(0.2 − 0.2 − 1) = −0.40, 0.7·(0.3 − 0.2 − 1) = −0.63 → r = 3
    #   λ = 0.5: 0.2·(0.5 − 1 − 1)   = −0.30, 0.4·(1 − 1 − 1)     = −0.40, 0.7·(1.5 − 1 − 1)   = −0.35 → r = 2
    #   λ = 1:   0.2·(1 − 2 − 1)     = −0.40, 0.4·(2 − 2 − 1)     = −0.40, 0.7·(3 − 2 − 1)     =  0    → tie of
    #            r = 1 (cost 0.2·(1 − 2) = −0.2) and r = 2 (cost 0): the cheaper, r = 1, keeps the budget
    value, cost, budget = ratio_form(CUSTOMERS[:1], LEVELS, max_ratio=2.0)
    assert budget == 0.0
    np.testing.assert_allclose(cost, [[-0.2, 0.0, 0.7]])
    assert [int(decide(value[0], cost[0], lam)) for lam in (0.1, 0.5, 1.0)] == [2, 1, 0]
    for lam in (0.1, 0.5, 1.0):
        eq19 = CUSTOMERS[0] * (lam * LEVELS - lam * 2.0 - 1)
        assert eq19[decide(value[0], cost[0], lam)] == eq19.min()


def test_decide_is_eq20_for_a_merchant_paid_per_request():
    # f^m = (0.1, 0.5, 0.6), B = 2. Eq. 20 picks argmin_j λ r_j − λ B − f_j:
    #   λ = 0.3:  0.3 − 0.6 − 0.1 = −0.4,  0.6 − 0.6 − 0.5 = −0.5,  0.9 − 0.6 − 0.6 = −0.3   → r = 2
    #   λ = 0.05: 0.05 − 0.1 − 0.1 = −0.15, 0.1 − 0.1 − 0.5 = −0.5, 0.15 − 0.1 − 0.6 = −0.55 → r = 3
    value, cost, _ = ratio_form([[0.1, 0.5, 0.6]], LEVELS, max_ratio=2.0, paid_on="request")
    np.testing.assert_allclose(cost, [[-1.0, 0.0, 1.0]])
    assert int(decide(value[0], cost[0], 0.3)) == 1
    assert int(decide(value[0], cost[0], 0.05)) == 2


def test_decide_on_a_batch_matches_one_request_at_a_time():
    scores, levels = hazard_scores(50, 6, seed=3)
    value, cost, _ = ratio_form(scores, levels, max_ratio=4.0)
    batch = decide(value, cost, 0.2)
    assert batch.shape == (50,) and batch.dtype == np.int64
    assert [int(decide(value[i], cost[i], 0.2)) for i in range(50)] == batch.tolist()


# ------------------------------------------------------------------------------- solver, hand-computed cases


def test_ratio_form_two_customers_by_hand():
    # value f, cost f·(r − 2): A (−0.2, 0.2) (0, 0.4) (0.7, 0.7); B (−0.3, 0.3) (0, 0.35) (0.4, 0.4).
    # Hull segments (Δcost, Δvalue, efficiency): A (0.2, 0.2, 1), (0.7, 0.3, 3/7); B (0.3, 0.05, 1/6), (0.4, 0.05, 1/8).
    # Budget 0, cheapest plan costs −0.5 → room 0.5: A's first segment fits (room 0.3 left), A's second
    # (0.7) does not: λ* = 3/7, LP optimum 0.5 + 0.2 + 0.3·(0.3/0.7) = 0.828571…; the fill then takes B's
    # first segment (0.3 ≤ 0.3). Plan: both at r = 2, objective 0.75, spent 0, ratio (0.8 + 0.7)/0.75 = 2.
    value, cost, budget = ratio_form(CUSTOMERS, LEVELS, max_ratio=2.0)
    plan = solve_budget(value, cost, budget)
    assert plan.choice.tolist() == [1, 1]
    assert plan.lam == pytest.approx(3 / 7)
    assert plan.objective == pytest.approx(0.75)
    assert plan.upper_bound == pytest.approx(0.5 + 0.2 + 0.3 * 3 / 7)
    assert plan.spent == pytest.approx(0.0, abs=1e-15) and plan.slack >= 0
    picked = CUSTOMERS[[0, 1], plan.choice]
    assert (LEVELS[plan.choice] * picked).sum() / picked.sum() <= 2.0 + 1e-12  # eq. 16
    lp = solve_budget_lp(value, cost, budget)
    assert lp.objective == pytest.approx(plan.upper_bound) and lp.lam == pytest.approx(3 / 7)
    assert solve_budget_lp(value, cost, budget, integral=True).objective == pytest.approx(0.75)


def test_absolute_form_by_hand():
    # levels (0, 1, 2), total 1. cost r·f: A (0, 0.5, 1.2) for f (0.1, 0.5, 0.6); B (0, 0.3, 1.4) for f (0.2, 0.3, 0.7).
    # A's hull: (0.5, 0.4, 0.8), (0.7, 0.1, 1/7). B's: r = 1 lies under the chord to r = 2, hull (1.4, 0.5, 5/14).
    # A's first segment fits (room 0.5 left), B's (1.4) does not: λ* = 5/14, LP optimum 0.3 + 0.4 + 0.5·5/14.
    # Nothing else fits in 0.5 along the hulls: plan A r = 1, B r = 0, objective 0.7, slack 0.5. The integer
    # optimum 0.8 (B at r = 1, off its hull) is within one request's Δvalue (0.5) of it.
    scores = np.array([[0.1, 0.5, 0.6], [0.2, 0.3, 0.7]])
    value, cost, budget = absolute_form(scores, [0.0, 1.0, 2.0], total=1.0)
    np.testing.assert_allclose(cost, [[0, 0.5, 1.2], [0, 0.3, 1.4]])
    plan = solve_budget(value, cost, budget)
    assert plan.choice.tolist() == [1, 0]
    assert plan.lam == pytest.approx(5 / 14)
    assert (plan.objective, plan.spent, plan.slack) == pytest.approx((0.7, 0.5, 0.5))
    assert plan.upper_bound == pytest.approx(0.7 + 0.5 * 5 / 14)
    assert plan.gap == pytest.approx(0.5 * 5 / 14)
    exact = solve_budget_lp(value, cost, budget, integral=True)
    assert exact.objective == pytest.approx(0.8) and exact.objective <= plan.upper_bound


def test_customers_and_merchants_share_one_ratio_budget():
    # Customers A, B as above (paid on response, eq. 19) and one merchant f^m = (0.1, 0.5, 0.6) paid per
    # request (eq. 20, cost r − 2 = (−1, 0, 1)). Merchant hull: (1, 0.4, 0.4), (1, 0.1, 0.1).
    # Cheapest plan costs −1.5 → room 1.5: A's segments (0.2, then 0.7) fit, the merchant's first (1.0) does
    # not: λ* = 0.4, LP optimum 0.6 + 0.2 + 0.3 + 0.6·0.4 = 1.34; the fill takes B's first segment (0.3).
    # Plan A r = 3, B r = 2, merchant r = 1: objective 0.7 + 0.35 + 0.1 = 1.15, spent −0.3.
    customers = ratio_form(CUSTOMERS, LEVELS, max_ratio=2.0)
    merchants = ratio_form([[0.1, 0.5, 0.6]], LEVELS, max_ratio=2.0, paid_on="request")
    value, cost, budget = stack_populations([customers, merchants])
    assert value.shape == (3, 3) and budget == 0.0
    plan = solve_budget(value, cost, budget)
    assert plan.choice.tolist() == [2, 1, 0]
    assert plan.lam == pytest.approx(0.4)
    assert (plan.objective, plan.spent, plan.upper_bound) == pytest.approx((1.15, -0.3, 1.34))
    # eq. 16 with the merchant counted per request: (3·0.7 + 2·0.35 + 1) / (0.7 + 0.35 + 1) ≤ 2
    assert (3 * 0.7 + 2 * 0.35 + 1) / (0.7 + 0.35 + 1) <= 2.0
    exact = solve_budget_lp(value, cost, budget, integral=True).objective
    assert plan.objective <= exact + 1e-12 and exact - plan.objective <= 0.5  # one request's Δvalue at most
    shared = stack_populations([absolute_form(CUSTOMERS, LEVELS, 1.0), absolute_form(CUSTOMERS, LEVELS, 1.0)],
                               budget=1.5)
    assert shared.budget == 1.5 and shared.value.shape == (4, 3)


def test_budget_that_does_not_bind_gives_every_request_its_best_option():
    scores, levels = hazard_scores(300, 5, seed=1)
    value, cost, _ = absolute_form(scores, levels, 0.0)
    plan = solve_budget(value, cost, float(cost.max(axis=1).sum()) + 1)
    assert plan.lam == 0 and plan.gap == 0
    np.testing.assert_array_equal(plan.choice, value.argmax(axis=1))


# --------------------------------------------------------------------------- against HiGHS on small instances


@st.composite
def small_problems(draw):
    n_rows = draw(st.integers(1, 7))
    n_options = draw(st.integers(1, 4))
    # coarse data makes exact ties in efficiency likely; the fine grid stays far above HiGHS's tolerances
    step = draw(st.sampled_from([1.0, 1e-3]))
    numbers = st.integers(-3, 6).map(float) if step == 1 else st.integers(-3000, 6000).map(lambda k: k * step)
    value = np.array(draw(st.lists(numbers, min_size=n_rows * n_options, max_size=n_rows * n_options)))
    cost = np.array(draw(st.lists(numbers, min_size=n_rows * n_options, max_size=n_rows * n_options)))
    value, cost = value.reshape(n_rows, n_options), cost.reshape(n_rows, n_options)
    low, high = cost.min(axis=1).sum(), cost.max(axis=1).sum()
    return value, cost, float(low + draw(st.floats(0, 1)) * (high - low))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(small_problems())
def test_solver_against_the_exact_lp_and_integer_optimum(problem):
    value, cost, budget = problem
    plan = solve_budget(value, cost, budget)
    lp = solve_budget_lp(value, cost, budget)
    exact = solve_budget_lp(value, cost, budget, integral=True)
    tolerance = 1e-7 * (1 + np.abs(value).sum() + np.abs(cost).sum())
    rows = np.arange(len(value))
    assert plan.spent <= budget + tolerance and plan.slack >= -tolerance  # budget never exceeded
    assert plan.spent == pytest.approx(cost[rows, plan.choice].sum())
    assert plan.objective == pytest.approx(value[rows, plan.choice].sum())
    assert plan.gap >= 0
    assert plan.upper_bound >= exact.objective - tolerance  # a true bound on the integer optimum
    assert plan.upper_bound == pytest.approx(lp.objective, abs=tolerance)  # and the LP optimum itself
    assert plan.objective <= exact.objective + tolerance
    one_request = (value.max(axis=1) - value.min(axis=1)).max()
    assert plan.objective >= lp.objective - one_request - tolerance


def test_sampled_bracket_gives_the_exact_lp_bound(monkeypatch):
    monkeypatch.setattr(budget_module, "DIRECT_ROWS", 1000)
    scores, levels = hazard_scores(20_000, 8, seed=2)
    value, cost, _ = absolute_form(scores, levels, 0.0)
    total = float(cost.min(axis=1).sum() + 0.3 * (cost.max(axis=1) - cost.min(axis=1)).sum())
    for value, cost, budget in (ratio_form(scores, levels, 3.5), absolute_form(scores, levels, total)):
        direct = solve_budget(value, cost, budget, sample_size=20_000)  # 2 × sample ≥ N: every request hulled
        assert direct.method == "lagrange" and direct.lagrange_path == "hull"
        for size in (2_000, 60):  # a 60-request sample usually misses λ*: the bracket is widened
            plan = solve_budget(value, cost, budget, sample_size=size, seed=5)
            assert plan.lagrange_path == "hull+sweep" and plan.sweeps >= 1
            assert plan.upper_bound == pytest.approx(direct.upper_bound, rel=1e-10)
            assert plan.lam == pytest.approx(direct.lam, rel=1e-9)
            assert 0 <= plan.slack and plan.gap <= (value.max(axis=1) - value.min(axis=1)).max()
            np.testing.assert_array_equal(plan.choice, solve_budget(value, cost, budget, sample_size=size,
                                                                    seed=5).choice)  # reproducible
        float32 = solve_budget(value.astype(np.float32), cost.astype(np.float32), budget, sample_size=2_000)
        assert float32.objective == pytest.approx(direct.objective, rel=1e-5)


@pytest.mark.parametrize("shift", [0.3, 3.0])
def test_a_bracket_that_misses_lambda_star_is_widened(monkeypatch, shift):
    monkeypatch.setattr(budget_module, "DIRECT_ROWS", 1000)
    scores, levels = hazard_scores(5_000, 6, seed=7)
    value, cost, budget = ratio_form(scores, levels, 3.0)
    direct = solve_budget(value, cost, budget, sample_size=5_000)
    bracket = budget_module._Hull.bracket

    def first_bracket_misses(hull, share, width):  # entirely below (shift 0.3) or above (3.0) λ*
        if width == budget_module.BRACKET_WIDTHS[0]:
            return direct.lam * shift, direct.lam * shift * 1.1
        return bracket(hull, share, width)

    monkeypatch.setattr(budget_module._Hull, "bracket", first_bracket_misses)
    plan = solve_budget(value, cost, budget, sample_size=500)
    assert plan.sweeps == 2
    assert plan.lam == pytest.approx(direct.lam) and plan.upper_bound == pytest.approx(direct.upper_bound)
    assert plan.slack >= 0


def test_decide_just_above_lambda_star_meets_the_budget():
    scores, levels = hazard_scores(3_000, 10, seed=4)
    value, cost, budget = ratio_form(scores, levels, 4.0)
    plan = solve_budget(value, cost, budget)
    online = decide(value, cost, plan.lam * (1 + 1e-9))  # every hull segment strictly above λ*
    rows = np.arange(len(value))
    assert cost[rows, online].sum() <= budget
    assert value[rows, online].sum() >= plan.upper_bound - (value.max(axis=1) - value.min(axis=1)).max()
    assert (online != plan.choice).sum() <= 10  # only the marginal request and the filled ones differ


# ----------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("scores, levels, message", [
    ([[0.1, np.nan, 0.3]], LEVELS, "scores has 1 NaN"),
    ([[0.1, -0.2, 0.3]], LEVELS, "scores has 1 NaN, infinite or negative"),
    ([[0.1, 0.2, 0.3]], [1.0, 3.0, 2.0], r"levels must be strictly increasing.*levels\[2\]=2 after levels\[1\]=3"),
    ([[0.1, 0.2, 0.3]], [1.0, 2.0, 2.0], "1 of 2 steps are not"),
    ([[0.1, 0.2, 0.3]], [1.0, 2.0], "scores have 3 columns but there are 2 levels"),
    ([0.1, 0.2, 0.3], LEVELS, "scores must be a matrix"),
])
def test_bad_scores_and_levels(scores, levels, message):
    with pytest.raises(DataError, match=message):
        ratio_form(scores, levels, 2.0)
    with pytest.raises(DataError, match=message):
        absolute_form(scores, levels, 1.0)


def test_bad_problem_shapes_and_numbers():
    with pytest.raises(DataError, match=r"value has shape \(2, 3\) but cost has shape \(2, 2\)"):
        solve_budget(np.ones((2, 3)), np.ones((2, 2)), 1.0)
    with pytest.raises(DataError, match="cost has 1 NaN, infinite"):
        solve_budget(np.ones((2, 2)), [[1.0, np.inf], [1.0, 1.0]], 1.0)
    with pytest.raises(DataError, match="budget must be finite"):
        solve_budget(np.ones((2, 2)), np.ones((2, 2)), np.nan)
    with pytest.raises(DataError, match="need at least one request"):
        solve_budget(np.ones((0, 2)), np.ones((0, 2)), 1.0)
    with pytest.raises(DataError, match="paid_on must be"):
        ratio_form(CUSTOMERS, LEVELS, 2.0, paid_on="click")
    with pytest.raises(DataError, match="same number of options"):
        stack_populations([BudgetProblem(np.ones((1, 2)), np.ones((1, 2)), 0.0),
                           BudgetProblem(np.ones((1, 3)), np.ones((1, 3)), 0.0)])
    with pytest.raises(DataError, match="lam must be a finite number"):
        decide([1.0, 2.0], [0.0, 1.0], -1.0)
    with pytest.raises(DataError, match="value has 1 NaN"):
        decide([1.0, np.nan], [0.0, 1.0], 0.5)


@pytest.mark.parametrize("method", ["lagrange", "lp"])
def test_a_ratio_below_the_lowest_level_is_said_in_plain_words(method):
    import pandas as pd

    from promokit.allocation.budget_plan import plan_budget

    scores = pd.DataFrame({"user_id": ["a", "b"], "score_20": [0.1, 0.2], "score_40": [0.3, 0.5]})
    with pytest.raises(DataError, match=r"^`ratio` 10 is below the lowest level 20: even the lowest level costs 20 per "
                                        r"expected response, so the ratio must be at least 20 \(or the scores need a "
                                        r"level 0, no coupon\)$"):
        plan_budget(scores, ratio=10, method=method)
    with pytest.raises(DataError, match=r"^`budget` 1: budget 1 is infeasible"):  # an absolute budget: as it was
        plan_budget(scores, budget=1, method=method)
    with_control = scores.assign(score_0=[0.0, 0.2])[["user_id", "score_0", "score_20", "score_40"]]
    plan = plan_budget(with_control, ratio=10, method=method)  # 'no coupon' at cost 0 for b funds a's coupon
    assert plan.plan["level"].tolist() == [20.0, 0.0] and plan.plan["cost"].iloc[1] == 0


def test_infeasible_budget(monkeypatch):
    # every customer's cheapest level already exceeds B = 0.5 in the ratio form (cost f·(r − 0.5) > 0)
    value, cost, budget = ratio_form(CUSTOMERS, LEVELS, max_ratio=0.5)
    message = (r"budget 0 is infeasible: the cheapest options of the 2 requests already cost 0.25 in total "
               r"\(e.g. request 1")
    with pytest.raises(DataError, match=message):
        solve_budget(value, cost, budget)
    with pytest.raises(DataError, match=message):
        solve_budget_lp(value, cost, budget)
    monkeypatch.setattr(budget_module, "DIRECT_ROWS", 100)  # and through the sampled sweep
    scores, levels = hazard_scores(5_000, 4, seed=6)
    value, cost, _ = absolute_form(scores, levels, 0.0)
    with pytest.raises(DataError, match="infeasible: the cheapest options of the 5000 requests"):
        solve_budget(value, cost, 0.5 * float(cost.min(axis=1).sum()), sample_size=500)

"""Quota/risk customer allocation (EOCA eqs. 1–5): hand-computed cases, every solver against the exact
optimum on small instances, the dual certificate, feasibility detection and every documented error."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promokit.allocation.quota import (QuotaProblem, check_plan, check_quota_problem, dual_bound, plan_prices,
                                       prepare_quota_problem, risk_slack, solve_quota)
from promokit.allocation.quota_prices import market_clearing, sample_quotas
from promokit.data import DataError
from promokit.experiments.allocation.instances import make_quota_instance

pytestmark = pytest.mark.extra("allocation")

# Two users, two funds, one seat each. Giving each user its own top fund is impossible (both prefer fund 0);
# the optimum gives fund 0 to user 1 (8) and fund 1 to user 0 (9): 17.
TWO_BY_TWO = np.array([[10.0, 9.0],
                       [8.0, 1.0]])
# Fund 1 has risk 2 and only user A (tolerance 2) may take it, so A must get it although A prefers fund 0.
TIGHT_ETV = np.array([[10.0, 1.0],   # user A, tolerance 2
                      [5.0, 0.0]])   # user B, tolerance 1
TIGHT = dict(quotas=[1, 1], tolerance=[2, 1], risk=[1, 2])
# prices' sampling, clearing and margin-repair paths on tiny inputs
FORCED_LEVELS = dict(base_users=5, sample_ratio=2.0, candidate_constant=0.5, min_margin_users=1)


@st.composite
def quota_instances(draw, max_users=40, max_types=4):
    """Small instances, feasible by construction (quotas count a random plan that respects eq. 5), with
    continuous or heavily tied ETVs, with or without risk limits."""
    n_users, n_types = draw(st.integers(1, max_users)), draw(st.integers(1, max_types))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    etv = rng.random((n_users, n_types)) * 100
    if draw(st.booleans()):
        etv = np.floor(etv / 25)  # values 0..3: many ties
    if not draw(st.booleans()):
        plan = rng.integers(0, n_types, n_users)
        return etv, np.bincount(plan, minlength=n_types), None, None
    tolerance = rng.integers(1, 4, n_users)
    risk = rng.integers(1, 4, n_types)
    risk[rng.integers(n_types)] = tolerance.min()
    allowed = tolerance[:, None] >= risk[None, :]
    plan = np.argmax(allowed * rng.random((n_users, n_types)), axis=1)
    return etv, np.bincount(plan, minlength=n_types), tolerance, risk


def relative(a, b):
    return abs(a - b) / max(1.0, abs(b))


# ------------------------------------------------------------------------------- eqs. 1–5 and the dual, by hand


def test_every_method_on_a_hand_computed_case():
    exact = solve_quota(TWO_BY_TWO, [1, 1], method="exact")
    assert exact.assignment.tolist() == [1, 0] and exact.objective == 17.0
    assert exact.upper_bound == pytest.approx(17.0) and exact.assignment.dtype == np.int64
    assert solve_quota(TWO_BY_TWO, [1, 1], method="exact", backend="highs").assignment.tolist() == [1, 0]
    assert solve_quota(TWO_BY_TWO, [1, 1], method="prices").objective == 17.0
    # HA (Algorithm 1): α = ((10 + 8)/1, (9 + 1)/1) = (18, 10); the padded third fund counts as ETV 0, so
    # h_0 = (18 + 10)/2 · (2·10 − 9 − 0) = 154 and h_1 = 14 · (2·8 − 1 − 0) = 210: user 1 goes first and
    # takes fund 0, which fills; user 0 is left fund 1. Scoring by h is what makes HA optimal here.
    assert solve_quota(TWO_BY_TWO, [1, 1], method="ha").assignment.tolist() == [1, 0]
    # Manual: fund 0 has the higher mean ETV (9 vs 5) and takes its top user, user 0 (10): 10 + 1 = 11.
    manual = solve_quota(TWO_BY_TWO, [1, 1], method="manual")
    assert manual.assignment.tolist() == [0, 1] and manual.objective == 11.0
    assert manual.diagnostics["priority"] == [0, 1] and manual.upper_bound is None
    assert solve_quota(TWO_BY_TWO, [1, 1], method="manual", priority=[1, 0]).assignment.tolist() == [1, 0]


def test_dual_bound_by_hand_and_the_plan_prices_that_reach_the_optimum():
    masked = prepare_quota_problem(TWO_BY_TWO, [1, 1]).masked_etv()
    # D(p) = Σ_i max_j (ETV_ij − p_j) + Σ_j d_j p_j: at p = 0, 10 + 8 = 18; at p = (3, 0), 9 + 5 + 3 = 17
    assert dual_bound(masked, np.zeros(2), np.array([1, 1])) == 18.0
    assert dual_bound(masked, np.array([3.0, 0.0]), np.array([1, 1])) == 17.0
    # The optimal plan's exchange graph: W[1, 0] = 10 − 9 = 1, W[0, 1] = 1 − 8 = −7, so p = (1, 0) and D = 17
    prices = plan_prices(masked, np.array([1, 0]))
    np.testing.assert_allclose(prices, [1.0, 0.0])
    assert dual_bound(masked, prices, np.array([1, 1])) == 17.0


def test_risk_limits_are_kept_where_a_greedy_order_would_strand_a_user():
    # Unguarded, HA scores A first (h_A = (15 + 1)/2 · 19 = 152 > h_B = 80) and A takes fund 0, leaving B, who may
    # only take fund 0, with nothing; manual would do the same. The feasibility guard keeps A for fund 1.
    for method in ("ha", "manual", "exact", "prices"):
        plan = solve_quota(TIGHT_ETV, method=method, **TIGHT)
        assert plan.assignment.tolist() == [1, 0], method
        check_plan(plan.assignment, **TIGHT)


# ------------------------------------------------------------------ every solver against the exact optimum


@settings(max_examples=60, deadline=None, derandomize=True)
@given(quota_instances())
def test_solvers_meet_every_constraint_and_prices_matches_the_exact_optimum(instance):
    etv, quotas, tolerance, risk = instance
    exact = solve_quota(etv, quotas, tolerance, risk, method="exact")
    highs = solve_quota(etv, quotas, tolerance, risk, method="exact", backend="highs")
    assert relative(highs.objective, exact.objective) <= 1e-9
    assert exact.upper_bound >= exact.objective - 1e-9 * max(1.0, exact.objective)
    plans = [solve_quota(etv, quotas, tolerance, risk, method=method) for method in ("prices", "ha", "manual")]
    plans.append(solve_quota(etv, quotas, tolerance, risk, method="prices", **FORCED_LEVELS))
    for plan in [exact, highs, *plans]:
        check_plan(plan.assignment, quotas, tolerance, risk)
        assert plan.objective <= exact.objective + 1e-9 * max(1.0, exact.objective)
    for priced in (plans[0], plans[3]):
        assert priced.diagnostics["certified"]
        assert relative(priced.objective, exact.objective) <= 1e-9
        assert priced.upper_bound >= exact.objective - 1e-9 * max(1.0, exact.objective)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(quota_instances(), st.integers(0, 2 ** 32 - 1))
def test_the_dual_bound_is_above_the_optimum_at_any_prices(instance, seed):
    etv, quotas, tolerance, risk = instance
    problem = prepare_quota_problem(etv, quotas, tolerance, risk)
    optimum = solve_quota(etv, quotas, tolerance, risk, method="exact").objective
    prices = np.random.default_rng(seed).normal(0, 50, len(quotas))
    assert dual_bound(problem.masked_etv(), prices, problem.quotas) >= optimum - 1e-9 * max(1.0, optimum)


def test_prices_through_several_sample_levels_is_certified_optimal_and_reproducible():
    instance = make_quota_instance(4000, 6, seed=3)
    args = (instance.etv, instance.quotas, instance.tolerance, instance.risk)
    exact = solve_quota(*args, method="exact")
    options = dict(base_users=200, sample_ratio=4.0)
    priced = solve_quota(*args, method="prices", **options)
    assert [level["users"] for level in priced.diagnostics["levels"]][-1] == 4000
    assert len(priced.diagnostics["levels"]) >= 3 and priced.diagnostics["certified"]
    assert relative(priced.objective, exact.objective) <= 1e-9 and abs(priced.gap) <= 1e-9 * exact.objective
    np.testing.assert_array_equal(solve_quota(*args, method="prices", **options).assignment, priced.assignment)
    for method in ("ha", "manual"):
        assert solve_quota(*args, method=method).objective < exact.objective


def test_prices_stays_exact_when_clearing_is_cut_short_by_widening_the_margin_until_certified():
    # one sweep and few candidates leave quotas unmet, so the margin repair runs and sometimes must widen
    options = dict(base_users=100, sample_ratio=4.0, candidate_constant=0.3, max_sweeps=1, min_margin_users=1)
    attempts = []
    for seed in range(25, 41):
        instance = make_quota_instance(2000, 5, seed=seed)
        args = (instance.etv, instance.quotas, instance.tolerance, instance.risk)
        priced = solve_quota(*args, method="prices", **options)
        assert priced.diagnostics["certified"]
        assert relative(priced.objective, solve_quota(*args, method="exact").objective) <= 1e-9
        attempts += [level.get("margin_attempts", 0) for level in priced.diagnostics["levels"][1:]]
    assert max(attempts) >= 2


def test_market_clearing_finds_prices_that_meet_the_quotas_and_certify_the_plan():
    rng = np.random.default_rng(0)
    etv = rng.gamma(2.0, 10.0, (600, 4))
    quotas = np.array([300, 150, 100, 50])
    cleared = market_clearing(etv, quotas, np.zeros(4), max_sweeps=50)
    assert cleared.met and cleared.sweeps < 50
    np.testing.assert_array_equal(np.bincount(cleared.choice, minlength=4), quotas)
    objective = etv[np.arange(600), cleared.choice].sum()
    assert dual_bound(etv, cleared.prices, quotas) == pytest.approx(objective, rel=1e-12)
    assert objective == pytest.approx(solve_quota(etv, quotas, method="exact").objective, rel=1e-12)


def test_sample_quotas_scale_the_quotas_and_stay_feasible_under_tight_risk_limits():
    risk = np.array([1.0, 2.0, 3.0])
    tolerance = np.array([1.0] * 8 + [2.0] + [3.0])  # only 1 of 10 sampled users may take fund 2
    scaled = sample_quotas(np.array([500, 300, 200]), tolerance, risk)  # proportional: (5, 3, 2)
    assert scaled.sum() == 10
    assert scaled.tolist() == [8, 1, 1]
    assert (risk_slack(tolerance, risk, scaled).slack >= 0).all()


def test_problem_without_risk_limits_allows_every_type():
    problem = prepare_quota_problem(TWO_BY_TWO, [1, 1])
    assert isinstance(problem, QuotaProblem) and problem.allowed().all()
    assert np.isfinite(problem.masked_etv()).all()


# ------------------------------------------------------------------------------ feasibility and errors


@pytest.mark.parametrize("tolerance, risk, quotas, message", [
    ([1, 1, 1, 2], [1, 2], [2, 2],
     r"quotas of types \[1\] \(risk ≥ 2\) cannot be met: they need 2 users but only 1 users have tolerance ≥ 2; "
     r"short by 1 users"),
    # the riskiest level is fine (1 user for fund 2); the shortfall is at level 2, which funds 1 and 2 share
    ([1, 1, 2, 3], [1, 2, 3], [1, 2, 1],
     r"quotas of types \[1, 2\] \(risk ≥ 2\) cannot be met: they need 3 users but only 2 users .* short by 1"),
    ([0, 1, 1], [1, 1], [2, 1],  # user 0 may take no fund at all
     r"quotas of types \[0, 1\] \(risk ≥ 1\) cannot be met: they need 3 users but only 2 .* short by 1 users"),
])
def test_quotas_the_risk_limits_cannot_meet_are_named_with_the_shortfall(tolerance, risk, quotas, message):
    etv = np.ones((len(tolerance), len(risk)))
    with pytest.raises(DataError, match=message):
        check_quota_problem(etv, quotas, tolerance, risk)
    with pytest.raises(DataError, match=message):
        solve_quota(etv, quotas, tolerance, risk, method="prices")


@pytest.mark.parametrize("etv, quotas, tolerance, risk, message", [
    (np.ones((4, 2)), [2, 1], None, None, "quotas sum to 3 but etv has 4 users"),
    (np.ones((4, 2)), [5, -1], None, None, r"quotas has 1 NaN, infinite or negative entries in 2 rows, e\.g\. row 1"),
    (np.ones((4, 2)), [2.5, 1.5], None, None, r"quotas must be whole numbers of users: 2 of 2 are not, e\.g\. type 0"),
    (np.ones((4, 2)), [1, 1, 2], None, None, r"quotas has shape \(3, 1\), expected \(2, 1\)"),
    ([[1.0, np.nan], [1.0, 1.0]], [1, 1], None, None,
     r"etv has 1 NaN, infinite or negative entries in 2 rows, e\.g\. row 0, option 1"),
    ([[1.0, 2.0], [-3.0, 1.0]], [1, 1], None, None,
     r"etv has 1 NaN, infinite or negative entries in 2 rows, e\.g\. row 1, option 0"),
    (np.ones(4), [4], None, None, "etv must be a matrix"),
    (np.ones((0, 2)), [0, 0], None, None, "etv must have at least one user and one fund type"),
    (np.ones((2, 2)), [1, 1], [1, 2], None, "tolerance and risk go together"),
    (np.ones((2, 2)), [1, 1], [1, 2, 3], [1, 1], r"tolerance has shape \(3, 1\), expected \(2, 1\)"),
    (np.ones((2, 2)), [1, 1], [1, 2], [1], r"risk has shape \(1, 1\), expected \(2, 1\)"),
    (np.ones((2, 2)), [1, 1], [1, np.nan], [1, 1], "tolerance has 1 NaN, infinite entries"),
])
def test_malformed_inputs_raise_one_line_errors(etv, quotas, tolerance, risk, message):
    with pytest.raises(DataError, match=message):
        check_quota_problem(etv, quotas, tolerance, risk)


@pytest.mark.parametrize("options, message", [
    (dict(method="greedy"), r"method must be one of \['prices', 'ha', 'manual', 'exact'\], got 'greedy'"),
    (dict(method="manual", priority=[0, 0]), r"priority must list each of the 2 fund types once, got \[0, 0\]"),
    (dict(method="exact", backend="cplex"), "backend must be 'ortools' or 'highs', got 'cplex'"),
])
def test_bad_solver_options_raise(options, message):
    with pytest.raises(DataError, match=message):
        solve_quota(TWO_BY_TWO, [1, 1], **options)


@pytest.mark.parametrize("assignment, message", [
    ([0, 0], r"assignment misses 2 quotas \(eq\. 4\), e\.g\. type 0 has 2 users but its quota is 1"),
    ([0, 2], r"assignment has 1 users with no valid type \(eq\. 3\), e\.g\. user 1: 2"),
    ([0.0, 1.0], "assignment must be a 1-D integer array"),
    ([0, 1], r"gives 1 users a type above their risk tolerance \(eq\. 5\), e\.g\. user 1 \(tolerance 1\) gets "
             r"type 1 \(risk 2\)"),
])
def test_check_plan_names_the_broken_constraint(assignment, message):
    with pytest.raises(DataError, match=message):
        check_plan(np.asarray(assignment), [1, 1], [2, 1], [1, 2])


def test_check_plan_accepts_a_valid_plan():
    check_plan(np.array([1, 0]), [1, 1], [2, 1], [1, 2])
    check_plan(np.array([1, 0]), [1, 1])


def test_prices_repairs_its_margins_without_or_tools(monkeypatch):
    """Without promokit[allocation] the margin repair is SciPy's HiGHS LP: the plan is the same and certified."""
    import importlib.util

    from promokit.allocation import quota_exact

    instance = make_quota_instance(2000, 5, seed=26)
    args = (instance.etv, instance.quotas, instance.tolerance, instance.risk)
    options = dict(base_users=100, sample_ratio=4.0, candidate_constant=0.3, max_sweeps=1, min_margin_users=1)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ortools" else find_spec(name, *a))
    monkeypatch.setattr(quota_exact, "min_cost_flow_assignment", lambda *a: pytest.fail("OR-Tools was called"))
    priced = solve_quota(*args, method="prices", **options)
    assert priced.diagnostics["certified"] and abs(priced.gap) <= 1e-9 * priced.objective
    assert any(level.get("margin_attempts", 0) for level in priced.diagnostics["levels"][1:])
    monkeypatch.undo()
    if find_spec("ortools") is not None:
        assert relative(solve_quota(*args, method="prices", **options).objective, priced.objective) <= 1e-9

"""Quotas as bounds (EOCA eq. 4 as L_j ≤ Σ_i X_ij ≤ U_j): every solver against the exact optimum on small
instances, the sign-constrained dual bound, feasibility checks, and the quotas table with min / max columns
through `promokit allocate quota`."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from promokit.allocation.quota import check_plan, check_quota_problem, dual_bound, prepare_quota_problem, solve_quota
from promokit.allocation.quota_core import plan_prices, price_limits, risk_slack
from promokit.allocation.quota_manual import priority_counts
from promokit.allocation.quota_prices import Bounds, market_clearing, sample_bounds
from promokit.allocation.tables import read_quotas
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.allocation.instances import make_quota_instance
from conftest import spoil

pytestmark = pytest.mark.extra("allocation")

METHODS = ("prices", "ha", "manual", "exact")
# prices' sampling, clearing and margin-repair paths on tiny inputs
FORCED_LEVELS = dict(base_users=5, sample_ratio=2.0, candidate_constant=0.5, min_margin_users=1)
# Three users, two funds. Everyone prefers fund 0, which may take at most 1 user, so its max binds (price ≥ 0);
# fund 1 is free (min 0, max 3). The optimum gives fund 0 to the user who loses most without it: user 0
# (10 − 1 = 9 against 8 − 2 = 6 and 5 − 1 = 4): 10 + 2 + 1 = 13.
AT_MOST = np.array([[10.0, 1.0],
                    [8.0, 2.0],
                    [5.0, 1.0]])


@st.composite
def bounded_instances(draw, max_users=40, max_types=4):
    """Small instances with per-type bounds around the counts of a random plan that respects eq. 5 (so they are
    feasible): each type exact, at least, at most, between or free; continuous or heavily tied ETVs; with or
    without risk limits."""
    n_users, n_types = draw(st.integers(1, max_users)), draw(st.integers(1, max_types))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    etv = rng.random((n_users, n_types)) * 100
    if draw(st.booleans()):
        etv = np.floor(etv / 25)  # values 0..3: many ties
    tolerance = risk = None
    allowed = np.ones((n_users, n_types), dtype=bool)
    if draw(st.booleans()):
        tolerance = rng.integers(1, 4, n_users)
        risk = rng.integers(1, 4, n_types)
        risk[rng.integers(n_types)] = tolerance.min()
        allowed = tolerance[:, None] >= risk[None, :]
    counts = np.bincount(np.argmax(allowed * rng.random((n_users, n_types)), axis=1), minlength=n_types)
    kind = rng.integers(0, 5, n_types)  # 0 exact, 1 at least, 2 at most, 3 between, 4 free
    lower = np.where(np.isin(kind, (0, 1, 3)), counts - rng.integers(0, 3, n_types) * (kind != 0), 0).clip(0)
    upper = np.where(np.isin(kind, (0, 2, 3)), counts + rng.integers(0, 3, n_types) * (kind != 0), np.inf)
    return etv, tolerance, risk, lower, upper


def relative(a, b):
    return abs(a - b) / max(1.0, abs(b))


def assert_within(plan, lower, upper, tolerance=None, risk=None):
    check_plan(plan.assignment, tolerance=tolerance, risk=risk, min_users=lower, max_users=upper)
    counts = np.bincount(plan.assignment, minlength=len(lower))
    assert (counts >= lower).all() and (counts <= upper).all()


# --------------------------------------------------------------------------------- by hand


def test_a_binding_max_gets_a_nonnegative_price_and_a_free_fund_price_zero():
    exact = solve_quota(AT_MOST, max_users=[1, np.inf], method="exact")
    assert exact.assignment.tolist() == [0, 1, 1] and exact.objective == 13.0
    for method in ("prices", "ha"):
        assert solve_quota(AT_MOST, max_users=[1, np.inf], method=method).assignment.tolist() == [0, 1, 1], method
    # Fund 0 holds its max (1 user, min 0): p_0 ≥ 0; fund 1 is strictly inside (2 of 0..3): p_1 = 0.
    lower, upper = np.array([0, 0]), np.array([1, 3])
    limits = price_limits(np.array([1, 2]), lower, upper)
    np.testing.assert_array_equal(limits[0], [0.0, 0.0])
    np.testing.assert_array_equal(limits[1], [np.inf, 0.0])
    # Each user's type must be its best: 10 − p_0 ≥ 1 − p_1, 2 − p_1 ≥ 8 − p_0, 1 − p_1 ≥ 5 − p_0, so
    # 6 ≤ p_0 − p_1 ≤ 9; with p_1 = 0 the least is p = (6, 0).
    masked = prepare_quota_problem(AT_MOST, max_users=[1, np.inf]).masked_etv()
    prices = plan_prices(masked, exact.assignment, limits=limits)
    np.testing.assert_allclose(prices, [6.0, 0.0])
    # D(p) = Σ_i max_j (ETV_ij − p_j) + Σ_j max(p_j L_j, p_j U_j): (4 + 2 + 1) + 6·1 + 0 = 13, the optimum
    assert dual_bound(masked, prices, lower, upper) == 13.0
    # a negative price is charged at the min: D(0, −1) = (10 + 8 + 5) + 0 + (−1)·0 = 23 ≥ 13
    assert dual_bound(masked, np.array([0.0, -1.0]), lower, upper) == 23.0


def test_a_binding_min_gets_a_nonpositive_price():
    # fund 1 (a holdout) must get at least 2 of the 3 users although everyone prefers fund 0
    # the same losses, 9, 6 and 4, send users 1 and 2 to fund 1 (10 + 2 + 1 = 13); fund 0 is strictly inside its
    # bounds (1 of 0..3), so p_0 = 0, and 6 ≤ p_0 − p_1 ≤ 9 makes p_1 ≤ −6
    exact = solve_quota(AT_MOST, min_users=[0, 2], method="exact")
    assert exact.assignment.tolist() == [0, 1, 1] and exact.objective == 13.0
    priced = solve_quota(AT_MOST, min_users=[0, 2], method="prices")
    assert priced.assignment.tolist() == [0, 1, 1] and priced.diagnostics["certified"]
    prices = priced.diagnostics["prices"]
    assert prices[0] == 0.0 and -9.0 <= prices[1] <= -6.0


def test_market_clearing_prices_carry_the_signs_of_the_binding_bounds():
    rng = np.random.default_rng(1)
    etv = rng.gamma(2.0, 10.0, (600, 3))
    etv[:, 0] += 15  # fund 0 is everyone's favourite: its max binds
    lower, upper = np.array([0, 250, 0]), np.array([200, 600, 600])  # fund 1 must take more than it wants
    cleared = market_clearing(etv, lower, np.zeros(3), 50, upper)
    counts = np.bincount(cleared.choice, minlength=3)
    assert cleared.met and counts[0] == 200 and counts[1] == 250
    assert cleared.prices[0] > 0 and cleared.prices[1] < 0 and cleared.prices[2] == 0
    objective = etv[np.arange(600), cleared.choice].sum()
    assert dual_bound(etv, cleared.prices, lower, upper) == pytest.approx(objective, rel=1e-12)
    assert objective == pytest.approx(solve_quota(etv, min_users=lower, max_users=upper, method="exact").objective,
                                      rel=1e-12)


def test_manual_fixes_counts_in_priority_order_filling_each_fund_up_to_what_the_others_allow():
    # 10 users; fund 2 (risk 2) may only take the 4 users of tolerance 2 and needs at least 3 of them
    tolerance = np.array([1] * 6 + [2] * 4)
    problem = prepare_quota_problem(np.ones((10, 3)), None, tolerance, [1, 1, 2], min_users=[0, 2, 3],
                                    max_users=[8, 9, 10])
    # fund 0 first: its max 8 would leave 2 users for the minimums 2 + 3, so it takes 5; fund 1 then all it may
    # (its min 2 plus the 0 users to spare) and fund 2 the rest
    assert priority_counts(problem, np.array([0, 1, 2])).tolist() == [5, 2, 3]
    assert priority_counts(problem, np.array([2, 1, 0])).tolist() == [0, 6, 4]
    plan = solve_quota(np.ones((10, 3)), None, tolerance, [1, 1, 2], method="manual", priority=[2, 1, 0],
                       min_users=[0, 2, 3], max_users=[8, 9, 10])
    assert np.bincount(plan.assignment, minlength=3).tolist() == [0, 6, 4]


def test_exact_quotas_given_as_equal_bounds_give_the_same_plans():
    instance = make_quota_instance(3000, 5, seed=4)
    for method in METHODS:
        quotas = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method=method)
        bounds = solve_quota(instance.etv, None, instance.tolerance, instance.risk, method=method,
                             min_users=instance.quotas, max_users=instance.quotas)
        np.testing.assert_array_equal(bounds.assignment, quotas.assignment)


# ------------------------------------------------------- every solver against the exact optimum


@settings(max_examples=80, deadline=None, derandomize=True)
@given(bounded_instances())
def test_every_plan_keeps_every_bound_and_prices_reaches_the_exact_optimum_or_reports_the_gap(instance):
    etv, tolerance, risk, lower, upper = instance
    bounds = dict(min_users=lower, max_users=upper)
    exact = solve_quota(etv, None, tolerance, risk, method="exact", **bounds)
    highs = solve_quota(etv, None, tolerance, risk, method="exact", backend="highs", **bounds)
    assert relative(highs.objective, exact.objective) <= 1e-9
    assert exact.gap <= 1e-9 * max(1.0, exact.objective)
    plans = [solve_quota(etv, None, tolerance, risk, method=method, **bounds) for method in ("prices", "ha", "manual")]
    plans.append(solve_quota(etv, None, tolerance, risk, method="prices", **bounds, **FORCED_LEVELS))
    for plan in [exact, highs, *plans]:
        assert_within(plan, lower, upper, tolerance, risk)
        assert plan.objective <= exact.objective + 1e-9 * max(1.0, exact.objective)
    for priced in (plans[0], plans[3]):
        assert priced.upper_bound >= exact.objective - 1e-9 * max(1.0, exact.objective)  # weak duality
        shortfall = exact.objective - priced.objective
        assert shortfall <= 1e-9 * max(1.0, exact.objective) or priced.gap >= shortfall
        assert priced.diagnostics["certified"] and relative(priced.objective, exact.objective) <= 1e-9


@settings(max_examples=60, deadline=None, derandomize=True)
@given(bounded_instances(), st.integers(0, 2 ** 32 - 1))
def test_the_bounded_dual_is_above_the_optimum_at_prices_of_any_sign(instance, seed):
    etv, tolerance, risk, lower, upper = instance
    problem = prepare_quota_problem(etv, None, tolerance, risk, min_users=lower, max_users=upper)
    optimum = solve_quota(etv, None, tolerance, risk, method="exact", min_users=lower, max_users=upper).objective
    prices = np.random.default_rng(seed).normal(0, 50, len(lower))
    bound = dual_bound(problem.masked_etv(), prices, problem.min_users, problem.max_users)
    assert bound >= optimum - 1e-9 * max(1.0, optimum)


@pytest.mark.parametrize("risk_rule", [True, False])
def test_prices_with_bounds_through_several_sample_levels_is_certified_optimal_and_reproducible(risk_rule):
    instance = make_quota_instance(4000, 6, seed=5)
    d = instance.quotas
    lower = np.where(np.arange(6) % 2 == 0, np.floor(d * 0.8), 0).astype(int)  # half at least, half free below
    upper = np.where(np.arange(6) < 3, np.ceil(d * 1.1), np.inf)               # half at most, half unbounded
    args = (instance.etv, None, instance.tolerance, instance.risk) if risk_rule else (instance.etv,)
    bounds = dict(min_users=lower, max_users=upper)
    exact = solve_quota(*args, method="exact", **bounds)
    options = dict(base_users=200, sample_ratio=4.0)
    priced = solve_quota(*args, method="prices", **bounds, **options)
    assert len(priced.diagnostics["levels"]) >= 3 and priced.diagnostics["certified"]
    assert relative(priced.objective, exact.objective) <= 1e-9 and abs(priced.gap) <= 1e-9 * exact.objective
    assert_within(priced, lower, upper, *((instance.tolerance, instance.risk) if risk_rule else ()))
    np.testing.assert_array_equal(solve_quota(*args, method="prices", **bounds, **options).assignment,
                                  priced.assignment)
    for method in ("ha", "manual"):
        assert_within(solve_quota(*args, method=method, **bounds), lower, upper)


def test_sample_bounds_scale_the_bounds_and_stay_feasible_under_tight_risk_limits():
    risk = np.array([1.0, 2.0, 3.0])
    tolerance = np.array([1.0] * 8 + [2.0] + [3.0])  # 10 sampled users of 1000: only 1 may take fund 2
    sampled = sample_bounds(Bounds(np.array([0, 100, 300]), np.array([100, 300, 1000])), 1000, tolerance, risk)
    # scaled: minimums (0, 1, 3) rounded down, maximums (1, 3, 10) up; fund 2's minimum drops to the 1 user able
    # to meet it, and the 8 users of tolerance 1, who fit only under fund 0's max of 1, widen it to 8
    assert sampled.lower.tolist() == [0, 1, 1] and sampled.upper.tolist() == [8, 3, 10]
    hall = risk_slack(tolerance, risk, sampled.lower, sampled.upper)
    assert (hall.slack >= 0).all() and (hall.room >= 0).all()


# ------------------------------------------------------------------------------ feasibility and errors


@pytest.mark.parametrize("tolerance, risk, bounds, message", [
    (None, None, dict(min_users=[3, 2]), r"min_users sum to 5 but etv has only 4 users"),
    (None, None, dict(max_users=[1, 2]), r"max_users sum to 3 but etv has 4 users: every user gets one type "
                                         r"\(eq\. 3\), so 1 users would have none"),
    (None, None, dict(min_users=[3, 0], max_users=[2, 4]),
     r"min_users is above max_users for 1 of 2 types, e\.g\. type 0: min 3 > max 2"),
    ([1, 1, 1, 2], [1, 2], dict(min_users=[0, 2]),
     r"minimums of types \[1\] \(risk ≥ 2\) cannot be met: they need at least 2 users but only 1 users have "
     r"tolerance ≥ 2; short by 1 users"),
    ([1, 1, 1, 2], [1, 2], dict(max_users=[2, 4]),
     r"3 users have tolerance below 2 and may only take types \[0\] \(risk < 2, eq\. 5\), but their maximums take "
     r"at most 2 users; 1 users would have no type"),
    ([0, 1, 1, 1], [1, 1], dict(max_users=[4, 4]),
     r"1 users have tolerance below 1, the lowest risk of any type, so eq\. 5 allows them none"),
    (None, None, dict(min_users=[1.5, 0]), r"min_users must be whole numbers of users: 1 of 2 are not, e\.g\. "
                                           r"type 0: 1\.5"),
    (None, None, dict(min_users=[-1, 0]), r"min_users has 1 NaN, infinite or negative entries in 2 rows"),
    (None, None, dict(max_users=[np.nan, 4]), r"max_users has 1 NaN, infinite or negative entries in 2 rows"),
    (None, None, dict(max_users=[4, 4, 4]), r"max_users has shape \(3, 1\), expected \(2, 1\)"),
])
def test_infeasible_or_malformed_bounds_are_one_line_errors(tolerance, risk, bounds, message):
    etv = np.ones((4, 2))
    with pytest.raises(DataError, match=message) as caught:
        check_quota_problem(etv, None, tolerance, risk, **bounds)
    assert "\n" not in str(caught.value)
    with pytest.raises(DataError, match=message):
        solve_quota(etv, None, tolerance, risk, method="prices", **bounds)


def test_errors_name_the_funds_when_given_and_quotas_exclude_bounds():
    with pytest.raises(DataError, match=r"minimums of funds \['holdout'\] \(risk ≥ 2\)"):
        check_quota_problem(np.ones((4, 2)), None, [1, 1, 1, 2], [1, 2], min_users=[0, 2], funds=["F", "holdout"])
    with pytest.raises(DataError, match="give quotas .* or min_users / max_users .*, not both"):
        solve_quota(np.ones((2, 2)), [1, 1], min_users=[0, 0])
    with pytest.raises(DataError, match="give quotas .* or min_users and/or max_users"):
        solve_quota(np.ones((2, 2)))


@pytest.mark.parametrize("assignment, message", [
    ([0, 0, 0], r"assignment misses 1 quotas \(eq\. 4\), e\.g\. type 0 has 3 users but its max is 2"),
    ([1, 1, 1], r"assignment misses 1 quotas \(eq\. 4\), e\.g\. type 0 has 0 users but its min is 1"),
])
def test_check_plan_names_the_broken_bound(assignment, message):
    with pytest.raises(DataError, match=message):
        check_plan(np.asarray(assignment), min_users=[1, 0], max_users=[2, np.inf])


# ------------------------------------------------------------------------------ quotas table and CLI


def test_a_quotas_table_mixes_exact_funds_and_bounds():
    table = pd.DataFrame({"fund": ["C", "A", "B"], "quota": [5, None, None], "min": [None, 2, None],
                          "max": [None, 9, None], "risk": [3, 1, 2]})
    with pytest.raises(DataError, match="funds with none of"):
        read_quotas(table, ["A", "B", "C"])
    funds = read_quotas(table.assign(min=[None, 2, 0]), ["A", "B", "C"])
    assert funds.min_users.tolist() == [2, 0, 5] and funds.max_users.tolist() == [9, np.inf, 5]
    assert funds.risk.tolist() == [1, 2, 3] and funds.quotas is None
    exact = read_quotas(pd.DataFrame({"fund": ["A", "B"], "min": [3, 4], "max": [3, 4]}), ["A", "B"])
    assert exact.quotas.tolist() == [3, 4]


runner = CliRunner()


@pytest.fixture(scope="module")
def quota_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quota_bounds")
    result = runner.invoke(app, ["allocate", "synth", "quota", "--users", "400", "--types", "5", "--seed", "1",
                                 "--layout", "long", "--format", "csv", "--out", str(folder)])
    assert result.exit_code == 0, result.output
    quotas = pd.read_csv(folder / "quotas.csv")
    d = quotas["quota"].to_numpy()
    bounds = pd.DataFrame({"fund": quotas["fund"], "quota": [None, None, d[2], None, None],
                           "min": [d[0], None, None, 0, d[4] // 2], "max": [None, d[1] // 2, None, None, d[4]],
                           "risk": quotas["risk"]})
    bounds.to_csv(folder / "bounds.csv", index=False)
    return folder


@pytest.mark.parametrize("method", METHODS)
def test_allocate_quota_reads_min_and_max_columns_and_keeps_every_fund_inside_them(quota_files, tmp_path, method):
    result = runner.invoke(app, ["allocate", "quota", "--scores", str(quota_files / "scores.csv"), "--quotas",
                                 str(quota_files / "bounds.csv"), "--method", method, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    plan = pd.read_parquet(tmp_path / "plan.parquet")
    bounds = pd.read_csv(quota_files / "bounds.csv").set_index("fund")
    lower = bounds["quota"].fillna(bounds["min"]).fillna(0)
    upper = bounds["quota"].fillna(bounds["max"]).fillna(len(plan))
    counts = plan["fund"].value_counts().reindex(bounds.index, fill_value=0)
    assert (counts >= lower).all() and (counts <= upper).all(), counts
    assert (plan["tolerance"] >= plan["risk"]).all()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["quotas"] == "bounds" and report["per_fund"]["assigned"] == counts.tolist()
    assert report["per_fund"]["min"] == lower.astype(int).tolist()
    assert report["per_fund"]["max"] == upper.astype(int).tolist()
    if method in ("prices", "exact"):
        exact = solve_quota(*_etv_and_tolerance(quota_files), bounds["risk"].to_numpy(), method="exact",
                            min_users=lower.to_numpy(), max_users=upper.to_numpy())
        assert report["objective"] == pytest.approx(exact.objective) and report["gap"] <= 1e-6


def _etv_and_tolerance(folder):
    scores = pd.read_csv(folder / "scores.csv")
    etv = scores.pivot(index="user_id", columns="fund", values="score").to_numpy()
    return etv, None, scores.groupby("user_id")["tolerance"].first().to_numpy()


@pytest.mark.parametrize("spoil, message", [
    (spoil("min", 2, 10), "funds with both a 'quota' and a 'min' or 'max' (give exactly quota users, or bounds): "
     "1 of 5 rows in the quotas table, e.g. row 2 {fund='F3', quota="),
    (spoil("min", 0, -5), "column 'min' has non-numeric, infinite or negative values: 1 of 5 rows in the quotas "
     "table, e.g. row 0 {fund='F1', min=-5.0}"),
    (spoil("max", 1, -1), "column 'max' has non-numeric, infinite or negative values: 1 of 5 rows"),
    (spoil("min", 4, 1000), "column 'min' is above column 'max': 1 of 5 rows in the quotas table, e.g. row 4 "
     "{fund='F5', min=1000"),
    (spoil("max", 1, 2.5), "max must be whole numbers of users: 1 of 5 rows in the quotas table, e.g. row 1 "
     "{fund='F2', max=2.5}"),
    (spoil("min", 0, np.nan), "funds with none of ['quota', 'min', 'max'] (each needs a 'quota', or a 'min' "
     "and/or a 'max'; min 0 leaves a fund free): 1 of 5 rows in the quotas table, e.g. row 0 {fund='F1'"),
    (spoil("min", 0, "many"), "column 'min' has non-numeric, infinite or negative values: 1 of 5 rows in the quotas "
     "table, e.g. row 0 {fund='F1', min='many'}"),
    (spoil("max", 1, np.inf), "column 'max' has non-numeric, infinite or negative values: 1 of 5 rows"),
    (lambda f: f.rename(columns={"max": "mx"}), "1 unknown columns in the quotas table of 5 rows, e.g. 'mx'; did you "
     "mean 'max'?"),
    (lambda f: f.assign(quota=None, min=[100] * 5, max=None), "min_users sum to 500 but etv has only 400 users"),
    (lambda f: f.assign(quota=None, min=None, max=[10] * 5), "max_users sum to 50 but etv has 400 users"),
    # 37 users have tolerance 5, the risk of F5
    (lambda f: f.assign(min=[181, None, None, 0, 38], max=[None, 63, None, None, 40]),
     "minimums of funds ['F5'] (risk ≥ 5) cannot be met: they need at least 38 users but only 37 users have "
     "tolerance ≥ 5; short by 1 users"),
    # 62 users have tolerance 1 and may only take F1
    (lambda f: f.assign(quota=None, min=None, max=[10, 400, 400, 400, 400]),
     "62 users have tolerance below 2 and may only take funds ['F1'] (risk < 2, eq. 5), but their maximums take "
     "at most 10 users; 52 users would have no type"),
    (lambda f: f.drop(columns=["min", "max"]).assign(quota=[None, 1, 2, 3, 4]),
     "column 'quota' has missing, non-numeric, infinite or negative values: 1 of 5 rows in the quotas table, "
     "e.g. row 0 {fund='F1', quota=nan}"),
])
def test_bad_quotas_tables_are_one_line_errors_naming_the_column_rows_and_an_example(quota_files, tmp_path, spoil,
                                                                                        message):
    spoil(pd.read_csv(quota_files / "bounds.csv")).to_csv(tmp_path / "bad.csv", index=False)
    result = runner.invoke(app, ["allocate", "quota", "--scores", str(quota_files / "scores.csv"), "--quotas",
                                 str(tmp_path / "bad.csv"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1
    assert not (tmp_path / "out" / "plan.parquet").exists()

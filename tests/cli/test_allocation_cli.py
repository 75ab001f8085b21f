import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.allocation import absolute_form, check_plan, ratio_form, solve_budget, solve_quota
from promokit.cli import app
from promokit.experiments.allocation.instances import DEFAULT_LEVELS, make_budget_instance, make_quota_instance
from conftest import spoil

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _ok(*args):
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    return result


def _report(folder):
    return json.loads((folder / "report.json").read_text())


@pytest.fixture(scope="module")
def budget_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("budget")
    _ok("allocate", "synth", "budget", "--users", 300, "--merchants", 100, "--seed", 4, "--out", folder)
    return folder


@pytest.fixture(scope="module")
def quota_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quota")
    _ok("allocate", "synth", "quota", "--users", 400, "--types", 5, "--seed", 1, "--layout", "long",
        "--format", "csv", "--out", folder)
    return folder


def test_synth_budget_writes_the_generator_instance(budget_files):
    scores = pd.read_parquet(budget_files / "scores.parquet")
    assert list(scores.columns) == ["user_id", *(f"score_{level:g}" for level in DEFAULT_LEVELS)]
    np.testing.assert_allclose(scores.drop(columns="user_id").to_numpy(), make_budget_instance(300, seed=4).scores)
    assert len(pd.read_parquet(budget_files / "merchants.parquet")) == 100


def test_budget_ratio_plan_is_the_python_api_plan_and_meets_eq_16(budget_files, tmp_path):
    _ok("allocate", "budget", "--scores", budget_files / "scores.parquet", "--ratio", 2.5, "--out", tmp_path)
    plan = pd.read_parquet(tmp_path / "plan.parquet")
    assert list(plan.columns) == ["user_id", "level", "score", "cost"]
    instance = make_budget_instance(300, seed=4)
    expected = solve_budget(*ratio_form(instance.scores, instance.levels, 2.5))
    np.testing.assert_array_equal(plan["level"], instance.levels[expected.choice])
    np.testing.assert_allclose(plan["cost"], plan["level"] * plan["score"])
    report = _report(tmp_path)
    assert report["form"] == "ratio" and report["B"] == 2.5 and report["customers"] == 300
    assert report["objective"] == pytest.approx(plan["score"].sum())
    assert report["spend_per_response"] <= 2.5 + 1e-9           # eq. 16
    assert report["lam"] == pytest.approx(expected.lam) and report["slack"] >= -1e-9
    assert report["upper_bound"] >= report["objective"] and report["gap"] >= 0
    assert sum(report["per_level"]["requests"]) == 300
    assert "| lam |" in (tmp_path / "report.md").read_text()


def test_budget_with_merchants_and_an_absolute_total(budget_files, tmp_path):
    _ok("allocate", "budget", "--scores", budget_files / "scores.parquet", "--merchants",
        budget_files / "merchants.parquet", "--total", 300, "--out", tmp_path)
    plan = pd.read_parquet(tmp_path / "plan.parquet")
    assert plan["population"].value_counts().to_dict() == {"customer": 300, "merchant": 100}
    assert plan["cost"].sum() <= 300 + 1e-9
    report = _report(tmp_path)
    assert report["merchants"] == 100 and report["expected_spend"] == pytest.approx(plan["cost"].sum())


def test_budget_reads_explicit_value_and_cost_columns_from_a_long_table(tmp_path):
    instance = make_budget_instance(50, levels=(1.0, 2.0, 4.0), seed=0)
    value = instance.scores * np.array([10.0, 12.0, 13.0])   # e.g. margin per response at each level
    cost = instance.scores * instance.levels + 0.1            # plus a fixed cost per request
    n, k = value.shape
    table = pd.DataFrame({"user_id": np.repeat(np.arange(n), k), "level": np.tile(instance.levels, n),
                          "score": instance.scores.ravel(), "value": value.ravel(), "cost": cost.ravel()})
    table.to_csv(tmp_path / "long.csv", index=False)
    _ok("allocate", "budget", "--scores", tmp_path / "long.csv", "--total", 60, "--out", tmp_path / "plan")
    plan = pd.read_parquet(tmp_path / "plan" / "plan.parquet")
    expected = solve_budget(value, cost, 60.0)
    rows = np.arange(n)
    np.testing.assert_allclose(plan["value"], value[rows, expected.choice])
    np.testing.assert_allclose(plan["cost"], cost[rows, expected.choice])
    assert plan["cost"].sum() <= 60
    assert _report(tmp_path / "plan")["objective"] == pytest.approx(plan["value"].sum())


def test_budget_lp_method_bounds_the_lagrange_plan(budget_files, tmp_path):
    scores = budget_files / "scores.parquet"
    _ok("allocate", "budget", "--scores", scores, "--total", 200, "--method", "lp", "--out", tmp_path / "lp")
    _ok("allocate", "budget", "--scores", scores, "--total", 200, "--out", tmp_path / "fast")
    lp, fast = _report(tmp_path / "lp"), _report(tmp_path / "fast")
    assert lp["method"] == "lp" and fast["method"] == "lagrange" and fast["lagrange_path"] == "hull"
    assert fast["objective"] <= lp["objective"] + 1e-9 <= fast["upper_bound"] + 2e-9


@pytest.mark.extra("allocation")
def test_synth_quota_then_every_method_meets_the_quotas_and_risk_rule(quota_files, tmp_path):
    scores = pd.read_csv(quota_files / "scores.csv")
    assert list(scores.columns) == ["user_id", "fund", "score", "tolerance"] and len(scores) == 400 * 5
    quotas = pd.read_csv(quota_files / "quotas.csv")
    assert list(quotas.columns) == ["fund", "quota", "risk"] and quotas["quota"].sum() == 400
    instance = make_quota_instance(400, 5, seed=1)
    exact = solve_quota(instance.etv, instance.quotas, instance.tolerance, instance.risk, method="exact")
    objectives = {}
    for method in ("prices", "ha", "manual", "exact"):
        out = tmp_path / method
        _ok("allocate", "quota", "--scores", quota_files / "scores.csv", "--quotas", quota_files / "quotas.csv",
            "--method", method, "--out", out)
        plan = pd.read_parquet(out / "plan.parquet")
        assert list(plan.columns) == ["user_id", "fund", "score", "tolerance", "risk"]
        assignment = pd.Index(instance.funds).get_indexer(plan["fund"])
        check_plan(assignment, instance.quotas, instance.tolerance, instance.risk)
        report = _report(out)
        assert report["objective"] == pytest.approx(plan["score"].sum())
        assert report["per_fund"]["assigned"] == instance.quotas.tolist()
        objectives[method] = report["objective"]
    assert objectives["exact"] == pytest.approx(exact.objective)
    assert objectives["prices"] == pytest.approx(exact.objective)
    assert max(objectives["ha"], objectives["manual"]) <= exact.objective + 1e-6


@pytest.mark.extra("allocation")
def test_quota_without_risk_limits_reads_a_wide_table(tmp_path):
    instance = make_quota_instance(60, 3, seed=0)
    wide = pd.DataFrame({"user_id": [f"u{i}" for i in range(60)],
                         **{f"etv_{f}": instance.etv[:, j] for j, f in enumerate(instance.funds)}})
    wide.to_parquet(tmp_path / "wide.parquet")
    pd.DataFrame({"fund": instance.funds, "quota": [20, 20, 20]}).to_csv(tmp_path / "q.csv", index=False)
    _ok("allocate", "quota", "--scores", tmp_path / "wide.parquet", "--columns", "etv_", "--quotas", tmp_path / "q.csv",
        "--method", "exact", "--out", tmp_path / "plan")
    plan = pd.read_parquet(tmp_path / "plan" / "plan.parquet")
    assert list(plan.columns) == ["user_id", "fund", "score"] and plan["fund"].value_counts().to_dict() == {
        "F1": 20, "F2": 20, "F3": 20}
    assert _report(tmp_path / "plan")["risk_rule"] is False


@pytest.fixture
def bad_inputs(tmp_path, budget_files, quota_files):
    wide = pd.read_parquet(budget_files / "scores.parquet")
    wide.rename(columns={"user_id": "user"}).to_parquet(tmp_path / "misnamed.parquet")
    long = pd.read_csv(quota_files / "scores.csv")
    long.drop(columns="tolerance").to_csv(tmp_path / "no_tolerance.csv", index=False)
    quotas = pd.read_csv(quota_files / "quotas.csv")
    pd.concat([quotas, pd.DataFrame({"fund": ["F9"], "quota": [0], "risk": [1]})]).to_csv(tmp_path / "q9.csv", index=False)
    too_many = quotas.assign(quota=quotas["quota"] + 1)
    too_many.to_csv(tmp_path / "q_sum.csv", index=False)
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["budget", "--scores", "{tmp}/misnamed.parquet", "--ratio", 3],
     "misnamed.parquet: column 'user_id' (required in the wide table) is missing from the table of 300 rows; "
     "did you mean 'user'?"),
    (["budget", "--scores", "{budget}/scores.parquet"], "give exactly one of --ratio B (eq. 16) or --total B"),
    (["budget", "--scores", "{budget}/scores.parquet", "--ratio", 3, "--total", 5], "give exactly one of"),
    (["budget", "--scores", "{budget}/scores.parquet", "--total", 1],
     "--total 1: budget 1 is infeasible: the cheapest options of the 300 requests already cost"),
    (["budget", "--scores", "{budget}/scores.parquet", "--ratio", 0.2],
     "--ratio 0.2 is below the lowest level 0.5: even the lowest level costs 0.5 per expected response, so the ratio "
     "must be at least 0.5"),
    (["budget", "--scores", "{budget}/scores.parquet", "--ratio", 3, "--method", "simplex"],
     "--method must be one of ['lagrange', 'lp', 'milp']"),
    (["budget", "--scores", "{tmp}/none.parquet", "--ratio", 3], "none.parquet: no such file"),
    (["budget", "--scores", "{budget}/scores.parquet", "--merchants", "{tmp}/q9.csv", "--ratio", 3],
     "q9.csv: column 'user_id' (required in the long table) is missing from the table of 6 rows"),
    (["quota", "--scores", "{quota}/scores.csv", "--quotas", "{tmp}/q9.csv"],
     "q9.csv: the quotas table (6 rows) has 1 funds that are not in the score table, e.g. 'F9'"),
    (["quota", "--scores", "{quota}/scores.csv", "--quotas", "{tmp}/q_sum.csv"], "quotas sum to 405 but etv has 400 users"),
    (["quota", "--scores", "{tmp}/no_tolerance.csv", "--quotas", "{quota}/quotas.csv"],
     "the risk rule (eq. 5) needs a 'tolerance' column"),
    (["quota", "--scores", "{quota}/scores.csv", "--quotas", "{quota}/quotas.csv", "--method", "greedy"],
     "--method must be one of ['prices', 'ha', 'manual', 'exact']"),
    (["synth", "quota", "--users", 0], "n_users must be a positive integer"),
    (["synth", "budget", "--levels", "1,x"], "--levels must be comma-separated numbers"),
    (["synth", "budget", "--format", "xlsx"], "--format must be 'parquet' or 'csv'"),
])
def test_errors_are_one_line_and_exit_2(bad_inputs, budget_files, quota_files, args, message):
    paths = {"tmp": bad_inputs, "budget": budget_files, "quota": quota_files}
    args = [str(a).format(**paths) for a in args]
    result = _invoke("allocate", *args, "--out", bad_inputs / "out")
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    assert not (bad_inputs / "out" / "plan.parquet").exists()


@pytest.fixture
def spoiled(tmp_path, budget_files, quota_files):
    """Write ``edit(table)`` of a budget (wide), long budget or quota (long) table as CSV; ``header`` replaces the
    written column names, ``text`` the whole file."""
    tables = {"budget": pd.read_parquet(budget_files / "scores.parquet"), "quota": pd.read_csv(quota_files / "scores.csv"),
              "quotas": pd.read_csv(quota_files / "quotas.csv")}
    wide = tables["budget"]
    tables["long"] = wide.melt(id_vars="user_id", var_name="level", value_name="score").assign(
        level=lambda f: f["level"].str.removeprefix("score_").astype(float))

    def write(kind, edit=None, header=None, text=None):
        path = tmp_path / f"{kind}_spoiled.csv"
        frame = edit(tables[kind].copy()) if edit else tables[kind]
        if text is not None:
            path.write_text(text)
        elif header is not None:
            path.write_text(",".join(header(list(frame.columns))) + "\n" + frame.to_csv(index=False, header=False))
        else:
            frame.to_csv(path, index=False)
        return path
    return write


@pytest.mark.parametrize("kind, spoil, message", [
    # (b) infinite values
    ("budget", dict(edit=spoil("score_2", 4, np.inf)), "budget_spoiled.csv: column 'score_2' has missing, non-numeric, "
     "infinite or negative values: 1 of 300 rows in the wide table, e.g. row 4 {user_id=4, score_2=inf}"),
    ("long", dict(edit=lambda f: f.assign(cost=f["score"] * f["level"]).pipe(spoil("cost", 9, np.inf))),
     "column 'cost' has missing, non-numeric, infinite or negative values: 1 of 3000 rows in the long table"),
    ("quota", dict(edit=spoil("tolerance", 0, -np.inf)), "column 'tolerance' has missing, non-numeric or infinite "
     "values: 1 of 2000 rows in the long table"),
    ("quotas", dict(edit=spoil("quota", 1, np.inf)), "column 'quota' has missing, non-numeric, infinite or negative "
     "values: 1 of 5 rows in the quotas table"),
    # (c) numbers with a few text values
    ("long", dict(edit=spoil("level", 3, "high")), "column 'level' has missing, non-numeric or infinite values: 1 of "
     "3000 rows in the long table, e.g. row 3 {user_id=3, level='high'}"),
    ("quota", dict(edit=spoil("score", 11, "abc")), "column 'score' has missing, non-numeric, infinite or negative "
     "values: 1 of 2000 rows in the long table"),
    # (d) a repeated column name
    ("budget", dict(header=lambda names: [*names[:-1], "score_1"]), "column names ['score_1'] appear more than once "
     "in the header of its 300 rows"),
    ("quotas", dict(header=lambda names: ["fund", "quota", "quota"]), "column names ['quota'] appear more than once"),
    # (f) empty
    ("budget", dict(edit=lambda f: f.head(0)), "budget_spoiled.csv: the table has no rows"),
    ("quota", dict(text=""), "quota_spoiled.csv: the file is empty"),
    # (g) text where a number is needed
    ("budget", dict(edit=lambda f: f.assign(score_1="likely")), "column 'score_1' has missing, non-numeric, infinite "
     "or negative values: 300 of 300 rows in the wide table"),
    ("quotas", dict(edit=lambda f: f.assign(risk="low")), "column 'risk' has missing, non-numeric or infinite values: "
     "5 of 5 rows in the quotas table"),
])
def test_bad_tables_are_one_line_errors(spoiled, budget_files, quota_files, tmp_path, kind, spoil, message):
    path = spoiled(kind, **spoil)
    if kind in ("budget", "long"):
        args = ["budget", "--scores", path, "--ratio", 3]
    else:
        args = ["quota", "--scores", path if kind == "quota" else quota_files / "scores.csv",
                "--quotas", path if kind == "quotas" else quota_files / "quotas.csv"]
    result = _invoke("allocate", *args, "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error:")]) == 1


@pytest.mark.parametrize("option, message", [
    (["--ratio", "inf"], "--ratio must be a finite number, got inf"),
    (["--total", "nan"], "--total must be a finite number, got nan"),
    (["--total", "-inf"], "--total must be a finite number, got -inf"),
])
def test_an_infinite_budget_names_its_option(budget_files, tmp_path, option, message):
    result = _invoke("allocate", "budget", "--scores", budget_files / "scores.parquet", *option, "--out", tmp_path)
    assert result.exit_code == 2 and message in result.output


@pytest.mark.extra("allocation")
def test_one_row_tables_are_a_problem_of_one_user(spoiled, quota_files, tmp_path):
    """(a) A score table of one user is valid: one request gets its best affordable level; one user fills the one
    fund with a quota of 1."""
    _ok("allocate", "budget", "--scores", spoiled("budget", edit=lambda f: f.head(1)), "--ratio", 3,
        "--out", tmp_path / "b")
    plan = pd.read_parquet(tmp_path / "b" / "plan.parquet")
    assert len(plan) == 1 and plan["cost"].sum() <= 3 * plan["score"].sum() + 1e-12
    quotas = pd.read_csv(quota_files / "quotas.csv").assign(quota=0)
    quotas.loc[quotas["risk"].idxmin(), "quota"] = 1
    quotas.to_csv(tmp_path / "q1.csv", index=False)
    one = pd.read_csv(quota_files / "scores.csv").query("user_id == 0")
    one.assign(tolerance=quotas["risk"].max()).to_csv(tmp_path / "one.csv", index=False)
    for method in ("prices", "ha", "manual", "exact"):
        _ok("allocate", "quota", "--scores", tmp_path / "one.csv", "--quotas", tmp_path / "q1.csv", "--method", method,
            "--out", tmp_path / method)
        chosen = pd.read_parquet(tmp_path / method / "plan.parquet")
        assert chosen["fund"].tolist() == quotas.loc[quotas["quota"] == 1, "fund"].tolist()


def test_help_and_the_allocation_package_do_not_import_torch_or_the_solvers():
    code = ("import sys; from promokit.cli import app; import promokit.allocation as a; "
            "heavy = [m for m in ('torch', 'scipy', 'promokit.allocation.budget', 'promokit.allocation.quota') "
            "if m in sys.modules]; assert not heavy, heavy; "
            "a.solve_budget, a.solve_quota, a.solve_budget_lp, a.read_budget_table; "
            "import promokit.experiments.allocation as e; e.make_quota_instance; "
            "assert 'torch' not in sys.modules, 'torch imported by the allocation domain'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_export_resolves():
    import promokit.allocation as allocation

    assert all(getattr(allocation, name) is not None for name in allocation.__all__)
    assert absolute_form is allocation.absolute_form


@pytest.mark.extra("allocation")
def test_the_key_column_is_told_or_found_and_kept_in_the_plan(budget_files, quota_files, tmp_path):
    scores = pd.read_parquet(budget_files / "scores.parquet")
    merchants = pd.read_parquet(budget_files / "merchants.parquet")
    _ok("allocate", "budget", "--scores", budget_files / "scores.parquet", "--merchants",
        budget_files / "merchants.parquet", "--ratio", 3, "--out", tmp_path / "user_id")
    expected = pd.read_parquet(tmp_path / "user_id" / "plan.parquet").rename(columns={"user_id": "customer_id"})
    scores.rename(columns={"user_id": "customer_id"}).to_parquet(tmp_path / "customers.parquet")
    merchants.rename(columns={"user_id": "customer_id"}).to_parquet(tmp_path / "merchants.parquet")
    for told in ([], ["--key", "customer_id"]):  # the only *_id column is the key, or told
        _ok("allocate", "budget", "--scores", tmp_path / "customers.parquet", "--merchants",
            tmp_path / "merchants.parquet", "--ratio", 3, "--out", tmp_path / "customer_id", *told)
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "customer_id" / "plan.parquet"), expected)

    quota = pd.read_csv(quota_files / "scores.csv").rename(columns={"user_id": "client"})
    quota.assign(campaign_id="c1", region_id="r1").to_csv(tmp_path / "etv.csv", index=False)
    result = _invoke("allocate", "quota", "--scores", tmp_path / "etv.csv", "--quotas", quota_files / "quotas.csv",
                     "--out", tmp_path / "q")
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "no 'user_id' column and 2 id columns ['campaign_id', 'region_id']" in said
    assert "--key" in said
    quota.to_csv(tmp_path / "etv.csv", index=False)
    _ok("allocate", "quota", "--scores", tmp_path / "etv.csv", "--quotas", quota_files / "quotas.csv",
        "--key", "client", "--out", tmp_path / "q")
    plan = pd.read_parquet(tmp_path / "q" / "plan.parquet")
    assert list(plan.columns[:2]) == ["client", "fund"] and sorted(plan.client) == sorted(quota.client.unique())
    quota[quota.client != quota.client.iloc[0]].to_csv(tmp_path / "short.csv", index=False)
    result = _invoke("allocate", "quota", "--scores", tmp_path / "short.csv", "--quotas", quota_files / "quotas.csv",
                     "--key", "user_id", "--out", tmp_path / "q2")
    assert result.exit_code == 2 and "column 'user_id' (required in the long table) is missing" in result.output


def test_the_key_column_of_parts_names_their_plans_and_the_repeated_users(budget_files, tmp_path):
    scores = pd.read_parquet(budget_files / "scores.parquet").rename(columns={"user_id": "customer_id"})
    (tmp_path / "parts").mkdir()
    scores.iloc[:150].to_parquet(tmp_path / "parts" / "part-0.parquet")
    scores.iloc[150:].to_parquet(tmp_path / "parts" / "part-1.parquet")
    _ok("allocate", "budget", "--scores", tmp_path / "parts", "--ratio", 3, "--out", tmp_path / "plan")
    plan = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "plan" / "plan").glob("*.parquet"))])
    assert plan.customer_id.tolist() == scores.customer_id.tolist()
    scores.iloc[140:].to_parquet(tmp_path / "parts" / "part-1.parquet")  # customers 140…149 in both parts
    result = _invoke("allocate", "budget", "--scores", tmp_path / "parts", "--ratio", 3, "--out", tmp_path / "plan")
    assert result.exit_code == 2 and "customer_id" in result.output

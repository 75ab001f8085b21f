"""plan_budget and plan_quota: the plans of ``promokit allocate budget | quota`` from Python, on DataFrames or paths,
with errors that name the arguments; and the deprecated ``--method ours``."""

import json
from contextlib import nullcontext

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.allocation import Allocation, plan_budget, plan_quota, score_frame
from promokit.cli import app
from promokit.data import DataError
from promokit.experiments.allocation.instances import make_budget_instance, make_quota_instance

runner = CliRunner()


def _cli(*args):
    result = runner.invoke(app, ["allocate", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


def _same_report(allocation: Allocation, folder):
    """The CLI's report.json holds the allocation's summary and table (up to the solver's seconds)."""
    written = json.loads((folder / "report.json").read_text())
    for name, value in allocation.summary.items():
        if name != "seconds":
            assert written[name] == (pytest.approx(value) if isinstance(value, float) else value), name
    for name, table in allocation.tables.items():
        pd.testing.assert_frame_equal(pd.DataFrame(written[name]), table.reset_index(drop=True), check_dtype=False,
                                      obj=name)


@pytest.fixture(scope="module")
def budget_frames():
    customers, merchants = make_budget_instance(120, seed=3), make_budget_instance(40, seed=4)
    return (score_frame(np.arange(120), customers.levels, {"score": customers.scores}, "level"),
            score_frame(1000 + np.arange(40), merchants.levels, {"score": merchants.scores}, "level", "long"))


@pytest.fixture(scope="module")
def quota_frames():
    instance = make_quota_instance(300, 4, seed=2)
    scores = score_frame([f"u{i}" for i in range(300)], instance.funds, {"score": instance.etv}, "fund",
                         per_user={"tolerance": instance.tolerance})
    return scores, pd.DataFrame({"fund": instance.funds, "quota": instance.quotas, "risk": instance.risk})


@pytest.mark.parametrize("bound", [dict(ratio=2.5), dict(budget=150.0)], ids=["ratio", "budget"])
def test_plan_budget_from_dataframes_is_the_cli_plan(budget_frames, tmp_path, bound):
    customers, merchants = budget_frames
    customers.to_parquet(tmp_path / "customers.parquet")
    merchants.to_csv(tmp_path / "merchants.csv", index=False)
    allocation = plan_budget(customers, merchants=merchants, merchant_paid_on="request", **bound)
    flag = ["--ratio", bound["ratio"]] if "ratio" in bound else ["--total", bound["budget"]]
    _cli("budget", "--scores", tmp_path / "customers.parquet", "--merchants", tmp_path / "merchants.csv", *flag,
         "--merchant-paid-on", "request", "--out", tmp_path / "cli")
    pd.testing.assert_frame_equal(allocation.plan, pd.read_parquet(tmp_path / "cli" / "plan.parquet"))
    _same_report(allocation, tmp_path / "cli")
    assert allocation.summary["customers"] == 120 and allocation.summary["merchants"] == 40
    assert allocation.solution.lam == allocation.summary["lam"] and allocation.title == "Budget plan"
    allocation.write(tmp_path / "py")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "py" / "plan.parquet"), allocation.plan)
    assert "| lam |" in (tmp_path / "py" / "report.md").read_text()


@pytest.mark.extra("allocation")
def test_plan_quota_from_dataframes_is_the_cli_plan(quota_frames, tmp_path):
    scores, quotas = quota_frames
    scores.to_csv(tmp_path / "scores.csv", index=False)
    quotas.to_csv(tmp_path / "quotas.csv", index=False)
    allocation = plan_quota(scores, quotas, seed=5)
    result = _cli("quota", "--scores", tmp_path / "scores.csv", "--quotas", tmp_path / "quotas.csv", "--seed", 5,
                  "--out", tmp_path / "cli")
    pd.testing.assert_frame_equal(allocation.plan, pd.read_parquet(tmp_path / "cli" / "plan.parquet"))
    _same_report(allocation, tmp_path / "cli")
    assert allocation.summary["method"] == "prices" and allocation.diagnostics["certified"]
    assert allocation.plan["fund"].value_counts().sort_index().tolist() == quotas["quota"].tolist()
    assert allocation.headline().split(" in ")[0] in result.output  # the line the CLI prints, but the seconds


def test_paths_in_parts_give_the_in_memory_plan_written_part_by_part(budget_frames, tmp_path):
    customers, _ = budget_frames
    (tmp_path / "parts").mkdir()
    for i, rows in enumerate((slice(0, 50), slice(50, 120))):
        customers.iloc[rows].to_parquet(tmp_path / "parts" / f"part-{i}.parquet")
    steps = []

    def progress(text):
        steps.append(text)
        return nullcontext()

    whole = plan_budget(customers, ratio=3.0)
    parts = plan_budget(tmp_path / "parts", ratio=3.0, out=tmp_path / "out", progress=progress)
    assert parts.plan is None and parts.plan_dir == tmp_path / "out" / "plan" and parts.summary["parts"] == 2
    plan = pd.concat([pd.read_parquet(path) for path in sorted(parts.plan_dir.glob("part-*.parquet"))],
                     ignore_index=True)
    pd.testing.assert_frame_equal(plan, whole.plan)
    assert parts.summary["lam"] == pytest.approx(whole.summary["lam"], rel=1e-12)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["parts"] == 2
    assert [text.split(" ")[0] for text in steps] == ["reading", "solving"]
    with pytest.raises(DataError, match=r"^`out_dir` .*: the plan of this table in parts is in "):
        parts.write(tmp_path / "elsewhere")


@pytest.fixture
def tables(budget_frames, quota_frames, tmp_path):
    (tmp_path / "parts").mkdir()
    budget_frames[0].to_parquet(tmp_path / "parts" / "part-0.parquet")
    return {"budget": budget_frames[0], "scores": quota_frames[0], "quotas": quota_frames[1],
            "parts": tmp_path / "parts",
            "keys": budget_frames[0].rename(columns={"user_id": "campaign_id"}).assign(region_id=1)}


@pytest.mark.parametrize("call, message", [
    (lambda t: plan_budget(t["budget"]), "give exactly one of `ratio` B (eq. 16) or `budget` B (absolute budget)"),
    (lambda t: plan_budget(t["budget"], ratio=2, budget=10), "give exactly one of `ratio` B"),
    (lambda t: plan_budget(t["budget"], ratio=float("inf")), "`ratio` must be a finite number, got inf"),
    (lambda t: plan_budget(t["budget"], budget="lots"), "`budget` must be a finite number, got 'lots'"),
    (lambda t: plan_budget(t["budget"], budget=1e-6), "`budget` 1e-06: budget 1e-06 is infeasible"),
    (lambda t: plan_budget(t["budget"], ratio=0.2), "`ratio` 0.2 is below the lowest level 0.5: "),
    (lambda t: plan_budget(t["budget"], ratio=3, method="simplex"),
     "`method` must be one of ['lagrange', 'lp', 'milp'], got 'simplex'"),
    (lambda t: plan_budget(t["budget"], ratio=3, merchant_paid_on="click"),
     "`merchant_paid_on` must be one of ['response', 'request'], got 'click'"),
    (lambda t: plan_budget(t["budget"].to_numpy(), ratio=3), "`scores` must be a DataFrame or the path of a table"),
    (lambda t: plan_budget(t["keys"], ratio=3), "2 id columns ['campaign_id', 'region_id'] to take as the users' key; "
                                                "name it with `key`"),
    (lambda t: plan_budget(t["parts"], ratio=3), "`out` is needed for a table in parts"),
    (lambda t: plan_budget(t["parts"], ratio=3, method="lp", out=t["parts"].parent / "out"),
     "`method` lp needs the whole table in one file; a directory or glob of parts is solved with `method` lagrange"),
    (lambda t: plan_budget(t["parts"], ratio=3, merchants=t["budget"], out=t["parts"].parent / "out"),
     "`merchants`: a table in parts is solved with its other tables given as files or parts"),
    (lambda t: plan_quota(t["scores"], t["quotas"], method="ours"),
     "`method` must be one of ['prices', 'ha', 'manual', 'exact'], got 'ours'"),
    (lambda t: plan_quota(t["scores"], {"F1": 3}), "`quotas` must be a DataFrame or the path of a table"),
    (lambda t: plan_quota(t["scores"].drop(columns="tolerance"), t["quotas"]),
     "the risk rule (eq. 5) needs a 'tolerance' column in the `scores` table and a 'risk' column in the `quotas` "
     "table; only the risk is there"),
])
def test_library_errors_name_the_argument_not_an_option(tables, call, message):
    with pytest.raises(DataError) as raised:
        call(tables)
    assert message in str(raised.value) and "--" not in str(raised.value)


def test_the_cli_names_its_options_where_the_library_names_arguments(budget_frames, tmp_path):
    budget_frames[0].to_parquet(tmp_path / "scores.parquet")
    result = runner.invoke(app, ["allocate", "budget", "--scores", str(tmp_path / "scores.parquet"), "--total", "1e-6",
                                 "--merchant-paid-on", "click", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "error: --merchant-paid-on must be one of ['response', 'request'], got 'click'" in result.output


@pytest.mark.extra("allocation")
def test_method_ours_is_a_deprecated_name_of_prices(quota_frames, tmp_path):
    scores, quotas = quota_frames
    scores.to_parquet(tmp_path / "scores.parquet")
    quotas.to_csv(tmp_path / "quotas.csv", index=False)
    for method in ("ours", "prices"):
        result = _cli("quota", "--scores", tmp_path / "scores.parquet", "--quotas", tmp_path / "quotas.csv",
                      "--method", method, "--out", tmp_path / method)
        warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
        assert warned == (["warning: --method ours is deprecated: the same method is now --method prices"]
                          if method == "ours" else [])
        assert json.loads((tmp_path / method / "report.json").read_text())["method"] == "prices"
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ours" / "plan.parquet"),
                                  pd.read_parquet(tmp_path / "prices" / "plan.parquet"))

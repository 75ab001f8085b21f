"""``campaign demo`` end to end on a tiny world: world → models → plan → campaign → service → outcomes → report."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from promokit.cli.campaign import demo

pytestmark = pytest.mark.extra("serve")

runner = CliRunner()
CUSTOMERS, WAVES = 600, 5
ARMS = {("gnn-hazard", "served"), ("uniform level", "none"),
        *((m, b) for m in ("gnn-hazard", "dnn-h", "oracle", "random") for b in ("planned", "paced"))}


def _invoke(*args):
    app = typer.Typer()
    app.command()(demo)
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign") / "demo"
    result = _invoke("--out", out, "--customers", CUSTOMERS, "--merchants", 80, "--epochs", 2, "--waves", WAVES,
                     "--seed", 3)
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "report.json").read_text()), result.output


def test_writes_every_artefact(run):
    out, _, output = run
    for name in ("report.md", "report.html", "report.json", "status.html", "budget_burn.png", "pacing.png",
                 "served_levels.png", "arms.png", "plan/plan.parquet", "plan/report.json", "campaign/campaign.json",
                 "world/truth_customers.parquet", "models/gnn-hazard/config.json", "models/dnn-h/config.json"):
        assert (out / name).is_file(), name
    for model in ("gnn-hazard", "dnn-h"):
        scores = pd.read_parquet(out / "scores" / model / "customers.parquet")
        assert len(scores) == CUSTOMERS and scores.columns[0] == "user_id"
        assert list(scores.columns[1:]) == [f"score_{v}" for v in (20, 40, 60, 80, 100, 120, 150, 200)]
    assert "<table" in (out / "report.html").read_text() and "promokit decision service" in (out / "status.html").read_text()
    assert "allocations at B = 90" in output


def test_budget_is_safe_and_every_customer_decided_once(run):
    _, report, _ = run
    safety, retries = report["safety"], report["retries"]
    setup = report["setup"]
    assert setup["expected_spend"] > (1 - setup["explore"]) * report["plan"]["expected_spend"]  # + the exploration's
    assert safety["cap"] == pytest.approx(setup["cap_factor"] * setup["expected_spend"], abs=0.01)
    assert safety["cap"] == round(safety["cap"], 2)  # whole cents
    assert safety["within_cap"] and safety["peak_at_risk"] <= safety["cap"] and safety["at_risk"] <= safety["cap"]
    assert safety["audit_matches"]
    for key, value in safety["totals"].items():
        assert isinstance(value, int) and safety["audit"][key] == value, key  # counts and cents, exactly
    assert safety["decided"] == safety["customers"] == safety["audit"]["distinct_ids"] == CUSTOMERS
    assert safety["totals"]["decisions"] == CUSTOMERS and safety["decided_once"]
    assert retries["sent"] == WAVES * round(0.02 * CUSTOMERS / WAVES) > 0
    assert retries["answered_once"] == retries["same_answer"] == retries["sent"] == safety["ledger_replays"]
    assert safety["failed_decisions"] == safety["failed_outcomes"] == 0
    assert report["waves"][-1]["decisions"] == CUSTOMERS and len(report["waves"]) == 2 * WAVES


def test_arms_are_scored_by_the_truth(run):
    out, report, _ = run
    arms = pd.DataFrame(report["arms"]).set_index(["model", "budget"])
    B = report["setup"]["B"]
    assert B == 90 and set(arms.index) == ARMS
    # the oracle's plan is optimal up to one request's contribution among allocations that keep B in truth
    ceiling = arms.loc[("oracle", "planned"), "redemptions"]
    within = arms[arms["spend_per_redemption"] <= B * (1 + 1e-9)]
    assert len(within) >= 4 and (within["redemptions"] <= ceiling + 1).all()
    paced = arms.xs("paced", level="budget")["spend_per_redemption"]
    assert ((paced <= B * (1 + 1e-9)) & (paced > 0.95 * B)).all()

    # gnn-hazard "planned" is the plan `allocate budget` wrote, scored by the true curves
    plan = pd.read_parquet(out / "plan" / "plan.parquet")
    truth = pd.read_parquet(out / "world" / "truth_customers.parquet").set_index("customer_id")
    expected = truth.to_numpy()[truth.index.get_indexer(plan["user_id"]),
                                np.searchsorted(report["setup"]["levels"], plan["level"])]
    assert expected.sum() == pytest.approx(arms.loc[("gnn-hazard", "planned"), "redemptions"], rel=1e-9)

    # the served arm's drawn redemptions are the ledger's responses and what it paid
    served = arms.loc[("gnn-hazard", "served")]
    assert served["drawn_redemptions"] == report["safety"]["totals"]["responses"]
    by_level = pd.DataFrame(report["served_levels"])
    assert by_level["decisions"].sum() == CUSTOMERS - report["safety"]["no_coupon"]
    drawn = (by_level["drawn_rate"].fillna(0) * by_level["decisions"]).round().astype(int)
    assert drawn.sum() == served["drawn_redemptions"]
    assert (drawn * by_level["level"]).sum() == pytest.approx(report["safety"]["paid"])


def test_bad_settings_are_one_line_errors(tmp_path):
    result = _invoke("--out", tmp_path / "demo", "--waves", 0)
    assert result.exit_code == 2 and "waves" in result.output and "Traceback" not in result.output


def test_the_report_reads_like_a_report(run):
    """It opens with what happened; numbers are for people (no four-decimal counts, no True/False, λ not lam);
    each figure sits beside the numbers it explains."""
    out, _, _ = run
    markdown = (out / "report.md").read_text()
    sections = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert sections[0] == "## What happened" and sections[1] == "## Setup"
    headline = markdown.split("## Setup")[0]
    assert "of the oracle's expected redemptions" in headline and "never above it" in headline
    assert " True " not in markdown and "| True |" not in markdown and "lam" not in markdown.replace("λ", "")
    assert "✓" in markdown and "λ" in markdown
    allocations = markdown.split("## Allocations")[1].split("## ")[0]
    assert "![arms](arms.png)" in allocations
    rows = [line.split("|")[1:-1] for line in allocations.splitlines() if line.startswith("| ")][2:]
    for cells in rows:  # model, budget, expected and drawn redemptions, spend per redemption, share, λ
        assert re.fullmatch(r" [\d,]+ ", cells[2]) and re.fullmatch(r" [\d,]+ ", cells[3]), cells
        assert re.fullmatch(r" [\d,]+\.\d\d ", cells[4]) and re.fullmatch(r" [\d.]+% ", cells[5]), cells
    assert "![budget_burn](budget_burn.png)" in markdown.split("## Budget safety")[1].split("## ")[0]
    html = (out / "report.html").read_text()
    assert html.index("What happened") < html.index("Setup") and "<li>" in html


def test_the_plans_are_judged_on_the_services_exploration_log(run):
    """The exploration bucket's decisions, exported from the ledger with their propensities, judge the paper's plan
    against the baseline's; the report shows the estimates beside the true values of both plans."""
    out, report, _ = run
    judged = report["judged"]
    log = pd.read_parquet(out / "log.parquet")
    assert len(log) == judged["customers"] > 0 and (log["bucket"] == "explore").all()
    assert ((log["propensity"] > 0) & (log["propensity"] <= 1)).all()
    assert 0.03 < judged["customers"] / CUSTOMERS < 0.2  # the 10 % bucket, chosen by a hash of the id
    for plan in ("gnn-hazard", "dnn-h"):
        estimate = judged["estimates"][plan]["responses"]["DR"]
        assert estimate["low"] <= estimate["estimate"] <= estimate["high"]
        assert 0 < judged["truth"][plan]["responses"] < 1
    assert (out / "ope" / "report.md").is_file()
    assert "off-policy evaluation puts the paper's plan against the baseline's" in (out / "report.md").read_text()

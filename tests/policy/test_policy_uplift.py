"""``policy uplift``: each action's uplift and Qini curves against a control on a randomized log, from any score
table in the incentive or value layout, and its one-line errors."""

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data import DataError
from promokit.metrics.uplift import UpliftCurves
from promokit.policy.log import read_log
from promokit.policy.uplift import uplift_by_action

runner = CliRunner()
LEVELS = (10.0, 20.0, 30.0)


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _experiment(n=600, seed=0):
    """An incentive log with random levels and the true response probabilities as a wide score table."""
    rng = np.random.default_rng(seed)
    sensitivity = rng.uniform(0, 1, n)
    scores = 0.1 + 0.02 * np.outer(sensitivity, LEVELS)
    level = rng.integers(0, 3, n)
    ids = [f"c{i}" for i in range(n)]
    log = pd.DataFrame({"customer_id": ids, "level": np.array(LEVELS)[level],
                        "redeemed": (rng.random(n) < scores[np.arange(n), level]).astype(int)})
    table = pd.DataFrame({"user_id": ids, **{f"score_{v:g}": scores[:, j] for j, v in enumerate(LEVELS)}})
    return log, table


def test_each_level_is_judged_on_its_rows_and_the_controls():
    log, table = _experiment()
    result = uplift_by_action(read_log(log, design="uniform"), table.iloc[:, 1:].to_numpy(), np.array(LEVELS))
    assert result.control == "10" and result.outcome == "redeemed" and list(result.curves) == ["20", "30"]
    pair = log.level.isin([10, 30]).to_numpy()
    expected = UpliftCurves.of((table.score_30 - table.score_10)[pair], log.level[pair] == 30, log.redeemed[pair])
    row = result.table.set_index("action").loc["30"]
    assert (row.treated, row.control) == (expected.treated, expected.control)
    assert row.auuc == expected.auuc and row.qini_coefficient == expected.qini_coefficient
    assert row.auuc > 0.1  # the true probabilities rank the uplift


def test_the_command_writes_the_report_for_incentive_and_value_logs(tmp_path):
    log, table = _experiment()
    log.to_csv(tmp_path / "log.csv", index=False)
    table.to_csv(tmp_path / "scores.csv", index=False)
    result = _invoke("policy", "uplift", "--log", tmp_path / "log.csv", "--scores", tmp_path / "scores.csv",
                     "--out", tmp_path / "out", "--control", 20)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["control"] == "20" and [r["action"] for r in report["actions"]] == ["10", "30"]
    assert (tmp_path / "out" / "uplift_curves.png").exists()

    deliveries = log.rename(columns={"customer_id": "user_id", "redeemed": "convert"})
    deliveries = deliveries.assign(fund=deliveries.level.map({10: "F1", 20: "F2", 30: "F3"}),
                                   amount=deliveries.convert * 50.0).drop(columns="level")
    deliveries.to_csv(tmp_path / "deliveries.csv", index=False)
    table.set_axis(["user_id", "score_F1", "score_F2", "score_F3"], axis=1).to_csv(tmp_path / "etv.csv", index=False)
    result = _invoke("policy", "uplift", "--log", tmp_path / "deliveries.csv", "--scores", tmp_path / "etv.csv",
                     "--out", tmp_path / "value", "--control", "F1", "--outcome", "amount")
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "value" / "report.json").read_text())["actions"]
    assert [r["auuc"] for r in rows] == [None, None] and all(r["qini_area"] > 0 for r in rows)


@pytest.mark.parametrize("change_log, change_scores, options, message", [
    (lambda f: f.assign(customer_id=f.customer_id.where(f.index > 0, "x")), None, (),
     "1 of the log's 600 subjects have no scores"),
    (None, None, ("--control", 15), "the log never took that action"),
    (None, None, ("--control", "low"), "--control must be a level"),
    (lambda f: f.assign(redeemed=0), None, (), "is 0 on all 600 rows"),
    (None, lambda t: t.drop(columns="score_30"), (), "no score column for the logged action(s) ['30']"),
    (lambda f: f[f.level == 10], None, (), "every row took the action 10"),
    (None, None, ("--outcome", "amount"), "--outcome is one of ['redeemed', 'spend']"),
    (lambda f: f.iloc[:1], None, (), "is 0 on all 1 rows"),
    (None, lambda t: t.assign(score_20=t.score_20.astype(object).where(t.index > 0, "hi")), (), "non-numeric"),
    (lambda f: pd.concat([f, f.iloc[:1]]), None, (), "repeated customer_id"),
    (lambda f: f.rename(columns={"customer_id": "user_id"}), None, (), "exactly one of 'customer_id' and"),
])
def test_bad_inputs_are_one_line_errors(tmp_path, change_log, change_scores, options, message):
    log, table = _experiment()
    (change_log or (lambda f: f))(log).to_csv(tmp_path / "log.csv", index=False)
    (change_scores or (lambda t: t))(table).to_csv(tmp_path / "scores.csv", index=False)
    result = _invoke("policy", "uplift", "--log", tmp_path / "log.csv", "--scores", tmp_path / "scores.csv",
                     "--out", tmp_path / "out", *options)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_a_value_log_names_its_control():
    log = pd.DataFrame({"user_id": ["a", "b"], "fund": ["F1", "F2"], "convert": [0, 1], "amount": [0.0, 5.0]})
    with pytest.raises(DataError, match="name the control fund with `control`"):
        uplift_by_action(read_log(log, design="uniform"), np.zeros((2, 2)), np.array(["F1", "F2"]))

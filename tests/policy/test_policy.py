"""Off-policy evaluation (``promokit.policy``): the estimators against a hand-computed log, the paired bootstrap,
logs and their propensities, plans, and ``policy evaluate`` end to end with its errors."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import promokit as pk
from promokit.cli import app
from promokit.data import DataError
from promokit.policy.estimators import Terms, bootstrap_sums, effective_sample_size, estimate
from promokit.policy.judging import judge
from promokit.policy.log import read_log
from promokit.policy.plans import Plan, read_plan, reference_plan

runner = CliRunner()

# four subjects, two actions: a hand-computed case
ACTION = np.array([0, 1, 1, 0])
PROPENSITY = np.array([0.5, 0.5, 0.25, 0.75])
OUTCOME = np.array([1.0, 0.0, 1.0, 1.0])
PLAN = np.array([[0, 1], [0, 1], [1, 0], [1, 0]], dtype=float)
PREDICTED = np.array([[0.6, 0.2], [0.3, 0.5], [0.1, 0.9], [0.7, 0.4]])


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_estimators_on_a_hand_computed_log():
    """w = (0, 2, 0, 4/3); IPS = (4/3)/4; SNIPS = (4/3)/(10/3); DM = (0.2 + 0.5 + 0.1 + 0.7)/4; the residuals
    w·(y − q̂) sum to 2·(0 − 0.5) + 4/3·(1 − 0.7) = −0.6, so DR = DM − 0.15 and SNDR = DM − 0.6/(10/3)."""
    terms = Terms.of(PLAN, ACTION, PROPENSITY, OUTCOME, PREDICTED)
    expected = {"IPS": 1 / 3, "SNIPS": 0.4, "DM": 0.375, "DR": 0.225, "SNDR": 0.195}
    for name, value in expected.items():
        assert estimate(terms, name) == pytest.approx(value, abs=1e-15), name
    assert effective_sample_size(terms.w) == pytest.approx(100 / 52)
    clipped = Terms.of(PLAN, ACTION, PROPENSITY, OUTCOME, clip=1.5)
    assert clipped.w.tolist() == [0.0, 1.5, 0.0, pytest.approx(4 / 3)]
    assert Terms.of(PLAN, ACTION, PROPENSITY, OUTCOME).estimators == ("IPS", "SNIPS")


def test_the_bootstrap_resamples_subjects_with_all_their_rows():
    matrix = np.arange(12, dtype=float).reshape(6, 2)
    once = bootstrap_sums(matrix, 50, seed=3)
    assert np.array_equal(once, bootstrap_sums(matrix, 50, seed=3))  # seeded
    assert (once[:, 0] % 2 == 0).all()  # sums of even numbers only: whole rows are drawn
    # two subjects of three rows each: every replicate draws 2 subjects, so 6 rows in all
    counts = bootstrap_sums(np.ones((6, 1)), 200, seed=0, subjects=np.array([0, 0, 0, 1, 1, 1]))
    assert (counts == 6).all()


def _log(frame, **options):
    return read_log(pd.DataFrame(frame), "log", **options)


def _incentive(n=40, seed=0):
    rng = np.random.default_rng(seed)
    level = rng.choice([1.0, 2.0], n)
    return {"customer_id": [f"c{i}" for i in range(n)], "level": level, "redeemed": rng.integers(0, 2, n)}


def test_a_plan_equal_to_its_reference_differs_by_exactly_nothing():
    log = _log(_incentive(), design="uniform")
    uniform = reference_plan("uniform", log)
    same = Plan("same", uniform.actions, uniform.probabilities.copy(), uniform.subjects)
    result = judge(log, [same], uniform, bootstrap=100).plans[0]
    for outcome in ("responses", "spend"):
        for estimate_ in result.differences[outcome].values():
            assert (estimate_.value, estimate_.low, estimate_.high) == (0.0, 0.0, 0.0)


def test_the_logging_reference_is_the_observed_mean():
    data = _incentive()
    log = _log(data, design="uniform")
    result = judge(log, [], reference_plan("logging", log), bootstrap=20).reference
    assert result.means["responses"]["IPS"].value == pytest.approx(np.mean(data["redeemed"]))
    assert result.means["spend"]["DR"].value == pytest.approx(np.mean(data["redeemed"] * data["level"]))


def test_designs_give_the_logging_policy_of_every_action():
    frame = {"customer_id": ["a", "b", "c", "d", "e"], "level": [1, 2, 1, 3, 3], "redeemed": [0, 1, 0, 1, 1],
             "bucket": ["x", "x", "x", "y", "y"]}
    uniform = _log(frame, design="uniform")
    assert uniform.propensity.tolist() == [1 / 3] * 5 and uniform.logging.shape == (5, 3)
    bucket = _log(frame, design="bucket:bucket")  # bucket x randomized over levels 1 and 2, bucket y gave 3 only
    assert bucket.propensity.tolist() == [0.5, 0.5, 0.5, 1.0, 1.0]
    assert bucket.logging[3].tolist() == [0.0, 0.0, 1.0]


def test_a_propensity_column_is_read_and_checked_against_the_design():
    frame = {**_incentive(8), "propensity": [0.5] * 8}
    assert _log(frame).propensity.tolist() == [0.5] * 8  # the 'propensity' column by default, with a note
    assert _log(frame, design="uniform").propensity.tolist() == [0.5] * 8
    frame["propensity"][3] = 0.4
    with pytest.raises(DataError, match=r"column 'propensity' disagrees with uniform in 1 of 8 rows, e.g. row 3: "
                                        r"0.4 where uniform gives 0.5"):
        _log(frame, design="uniform")


@pytest.mark.parametrize("edit, message", [
    (lambda f: f.update(propensity=[0.0] + [0.5] * 7), r"must hold propensities in \(0, 1\] but has 1 other"),
    (lambda f: f.update(propensity=[1.5] + [0.5] * 7), r"must hold propensities in \(0, 1\]"),
    (lambda f: f.update(propensity=["x"] + [0.5] * 7), r"must hold finite numbers"),
    (lambda f: f.update(customer_id=["c0"] * 8, propensity=[0.5] * 8), r"8 rows|7 repeated customer_id values"),
    (lambda f: f.update(level=["high"] + [1.0] * 7, propensity=[0.5] * 8), r"column 'level' must hold finite"),
    (lambda f: f.update(redeemed=[2] + [0] * 7, propensity=[0.5] * 8), r"column 'redeemed' must be 0/1"),
    (lambda f: f.update(level=[np.inf] + [1.0] * 7, propensity=[0.5] * 8), r"column 'level' must hold finite"),
])
def test_bad_logs_are_one_line_errors(edit, message):
    frame = _incentive(8)
    edit(frame)
    with pytest.raises(DataError, match=message):
        _log(frame, propensity="propensity" if "propensity" in frame else None)


def test_a_log_without_a_propensity_or_a_contract_is_refused():
    with pytest.raises(DataError, match="no logging propensity: give `propensity` COL"):
        _log(_incentive(8))
    with pytest.raises(DataError, match="needs 'level' .* or 'fund'"):
        _log({"customer_id": ["a"], "redeemed": [1]})
    with pytest.raises(DataError, match="exactly one of 'customer_id' and 'merchant_id'"):
        _log({"customer_id": ["a"], "merchant_id": ["m"], "level": [1], "redeemed": [1], "propensity": [1.0]})


def test_a_value_log_holds_several_deliveries_of_a_user():
    log = _log({"user_id": ["u1", "u1", "u2"], "fund": ["F1", "F2", "F1"], "convert": [1, 0, 0],
                "amount": [10.0, 0.0, 0.0]}, design="uniform")
    assert log.subjects.tolist() == [0, 0, 1] and log.propensity.tolist() == [0.5] * 3
    assert set(log.outcomes) == {"conversions", "amount"}


def test_an_estimated_logging_policy_follows_the_features():
    rng = np.random.default_rng(0)
    x = rng.normal(size=4000)
    p_high = 1 / (1 + np.exp(-1.5 * x))
    level = np.where(rng.random(4000) < p_high, 2.0, 1.0)
    log = _log({"customer_id": np.arange(4000), "level": level, "redeemed": rng.integers(0, 2, 4000), "x": x},
               estimate_propensity=["x"])
    assert np.abs(log.logging[:, 1] - p_high).max() < 0.05
    with pytest.raises(DataError, match="without `propensity` or `design`"):
        _log({"customer_id": [1], "level": [1.0], "redeemed": [1], "x": [0.0]}, estimate_propensity=["x"],
             design="uniform")


def _plan_file(path, frame):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(frame).to_parquet(path, index=False)
    return path


def test_plans_deterministic_stochastic_and_allocate_folders(tmp_path):
    log = _log({"customer_id": ["a", "b"], "level": [1.0, 2.0], "redeemed": [1, 0]}, design="uniform")
    folder = tmp_path / "budget"
    _plan_file(folder / "plan.parquet", {"population": ["customer", "customer", "merchant"],
                                         "user_id": ["b", "a", "a"], "level": [2.0, 1.0, 2.0]})
    plan, decided = read_plan(folder, log)
    assert plan.name == "budget" and decided.all() and plan.probabilities.tolist() == [[1, 0], [0, 1]]
    stochastic = _plan_file(tmp_path / "s.parquet", {"user_id": ["a", "a", "b"], "level": [1.0, 2.0, 2.0],
                                                     "probability": [0.25, 0.75, 1.0]})
    assert read_plan(stochastic, log)[0].probabilities.tolist() == [[0.25, 0.75], [0, 1]]


@pytest.mark.parametrize("frame, message", [
    ({"user_id": ["a", "a"], "level": [1.0, 2.0]}, "more than one row"),
    ({"user_id": ["a", "a"], "level": [1.0, 2.0], "probability": [0.5, 0.6]},
     r"do not sum to 1 \(within 1e-06\), e.g. subject 'a': 1.1; renormalise each subject's probabilities"),
    ({"user_id": ["a"], "level": [1.0], "probability": [-0.1]}, r"probabilities in \[0, 1\]"),
    ({"user_id": ["a"], "fund": ["F1"]}, "needs the columns 'user_id' and 'level'"),
    ({"user_id": ["a", "b"], "level": ["x", "1"]}, "column 'level' has 1 missing or unreadable actions in 2 rows, e.g. "
                                                  "row 0"),
    ({"user_id": ["a", "b"], "level": [None, 1.0]}, "column 'level' has 1 missing or unreadable actions"),
])
def test_bad_plans_are_one_line_errors(tmp_path, frame, message):
    log = _log({"customer_id": ["a"], "level": [1.0], "redeemed": [1]}, design="uniform")
    with pytest.raises(DataError, match=message):
        read_plan(_plan_file(tmp_path / "p.parquet", frame), log)


# ------------------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A randomized incentive log of 3,000 customers over 4 levels, the true response curves, a model's scores
    (the truth seen through noise) and two plans: the model's best level under a spend per response, and level 1."""
    root = tmp_path_factory.mktemp("ope")
    rng = np.random.default_rng(7)
    n, levels = 3000, np.array([1.0, 2.0, 3.0, 4.0])
    x = rng.normal(size=n)
    truth = 1 / (1 + np.exp(-(-1.5 + 0.6 * x[:, None] + 0.4 * np.arange(4)[None, :] * (x[:, None] > 0))))
    level = rng.integers(0, 4, n)
    ids = [f"c{i}" for i in range(n)]
    pd.DataFrame({"customer_id": ids, "level": levels[level],
                  "redeemed": (rng.random(n) < truth[np.arange(n), level]).astype(int)}).to_parquet(root / "log.parquet")
    noisy = np.clip(truth + rng.normal(scale=0.05, size=truth.shape), 0.001, 0.999)
    pd.DataFrame({"user_id": ids, **{f"score_{l:g}": noisy[:, j] for j, l in enumerate(levels)}}).to_parquet(
        root / "scores.parquet")
    best = np.argmax(noisy - 0.05 * levels[None, :], axis=1)
    _plan_file(root / "model" / "plan.parquet", {"user_id": ids, "level": levels[best]})
    _plan_file(root / "one" / "plan.parquet", {"user_id": ids, "level": np.ones(n)})
    rows = np.arange(n)
    return root, {"model": truth[rows, best].mean(), "one": truth[:, 0].mean()}


def test_policy_evaluate_reports_every_plan_with_intervals_that_hold_the_truth(campaign):
    root, true_means = campaign
    result = _invoke("policy", "evaluate", "--log", root / "log.parquet", "--plan", root / "model", "--plan",
                     root / "one", "--scores", root / "scores.parquet", "--design", "uniform", "--out", root / "out",
                     "--bootstrap", 300)
    assert result.exit_code == 0, result.output
    assert "model against logging:" in " ".join(result.output.split())
    report = json.loads((root / "out" / "report.json").read_text())
    for plan in report["plans"]:
        truth = true_means[plan["name"]]
        for estimator in ("IPS", "SNIPS", "DR", "SNDR"):
            interval = plan["means"]["responses"][estimator]
            assert interval["low"] <= truth <= interval["high"], (plan["name"], estimator, interval, truth)
        assert plan["diagnostics"]["supported_share"] == 1.0
        assert plan["totals"]["responses"]["DR"]["estimate"] == pytest.approx(
            3000 * plan["means"]["responses"]["DR"]["estimate"])
    assert (root / "out" / "estimates.png").stat().st_size > 0
    markdown = (root / "out" / "report.md").read_text()
    assert "## Headline" in markdown and "spend per response" in markdown


def test_a_plan_that_leaves_log_subjects_undecided(campaign, tmp_path):
    root, _ = campaign
    plan = pd.read_parquet(root / "one" / "plan.parquet").iloc[10:]
    _plan_file(tmp_path / "part" / "plan.parquet", plan)
    args = ["policy", "evaluate", "--log", root / "log.parquet", "--plan", tmp_path / "part", "--design", "uniform",
            "--out", tmp_path / "out", "--bootstrap", 20]
    result = _invoke(*args)
    assert result.exit_code == 2
    assert re.search(r"10 of the log's 3,000 subjects have no decision in this plan, e.g. customer_id 'c0'",
                     " ".join(result.output.split())), result.output
    result = _invoke(*args, "--missing", "drop")
    assert result.exit_code == 0, result.output
    assert "2,990" in json.loads((tmp_path / "out" / "report.json").read_text())["notes"][0]


def test_thin_support_and_unlogged_actions_are_stated(campaign, tmp_path):
    root, _ = campaign
    log = pd.read_parquet(root / "log.parquet")
    log = log[log.level != 4.0]  # level 4 never logged
    log.to_parquet(tmp_path / "log.parquet")
    _plan_file(tmp_path / "four" / "plan.parquet", {"user_id": log.customer_id, "level": 4.0})
    result = _invoke("policy", "evaluate", "--log", tmp_path / "log.parquet", "--plan", tmp_path / "four",
                     "--scores", root / "scores.parquet", "--design", "uniform", "--out", tmp_path / "out",
                     "--bootstrap", 20)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: four: 100.0% of its choices are not among the actions the logging policy gave" in text
    assert "effective sample size 0.0" in text


@pytest.mark.parametrize("extra, message", [
    (["--reference", "constant:9"], "the log holds no action '9'"),
    (["--reference", "best"], "best: no such file"),
    (["--clip", "0"], "--clip must be a weight above 0"),
    (["--bootstrap", "1"], "--bootstrap must be at least 2"),
    (["--missing", "maybe"], "--missing must be error or drop"),
    (["--design", "stratified"], "--design must be one of"),
])
def test_bad_options_are_one_line_errors(campaign, tmp_path, extra, message):
    root, _ = campaign
    result = _invoke("policy", "evaluate", "--log", root / "log.parquet", "--plan", root / "one", "--out",
                     tmp_path / "out", *(["--design", "uniform"] if "--design" not in extra else []), *extra)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_scores_must_hold_every_subject_and_action(campaign, tmp_path):
    root, _ = campaign
    scores = pd.read_parquet(root / "scores.parquet")
    scores.iloc[5:].to_parquet(tmp_path / "short.parquet")
    scores.drop(columns="score_4").to_parquet(tmp_path / "narrow.parquet")
    for table, message in (("short", "5 of the log's 3,000 subjects have no scores, e.g. customer_id 'c0'"),
                           ("narrow", "no score column for the logged action(s) ['4']")):
        result = _invoke("policy", "evaluate", "--log", root / "log.parquet", "--plan", root / "one", "--scores",
                         tmp_path / f"{table}.parquet", "--design", "uniform", "--out", tmp_path / "out")
        assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output


def test_a_plan_judged_on_its_models_training_subjects_is_warned_about(campaign, tmp_path):
    from promokit.data.ids import id_hashes

    root, _ = campaign
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    args = ["policy", "evaluate", "--log", root / "log.parquet", "--plan", root / "one", "--design", "uniform",
            "--model", model, "--out", tmp_path / "out", "--bootstrap", 20]
    old = _invoke(*args)
    assert old.exit_code == 0 and "does not record the subjects it was trained on" in \
        (tmp_path / "out" / "report.md").read_text()
    np.save(model / "training_ids.npy", id_hashes([f"c{i}" for i in range(750)]))
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    notes = json.loads((tmp_path / "out" / "report.json").read_text())["notes"]
    assert any(note.startswith("25.0% of the log's subjects are ones") for note in notes), notes


def test_a_plan_against_another_plan(campaign, tmp_path):
    root, true_means = campaign
    result = _invoke("policy", "evaluate", "--log", root / "log.parquet", "--plan", root / "model", "--reference",
                     root / "one", "--scores", root / "scores.parquet", "--design", "uniform", "--out", tmp_path / "o",
                     "--bootstrap", 300)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    plan, reference = report["plans"][0], report["reference"]
    assert reference["name"] == "one" and len(report["plans"]) == 1
    for estimator in ("IPS", "DR"):
        difference = plan["difference"]["responses"][estimator]
        assert difference["estimate"] == pytest.approx(plan["means"]["responses"][estimator]["estimate"]
                                                       - reference["means"]["responses"][estimator]["estimate"])
        assert difference["low"] <= true_means["model"] - true_means["one"] <= difference["high"]


def test_a_log_with_the_services_exploit_bucket_says_what_it_supports():
    log = _log({"customer_id": ["a", "b"], "level": [1.0, 2.0], "redeemed": [1, 0], "propensity": [1.0, 0.5],
                "bucket": ["exploit", "explore"]})
    assert any("1 rows are the service's exploit bucket" in note for note in log.notes)


def test_a_heavy_tailed_outcome_on_few_rows_is_stated():
    rng = np.random.default_rng(1)
    n = 2000
    convert = rng.random(n) < 0.02
    log = _log({"user_id": [f"u{i}" for i in range(n)], "fund": rng.choice(["F1", "F2"], n),
                "convert": convert.astype(int), "amount": np.where(convert, rng.lognormal(3, 2, n), 0.0)},
               design="uniform")
    plan = reference_plan("constant:F1", log)
    result = judge(log, [Plan("f1", plan.actions, plan.probabilities, plan.subjects)],
                   reference_plan("logging", log), bootstrap=20).plans[0]
    tail = result.diagnostics["outcomes"]["amount"]
    assert 0 < tail["rows"] < 50 and 0 < tail["top_share"] <= 1
    assert any(w.startswith(f"f1: its amount estimate rests on {tail['rows']} rows") for w in result.warnings)


def test_bca_corrects_a_skewed_estimators_interval():
    """The influence of a subject on a mean is its deviation from the mean; on the mean of a right-skewed outcome
    BCa moves the interval up against the percentiles (z₀ ≈ 0, acceleration > 0)."""
    from promokit.policy.estimators import influence, interval

    rng = np.random.default_rng(0)
    y = rng.lognormal(0, 1.5, 400)
    assert np.allclose(influence(lambda m: m[..., 0], y[:, None]), y - y.mean(), atol=1e-6)
    draws = bootstrap_sums(y[:, None], 2000, seed=1)[:, 0] / len(y)
    percentile = interval(draws)
    bca = interval(draws, float(y.mean()), y - y.mean())
    assert bca[0] > percentile[0] and bca[1] > percentile[1]
    log = _log(_incentive(), design="uniform")
    uniform = reference_plan("uniform", log)
    result = judge(log, [Plan("u", uniform.actions, uniform.probabilities, uniform.subjects)],
                   reference_plan("logging", log), bootstrap=50, interval="bca").plans[0]
    low, value, high = (getattr(result.means["responses"]["IPS"], k) for k in ("low", "value", "high"))
    assert low < value < high
    with pytest.raises(DataError, match="`interval` must be one of"):
        judge(log, [], reference_plan("logging", log), interval="normal")


def test_evaluate_from_python_gives_what_the_command_writes(campaign, tmp_path):
    import promokit.policy

    root, _ = campaign
    result = _invoke("policy", "evaluate", "--log", root / "log.parquet", "--plan", root / "model", "--plan",
                     root / "one", "--scores", root / "scores.parquet", "--design", "uniform", "--out",
                     tmp_path / "cli", "--bootstrap", 50)
    assert result.exit_code == 0, result.output
    evaluation = promokit.policy.evaluate(root / "log.parquet", [root / "model", root / "one"],
                                          scores=root / "scores.parquet", design="uniform", bootstrap=50)
    evaluation.write(tmp_path / "python")
    for name in ("report.md", "report.json"):
        assert (tmp_path / "python" / name).read_text() == (tmp_path / "cli" / name).read_text(), name
    assert evaluation.to_markdown() == (tmp_path / "cli" / "report.md").read_text()
    assert json.loads(evaluation.to_json()) == json.loads((tmp_path / "cli" / "report.json").read_text())
    assert "DM's interval holds the score model fixed" in evaluation.to_markdown()
    assert set(evaluation.figures) == {"estimates"} and (tmp_path / "python" / "estimates.png").stat().st_size > 0
    # tables in memory judge the same, named by the mapping
    frames = promokit.policy.evaluate(pd.read_parquet(root / "log.parquet"),
                                      {"model": pd.read_parquet(root / "model" / "plan.parquet"),
                                       "one": pd.read_parquet(root / "one" / "plan.parquet")},
                                      scores=pd.read_parquet(root / "scores.parquet"), design="uniform", bootstrap=50)
    pd.testing.assert_frame_equal(frames.estimates, evaluation.estimates)
    pd.testing.assert_frame_equal(frames.differences, evaluation.differences)
    assert frames.setup["log"].startswith("log: a incentive log of 3,000 rows") and frames.setup["scores"] == "scores"
    with pytest.raises(DataError, match=r"^`bootstrap` must be at least 2, got 1$"):
        promokit.policy.evaluate(root / "log.parquet", root / "one", design="uniform", bootstrap=1)


def test_a_bca_endpoint_among_the_most_extreme_replicates_is_warned_about(tmp_path):
    """One of 30 users brings almost all the amount: BCa's upper level moves past 99.5 % of 200 replicates."""
    import promokit.policy

    log = pd.DataFrame({"user_id": [f"u{i}" for i in range(30)], "fund": ["F1", "F2"] * 15,
                        "convert": [1, 1] + [0] * 28, "amount": [1000.0, 1.0] + [0.0] * 28})
    plan = pd.DataFrame({"user_id": log.user_id, "fund": "F1"})
    evaluation = promokit.policy.evaluate(log, {"f1": plan}, design="uniform", bootstrap=200)
    assert any(w.startswith("f1: the BCa interval of IPS (conversions mean, amount mean) reaches into the outer "
                            "0.5% of the 200 bootstrap replicates") for w in evaluation.interval_warnings)
    assert all("use more replicates" in w for w in evaluation.interval_warnings)
    assert not promokit.policy.evaluate(log, {"f1": plan}, design="uniform", bootstrap=200,
                                        interval="percentile").interval_warnings
    log.to_csv(tmp_path / "log.csv", index=False)
    plan.to_csv(tmp_path / "f1.csv", index=False)
    result = _invoke("policy", "evaluate", "--log", tmp_path / "log.csv", "--plan", tmp_path / "f1.csv", "--design",
                     "uniform", "--bootstrap", 200, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert "warning: f1: the BCa interval of IPS" in " ".join(result.output.split())
    assert json.loads((tmp_path / "out" / "report.json").read_text())["interval_warnings"] == \
        evaluation.interval_warnings


def test_long_action_lists_are_cut_in_messages():
    from promokit.policy.log import action_list

    assert action_list([1.0, 2.0, 3.0, 4.0, 5.0]) == "['1', '2', '3', '4', '5']"
    assert action_list([f"F{i}" for i in range(20)]) == "['F0', 'F1', 'F2', … 17 more]"
    log = _log({"customer_id": [f"c{i}" for i in range(20)], "level": np.arange(1.0, 21.0), "redeemed": [0] * 20},
               design="uniform")
    with pytest.raises(DataError, match=re.escape("its actions are ['1', '2', '3', … 17 more]")):
        reference_plan("constant:99", log)


def hillstrom_style(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """A Hillstrom-style e-mail test: each customer one of three arms at random, then a visit, a conversion and
    the spend, under the log's own column names."""
    rng = np.random.default_rng(seed)
    segment = rng.choice(["Mens E-Mail", "Womens E-Mail", "No E-Mail"], n)
    visit = (rng.random(n) < np.where(segment == "No E-Mail", 0.10, 0.18)).astype(int)
    conversion = visit * (rng.random(n) < 0.1)
    return pd.DataFrame({"id": np.arange(n), "segment": segment, "visit": visit, "conversion": conversion,
                         "spend": conversion * rng.gamma(2.0, 50.0, n).round(2)})


def test_a_log_under_its_own_names_is_judged_on_several_outcomes_from_a_series_plan():
    log = hillstrom_style()
    mens = pd.Series("Mens E-Mail", index=log["id"], name="mens")
    evaluation = pk.policy.evaluate(log, mens, design="uniform", labels={"user_id": "id", "fund": "segment",
                                                                        "convert": "conversion", "amount": "spend"},
                                    outcomes=["visit"], bootstrap=200)
    table = evaluation.to_frame()
    snips = table.set_index(["plan", "outcome", "estimator"]).loc["mens"]
    arm = log[log["segment"] == "Mens E-Mail"]
    assert snips.loc[("visit", "SNIPS"), "mean"] == pytest.approx(arm["visit"].mean())  # the arm's own rate
    assert snips.loc[("conversions", "SNIPS"), "mean"] == pytest.approx(arm["conversion"].mean())
    assert snips.loc[("amount", "SNIPS"), "mean"] == pytest.approx(arm["spend"].mean())
    assert {"difference", "low", "high"} <= set(table.columns) and table["difference"].notna().any()
    assert snips.loc[("visit", "SNIPS"), "mean_low"] < snips.loc[("visit", "SNIPS"), "mean_high"]


NAMES = {"user_id": "id", "fund": "segment", "convert": "conversion", "amount": "spend"}


@pytest.mark.parametrize("log_columns, options, message", [
    ({}, {"labels": {**NAMES, "segment": "fund"}}, "`labels`: 'segment' is not a column of a log's contract"),
    ({}, {"labels": {**NAMES, "fund": "arm"}}, "`labels`: column 'arm' (for 'fund') is not in the log's 300 rows"),
    ({"fund": "x"}, {"labels": NAMES}, "`labels` maps 'segment' to 'fund', but the log has a 'fund' column too"),
    ({}, {"labels": NAMES, "outcomes": ["amount"]}, "`outcomes`: 'amount' is already an outcome of a value log"),
    ({}, {"labels": NAMES, "outcomes": ["nowhere"]}, "'nowhere'"),
])
def test_bad_labels_and_outcomes_are_one_line_errors(log_columns, options, message):
    log = hillstrom_style(300).assign(**log_columns)
    with pytest.raises(DataError, match=re.escape(message)) as error:
        pk.policy.evaluate(log, pd.Series("Mens E-Mail", index=log["id"]), design="uniform", bootstrap=10, **options)
    assert "\n" not in str(error.value)


def test_the_command_takes_the_log_under_its_own_names(tmp_path):
    log = hillstrom_style(600)
    log.to_csv(tmp_path / "log.csv", index=False)
    pd.DataFrame({"user_id": log["id"], "fund": "Mens E-Mail"}).to_csv(tmp_path / "plan.csv", index=False)
    args = ["policy", "evaluate", "--log", tmp_path / "log.csv", "--plan", tmp_path / "plan.csv", "--design", "uniform",
            "--bootstrap", "20", "--out", tmp_path / "ope", "--label", "user_id=id", "--label", "fund=segment",
            "--label", "convert=conversion", "--label", "amount=spend", "--outcomes", "visit"]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert "visit" in result.output and (tmp_path / "ope" / "report.md").is_file()
    bad = CliRunner().invoke(app, [str(a) for a in args[:12]] + ["--label", "fund=arm"])
    assert bad.exit_code == 2 and "--label: column 'arm' (for 'fund')" in bad.output, bad.output

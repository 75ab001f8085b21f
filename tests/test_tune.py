"""The shared hyper-parameter search: sampling, resumable storage, pruning, interruption."""

import pytest

from promokit.data import DataError
from promokit.experiments.tuning import tune

pytestmark = pytest.mark.extra("tune")

SPACE = {"x": ("float", -1.0, 1.0), "width": ("choice", ((8,), (16, 8))), "k": ("int", 1, 3)}


def _score(params, report):
    assert isinstance(params["width"], tuple) and params["k"] in (1, 2, 3)
    for epoch in range(3):
        report(epoch, -abs(params["x"] - 0.3) - 0.1 * epoch)
    return -abs(params["x"] - 0.3) + len(params["width"]) / 100


def test_tune_finds_the_optimum_and_decodes_choices(tmp_path):
    result = tune(_score, SPACE, tmp_path / "s.db", "toy", trials=25, seed=0, prune=False)
    assert abs(result.best_params["x"] - 0.3) < 0.15
    assert result.best_params["width"] in ((8,), (16, 8))
    assert [t["trial"] for t in result.trials] == list(range(25)) and not result.interrupted


def test_a_rerun_continues_the_stored_study_and_a_seed_repeats_it(tmp_path):
    first = tune(_score, SPACE, tmp_path / "a.db", "toy", trials=3, seed=1)
    again = tune(_score, SPACE, tmp_path / "a.db", "toy", trials=5, seed=1)
    assert [t["x"] for t in again.trials[:3]] == [t["x"] for t in first.trials] and len(again.trials) == 5
    other = tune(_score, SPACE, tmp_path / "b.db", "toy", trials=3, seed=1)
    assert [t["x"] for t in other.trials] == [t["x"] for t in first.trials]


def test_trials_reported_worse_than_the_median_are_pruned(tmp_path):
    calls = []

    def score(params, report):
        calls.append(params)
        value = 1.0 if len(calls) <= 6 else 0.0  # later trials are worse from their first epoch on
        for epoch in range(4):
            report(epoch, value)
        return value

    result = tune(score, {"x": ("float", 0.0, 1.0)}, tmp_path / "p.db", "prune", trials=9, seed=0)
    assert [t["state"] for t in result.trials[6:]] == ["pruned"] * 3
    assert all(t["epochs"] == 2 for t in result.trials[6:])  # stopped after the second epoch's report


def test_ctrl_c_keeps_the_finished_trials_and_the_same_call_continues(tmp_path):
    calls = []

    def score(params, report):
        calls.append(params)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return params["x"]

    space = {"x": ("float", 0.0, 1.0)}
    stopped = tune(score, space, tmp_path / "i.db", "stop", trials=5, seed=0)
    assert stopped.interrupted and [t["state"] for t in stopped.trials] == ["complete", "complete", "fail"]
    finished = tune(score, space, tmp_path / "i.db", "stop", trials=5, seed=0)
    assert sum(t["state"] == "complete" for t in finished.trials) == 5 and not finished.interrupted


def test_a_study_without_a_complete_trial_and_zero_trials_are_errors(tmp_path):
    def interrupt(params, report):
        raise KeyboardInterrupt

    with pytest.raises(DataError, match="no complete trial yet"):
        tune(interrupt, SPACE, tmp_path / "n.db", "none", trials=2)
    with pytest.raises(DataError, match="--trials must be at least 1"):
        tune(_score, SPACE, tmp_path / "n.db", "none", trials=0)

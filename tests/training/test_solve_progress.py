import lightgbm as lgb
import numpy as np

from promokit.training import solve_progress
from promokit.training.solve_progress import BoostingProgress, SolveProgress


def _printed(capsys) -> str:
    return " ".join(capsys.readouterr().out.split())  # rich folds a line at the terminal's width


def test_a_long_solve_shows_its_iterations_gradient_and_the_time_left(monkeypatch, capsys):
    clock = iter([0.0, 2.0, 10.0, 20.0])  # created; then three iterations, the first within the quiet seconds
    monkeypatch.setattr(solve_progress.time, "perf_counter", lambda: next(clock))
    shown = SolveProgress("lr", 1e-3, 1e-6, every=5.0)
    for gradient in (1e-1, 1e-2, 1e-3):
        shown(gradient)
    # a decade of the gradient in 10 s, four to go: 40 s; then two decades in 20 s, three to go: 30 s
    assert _printed(capsys) == (
        "lr: l2 1.0e-03, 2 iterations, gradient 1.0e-02 (stops at 1.0e-06), 10 s, about 40 s left "
        "lr: l2 1.0e-03, 3 iterations, gradient 1.0e-03 (stops at 1.0e-06), 20 s, about 30 s left")


class _Env:
    """What LightGBM gives a callback after each tree."""

    def __init__(self, iteration, auc):
        self.iteration, self.begin_iteration = iteration, 0
        self.evaluation_result_list = [("valid_0", "auc", auc, True)]


def test_a_long_boosting_run_shows_its_trees_the_best_score_and_the_time_left(monkeypatch, capsys):
    clock = iter([0.0, 1.0, 6.0, 12.0])
    monkeypatch.setattr(solve_progress.time, "perf_counter", lambda: next(clock))
    shown = BoostingProgress("gbdt ctr", 100, every=5.0)
    for iteration, score in enumerate((0.70, 0.72, 0.71)):
        shown(_Env(iteration, score))
    # 2 trees in 6 s, 98 to go at that pace: 294 s; 3 in 12 s: 388 s
    assert _printed(capsys) == (
        "gbdt ctr: 2 of at most 100 trees, valid auc 0.7200 (best 0.7200), 6 s, about 294 s left at most "
        "gbdt ctr: 3 of at most 100 trees, valid auc 0.7100 (best 0.7200), 12 s, about 388 s left at most")


def test_the_callback_runs_inside_lightgbm_after_early_stopping(capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 3))
    y = (x[:, 0] + rng.normal(size=400) > 0).astype(float)
    train = lgb.Dataset(x[:300], y[:300])
    valid = lgb.Dataset(x[300:], y[300:], reference=train)
    lgb.train({"objective": "binary", "metric": "auc", "verbosity": -1}, train, num_boost_round=5, valid_sets=[valid],
              callbacks=[lgb.early_stopping(50, verbose=False), BoostingProgress("gbdt", 5, every=0.0)])
    printed = _printed(capsys)
    assert printed.startswith("gbdt: 1 of at most 5 trees, valid auc ") and "gbdt: 5 of at most 5 trees" in printed

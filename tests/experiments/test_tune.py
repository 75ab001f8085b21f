"""The generic hyper-parameter search: any estimator, cloned per trial; sampling, resumable storage, pruning,
interruption; its best parameters as train --params reads them."""

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import ClassVar

import pandas as pd
import pytest
from typer.testing import CliRunner

from promokit.cli import app
from promokit.conversion.defaults import DEFAULT_TRAIN
from promokit.conversion.estimator import ConversionModel
from promokit.data import DataError
from promokit.experiments.conversion.tune import tune_conversion
from promokit.experiments.tuning import tune
from promokit.experiments.voucher.world import make_world
from promokit.training.estimator import Estimator
from promokit.voucher.estimator import VoucherModel

pytestmark = pytest.mark.extra("tune")

SPACE = {"params.x": ("float", -1.0, 1.0), "params.width": ("choice", ((8,), (16, 8))), "params.k": ("int", 1, 3)}
SMALL_NET = {"emb_dim": 4, "hidden": [16], "dropout": 0.0}


class Toy(Estimator):
    """An estimator whose validation score peaks at ``params["x"]`` = 0.3; ``fits`` counts the fits of all."""

    fits: ClassVar[list[dict]] = []

    def __init__(self, params: dict | None = None, epoch_values=None):
        self.params = params
        self.epoch_values = epoch_values  # params → the value each epoch reports, or None
        self._configure()

    def _configure(self) -> None:
        if (self.params or {}).get("k", 1) > 3:
            raise DataError(f"params: k must be at most 3, got {self.params['k']}")

    def fit(self, data, *, validation=None, on_epoch=None):
        Toy.fits.append(self.params)
        interrupted = data == "always" or data == "interrupt" and len(Toy.fits) == 3  # Ctrl-C in that fit
        stopped = "interrupted" if interrupted else "completed"
        for epoch in range(4 if self.epoch_values else 0):
            on_epoch(epoch, {"valid_score": self.epoch_values(self.params)})
        self.history_ = SimpleNamespace(stopped=stopped)
        return self

    def evaluate(self, data):
        p = self.params
        assert isinstance(p["width"], tuple) and p["k"] in (1, 2, 3)
        return {"score": -abs(p["x"] - 0.3) + len(p["width"]) / 100}

    def predict(self, data):
        return pd.DataFrame()

    def save(self, path):
        pass

    @classmethod
    def load(cls, path):
        return cls()


def _toy_tune(storage, trials, seed=0, data=None, **options):
    return tune(Toy(), SPACE, data, metric="score", trials=trials, storage=storage, study_name="toy", seed=seed,
                **options)


@pytest.fixture(autouse=True)
def _fresh_fits():
    Toy.fits.clear()


def test_tune_returns_the_best_trial_with_its_choices_decoded():
    result = _toy_tune(None, trials=6, prune=False)
    best = max(result.trials, key=lambda t: t["value"])
    assert result.best_params == {k: best[k] for k in ("x", "width", "k")} and result.best_score == best["value"]
    assert result.best_params["width"] in ((8,), (16, 8)) and result.study.best_trial.number == best["trial"]
    assert [t["trial"] for t in result.trials] == list(range(6)) and not result.interrupted


def test_a_rerun_runs_only_the_missing_trials_and_a_seed_repeats_it(tmp_path):
    first = _toy_tune(tmp_path / "a.db", trials=2, seed=1)
    again = _toy_tune(tmp_path / "a.db", trials=3, seed=1)
    assert len(Toy.fits) == 3 and len(again.trials) == 3
    assert [t["x"] for t in again.trials[:2]] == [t["x"] for t in first.trials]
    other = _toy_tune(tmp_path / "b.db", trials=2, seed=1)
    assert [t["x"] for t in other.trials] == [t["x"] for t in first.trials]


def test_trials_reported_worse_than_the_median_are_pruned(tmp_path):
    def values(params):
        return 1.0 if len(Toy.fits) <= 6 else 0.0  # later trials are worse from their first epoch on

    estimator = Toy(epoch_values=values)
    result = tune(estimator, {"params.x": ("float", 0.0, 1.0)}, None, metric="score", trials=9,
                  storage=tmp_path / "p.db", score=lambda fitted: 1.0)
    assert [t["state"] for t in result.trials[6:]] == ["pruned"] * 3
    assert all(t["epochs"] == 2 for t in result.trials[6:])  # stopped after the second epoch's report


def test_ctrl_c_keeps_the_finished_trials_and_the_same_call_continues(tmp_path):
    stopped = _toy_tune(tmp_path / "i.db", trials=5, data="interrupt")
    assert stopped.interrupted and [t["state"] for t in stopped.trials] == ["complete", "complete", "fail"]
    finished = _toy_tune(tmp_path / "i.db", trials=5, data="interrupt")
    assert sum(t["state"] == "complete" for t in finished.trials) == 5 and not finished.interrupted


def test_errors_name_the_argument_and_a_bad_space_fails_before_any_trial(tmp_path):
    with pytest.raises(DataError, match="`trials` must be at least 1, got 0"):
        _toy_tune(tmp_path / "n.db", trials=0)
    bad_spaces = {"names no parameter of Toy": {"param.x": ("float", 0, 1)},
                  "unknown kind 'uniform'": {"params.x": ("uniform", 0, 1)},
                  "would both be written as 'x'": {"params.x": ("float", 0, 1), "epoch_values.x": ("int", 0, 1)},
                  "k must be at most 3": {"params.k": ("int", 4, 9)},
                  "train has no setting 'lrr'": {"train.lrr": ("log", 1e-3, 1e-2)}}
    for message, space in bad_spaces.items():
        estimator = Toy() if "train" not in message else ConversionModel("esmm", train=DEFAULT_TRAIN)
        with pytest.raises(DataError, match=message):
            tune(estimator, space, None, metric="score", trials=1)
    assert Toy.fits == []
    with pytest.raises(DataError, match="no complete trial yet"):
        _toy_tune(tmp_path / "n.db", trials=2, data="always")
    with pytest.raises(DataError, match="`metric` must be one of"):
        tune_conversion("esmm", pd.DataFrame(), metric="auc")


def test_the_search_clones_estimators_of_two_domains_and_leaves_them_unfitted(impressions):
    space = {"params.dropout": ("float", 0.0, 0.5), "train.lr": ("log", 1e-3, 1e-2)}
    conversion = ConversionModel("esmm", SMALL_NET, {"epochs": 1, "progress": False}, test_fraction=0)
    result = tune(conversion, space, impressions.iloc[:3000], validation=impressions.iloc[3000:],
                  metric="ctcvr_auc", trials=2)
    assert not hasattr(conversion, "net_") and conversion.params == SMALL_NET
    assert conversion.train == {"epochs": 1, "progress": False}
    assert [t["epochs"] for t in result.trials] == [1, 1]  # each reported its epoch through on_epoch
    assert result.best_params == {**SMALL_NET, "dropout": result.best_params["dropout"],
                                  "lr": result.best_params["lr"]}

    tables = make_world(n_users=200, n_vouchers=20, n_items=200, n_sessions=1500, seed=2).tables
    voucher = VoucherModel("dnn", SMALL_NET, {"epochs": 1, "progress": False}, test_fraction=0)
    train_rows, valid_rows, _ = voucher.split_rows(tables)
    result = tune(voucher, space, tables, validation=valid_rows, metric="auc", trials=2,
                  fit_params={"rows": train_rows}, score=lambda fitted: fitted.evaluate(tables, rows=valid_rows)["auc"])
    assert not hasattr(voucher, "net_") and voucher.params == SMALL_NET and 0 < result.best_score < 1
    assert [t["epochs"] for t in result.trials] == [1, 1]


def test_the_best_params_round_trip_into_train_params(tmp_path, impressions):
    result = tune_conversion("esmm", impressions, train=replace(DEFAULT_TRAIN, epochs=1), trials=2,
                             storage=str(tmp_path / "c.db"))
    best = json.loads(json.dumps(result.best_params))  # as params.json holds them
    assert best["monitor"] == "ctcvr_auc"
    config, params = DEFAULT_TRAIN.merged(best)
    model = ConversionModel("esmm", params, config)
    assert (model.train_config.lr, model.train_config.embedding_decay) == (best["lr"], best["embedding_decay"])
    assert model.declared_spec.min_count == best["min_count"]
    assert {k: model._model_params[k] for k in ("emb_dim", "hidden", "dropout")} == {
        k: best[k] for k in ("emb_dim", "hidden", "dropout")}


def test_the_command_names_its_flags_in_the_search_errors(tmp_path, impressions):
    impressions.to_parquet(tmp_path / "t.parquet")
    result = CliRunner().invoke(app, ["conversion", "tune", "--data", str(tmp_path / "t.parquet"), "--trials", "0",
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--trials must be at least 1, got 0" in result.output

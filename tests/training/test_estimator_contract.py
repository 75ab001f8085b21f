"""The estimator contract of promokit.training.estimator: parameters stored as given, clone, set_params checked
once and atomically, and the Evaluation report."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from promokit.data import DataError
from promokit.training.estimator import Estimator, Evaluation


class MeanRate(Estimator):
    """The smallest estimator: predicts the training rate of ``label``, shrunk towards ``prior`` by ``strength``."""

    def __init__(self, label: str = "y", prior: float = 0.5, strength: float = 1.0):
        self.label = label
        self.prior = prior
        self.strength = strength
        self._configure()

    def _configure(self):
        if not 0 <= self.prior <= 1:
            raise DataError(f"prior must be in [0, 1], got {self.prior!r}")
        self.weight_ = 1.0 / (1.0 + self.strength)

    def fit(self, data, *, validation=None):
        self.rate_ = (data[self.label].sum() + self.strength * self.prior) / (len(data) + self.strength)
        return self

    def predict(self, data):
        return pd.DataFrame({"id": data["id"], "p": np.full(len(data), self.rate_)})

    def evaluate(self, data):
        p = self.predict(data)["p"].to_numpy()
        y = data[self.label].to_numpy()
        return Evaluation("mean rate", {"mean_predicted": float(p.mean()), "mean_observed": float(y.mean()),
                                        "auc": math.nan},
                          tables={"by_id": pd.DataFrame({"id": data["id"], "p": p})})

    def save(self, path):
        raise OSError("not written in this test")

    @classmethod
    def load(cls, path):
        raise OSError("not read in this test")


TABLE = pd.DataFrame({"id": [1, 2, 3, 4], "y": [0, 1, 1, 1]})


def test_parameters_are_stored_as_given_and_clone_keeps_them_unfitted():
    model = MeanRate(prior=0.25, strength=4.0).fit(TABLE)
    assert model.get_params() == {"label": "y", "prior": 0.25, "strength": 4.0}
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "rate_")
    assert model.rate_ == pytest.approx((3 + 4 * 0.25) / 8)


def test_set_params_configures_again_and_a_refused_value_keeps_the_old_ones():
    model = MeanRate()
    assert model.set_params(strength=3.0) is model
    assert model.weight_ == 0.25
    with pytest.raises(DataError, match=r"prior must be in \[0, 1\], got 2"):
        model.set_params(prior=2, strength=1.0)
    assert model.get_params() == {"label": "y", "prior": 0.5, "strength": 3.0}
    assert model.weight_ == 0.25
    with pytest.raises(ValueError, match="Invalid parameter 'priors'"):
        model.set_params(priors=0.1)


def test_evaluation_is_a_mapping_with_markdown_and_json(tmp_path):
    report = MeanRate().fit(TABLE).evaluate(TABLE)
    assert dict(report)["mean_observed"] == 0.75 and report["mean_predicted"] == pytest.approx(0.7)
    assert len(report) == 3 and "auc" in report
    text = report.to_markdown()
    assert text.startswith("# mean rate") and "| mean_observed | 0.7500 |" in text and "## By id" in text
    data = json.loads(report.to_json())
    assert data["metrics"] == {"mean_predicted": pytest.approx(0.7), "mean_observed": 0.75, "auc": None}
    assert data["by_id"][0] == {"id": 1, "p": pytest.approx(0.7)}
    report.write(tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["metrics"]["auc"] is None


def test_a_subclass_must_implement_the_whole_contract():
    class Partial(Estimator):
        def _configure(self):
            pass

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_train_settings_given_as_a_dict_replace_only_those_of_the_domain_default():
    from dataclasses import replace

    from promokit.conversion.estimator import DEFAULT_TRAIN, ConversionModel

    settings = {"epochs": 1, "progress": False}
    model = ConversionModel("esmm", train=settings)
    assert model.train_config == replace(DEFAULT_TRAIN, epochs=1, progress=False)
    assert clone(model).train_config == model.train_config == model.get_params()["train"]
    for train, message in (({"epoch": 2}, r"^train: no setting 'epoch'; the settings are \['epochs'"),
                           ({"batch_size": 0}, r"^train: batch_size must be a whole number ≥ 1, got 0$"),
                           ({"lr": float("nan")}, r"^train: lr must be a finite number > 0, got nan$"),
                           ("fast", r"^train must be a TrainConfig, a dict of its settings or None, got str$")):
        with pytest.raises(DataError, match=message):
            ConversionModel("esmm", train=train)

"""model="auto" (promokit.training.auto): every estimator fits its candidates on one split, keeps the best on the
validation rows, refits it and says which it chose and why."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.base import clone

from promokit.conversion import ConversionModel
from promokit.data import DataError
from promokit.incentive.estimator import IncentiveModel
from promokit.value.estimator import ValueModel
from promokit.voucher.estimator import VoucherModel

QUIET = {"epochs": 1, "progress": False}


@pytest.fixture(scope="module")
def auto_conversion(impressions_module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ConversionModel("auto", train=QUIET).fit(impressions_module)


@pytest.fixture(scope="module")
def impressions_module():
    from conftest import make_impressions

    return make_impressions()


def test_auto_keeps_the_best_candidate_on_validation_and_is_that_model_refit(auto_conversion, impressions_module):
    model, table = auto_conversion, impressions_module
    record = model.holdout_["auto"]
    assert list(record["scores"]) == list(ConversionModel.AUTO_CANDIDATES) and not record["passed_over"]
    assert record["chosen"] == max(record["scores"], key=record["scores"].get) == model.model_name
    assert record["metric"] == "ctcvr_auc" and record["reason"].startswith(f"{record['chosen']} has the highest")
    assert model.get_params()["model"] == "auto" and model.holdout_["refit"]["rows"] == len(table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        named = ConversionModel(record["chosen"], train=QUIET).fit(table)
    np.testing.assert_allclose(model.predict(table)["p_ctcvr"], named.predict(table)["p_ctcvr"], rtol=1e-6)
    assert not hasattr(clone(model), "model_choice_") and clone(model).model_name == "auto"


def test_the_choice_is_saved_and_the_loaded_model_is_the_chosen_one(auto_conversion, impressions_module, tmp_path):
    auto_conversion.save(tmp_path / "m")
    loaded = ConversionModel.load(tmp_path / "m")
    assert loaded.model == auto_conversion.model_name and loaded.holdout_["auto"] == auto_conversion.holdout_["auto"]
    np.testing.assert_allclose(loaded.predict(impressions_module)["p_ctr"],
                               auto_conversion.predict(impressions_module)["p_ctr"], rtol=1e-6)


def test_voucher_auto_scores_each_candidate_on_the_validation_sessions(voucher_tables):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = VoucherModel("auto", train=QUIET).fit(voucher_tables)
    record = model.holdout_["auto"]
    assert set(record["scores"]) == {"lr", "gbdt", "dmbgn"} and model.model_name == record["chosen"]
    chosen_score = record["scores"][record["chosen"]]
    assert chosen_score == max(record["scores"].values()) and 0.5 < chosen_score <= 1
    assert len(model.predict(voucher_tables)) == len(voucher_tables.sessions)


def test_a_candidate_the_data_cannot_feed_is_passed_over_with_its_reason():
    from promokit.experiments.incentive.world import make_world
    from promokit.incentive.contract import read_tables

    customers_only = read_tables({"customers": make_world(300, 30, seed=2).customers})
    model = IncentiveModel("auto", train=QUIET).fit(customers_only)
    record = model.holdout_["auto"]
    assert model.model_name == "lr" and list(record["scores"]) == ["lr"]
    assert record["passed_over"]["gnn-hazard"].startswith("model 'gnn-hazard' needs a graph")
    assert "passed over: gnn-hazard (model 'gnn-hazard' needs a graph" in record["reason"]


def test_value_auto_without_the_consumption_table_passes_over_esdpm(value_tables):
    from dataclasses import replace

    tables = replace(value_tables, consumption=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ValueModel("auto", train={**QUIET, "batch_size": 256}).fit(tables)
    record = model.holdout_["auto"]
    assert set(record["scores"]) == {"hurdle", "esdpm-ncg"} and "consumption" in record["passed_over"]["esdpm"]
    assert model.model_name == max(record["scores"], key=record["scores"].get)
    assert len(model.predict(tables)) == len(tables.deliveries)


def test_auto_errors_name_the_argument(impressions):
    with pytest.raises(DataError, match=r"^params: model='auto' fits each candidate with its own defaults"):
        ConversionModel("auto", {"l2_ctr": 1e-3})
    with pytest.raises(DataError, match=r"^model: unknown model 'esmx'; choose one of .* or 'auto'$"):
        VoucherModel("esmx")
    with pytest.raises(DataError, match=r"^validation: model='auto' chooses on the validation rows; give a fraction > 0"):
        ConversionModel("auto", train=QUIET).fit(impressions, validation=0.0)
    with pytest.raises(DataError, match=r"^model='auto' chooses on a table read whole"):
        ConversionModel("auto", train=QUIET).fit(impressions, executor=SimpleNamespace(name="ray"))

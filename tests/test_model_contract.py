"""The estimator contract, on every registered model of the four domains (as scikit-learn's ``check_estimator``):
parameters that clone, a bad setting refused in one line with nothing changed, an unfitted model refusing to
predict, evaluate or save with scikit-learn's ``NotFittedError``; and on each domain's floor and paper model, fit
returning the estimator, predictions keyed first, and a saved directory predicting exactly as the model did.

A model added to a domain's registry is checked here by that alone."""

import numpy as np
import pandas as pd
import pytest
from conftest import make_impressions
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from promokit.conversion.estimator import ConversionModel
from promokit.conversion.models import MODELS as CONVERSION
from promokit.data import DataError
from promokit.experiments.incentive.world import make_world as incentive_world
from promokit.experiments.value.world import make_world as value_world
from promokit.experiments.voucher.world import make_world as voucher_world
from promokit.incentive.contract import check_tables as incentive_tables
from promokit.incentive.estimator import MODELS as INCENTIVE
from promokit.incentive.estimator import IncentiveModel
from promokit.training import TrainConfig
from promokit.value.contract import check_tables as value_tables
from promokit.value.estimator import ValueModel
from promokit.value.models import MODELS as VALUE
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.models import MODELS as VOUCHER

REGISTERED = [(cls, name) for cls, names in ((ConversionModel, CONVERSION), (VoucherModel, VOUCHER),
                                              (IncentiveModel, INCENTIVE), (ValueModel, VALUE)) for name in names]
QUICK = TrainConfig(epochs=1, batch_size=256, progress=False)


def ids(case) -> str:
    return f"{case[0].__name__}-{case[1]}"


@pytest.mark.parametrize("case", REGISTERED, ids=ids)
def test_parameters_clone_and_a_bad_setting_changes_nothing(case):
    cls, name = case
    model = cls(name)
    assert model.model == name and clone(model).get_params() == model.get_params()
    before = model.get_params()
    with pytest.raises(DataError) as error:
        model.set_params(train={"epochs": -1})
    assert "\n" not in str(error.value) and "epochs" in str(error.value)
    assert model.get_params() == before


@pytest.mark.parametrize("case", REGISTERED, ids=ids)
def test_an_unfitted_model_refuses_with_sklearns_not_fitted_error(case, tmp_path):
    cls, name = case
    model = cls(name)
    for call in (lambda: model.predict({}), lambda: model.evaluate({}), lambda: model.save(tmp_path / "m")):
        with pytest.raises(NotFittedError, match=f"this {cls.__name__} is not fitted"):
            call()
    assert not (tmp_path / "m").exists()


def conversion():
    table = make_impressions()
    return ConversionModel, table, table.iloc[:500], {"esm2": {"emb_dim": 4, "hidden": (8,)}}, ["user_id", "item_id"]


def voucher():
    tables = voucher_world(n_users=300, n_vouchers=30, n_items=200, n_sessions=2500, seed=1).tables
    return VoucherModel, tables, tables, {"dmbgn": {"emb_dim": 4, "hidden": (8,), "pretrain": 0}}, ["session_id"]


def incentive():
    world = incentive_world(1500, 150, seed=3)
    tables = incentive_tables(world.customers, world.merchants, world.edges)
    return IncentiveModel, tables, tables, {"gnn-hazard": {"width": 8, "hidden": [8], "emb_dim": 4}}, ["customer_id"]


def value():
    world = value_world(1200, seed=3)
    tables = value_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    return ValueModel, tables, tables, {"esdpm-ncg": {"expert_hidden": [8], "expert_dim": 8, "tower_hidden": [4],
                                                      "emb_dim": 4}}, ["user_id", "fund"]


@pytest.mark.parametrize("domain", [conversion, voucher, incentive, value], ids=lambda d: d.__name__)
def test_the_floor_and_the_paper_model_fit_predict_and_round_trip_exactly(domain, tmp_path):
    cls, data, scored, paper, keys = domain()
    for name in (cls.AUTO_CANDIDATES[0], *paper):
        model = cls(name, paper.get(name), QUICK)
        assert model.fit(data) is model
        predicted = model.predict(scored)
        assert isinstance(predicted, pd.DataFrame) and list(predicted.columns[:len(keys)]) == keys
        assert predicted.index.equals(pd.RangeIndex(len(predicted)))
        model.save(tmp_path / name)
        again = cls.load(tmp_path / name).predict(scored)
        pd.testing.assert_frame_equal(again, predicted, check_exact=True)
        assert np.isfinite(predicted.select_dtypes("number").to_numpy()).all()


def test_a_model_directory_records_its_format_and_a_later_one_is_refused(tmp_path):
    import json

    from promokit.data import DataError
    from promokit.training.artifact import MODEL_FORMAT

    table = make_impressions()
    ConversionModel("lr", train=QUICK).fit(table).save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["format"] == MODEL_FORMAT
    (tmp_path / "m" / "config.json").write_text(json.dumps({**config, "format": MODEL_FORMAT + 1}))
    with pytest.raises(DataError, match=rf"of format {MODEL_FORMAT + 1}, written by a newer promokit") as error:
        ConversionModel.load(tmp_path / "m")
    assert "\n" not in str(error.value)

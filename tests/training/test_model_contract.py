"""The estimator contract, on every registered model of the four domains (as scikit-learn's ``check_estimator``):
parameters that clone, a bad setting refused in one line with nothing changed, an unfitted model refusing to
predict, evaluate or save with scikit-learn's ``NotFittedError`` and holding no fitted attribute (their names end in
``_``, so ``check_is_fitted`` tells), and fitting for one epoch, predicting keys first and round-tripping its
predictions exactly through a saved directory; and on each domain's floor and paper model, fit returning the estimator, the
fitted attributes named as docs/conventions.md's table names them (the names shared across domains on every one),
predictions keyed first, and a saved directory predicting exactly as the model did; and on
each domain's floor, ``fit(validation=…)`` read the same way everywhere (a fraction, a table given apart, a time, row
positions, or a one-line refusal naming ``validation`` where a form cannot mean anything) and ``evaluate(data)``
scoring every row given (``held_out=True``: the rows fit held out).

A model added to a domain's registry is checked here by that alone."""

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_impressions
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from promokit.conversion.estimator import ConversionModel
from promokit.conversion.models import MODELS as CONVERSION
from promokit.data import DataError, FeatureSpec
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
#: The fitted attributes every domain's model holds, one name per concept (docs/conventions.md, one contract).
SHARED = ("net_", "model_params_", "history_", "report_", "holdout_", "training_ids_")
CONVENTIONS = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"


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


def _fitted_attributes(model) -> list[str]:
    """The attributes scikit-learn takes for fitted state (``check_is_fitted``): public, ending in ``_``."""
    return sorted(name for name in vars(model) if name.endswith("_") and not name.startswith("_"))


def _documented() -> set[str]:
    """The fitted attributes named in the table of docs/conventions.md's one-contract section."""
    section = CONVENTIONS.read_text(encoding="utf-8").split("## One contract for every model", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z][a-z_]*_)`", row.split("|")[1])}


@pytest.mark.parametrize("case", REGISTERED, ids=ids)
def test_fitted_attributes_end_in_an_underscore_and_an_unfitted_model_holds_none(case):
    cls, name = case
    public = [n for n in cls.FITTED if not n.startswith("_")]
    assert public and all(n.endswith("_") for n in public), cls.FITTED
    assert set(public) <= _documented() and set(SHARED) & set(public) == {"net_", "model_params_", "training_ids_"}
    for model in (cls(name), clone(cls(name))):
        with pytest.raises(NotFittedError):
            check_is_fitted(model)
        assert _fitted_attributes(model) == [] and not any(hasattr(model, n) for n in (*public, *SHARED))


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
    documented = _documented()
    for name in (cls.AUTO_CANDIDATES[0], *paper):
        model = cls(name, paper.get(name), QUICK)
        with pytest.raises(NotFittedError):
            check_is_fitted(model)
        assert model.fit(data) is model
        check_is_fitted(model)
        fitted = _fitted_attributes(model)
        assert set(fitted) <= documented, set(fitted) - documented  # a new fitted name goes in the table first
        assert {n for n in cls.FITTED if not n.startswith("_")} | set(SHARED) <= set(fitted)
        assert sum(hasattr(model, n) for n in ("encoder_", "encoders_")) == 1  # one encoder, or one per table
        predicted = model.predict(scored)
        assert isinstance(predicted, pd.DataFrame) and list(predicted.columns[:len(keys)]) == keys
        assert predicted.index.equals(pd.RangeIndex(len(predicted)))
        model.save(tmp_path / name)
        loaded = cls.load(tmp_path / name)
        check_is_fitted(loaded)
        assert set(SHARED) <= set(_fitted_attributes(loaded)) <= documented
        assert {n for n in cls.FITTED if not n.startswith("_")} <= set(_fitted_attributes(loaded))
        assert loaded.holdout_ == model.holdout_
        again = loaded.predict(scored)
        pd.testing.assert_frame_equal(again, predicted, check_exact=True)
        assert np.isfinite(predicted.select_dtypes("number").to_numpy()).all()
        with pytest.raises(NotFittedError):
            check_is_fitted(clone(model))


#: GMCM and the micro-behaviour baselines read micro-behaviour columns (docs/conversion.md), which the impressions lack.
MICRO = ("gmcm", "mcm-2", "mcm-10", "mcm-gru")


def _micro_impressions():
    table = make_impressions()
    rng = np.random.default_rng(1)
    clicked, bought = table["click"].to_numpy() == 1, table["purchase"].to_numpy() == 1
    table["cart"] = (clicked & (rng.random(len(table)) < np.where(bought, 0.6, 0.15))).astype(int)
    table["favorite"] = (clicked & (rng.random(len(table)) < np.where(bought, 0.5, 0.1))).astype(int)
    return table, FeatureSpec(categorical=["segment"], numeric=["price"], micro_behaviors=["cart", "favorite"])


@pytest.mark.parametrize("case", REGISTERED, ids=ids)
def test_every_registered_model_fits_predicts_and_round_trips_exactly(case, tmp_path):
    """Every model of every registry, with its defaults for one epoch on the domain's small data: fit returns the
    estimator, predict keys first, and the saved directory predicts exactly as the model did."""
    cls, name = case
    _, data, scored, _, keys = {ConversionModel: conversion, VoucherModel: voucher, IncentiveModel: incentive,
                                ValueModel: value}[cls]()
    options = {}
    if name in MICRO:
        data, options["spec"] = _micro_impressions()
        scored, keys = data.iloc[:500], ["user_id"]
    model = cls(name, train=QUICK, **options)
    assert model.fit(data) is model
    predicted = model.predict(scored)
    assert list(predicted.columns[:len(keys)]) == keys and len(predicted)
    model.save(tmp_path / "m")
    pd.testing.assert_frame_equal(cls.load(tmp_path / "m").predict(scored), predicted, check_exact=True)


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


# ---- fit(validation=…) and evaluate(data): one contract in every domain (docs/conventions.md) ---------------------

def _conversion_floor():
    table = make_impressions().assign(time=pd.date_range("2024-01-01", periods=4000, freq="h"))
    model = ConversionModel("lr", train=QUICK, spec=FeatureSpec(time_key="time"), refit=False)
    return model, table, table.iloc[:400].drop(columns="time"), table["time"], "n", len(table)


def _voucher_floor():
    tables = voucher_world(n_users=300, n_vouchers=30, n_items=200, n_sessions=2500, seed=1).tables
    return VoucherModel("lr", None, QUICK, refit=False), tables, None, tables.sessions["collect_time"], "n", \
        len(tables.sessions)


def _incentive_floor():
    world = incentive_world(1500, 150, seed=3)
    tables = incentive_tables(world.customers, world.merchants, world.edges)
    return IncentiveModel("lr", None, QUICK, refit=False), tables, None, None, "customers", \
        len(tables.labelled_customers)


def _value_floor():
    world = value_world(1200, seed=3)
    tables = value_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    return ValueModel("hurdle", None, QUICK, refit=False), tables, None, pd.Series(pd.to_datetime(tables.time)), \
        "deliveries", len(tables.deliveries)


FLOORS = {"conversion": _conversion_floor, "voucher": _voucher_floor, "incentive": _incentive_floor,
          "value": _value_floor}


def _refused(call) -> str:
    with pytest.raises(DataError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message and "`validation`" in message and " takes None" in message, message
    return message


@pytest.mark.parametrize("domain", FLOORS)
def test_every_form_of_validation_means_the_same_in_every_domain(domain):
    model, data, apart, times, count, n_rows = FLOORS[domain]()
    report = model.fit(data, validation=0.2).report_
    held = model.held_out(data)
    held = held[0] if domain == "incentive" else held  # the customers held out (and the merchants)
    kept = report.n_train + report.n_valid
    assert report.n_test == len(held) and abs(report.n_valid - 0.2 * kept) <= 0.02 * kept + 1
    assert model.fit(data, validation=0).report_.n_valid == 0
    if apart is None:  # the domain's rows live with the other tables: a table given apart cannot validate
        _refused(lambda: model.fit(data, validation=data))
    else:
        assert model.fit(data, validation=apart).report_.n_valid == len(apart)
    if times is None:
        assert "no time" in _refused(lambda: model.fit(data, validation="2024-06-01"))
    else:
        start = times.quantile(0.6)
        later = (times >= start).to_numpy(copy=True)
        later[held] = False
        fitted = model.fit(data, validation=str(start)).report_
        assert (fitted.n_valid, fitted.n_train) == (later.sum(), kept - later.sum())
        with pytest.raises(DataError, match=r"^`validation` .* leaves .* both must be non-empty$"):
            model.fit(data, validation=times.max() + pd.Timedelta("1D"))
    labelled = data.labelled_customers if domain == "incentive" else np.arange(n_rows)
    rows = np.setdiff1d(labelled, held)[::9]
    fitted = model.fit(data, validation=list(rows)).report_
    assert (fitted.n_valid, fitted.n_train, fitted.n_test) == (len(rows), kept - len(rows), len(held))


def test_a_time_needs_a_time_column_where_the_rows_may_have_none():
    table = make_impressions()
    message = _refused(lambda: ConversionModel("lr", train=QUICK).fit(table, validation=pd.Timestamp("2024-06-01")))
    assert "time_key" in message


@pytest.mark.parametrize("domain", FLOORS)
def test_a_bad_validation_is_refused_in_one_line_and_changes_nothing(domain):
    model, data, _, _, _, _ = FLOORS[domain]()
    model.fit(data)
    scored = data.iloc[:300] if domain == "conversion" else data
    before, holdout, n_valid = model.predict(scored), dict(model.holdout_), model.report_.n_valid
    for bad in (-0.1, 1.0, float("nan"), True, np.bool_(False), "not a time", {"bad": 1}, [[1, 2]], [0.5], object()):
        with pytest.raises(DataError) as error:
            model.fit(data, validation=bad)
        assert "\n" not in str(error.value) and "`validation`" in str(error.value), str(error.value)
    pd.testing.assert_frame_equal(model.predict(scored), before)
    assert model.holdout_ == holdout and model.report_.n_valid == n_valid


@pytest.mark.parametrize("domain", FLOORS)
def test_evaluate_scores_every_row_given_and_held_out_true_the_rows_fit_held_out(domain):
    model, data, _, _, count, n_rows = FLOORS[domain]()
    model.fit(data)
    held = model.held_out(data)
    held = held[0] if domain == "incentive" else held
    assert 0 < len(held) < n_rows
    assert model.evaluate(data)[count] == n_rows
    assert model.evaluate(data, held_out=True)[count] == len(held)
    with pytest.raises(DataError, match="held_out must be True"):
        model.evaluate(data, held_out="yes")

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from promokit.conversion.contract import check_labels
from promokit.conversion.estimator import ConversionModel
from promokit.conversion.evaluate import conversion_metrics
from promokit.data import DataError, FeatureSpec
from promokit.metrics import auc
from promokit.training import TrainConfig

SMALL = {"emb_dim": 4, "hidden": (16,), "dropout": 0.0}
FAST = TrainConfig(epochs=4, batch_size=200, lr=0.01, progress=False, embedding_decay=0.0, decay_rows=0)
LABELS = {"click": "click", "daction": "daction", "purchase": "purchase"}


def _model(name="esm2", **kwargs):
    return ConversionModel(name, None if name == "gbdt" else SMALL, FAST, **kwargs)


@pytest.mark.parametrize("name", ["esm2", "esmm", "dnn", "dnn-os", "gbdt"])
def test_every_model_learns_the_click_signal(impressions, name):
    train, test = impressions.iloc[:3000], impressions.iloc[3000:]
    model = _model(name).fit(train)
    metrics = model.evaluate(test)
    assert metrics["ctr_auc"] > 0.62       # the generating logit gives ~0.68 on this table
    predictions = model.predict(test, keep=[])
    assert predictions.index.equals(test.index)
    assert ((predictions > 0) & (predictions < 1)).all().all()


def test_esm2_predicts_all_four_outputs_and_they_compose(impressions):
    predictions = _model().fit(impressions).predict(impressions.head(50))
    assert list(predictions.columns) == ["user_id", "item_id", "p_ctr", "p_cvr", "p_ctavr", "p_ctcvr"]
    np.testing.assert_allclose(predictions.p_ctcvr, predictions.p_ctr * predictions.p_cvr, rtol=1e-5)


@pytest.mark.parametrize("name", ["esm2", "gbdt"])
def test_model_directory_round_trip(tmp_path, impressions, name):
    model = _model(name).fit(impressions)
    model.save(tmp_path / "m")
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "encoder.json").exists()
    loaded = ConversionModel.load(tmp_path / "m")
    pd.testing.assert_frame_equal(loaded.predict(impressions), model.predict(impressions))
    model.save(tmp_path / "m")            # overwriting an existing directory works
    assert not list(tmp_path.glob(".m*"))  # and leaves no temporary directory behind


def test_load_rejects_a_folder_that_is_not_a_model(tmp_path):
    with pytest.raises(DataError, match="not a promokit model directory"):
        ConversionModel.load(tmp_path)


def test_unknown_model_name():
    with pytest.raises(DataError, match="unknown model 'esm3'"):
        ConversionModel("esm3")


def test_esm2_needs_daction_but_esmm_does_not(impressions):
    table = impressions.drop(columns="daction")
    with pytest.raises(DataError, match=r"model 'esm2' needs the \['daction'\] label"):
        _model("esm2").fit(table)
    _model("esmm").fit(table)


def test_purchase_without_click_is_an_error_with_count_and_example(impressions):
    table = impressions.copy()
    unclicked = table.index[table.click == 0][:3]
    table.loc[unclicked, "purchase"] = 1
    with pytest.raises(DataError, match=rf"'purchase' \(purchase\) is 1 on 3 of 4000 rows.*row {unclicked[0]}"):
        _model().fit(table)


def test_repair_zeroes_post_click_labels_on_unclicked_rows_and_reports(impressions):
    table = impressions.copy()
    table.loc[table.index[table.click == 0][:3], "purchase"] = 1
    table.loc[table.index[table.click == 0][:2], "daction"] = 1
    model = _model(repair_labels=True).fit(table, validation=0)
    assert model.report_.labels.repaired == {"daction": 2, "purchase": 3}


@pytest.mark.parametrize("value, message", [(2, "must be 0/1 but has 1 other values"),
                                            (np.nan, "has 1 missing values")])
def test_bad_label_values(impressions, value, message):
    table = impressions.astype({"click": float})
    table.loc[7, "click"] = value
    with pytest.raises(DataError, match=message):
        check_labels(table, LABELS)


def test_unseen_categories_at_predict_time_use_the_oov_slot(impressions):
    model = _model().fit(impressions)
    new = impressions.head(5).assign(user_id=[10_001, 10_002, 10_003, 10_004, 10_005], segment="new segment")
    predictions = model.predict(new)
    assert np.isfinite(predictions.to_numpy()).all()


def test_numeric_nan_is_imputed_and_flagged(impressions):
    table = impressions.copy()
    table.loc[table.index[::10], "price"] = np.nan
    model = _model().fit(table)
    assert model.encoder_.numeric["price"].flag_missing
    assert model.encoder_.numeric_width == 2
    assert np.isfinite(model.predict(table).to_numpy()).all()
    clean = _model().fit(impressions)
    with pytest.warns(UserWarning, match="'price': 400 of 4000 values are missing"):
        clean.predict(table)


def test_cvr_auc_is_over_clicked_rows_only():
    labels = {"click": np.array([1, 1, 1, 1, 0, 0.]), "purchase": np.array([1, 0, 1, 0, 0, 0.])}
    # on unclicked rows p_cvr is high: over all impressions that would lower the CVR AUC
    p_cvr = np.array([0.9, 0.1, 0.8, 0.2, 0.95, 0.99])
    p_ctr = np.full(6, 0.5)
    metrics = conversion_metrics(labels, {"p_ctr": p_ctr, "p_cvr": p_cvr, "p_ctcvr": p_ctr * p_cvr})
    assert metrics["cvr_auc"] == 1.0
    assert metrics["ctcvr_auc"] == pytest.approx(auc(labels["purchase"], p_cvr))


def test_fit_is_reproducible_from_the_seed(impressions):
    a = _model().fit(impressions).predict(impressions.head(100))
    b = _model().fit(impressions).predict(impressions.head(100))
    pd.testing.assert_frame_equal(a, b)


def test_the_held_out_and_the_validation_rows_are_the_latest_when_the_spec_names_a_time_key(impressions):
    table = impressions.assign(day=impressions.index // 400)  # ten days of 400 rows
    seen = {}

    def on_epoch(epoch, record):
        seen.setdefault("epochs", []).append(record)

    model = _model("esmm", spec=FeatureSpec(categorical=["user_id", "segment"], time_key="day"))
    model.fit(table, on_epoch=on_epoch)
    assert (model.report_.n_train, model.report_.n_valid, model.report_.n_test) == (3200, 400, 400)
    assert model.held_out(table).tolist() == list(range(3600, 4000))  # the last day, held out for evaluation
    # the validation rows are those of an explicit validation table of the day before
    explicit = _model("esmm", spec=FeatureSpec(categorical=["user_id", "segment"]), test_fraction=0)
    explicit.fit(table[table.day < 8], validation=table[table.day == 8])
    assert seen["epochs"][0]["valid_loss"] == pytest.approx(explicit.history_.epochs[0]["valid_loss"])
    randomly = _model("esmm", spec=FeatureSpec(categorical=["user_id", "segment"], time_key="day"))
    randomly.fit(table, validation_split="random")
    assert randomly.history_.epochs[0]["valid_loss"] != seen["epochs"][0]["valid_loss"]


def test_monitor_picks_the_epoch_on_a_validation_auc(impressions):
    config = TrainConfig(epochs=3, batch_size=200, lr=0.01, monitor="cvr_auc", patience=5, progress=False)
    model = ConversionModel("esm2", SMALL, config).fit(impressions)
    history = model.history_
    scores = [e["valid_cvr_auc"] for e in history.epochs]
    assert {"valid_ctr_auc", "valid_ctcvr_auc"} <= set(history.epochs[0])
    assert history.best_score == max(scores) and history.best_epoch == scores.index(max(scores))
    with pytest.raises(DataError, match="monitor must be one of"):
        ConversionModel("esm2", SMALL, TrainConfig(monitor="auc"))
    no_purchase = impressions.head(400).assign(purchase=0)
    with pytest.raises(DataError, match="monitor 'ctcvr_auc' needs both classes of 'purchase' among the 400"):
        ConversionModel("esmm", SMALL, TrainConfig(monitor="ctcvr_auc", progress=False)).fit(impressions,
                                                                                            validation=no_purchase)
    with pytest.raises(DataError, match=r"label 'purchase' \(purchase\) is 0 on all \d+ clicked rows of the 3600"):
        ConversionModel("esmm", SMALL, TrainConfig(progress=False), test_fraction=0).fit(impressions.assign(purchase=0))


def test_min_count_among_the_params_goes_to_the_vocabulary(impressions):
    params = {**SMALL, "min_count": 100}
    model = ConversionModel("esmm", params, FAST, refit=False).fit(impressions)
    assert model.feature_spec_.min_count == 100 and "min_count" not in model.model_params_
    assert model.params is params and params["min_count"] == 100 and model.spec is None  # parameters kept as given
    # 50 users of ~80 rows each: none reaches 100, so the user field is its OOV row alone
    assert model.encoder_.categorical["user_id"].cardinality == 1


def test_bench_gives_each_model_its_own_training_fields(impressions):
    from promokit.experiments.conversion import bench

    split = bench.Split(impressions.iloc[:3000], impressions.iloc[3000:3500], impressions.iloc[3500:])
    seen = {}
    params = {"esmm": {**SMALL, "lr": 0.02, "embedding_decay": 2.0, "min_count": 3}, "lr": {"min_count": 2}}
    bench.run(split, ["esmm", "lr"], [0], None, params, FAST,
              on_fitted=lambda m: seen.update({m.model: (m.train_config, m.feature_spec_.min_count)}))
    assert (seen["esmm"][0].lr, seen["esmm"][0].embedding_decay, seen["esmm"][1]) == (0.02, 2.0, 3)
    assert (seen["lr"][0].lr, seen["lr"][1]) == (FAST.lr, 2)


def test_an_unknown_model_parameter_is_one_line_with_a_hint():
    with pytest.raises(DataError, match=r"model 'esm2' has no parameter 'hiden' \(did you mean 'hidden'\?\); its parameters are"):
        ConversionModel("esm2", {"hiden": [8]})
    with pytest.raises(DataError, match=r"model 'lr' has no parameter 'l2'; its parameters are \['l2_ctr', 'l2_cvr'\]"):
        ConversionModel("lr", {"l2": 1e-3})


def _with_cart(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with an undeclared post-click column: ``cart`` is 1 on 40 % of the clicked rows, 0 elsewhere."""
    rng = np.random.default_rng(1)
    return table.assign(cart=((table.click == 1) & (rng.random(len(table)) < 0.4)).astype(int))


def test_a_post_click_column_left_among_the_features_is_named_in_a_warning(impressions, tmp_path):
    from conftest import write_parts
    from promokit.conversion.parts import fit_parts
    from promokit.scale.executor import LocalExecutor

    table = _with_cart(impressions)
    unclicked, clicked, carts = int((table.click == 0).sum()), int(table.click.sum()), int(table.cart.sum())
    warning = (rf"feature columns \['cart'\] are 0 on all {unclicked} rows where 'click' is 0 and 1 on some of the "
               rf"{clicked} clicked rows \(cart: {carts}\): they look like post-click labels .*micro_behaviors: \[cart\] in "
               "the spec")
    with pytest.warns(UserWarning, match=warning):
        _model("esmm").fit(table, validation=0)
    with pytest.warns(UserWarning, match=warning):  # over parts: the same sums, part by part
        fit_parts(ConversionModel("esmm", SMALL, FAST, test_fraction=0), write_parts(table, tmp_path / "parts", [1500, 2500]),
                  LocalExecutor(), valid_fraction=0)


def test_0_1_features_seen_before_a_click_or_too_rare_to_tell_are_not_called_post_click(impressions, recwarn):
    table = impressions.assign(promo=(impressions.index % 7 == 0).astype(int))  # 1 on clicked and unclicked rows
    clicked = table.index[table.click == 1]
    table["rare"] = table.index.isin(clicked[:3]).astype(int)  # 3 ones, all clicked: chance 0.27**3 = 0.02
    assert 1e-3 < table.click.mean() ** 3
    _model("esmm").fit(table, validation=0)
    assert not [w for w in recwarn if "post-click" in str(w.message)]


def test_the_estimator_contract_clone_and_set_params(impressions):
    from sklearn.base import clone

    spec = FeatureSpec(categorical=["user_id", "segment"])
    model = _model("esmm", spec=spec).fit(impressions)
    assert model.spec is spec and model.feature_spec_ != spec  # fit resolves into feature_spec_, keeps the parameter
    copy = clone(model)
    assert copy.get_params() == model.get_params() and not hasattr(copy, "net_") and not hasattr(copy, "feature_spec_")
    with pytest.raises(NotFittedError, match="not fitted"):
        copy.predict(impressions)
    with pytest.raises(DataError, match=r"^model 'esm2' has no parameter 'hiden'"):
        model.set_params(model="esm2", params={"hiden": [8]})
    assert model.get_params()["model"] == "esmm" and model.model_params_["emb_dim"] == 4
    with pytest.raises(DataError, match="^train: monitor must be one of"):
        model.set_params(train=TrainConfig(monitor="auc"))
    assert model.train_config == FAST
    with pytest.raises(DataError, match="^repair_labels must be True or False, got 'yes'"):
        ConversionModel("esmm", repair_labels="yes")
    assert model.set_params(params={**SMALL, "min_count": 7}) is model and model.declared_spec.min_count == 7


def test_fit_reads_paths_predict_keeps_keys_and_evaluate_is_an_evaluation(impressions, tmp_path):
    from promokit.training.estimator import Evaluation

    impressions.iloc[:3600].to_parquet(tmp_path / "train.parquet")
    impressions.iloc[3600:].to_csv(tmp_path / "valid.csv", index=False)
    model = _model("esmm", test_fraction=0).fit(tmp_path / "train.parquet", validation=str(tmp_path / "valid.csv"))
    assert (model.report_.n_train, model.report_.n_valid) == (3600, 400)
    test = impressions.iloc[3000:3100]
    predictions = model.predict(test, keep=["segment"])
    assert list(predictions.columns) == ["segment", "p_ctr", "p_cvr", "p_ctcvr"]
    assert predictions.index.equals(test.index) and predictions["segment"].equals(test["segment"])
    with pytest.raises(DataError, match=r"^keep: columns \['shop'\] are not in the table of 100 rows"):
        model.predict(test, keep=["shop"])
    evaluation = model.evaluate(tmp_path / "valid.csv")
    assert isinstance(evaluation, Evaluation) and evaluation["ctr_auc"] > 0.5
    assert evaluation.title == "Conversion model esmm" and "| ctcvr_auc |" in evaluation.to_markdown()
    with pytest.raises(DataError, match=r"^`validation`: a fraction must be in \[0, 1\) \(0: no validation\), got 1.5$"):
        _model("esmm").fit(impressions, validation=1.5)
    with pytest.raises(DataError, match="^`validation_split` cuts the validation rows from `data`"):
        _model("esmm").fit(impressions, validation=impressions, validation_split="random")
    with pytest.raises(DataError, match="^data must be a DataFrame or a table path, got list"):
        _model("esmm").fit([1, 2])


def test_fit_holds_out_a_seeded_random_share_that_held_out_finds_again_in_the_table_or_its_parts(impressions, tmp_path):
    from conftest import write_parts
    from promokit.conversion.parts import fit_parts
    from promokit.scale.executor import LocalExecutor

    model = _model("esmm").fit(impressions)
    held = model.held_out(impressions)
    rule = {k: v for k, v in model.holdout_.items() if k != "refit"}  # then fit again on all 4,000 rows
    assert rule == {"test_fraction": 0.1, "how": "random", "seed": 0, "rows": 4000, "held_out": len(held)}
    refit = model.holdout_["refit"]
    assert refit["rows"] == 4000 and refit["evaluation"]["ctr_auc"] == model.held_out_evaluation(impressions)["ctr_auc"] > 0.6
    assert model.held_out_evaluation(impressions.assign(click=0)) is None  # not the rows it scored
    assert 300 < len(held) < 500 and model.report_.n_train + model.report_.n_valid + len(held) == 4000
    assert np.array_equal(model.evaluate(impressions, rows=held)["ctr_auc"], model.evaluate(impressions.iloc[held])["ctr_auc"])
    impressions.to_parquet(tmp_path / "table.parquet")
    reloaded = tmp_path / "model"
    model.save(reloaded)
    assert np.array_equal(ConversionModel.load(reloaded).held_out(tmp_path / "table.parquet"), held)
    with pytest.raises(DataError, match=r"^held_out: the model held out \d+ of the 4,000 rows it was fitted on, and "
                                        r"these data have 100 rows"):
        model.held_out(impressions.head(100))
    # over parts, each part draws its own rows (part k seeded by (seed, k, 1)); held_out finds them in the parts
    parts = write_parts(impressions, tmp_path / "parts", [1500, 0, 2500])
    over_parts = fit_parts(ConversionModel("esmm", SMALL, FAST), parts, LocalExecutor(), valid_fraction=0)
    assert over_parts.report_.n_train + over_parts.report_.n_test == 4000
    assert len(over_parts.held_out(parts)) == over_parts.report_.n_test == over_parts.holdout_["held_out"]
    with pytest.raises(DataError, match=r"drew the rows it held out part by part, from parts of \[1500, 0, 2500\]"):
        over_parts.held_out(impressions)  # the same rows, not in the same parts
    assert len(_model("esmm", test_fraction=0).fit(impressions).held_out(impressions)) == 0
    with pytest.raises(DataError, match=r"^test_fraction must be a number in \[0, 1\) \(0: hold nothing out\), got 1"):
        ConversionModel("esmm", test_fraction=1)
    with pytest.raises(DataError, match="^test_fraction must be"):
        model.set_params(test_fraction=-0.1)
    assert model.test_fraction == 0.1


def test_over_parts_the_latest_rows_are_held_out_as_in_one_table(impressions, tmp_path):
    from conftest import write_parts
    from promokit.conversion.parts import fit_parts
    from promokit.scale.executor import LocalExecutor

    table = impressions.assign(day=impressions.index // 400)
    spec = FeatureSpec(categorical=["user_id", "segment"], time_key="day")
    parts = write_parts(table, tmp_path / "parts", [1700, 2300])
    model = fit_parts(ConversionModel("esmm", SMALL, FAST, spec), parts, LocalExecutor())
    assert (model.report_.n_train, model.report_.n_valid, model.report_.n_test) == (3200, 400, 400)
    assert model.held_out(parts).tolist() == list(range(3600, 4000))


def test_a_label_under_another_name_is_mapped_by_the_spec_and_the_error_says_how(impressions):
    table = impressions.rename(columns={"click": "is_click"})
    with pytest.raises(DataError, match=r"column 'click' \(label 'click'\) is missing from the table of 4000 rows; did "
                                        r"you mean 'is_click'\? If it holds the label, map it: "
                                        r"FeatureSpec\(labels=\{'click': 'is_click'\}\)\. Columns present"):
        _model("esmm").fit(table)
    model = _model("esmm", spec=FeatureSpec(labels={"click": "is_click"})).fit(table)
    assert model.evaluate(table, rows=model.held_out(table))["ctr_auc"] > 0.5


def test_the_train_command_takes_its_defaults_from_the_estimator():
    """Defaults are stated once, in the library: conversion train's are ConversionModel's and fit's."""
    import inspect

    import typer.main

    from promokit.cli.conversion import app
    from promokit.conversion.defaults import DEFAULT_TRAIN, VALIDATION_FRACTION
    from promokit.conversion.estimator import _validation

    command = {p.name: p.default for p in typer.main.get_command(app).commands["train"].params}
    init = inspect.signature(ConversionModel.__init__).parameters
    for name in ("model", "test_fraction", "repair_labels"):
        assert command[name] == init[name].default, name
    assert inspect.signature(ConversionModel.fit).parameters["validation"].default is None
    assert command["validation"] is None and _validation(None).fraction == VALIDATION_FRACTION  # fit's default
    assert command["seed"] == DEFAULT_TRAIN.seed
    assert all(command[name] is None for name in ("epochs", "batch_size", "lr", "patience", "embedding_decay",
                                                  "weight_decay", "monitor", "params", "min_count", "wide"))


def test_conversion_spec_reads_micro_behaviours_as_a_list_or_comma_separated():
    from promokit.conversion.contract import conversion_spec, micro_behavior_columns

    spec = conversion_spec(FeatureSpec(numeric=["price"]), micro_behaviors=" cart, favorite,,",
                           types={"segment": "categorical"}, labels={"click": "is_click"})
    assert spec.micro_behaviors == ["cart", "favorite"] and spec.numeric == ["price"]
    assert spec.types == {"segment": "categorical"} and spec.labels["click"] == "is_click"
    assert micro_behavior_columns(["cart"]) == ["cart"]
    with pytest.raises(DataError, match=r"^`micro_behaviors` names no column \(' , '\)"):
        micro_behavior_columns(" , ")
    with pytest.raises(DataError, match=r"^`micro_behaviors` lists \['cart'\] more than once"):
        micro_behavior_columns("cart,qa,cart")


def test_evaluate_maps_labels_and_checks_the_micro_behaviours_it_is_given(impressions):
    model = _model("esmm").fit(impressions)
    renamed = impressions.rename(columns={"click": "is_click"}).assign(cart=impressions["daction"])
    with pytest.warns(UserWarning, match="predicts no micro-behaviour nodes; `micro_behaviors` adds node AUCs"):
        evaluation = model.evaluate(renamed, labels={"click": "is_click"}, micro_behaviors="cart")
    assert evaluation["ctr_auc"] == model.evaluate(impressions)["ctr_auc"]
    assert model.feature_spec_.labels["click"] == "click" and model.feature_spec_.micro_behaviors == []  # unchanged
    with pytest.raises(DataError, match=r"^column 'carts' \(micro-behaviour label\) is missing .*did you mean 'cart'"):
        model.evaluate(renamed, labels={"click": "is_click"}, micro_behaviors=["carts"])


def test_fit_on_an_executor_trains_a_network_over_parts_and_refuses_or_reads_whole_the_others(impressions, tmp_path):
    from conftest import write_parts

    from promokit.cli.support import deferred_executor
    from promokit.conversion.parts import fit_parts
    from promokit.scale.executor import LocalExecutor

    parts = write_parts(impressions, tmp_path / "parts", [1500, 2500])
    with pytest.warns(UserWarning, match="offset wide term"):  # trained over the parts, as fit_parts trains
        on_executor = _model("esmm").fit(parts, validation=0, executor=LocalExecutor())
        alone = fit_parts(_model("esmm"), parts, LocalExecutor(), valid_fraction=0)
    assert [e["train_loss"] for e in on_executor.history_.epochs] == [
        e["train_loss"] for e in alone.history_.epochs]
    with pytest.warns(UserWarning, match="model 'lr' is fitted on the whole table, not by epochs over its parts"):
        assert ConversionModel("lr", train=FAST).fit(parts, executor=LocalExecutor()).report_.n_train > 0
    ray = deferred_executor("ray", None, None)
    with pytest.raises(DataError, match=r"^model 'lr' is not trained by epochs .* with `executor` ray: train it with "
                                        r"`executor` local"):
        ConversionModel("lr").fit(parts, executor=ray)
    assert ray._executor is None  # refused before a Ray cluster was started
    with pytest.raises(DataError, match=r"^`validation_split` cuts the validation rows from `data`"):
        _model("esmm").fit(parts, validation=impressions, validation_split="random", executor=LocalExecutor())


def test_evaluate_reports_the_calibration_of_each_probability(impressions):
    test = impressions.iloc[3000:]
    model = _model("esmm", test_fraction=0).fit(impressions.iloc[:3000])
    evaluation, predictions = model.evaluate(test), model.predict(test, keep=[])
    clicked = test["click"].to_numpy() == 1
    assert evaluation["mean_predicted"] == pytest.approx(predictions["p_ctcvr"].mean(), rel=1e-5)
    assert evaluation["mean_observed"] == pytest.approx(test["purchase"].mean())
    assert evaluation["ctr_mean_observed"] == pytest.approx(test["click"].mean())
    assert evaluation["cvr_mean_predicted"] == pytest.approx(predictions["p_cvr"][clicked].mean(), rel=1e-5)
    assert evaluation["calibration_ratio"] == pytest.approx(evaluation["mean_predicted"] / evaluation["mean_observed"])
    assert 0 <= evaluation["ece"] < 1 and "ctr_auc" in evaluation  # added beside the metrics, none replaced
    assert set(evaluation.tables) == {"calibration", "ctr_calibration", "cvr_calibration"}
    assert evaluation.tables["cvr_calibration"]["rows"].sum() == clicked.sum()

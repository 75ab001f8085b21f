"""The value domain: its contract's errors, leak-free behaviour, learning on a small world, the model directory,
the ETV table that `allocate quota` reads, and ValueModel's estimator contract (parameters, split, data forms)."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from promokit.allocation.tables import read_quota_table
from promokit.data import DataError
from promokit.experiments.value.world import make_world, write_world
from promokit.metrics import auc
from promokit.training import TrainConfig
from promokit.training.estimator import Evaluation
from promokit.value.contract import check_tables
from promokit.value.estimator import ValueModel, delivery_split

SMALL = {"expert_hidden": [16], "expert_dim": 16, "tower_hidden": [8], "emb_dim": 4, "fanouts": [4, 4],
         "max_len": 12}
QUICK = TrainConfig(epochs=2, batch_size=256, lr=3e-3, patience=2, progress=False)


@pytest.fixture(scope="module")
def world():
    return make_world(1200, seed=3)


@pytest.fixture(scope="module")
def tables(world):
    return check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)


@pytest.fixture(scope="module")
def fitted(tables):
    # the selected model, not refit: the tests below score it on the deliveries it held out
    model = ValueModel("esdpm", SMALL, QUICK, refit=False).fit(tables)
    return model, model.split_rows(tables)[2]


def _check(world, **changes):
    frames = {"deliveries": world.deliveries, "users": world.users, "funds": world.funds,
              "behaviors": world.behaviors, "consumption": world.consumption, **changes}
    return check_tables(frames["deliveries"], frames["users"], frames["funds"], frames["behaviors"],
                        frames["consumption"])


@pytest.mark.parametrize("change, message", [
    (lambda d: d.iloc[:0], "deliveries: the table is empty"),
    (lambda d: d.assign(user_id="nobody"), "not in the users table"),
    (lambda d: d.assign(fund=np.where(np.arange(len(d)) == 3, "F99", d.fund)), "1 values in"),
    (lambda d: d.assign(click=0), r"conversions without a click .* \(repair_labels=True sets the conversion"),
    (lambda d: d.assign(amount=np.where(d.convert == 1, 0.0, d.amount)), "conversions without an amount"),
    (lambda d: d.assign(amount=d.amount + 1.0), "amounts without a conversion"),
    (lambda d: d.assign(amount=np.where(np.arange(len(d)) == 5, np.inf, d.amount)), "finite numbers ≥ 0"),
    (lambda d: d.assign(convert="yes"), "must be 0/1"),
    (lambda d: d.assign(time=np.where(np.arange(len(d)) == 2, "soon", d.time.astype(str))), "unreadable"),
    (lambda d: d.assign(click=0, convert=0, amount=0.0), "'convert' is 0 on all"),
    (lambda d: d.drop(columns="amount"), "column 'amount'"),
])
def test_broken_deliveries_are_one_line_errors(world, change, message):
    with pytest.raises(DataError, match=message) as caught:
        _check(world, deliveries=change(world.deliveries))
    assert "\n" not in str(caught.value)


def test_other_tables_errors(world):
    with pytest.raises(DataError, match="users: 1 repeated user_id"):
        _check(world, users=pd.concat([world.users, world.users.iloc[:1]]))
    with pytest.raises(DataError, match="tolerance.*whole numbers"):
        _check(world, users=world.users.assign(tolerance=2.5))
    with pytest.raises(DataError, match="behaviors: column 'time' holds numbers"):
        _check(world, behaviors=world.behaviors.assign(time=1.0))
    with pytest.raises(DataError, match="consumption: column 'amount'"):
        _check(world, consumption=world.consumption.assign(amount=-1.0))
    odd = pd.concat([world.consumption, pd.DataFrame({"user_id": ["ghost"], "merchant_id": ["m1"], "amount": [3.0]})])
    assert _check(world, consumption=odd).counts["payments of unknown users (dropped)"] == 1


def test_repair_labels_counts_each_repair_once(world):
    broken = world.deliveries.copy()
    converted = np.flatnonzero(broken.convert.to_numpy() == 1)
    broken.loc[converted[:3], "click"] = 0         # conversions without a click (their amounts go too)
    broken.loc[converted[3:5], "amount"] = 0.0     # conversions without an amount
    unconverted = np.flatnonzero(broken.convert.to_numpy() == 0)
    broken.loc[unconverted[:4], "amount"] = 7.0    # amounts without a conversion
    tables = check_tables(broken, world.users, world.funds, repair_labels=True)
    assert tables.counts["repaired conversions without a click"] == 3
    assert tables.counts["repaired conversions without an amount"] == 2
    assert tables.counts["repaired amounts without a conversion"] == 4
    assert ((tables.amount > 0) == (tables.convert == 1)).all() and (tables.convert <= tables.click).all()


def test_no_behaviour_at_or_after_a_delivery_reaches_its_prediction(world, tables, fitted):
    """Every delivery's own click and purchase are echoed as behaviours at exactly its time: changing or removing
    every behaviour at or after a delivery's time must leave its prediction unchanged."""
    model, test = fitted
    rows = test[:300]
    cut = tables.time[rows].min()
    behaviors = world.behaviors
    later = behaviors.time.to_numpy().astype("datetime64[ns]").view(np.int64) >= cut
    forged = behaviors.copy()
    forged.loc[later, "action"] = "purchase"
    forged.loc[later, "fund"] = "F1"
    before = model.predict(tables, rows=rows)
    after = model.predict(_check(world, behaviors=forged), rows=rows)
    # rows at exactly the cut see nothing later; later rows may see the forged events before them, so compare those
    at_cut = tables.time[rows] == cut
    assert at_cut.sum() >= 1
    pd.testing.assert_frame_equal(before[at_cut], after[at_cut])
    only_past = _check(world, behaviors=behaviors[~later])
    pd.testing.assert_frame_equal(before[at_cut], model.predict(only_past, rows=rows)[at_cut])
    assert not np.allclose(before.etv, model.predict(_check(world, behaviors=behaviors.iloc[:0]), rows=rows).etv)


def test_sequences_hold_only_strictly_earlier_events(world, tables, fitted):
    model, _ = fitted
    rows = np.arange(0, len(tables.deliveries), 37)
    seq = model.encoders_.sequences(tables, rows)
    behaviour_time = tables.behaviors.time.to_numpy()
    for i, row in enumerate(rows):
        user_events = tables.behaviors.user.to_numpy() == tables.user[row]
        earlier = int((user_events & (behaviour_time < tables.time[row])).sum())
        assert int((seq[i, :, 0] >= 0).sum()) == min(earlier, model.max_len)


def test_esdpm_learns_conversion_and_amount_signal(tables, fitted):
    model, test = fitted
    predictions = model.predict(tables, rows=test)
    assert list(predictions.columns[:2]) == ["user_id", "fund"]
    assert (predictions.user_id == tables.deliveries.user_id.to_numpy()[test]).all()
    assert auc(tables.convert[test], predictions.p_ctcvr) > 0.7
    assert (predictions.sigma >= 0.1).all() and np.isfinite(predictions.etv).all()
    converted = tables.convert[test] == 1
    assert np.corrcoef(predictions.mu[converted], tables.log_amount[test][converted])[0, 1] > 0.3
    metrics = model.evaluate(tables, rows=test)
    deciles, funds = metrics.tables["decile_calibration"], metrics.tables["calibration_per_fund"]
    assert metrics["gini"] > 0.3 and len(deciles) == 10 and metrics["deliveries"] == len(test)
    assert funds.deliveries.sum() == len(test) and 0 <= metrics["best_differs"] <= 1


def test_model_directory_round_trip_and_quota_table(tables, fitted, tmp_path):
    model, test = fitted
    model.save(tmp_path / "m")
    loaded = ValueModel.load(tmp_path / "m")
    pd.testing.assert_frame_equal(model.predict(tables, rows=test), loaded.predict(tables, rows=test))
    assert loaded.get_params()["split"] == "time" and loaded.holdout_ == model.holdout_
    assert (loaded.split_rows(tables)[2] == test).all()
    scores = loaded.score_table(tables)
    assert list(scores.columns) == ["user_id", *[f"score_{f}" for f in tables.fund_names], "tolerance"]
    quota = read_quota_table(scores)
    assert quota.etv.shape == (len(tables.users), len(tables.funds)) and (quota.etv >= 0).all()
    assert quota.funds == tables.fund_names and (quota.tolerance == tables.tolerance()).all()


def test_graph_models_need_the_consumption_table(world, tables):
    without = check_tables(world.deliveries, world.users, world.funds, world.behaviors)
    with pytest.raises(DataError, match="reads the consumption graph"):
        ValueModel("esdpm", SMALL, QUICK).fit(without)
    with pytest.raises(DataError, match="no parameter 'experts'"):
        ValueModel("esdpm", {"experts": 3})


@pytest.mark.parametrize("name", ["esdpm-ncg", "mtl-ziln", "mtl-mse", "esmm", "mmoe", "shared-bottom", "dnn"])
def test_every_baseline_trains_and_scores(world, name):
    small = make_world(300, seed=5)
    tables = check_tables(small.deliveries, small.users, small.funds, small.behaviors, small.consumption)
    model = ValueModel(name, SMALL, TrainConfig(epochs=1, batch_size=256, progress=False)).fit(tables)
    predictions = model.predict(tables).drop(columns=["user_id", "fund"])
    assert np.isfinite(predictions.to_numpy()).all() and (predictions.etv >= 0).all()
    assert model.score_matrix(tables, contexts=2).shape == (300, len(tables.funds))


@pytest.fixture(scope="module")
def fitted_wide(tables):
    model = ValueModel("esdpm", {**SMALL, "wide": "joint"}, QUICK).fit(tables)
    return model, model.split_rows(tables)[2]


@pytest.mark.parametrize("which", ["fitted", "fitted_wide"])
def test_pair_scoring_equals_scoring_each_delivery(request, tables, which):
    """score_matrix computes each user's part once; it must equal scoring every user × fund × context as rows (with
    a wide term too, whose user, fund and context fields are laid out per pair)."""
    import torch

    model, _ = request.getfixturevalue(which)
    users = np.arange(7)
    at = tables.time.max() + 1
    fast = model.score_matrix(tables, at=at, users=users, contexts=3, seed=4)
    rng = np.random.default_rng(4)
    drawn = rng.choice(len(tables.deliveries), size=3, replace=False)
    context = model.encoders_.context.transform(tables.deliveries.iloc[drawn])
    n_funds = len(tables.funds)
    user = np.repeat(users, n_funds * 3)
    seq = model.encoders_.sequences(tables.__class__(**{**tables.__dict__, "user": users,
                                                        "time": np.full(len(users), at)}), users)
    batch = {"user": torch.from_numpy(user), "fund": torch.from_numpy(np.tile(np.repeat(np.arange(n_funds), 3), 7)),
             "ctx_cat": torch.from_numpy(np.tile(context.categorical, (7 * n_funds, 1))),
             "ctx_num": torch.from_numpy(np.tile(context.numeric, (7 * n_funds, 1))),
             "seq": torch.from_numpy(np.repeat(seq, n_funds * 3, axis=0))}
    with torch.no_grad():
        slow = model.net_.eval()(batch)["etv"].numpy().reshape(7, n_funds, 3).mean(axis=2)
    assert np.allclose(fast, slow, rtol=1e-5)


def test_cdnow_tables_from_a_hand_made_log(tmp_path):
    from promokit.value.cdnow import cdnow_tables, read_cdnow

    (tmp_path / "CDNOW_master.txt").write_text(
        " customer_id  date number_of_cds  dollar_value\n"
        " 00001 19970101  1   10.00\n"
        " 00001 19970301  2   30.00\n"
        " 00001 19971115  1   25.50\n"      # holdout: the label
        " 00002 19970105  3   40.00\n"
        " 00003 19970110  1    5.00\n"
        " 00003 19980701  1   99.00\n")     # after the holdout: ignored
    tables = cdnow_tables(read_cdnow(tmp_path))
    assert list(tables.users.user_id) == ["00001", "00002", "00003"]
    assert tables.amount.tolist() == [25.5, 0.0, 0.0] and tables.convert.tolist() == [1.0, 0.0, 0.0]
    first = tables.users.iloc[0]
    assert first.log_total_spend == pytest.approx(np.log1p(40.0)) and first.log_purchases == pytest.approx(np.log1p(2))
    assert first.days_since_last == (pd.Timestamp("1997-10-01") - pd.Timestamp("1997-03-01")).days  # to its end
    # only calibration purchases are behaviours, all before the delivery at the end of calibration
    assert len(tables.behaviors) == 4 and (tables.behaviors.time < tables.time.min()).all()
    with pytest.raises(DataError, match="no such file"):
        read_cdnow(tmp_path / "missing")


def test_one_table_set_is_encoded_once_for_predict_and_scores(world, fitted, monkeypatch):
    model, test = fitted
    tables = _check(world)  # a fresh table set: the model holds another's node inputs
    calls = []
    original = model.encoders_.nodes
    monkeypatch.setattr(model.encoders_, "nodes", lambda t: calls.append(t) or original(t))
    model.predict(tables, rows=test[:50])
    model.score_matrix(tables, users=np.arange(5), contexts=1)
    assert len(calls) == 1


def test_without_behaviours_the_network_has_no_sequence_encoder(tmp_path):
    small = make_world(300, seed=5)
    tables = check_tables(small.deliveries, small.users, small.funds)
    model = ValueModel("esdpm-ncg", SMALL, TrainConfig(epochs=1, batch_size=256, progress=False)).fit(tables)
    assert model.encoders_.max_len == 0 and model.encoders_.sequences(tables, np.arange(3)).shape == (3, 0, 2)
    assert not any(".behaviour." in name for name, _ in model.net_.named_parameters())
    full = ValueModel("esdpm-ncg", SMALL, TrainConfig(epochs=1, batch_size=256, progress=False))
    full.fit(check_tables(small.deliveries, small.users, small.funds, small.behaviors))
    assert full.encoders_.max_len == SMALL["max_len"]
    assert model.net_.encoders[0].output_dim == full.net_.encoders[0].output_dim - 128  # e_b, 128 wide (§5.1)
    model.save(tmp_path / "m")
    loaded = ValueModel.load(tmp_path / "m")
    # the behaviours of a scoring table change nothing: the model never learnt to read them
    scored = check_tables(small.deliveries, small.users, small.funds, small.behaviors)
    pd.testing.assert_frame_equal(model.predict(tables), loaded.predict(scored))
    assert np.array_equal(model.score_matrix(tables), loaded.score_matrix(scored))


# ---------------------------------------------------------------------------------------------- estimator contract


def test_clone_keeps_the_parameters_and_drops_what_fit_learnt(fitted):
    model, _ = fitted
    copy = clone(model)
    assert copy.get_params() == model.get_params() == {"model": "esdpm", "params": SMALL, "train": QUICK,
                                                       "split": "time", "test_fraction": 0.1, "labels": None,
                                                       "allow_leaky": None, "refit": False}
    assert not any(hasattr(copy, name) for name in ("net_", "encoders_", "holdout_")) and model.net_ is not None
    assert copy._model_params == model.model_params_ and copy.max_len == SMALL["max_len"]


@pytest.mark.parametrize("change, message", [
    ({"model": "esdmp"}, "unknown model 'esdmp'"),
    ({"split": "users"}, r"split must be one of \['time', 'random'\], got 'users'"),
    ({"test_fraction": 1.0}, r"test_fraction must be a number in \[0, 1\), got 1.0"),
    ({"params": {"max_len": 0}}, "params: max_len must be a whole number of at least 1, got 0"),
    ({"params": {"experts": 3}}, "no parameter 'experts'"),
    ({"train": "fast"}, "train must be a TrainConfig, a dict of its settings or None, got str"),
    ({"train": TrainConfig(monitor="gauc")}, "monitor must be one of"),
    ({"labels": {"bought": "purchased"}}, "labels: unknown label role 'bought'"),
])
def test_a_bad_parameter_is_a_one_line_error_and_set_params_keeps_the_old_ones(change, message):
    with pytest.raises(DataError, match=message) as caught:
        ValueModel(**{"model": "esdpm", **change})
    assert "\n" not in str(caught.value)
    model = ValueModel("esdpm-ncg", SMALL, QUICK, split="random")
    before = model.get_params()
    with pytest.raises(DataError, match=message):
        model.set_params(**change)
    assert model.get_params() == before and model._model_params["expert_dim"] == SMALL["expert_dim"]
    assert model.set_params(test_fraction=0.2, params={"max_len": 3}) is model
    assert model.max_len == 3 and model.holdout_for()["test_fraction"] == 0.2


def test_split_rows_hold_out_the_test_and_take_the_validation_given(tables):
    model = ValueModel("dnn", SMALL, QUICK)
    train, valid, test = model.split_rows(tables)
    assert [len(train), len(valid), len(test)] == [len(r) for r in delivery_split(tables)]
    assert tables.time[test].min() >= tables.time[train].max()  # split="time": the latest are held out
    assert len(model.split_rows(tables, 0.0)[1]) == 0 and len(model.split_rows(tables, 0.3)[1]) > 2 * len(valid)
    chosen = train[::7]
    got_train, got_valid, got_test = model.split_rows(tables, chosen)
    assert got_valid.tolist() == chosen.tolist() and (got_test == test).all()
    assert not np.isin(got_train, chosen).any() and len(got_train) + len(chosen) == len(train) + len(valid)
    with pytest.raises(DataError, match=r"validation: 2 of its 3 rows are held out for evaluation \(test_fraction"):
        model.split_rows(tables, [int(train[0]), *test[:2]])
    for bad, message in ((1.5, r"^`validation`: a fraction must be in \[0, 1\)"), ([-1], "are outside the"),
                         ("latest", r"^`validation` 'latest' is not a time .*; a value model takes None")):
        with pytest.raises(DataError, match=message):
            model.split_rows(tables, bad)
    random = ValueModel("dnn", SMALL, QUICK, split="random", test_fraction=0.25).split_rows(tables)[2]
    assert len(random) == round(0.25 * len(tables.deliveries)) and not np.array_equal(random, np.sort(test))


def test_fit_reads_a_folder_or_a_mapping_of_tables_and_evaluate_reports(tmp_path):
    small = make_world(300, seed=5)
    write_world(small, tmp_path / "world")
    tables = check_tables(small.deliveries, small.users, small.funds, small.behaviors, small.consumption)
    one_epoch = TrainConfig(epochs=1, batch_size=256, progress=False)
    from_tables = ValueModel("esdpm-ncg", SMALL, one_epoch).fit(tables, validation=0.2)
    from_folder = ValueModel("esdpm-ncg", SMALL, one_epoch).fit(tmp_path / "world", validation=0.2)
    mapping = {"deliveries": small.deliveries, "users": tmp_path / "world" / "users.parquet", "funds": small.funds,
               "behaviors": str(tmp_path / "world" / "behaviors.parquet")}
    from_mapping = ValueModel("esdpm-ncg", SMALL, one_epoch).fit(mapping, validation=0.2)
    held_out = from_folder.held_out(tmp_path / "world")
    split = {k: v for k, v in from_folder.holdout_.items() if k != "refit"}  # then refit on every delivery
    assert split == {"test_fraction": 0.1, "valid_fraction": 0.2, "how": "time", "seed": 0,
                     "rows": len(small.deliveries), "held_out": len(held_out)}
    assert from_folder.holdout_["refit"]["rows"] == len(small.deliveries)
    assert np.array_equal(held_out, from_folder.split_rows(tables)[2])
    with pytest.raises(DataError, match=rf"^held_out: the model held out {len(held_out)} of the "
                                        rf"{len(small.deliveries):,} deliveries it was fitted on, and these data have"):
        from_folder.held_out({**mapping, "deliveries": small.deliveries.head(100)})
    expected = from_tables.predict(tables)
    pd.testing.assert_frame_equal(from_folder.predict(tmp_path / "world"), expected)
    pd.testing.assert_frame_equal(from_mapping.predict(mapping), expected)
    report = from_folder.evaluate(tmp_path / "world", rows=held_out)
    assert isinstance(report, Evaluation) and report.title == "Value model esdpm-ncg"
    assert report["deliveries"] == len(held_out) and {"auc", "gini", "thc", "tha", "etv_bias"} <= set(report)
    text = report.to_markdown()
    assert f"| auc | {report['auc']:.4f} |" in text and "## Calibration per fund" in text
    with pytest.raises(DataError, match="data: no 'funds' table among"):
        from_folder.fit({"deliveries": small.deliveries, "users": small.users})
    with pytest.raises(DataError, match="data: unknown table 'payments'"):
        from_folder.fit({**mapping, "payments": small.consumption})


def test_evaluate_reports_the_calibration_of_pctcvr_by_fund(fitted, tables):
    model, test = fitted
    evaluation = model.evaluate(tables, rows=test)
    p_ctcvr = model.predict(tables, rows=test)["p_ctcvr"].to_numpy()
    assert evaluation["mean_predicted"] == pytest.approx(p_ctcvr.mean())
    assert evaluation["mean_observed"] == pytest.approx(tables.convert[test].mean())
    assert 0 <= evaluation["ece"] < 1
    by_fund = evaluation.tables["calibration_by_fund"]
    assert set(by_fund["fund"]) == set(np.asarray(tables.fund_names)[tables.fund[test]])
    assert by_fund["rows"].sum() == len(test)
    assert set(evaluation.tables) == {"decile_calibration", "calibration_per_fund", "calibration",
                                      "calibration_by_fund"}

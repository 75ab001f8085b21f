"""The incentive domain end to end on a tiny world: contract errors, learning, score tables for allocation."""

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError
import torch
from sklearn.base import clone

from promokit.allocation.tables import read_budget_table
from promokit.data import DataError
from promokit.experiments.allocation.simulate import simulate_budget
from promokit.experiments.incentive.world import make_world, write_world
from promokit.incentive.contract import check_tables, read_tables
from promokit.incentive.estimator import IncentiveModel, node_split
from promokit.incentive.offline_metrics import change_point, uplift_against_lowest
from promokit.training import TrainConfig
from promokit.training.estimator import Evaluation

FAST = TrainConfig(epochs=3, batch_size=256, lr=3e-3, lr_decay=0.95, patience=3, progress=False)


@pytest.fixture(scope="module")
def world():
    return make_world(2500, 250, seed=3)


@pytest.fixture(scope="module")
def tables(world):
    return check_tables(world.customers, world.merchants, world.edges)


@pytest.fixture(scope="module")
def fitted(tables):
    return IncentiveModel("gnn-hazard", {"width": 16, "hidden": [32, 16], "fanouts": [5, 5]}, FAST).fit(tables)


def test_contract_reads_the_world(tables, world):
    assert tables.levels.tolist() == list(world.levels)
    assert tables.counts["isolated_customers"] > 0 and tables.counts["edges"] == len(world.edges)
    assert tables.customer_spec.categorical == ["c_segment"] and "level" not in tables.customer_spec.numeric
    assert (tables.levels[tables.customer_level] == world.customers["level"].to_numpy()).all()


@pytest.mark.parametrize("table, change, message", [
    ("customers", lambda f: f.drop(columns="redeemed"), "column 'redeemed'"),
    ("customers", lambda f: f.assign(redeemed=2), "must be 0/1 but has 2500"),
    ("customers", lambda f: f.assign(redeemed=0), "only the value 0"),
    ("customers", lambda f: f.assign(level=f.level.astype(object).where(f.index != 5, "ten")), "non-numeric or infinite values"),
    ("customers", lambda f: f.assign(level=f.level.where(f.index != 5, np.inf)), "1 missing, non-numeric or infinite"),
    ("customers", lambda f: pd.concat([f, f.iloc[:1]]), "1 repeated customer_id values"),
    ("customers", lambda f: f.iloc[:0], "customers: the table is empty"),
    ("merchants", lambda f: f.assign(shares=f.shares.astype(float).where(f.index != 2, 1.5)), "whole numbers ≥ 0"),
    ("merchants", lambda f: f.assign(prior_shares=-1), "must hold numbers ≥ 0"),
    ("merchants", lambda f: f.assign(level=f.level.where(f.index != 0, 55.0)), "1 values outside the value list"),
    ("edges", lambda f: f.assign(merchant_id=f.merchant_id.where(f.index != 4, "nobody")), "not in the merchants table"),
    ("edges", lambda f: f.assign(weight=-f.weight), "negative values"),
    ("edges", lambda f: f.drop(columns="customer_id"), "column 'customer_id'"),
])
def test_every_broken_rule_is_one_line(world, table, change, message):
    parts = {"customers": world.customers, "merchants": world.merchants, "edges": world.edges}
    parts[table] = change(parts[table].copy())
    with pytest.raises(DataError, match=message) as error:
        check_tables(parts["customers"], parts["merchants"], parts["edges"],
                     levels=world.levels if table == "merchants" else None)
    assert "\n" not in str(error.value)


def test_levels_given_must_cover_the_offers(world):
    with pytest.raises(DataError, match="outside the value list"):
        check_tables(world.customers, world.merchants, world.edges, levels=[20, 40])
    with pytest.raises(DataError, match="strictly increasing"):
        check_tables(world.customers, world.merchants, world.edges, levels=[40, 20])


def test_split_holds_out_nodes_of_both_kinds():
    split = node_split(1000, 100, seed=1)
    assert len(split.test_customers) == 100 and len(split.test_merchants) == 10  # TEST_FRACTION of each
    every = np.concatenate([split.train_customers, split.valid_customers, split.test_customers])
    assert np.array_equal(np.sort(every), np.arange(1000))
    assert np.array_equal(node_split(1000, 100, seed=1).test_customers, split.test_customers)


def test_the_gnn_hazard_model_learns_the_response(fitted, tables, world):
    responses = fitted.responses(tables)
    result = fitted.evaluate(tables, held_out=True, truth=world.customer_truth)
    assert isinstance(result, Evaluation) and result.title == "incentive gnn-hazard"
    assert result["customers"] == len(fitted.held_out(tables)[0]) == 250
    # the held-out nodes' AUC_c of the selected model (scored before the refit, which learnt them): oracle ≈ 0.83;
    # a constant scores 0.5
    assert fitted.held_out_evaluation(tables)["auc_c"] > 0.72
    assert result["monotone_violations"] == 0 and 0 < result["curve_mae_c"] < 0.2
    assert np.all(np.diff(responses.customers, axis=1) >= -1e-6)
    assert (responses.merchants >= 0).all()
    assert result.tables["response_curve"]["predicted"].is_monotonic_increasing
    assert list(result.tables["uplift_by_quintile"]["group"]) == [1, 2, 3, 4, 5]
    assert set(result.figures) == {"response_curves", "uplift_curves"}
    text = result.to_markdown()
    assert f"| auc_c | {result['auc_c']:.4f} |" in text and "## Uplift by level" in text
    assert fitted.evaluate(tables)["customers"] == 2500  # every labelled node given, as in every domain


def test_predict_gives_the_customer_key_then_a_score_per_value(fitted, tables, world):
    scores = fitted.predict(tables)
    assert list(scores.columns) == ["customer_id", *[f"score_{v:g}" for v in world.levels]]
    assert scores["customer_id"].tolist() == world.customers["customer_id"].tolist()
    np.testing.assert_allclose(scores.iloc[:, 1:].to_numpy(), fitted.responses(tables).customers)
    assert read_budget_table(scores, key="customer_id").levels.tolist() == tables.levels.tolist()  # allocate budget


def test_clone_keeps_the_parameters_and_not_the_fit(fitted):
    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params()
    assert not any(hasattr(copy, name) for name in ("net_", "levels_", "history_"))
    with pytest.raises(NotFittedError, match="not fitted"):
        copy.predict({})


def test_a_refused_parameter_is_one_line_and_set_params_keeps_the_old_values():
    model = IncentiveModel("gnn-hazard", {"width": 8})
    before, settings = model.get_params(), dict(model._model_params)
    for change, message in (({"model": "gnn"}, "unknown model 'gnn'"),
                            ({"params": {"fanout": [5]}}, "did you mean 'fanouts'"),
                            ({"params": [("width", 4)]}, "params must be a dict"),
                            ({"train": TrainConfig(monitor="auc")}, "monitor must be one of"),
                            ({"train": "fast"}, "train must be a TrainConfig, a dict of its settings or None, got str")):
        with pytest.raises(DataError, match=message) as error:
            model.set_params(**change)
        assert "\n" not in str(error.value)
        assert model.get_params() == before and model._model_params == settings
    with pytest.raises(DataError, match="did you mean 'fanouts'"):
        IncentiveModel("gnn-hazard", {"fanout": [5, 5]})
    assert model.set_params(model="sbbm", params={"width": 4}) is model
    assert (model._model_params["head"], model._model_params["width"]) == ("sbbm", 4)


def test_fit_reads_a_folder_and_a_mapping_of_frames_and_paths(tmp_path):
    world = make_world(400, 40, seed=1)
    write_world(world, tmp_path)
    from_folder = IncentiveModel("lr", train=FAST).fit(tmp_path)
    mapping = {"customers": world.customers, "merchants": tmp_path / "merchants.parquet", "edges": world.edges}
    from_mapping = IncentiveModel("lr", train=FAST).fit(mapping)
    unlabelled = {**mapping, "customers": world.customers.drop(columns=["level", "redeemed"])}
    pd.testing.assert_frame_equal(from_mapping.predict(unlabelled), from_folder.predict(str(tmp_path)))
    for data, message in (({"customers": world.customers, "merchants": world.merchants},
                           "^merchants and edges go together: give both, or neither for an experiment with customers "
                           "only$"), ({"merchants": world.merchants}, r"data: no 'customers' table"),
                          (tmp_path / "none", "is not a folder"), (world.customers, "data must be a mapping of table name")):
        with pytest.raises(DataError, match=message):
            IncentiveModel("lr").fit(data)
    with pytest.raises(DataError, match=r"^`validation`: a fraction must be in \[0, 1\) \(0: no validation\), got 1.5$"):
        IncentiveModel("lr").fit(mapping, validation=1.5)


def test_test_fraction_is_a_parameter_and_held_out_finds_the_nodes_fit_held_out(tmp_path):
    world = make_world(400, 40, seed=1)
    write_world(world, tmp_path)
    model = IncentiveModel("lr", train=FAST, test_fraction=0.25).fit(tmp_path)
    customers, merchants = model.held_out(tmp_path)
    assert (len(customers), len(merchants)) == (100, 10) and model.get_params()["test_fraction"] == 0.25
    split = {k: v for k, v in model.holdout_.items() if k != "refit"}  # then refit on every labelled node
    assert split == {"test_fraction": 0.25, "valid_fraction": 0.1, "seed": 0, "rows": 400, "held_out": 100,
                     "merchants": 40, "held_out_merchants": 10} and model.holdout_["refit"]["rows"] == 400
    model.save(tmp_path / "model")
    loaded = IncentiveModel.load(tmp_path / "model")
    assert loaded.test_fraction == 0.25 and np.array_equal(loaded.held_out(tmp_path)[0], customers)
    assert loaded.evaluate(tmp_path, held_out=True)["customers"] == 100
    fewer = {"customers": world.customers.head(200), "merchants": world.merchants, "edges": world.edges.iloc[:0]}
    with pytest.raises(DataError, match=r"^held_out: the model held out 100 of the 400 labelled customers it was "
                                        r"fitted on, and these data have 200 labelled customers"):
        model.held_out(fewer)
    with pytest.raises(DataError, match=r"^test_fraction must be a number in \[0, 1\)"):
        IncentiveModel("lr", test_fraction=0.15).set_params(test_fraction="15 %")


def test_a_fit_validated_on_given_customers_records_no_fraction(tmp_path):
    world = make_world(400, 40, seed=1)
    write_world(world, tmp_path)
    model = IncentiveModel("lr", train=FAST, test_fraction=0.25, refit=False)
    held = model.fit(tmp_path, validation=0).held_out(tmp_path)[0]
    rows = np.setdiff1d(np.arange(400), held)[::6]
    model.fit(tmp_path, validation=rows)
    assert model.holdout_["valid_fraction"] is None and model.report_.n_valid == len(rows)
    assert np.array_equal(model.held_out(tmp_path)[0], held)
    split = model.split_rows(tmp_path)
    assert len(split.valid_customers) == 0 and np.isin(rows, split.train_customers).all()
    assert model.validation_evaluation(tmp_path, validation=rows)["customers"] == len(rows)
    model.save(tmp_path / "model")
    assert IncentiveModel.load(tmp_path / "model").holdout_["valid_fraction"] is None


def test_a_saved_model_scores_the_same_and_writes_allocatable_tables(fitted, tables, tmp_path):
    fitted.save(tmp_path / "model")
    loaded = IncentiveModel.load(tmp_path / "model")
    np.testing.assert_allclose(loaded.responses(tables).customers, fitted.responses(tables).customers, atol=1e-6)
    customers, merchants = loaded.score_tables(tables)
    customers.to_parquet(tmp_path / "c.parquet")
    merchants.to_parquet(tmp_path / "m.parquet")
    read = read_budget_table(tmp_path / "c.parquet")
    assert read.levels.tolist() == tables.levels.tolist() and read.scores.shape == (len(tables.customers), 8)
    assert read_budget_table(tmp_path / "m.parquet").scores.shape == (len(tables.merchants), 8)


def test_scoring_tables_without_labels(fitted, world):
    unlabelled = check_tables(world.customers.drop(columns=["level", "redeemed"]),
                              world.merchants.drop(columns=["level", "shares", "prior_shares"]), world.edges,
                              levels=world.levels, require_labels=False,
                              customer_features=fitted.customer_spec_, merchant_features=fitted.merchant_spec_)
    with pytest.warns(UserWarning, match="prior_shares"):
        scores = fitted.responses(unlabelled)
    assert scores.customers.shape == (2500, 8) and np.isfinite(scores.merchants).all()


def test_change_point_is_the_largest_rise_of_the_hazard():
    curve = pd.DataFrame({"level": [20, 40, 60, 80, 100, 120], "hazard_per_unit": [1.0, 1.1, 1.0, 1.2, 3.0, 3.1]})
    assert change_point(curve) == (80.0, 100.0)
    assert change_point(curve.drop(columns="hazard_per_unit")) is None


def test_each_value_against_the_lowest_by_hand():
    levels = np.array([10.0, 20.0, 30.0])
    offered = np.array([0, 1, 0, 1, 0])  # nobody offered 30
    y = np.array([0, 1, 0, 0, 1])
    f_c = np.array([[0.1, 0.6, 0.7], [0.1, 1.0, 1.0], [0.1, 0.5, 0.6], [0.1, 0.3, 0.4], [0.2, 0.2, 0.3]])
    table, curves = uplift_against_lowest(levels, offered, y, f_c)
    first = table.iloc[0]
    assert (first.treated, first.control) == (2, 3) and first.observed_uplift == pytest.approx(0.5 - 1 / 3)
    assert first.predicted_uplift == pytest.approx(np.mean([0.5, 0.9, 0.4, 0.2, 0.0]))
    # ranked by f_c(20) − f_c(10): the treated responder first, the control responder last (a perfect ranking)
    assert first.auuc == 1 and first.qini_coefficient == 1
    assert list(curves) == ["20"] and np.isnan(table.iloc[1].auuc) and table.iloc[1].treated == 0


def test_simulation_orders_oracle_above_random(world):
    levels, truth_c, truth_m = world.levels, world.customer_truth[:500], world.merchant_truth[:50]
    result = simulate_budget(levels, truth_c, truth_m, {"truth+noise": (np.clip(truth_c + 0.05, 0, 1), truth_m)}, 90.0)
    paced = result[result.budget == "paced"].set_index("model")
    assert set(paced.index) == {"truth+noise", "oracle", "random"}
    assert (paced["true_ratio"] <= 90.0 + 1e-6).all()
    assert paced.loc["oracle", "payments"] >= paced.loc["random", "payments"]
    planned = result[result.budget == "planned"].set_index("model")
    assert planned.loc["oracle", "true_ratio"] == pytest.approx(planned.loc["oracle", "planned_ratio"])


def test_a_level_that_was_not_randomised_is_refused(world):
    with pytest.raises(DataError, match="every one of the 2500 labelled rows was offered the level 100"):
        check_tables(world.customers.assign(level=100.0), world.merchants, world.edges)


def test_a_numeric_feature_with_a_stray_text_value_is_refused(world):
    spoiled = world.customers.assign(c_x0=world.customers.c_x0.astype(object).where(world.customers.index != 3, "abc"))
    with pytest.raises(DataError, match=r"column 'c_x0' holds numbers in 99.96% .* 1 values are not numbers, e.g. row 3"):
        check_tables(spoiled, world.merchants, world.edges)


def test_a_model_directory_that_does_not_fit_its_weights_is_a_one_line_error(fitted, tmp_path):
    import json

    fitted.save(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["params"]["conv"] == "graph" and config["params"]["fanouts"] == [5, 5]  # every setting is saved
    config["params"]["conv"] = "gat"
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="the weights do not fit the network its config.json describes"):
        IncentiveModel.load(tmp_path / "model")


def test_the_linear_floor_learns_and_has_no_tower(tables, world):
    model = IncentiveModel("lr", train=FAST).fit(tables)
    assert isinstance(model.net_.customer_tower, torch.nn.Identity)
    result = model.held_out_evaluation(tables)  # the selected model's, before the refit learnt the held-out nodes
    assert result["auc_c"] > 0.7 and result["monotone_violations"] == 0


@pytest.fixture(scope="module")
def part_labelled(world):
    """The world with a third of its customers unlabelled (no redemption, half of them without a level either)."""
    customers = world.customers.copy()
    customers.loc[customers.index % 3 == 0, "redeemed"] = np.nan
    customers.loc[customers.index % 6 == 0, "level"] = np.nan
    return customers


def test_unlabelled_customers_stay_in_the_graph_and_out_of_the_split(part_labelled, world):
    tables = check_tables(part_labelled, world.merchants, world.edges)
    assert tables.counts["unlabelled_customers"] == 834 and tables.counts["edges"] == len(world.edges)
    assert (tables.customer_level[::6] == -1).all() and len(tables.labelled_customers) == 1666
    split = IncentiveModel("gnn-hazard").split_rows(tables)
    rows = np.concatenate([split.train_customers, split.valid_customers, split.test_customers])
    assert np.array_equal(np.sort(rows), tables.labelled_customers) and len(split.test_customers) == 167


def test_split_rows_reads_validation_as_fit_does(part_labelled, world):
    tables = check_tables(part_labelled, world.merchants, world.edges)
    model = IncentiveModel("gnn-hazard")
    default, none, more = (model.split_rows(tables, v) for v in (None, 0.0, 0.3))
    assert len(none.valid_customers) == 0 and len(more.valid_customers) > 2 * len(default.valid_customers) > 0
    given = none.train_customers[:40]
    moved = model.split_rows(tables, given)
    assert np.array_equal(moved.valid_customers, np.sort(given)) and not np.isin(given, moved.train_customers).any()
    assert np.array_equal(moved.test_customers, none.test_customers)
    with pytest.raises(DataError, match="validation customers are held out for evaluation"):
        model.split_rows(tables, none.test_customers[:2])


def test_a_level_missing_on_a_labelled_customer_is_refused(part_labelled, world):
    broken = part_labelled.assign(level=part_labelled.level.where(part_labelled.index != 1, np.nan))
    with pytest.raises(DataError, match="customers: column 'level' has 1 missing, non-numeric or infinite values"):
        check_tables(broken, world.merchants, world.edges)


def test_unlabelled_customers_pass_messages_but_are_in_no_loss(part_labelled, world):
    small = {"width": 8, "hidden": [16, 8], "fanouts": [5, 5], "emb_dim": 4}
    fast = TrainConfig(epochs=2, batch_size=256, lr=3e-3, patience=3, progress=False)
    tables = check_tables(part_labelled, world.merchants, world.edges)
    model = IncentiveModel("gnn-hazard", small, fast).fit(tables)
    unlabelled = np.isnan(tables.redeemed)
    # what an unlabelled customer carries besides its features never reaches the loss: other levels, same weights
    other = check_tables(part_labelled.assign(level=np.where(unlabelled, 200.0, part_labelled.level)),
                         world.merchants, world.edges)
    again = IncentiveModel("gnn-hazard", small, fast).fit(other)
    for name, weight in model.net_.state_dict().items():
        assert torch.equal(weight, again.net_.state_dict()[name]), name
    # its features do reach its labelled neighbours two hops away, through their shared merchants
    edges = tables.edges
    shared = edges[edges.customer.isin(np.flatnonzero(unlabelled))].merchant
    neighbours = np.setdiff1d(edges[edges.merchant.isin(shared)].customer, np.flatnonzero(unlabelled))
    far = np.setdiff1d(tables.labelled_customers, neighbours)
    moved = part_labelled.assign(c_x1=np.where(unlabelled, -part_labelled.c_x1, part_labelled.c_x1),
                                 c_x2=np.where(unlabelled, -part_labelled.c_x2, part_labelled.c_x2))
    before = model.responses(tables).customers
    after = model.responses(check_tables(moved, world.merchants, world.edges)).customers
    change = np.abs(after - before).max(axis=1)
    assert (change[neighbours] > 0).mean() > 0.9 and change[neighbours].max() > 1e-5
    assert len(far) and change[far].max() == 0


def test_bench_summary_gives_relaimpr_of_auc_c_against_the_floor():
    from promokit.experiments.incentive.bench import BenchResult, HEADLINE, summary

    rows = [{"model": m, "seed": s, **{k: 0.3 for k in HEADLINE}, "auc_c": a, "monotone_violations": 0.0,
             "change_point_found": True, "fit_seconds": 1.0}
            for m, s, a in [("lr", 0, 0.79), ("lr", 1, 0.81), ("gnn-hazard", 0, 0.85), ("gnn-hazard", 1, 0.87),
                            ("oracle", 0, 0.89), ("oracle", 1, 0.89)]]
    table = summary(BenchResult(pd.DataFrame(rows), pd.DataFrame()))
    # ((0.86 − 0.5) / (0.80 − 0.5) − 1) · 100 = 20 %, ((0.89 − 0.5) / 0.3 − 1) · 100 = 30 %
    assert table["RelaImpr auc_c vs lr"].tolist() == ["+0.00%", "+20.00%", "+30.00%"]
    assert "RelaImpr auc_c vs lr" not in summary(BenchResult(pd.DataFrame(rows[2:]), pd.DataFrame())).columns


def test_the_model_keeps_the_label_mapping_it_was_fitted_with(world, tmp_path):
    renamed = {"customers": world.customers.rename(columns={"redeemed": "converted", "level": "offer"}),
               "merchants": world.merchants.rename(columns={"level": "offer"}), "edges": world.edges}
    labels = {"redeemed": "converted", "level": "offer"}
    model = IncentiveModel("lr", train=FAST).fit(read_tables(renamed, labels=labels))
    assert model.labels_ == labels
    model.save(tmp_path / "model")
    loaded = IncentiveModel.load(tmp_path / "model")
    assert loaded.labels_ == labels
    assert loaded.evaluate(renamed, held_out=True)["customers"] == model.holdout_["held_out"]
    # scoring needs no label: a table without the mapped columns is read as unlabelled
    unlabelled = {**renamed, "customers": renamed["customers"].drop(columns=["converted", "offer"])}
    assert len(loaded.predict(unlabelled)) == len(world.customers)
    # labels given replace the mapping kept
    with pytest.raises(DataError, match=r"column 'redeemed' \(label 'redeemed'\) is missing"):
        loaded.read(renamed, labels={"level": "offer"})


def test_evaluate_leaves_no_figure_in_pyplot(fitted, tables):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figures = fitted.evaluate(tables).figures
    assert plt.get_fignums() == before and set(figures) == {"response_curves", "uplift_curves"}


def test_evaluate_reports_calibration_at_the_offered_value_by_value(fitted, tables):
    evaluation = fitted.evaluate(tables, held_out=True)
    rows, _ = fitted.held_out(tables)
    assert evaluation["mean_observed"] == pytest.approx(tables.redeemed[rows].mean())
    assert evaluation["calibration_ratio"] == pytest.approx(evaluation["mean_predicted"] / evaluation["mean_observed"])
    assert 0 <= evaluation["ece"] < 1 and evaluation.tables["calibration"]["rows"].sum() == len(rows)
    by_level = evaluation.tables["calibration_by_level"]
    assert sorted(by_level["level"]) == sorted(set(fitted.levels_[tables.customer_level[rows]]))
    assert by_level["rows"].sum() == len(rows)

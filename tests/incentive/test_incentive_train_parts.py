"""The incentive GNN trained on a graph in parts (scan, records with encoders fitted from the shards' counts and roles
drawn from the ids, training from the records): the encoders equal those fitted on the one-folder graph, the roles
partition the labelled customers, and the model learns as the in-memory model does, saves, predicts in parts and
evaluates on the customers it held out; the command trains over parts; bad calls are one-line errors."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TrainsOnce
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data.errors import DataError
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import TEST, VALID, IncentiveModel, hashed_roles
from promokit.incentive.estimator import TRAIN as TRAIN_ROLE
from promokit.incentive.inputs import InputEncoders
from promokit.incentive.parts_training import train_parts
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig

torch.set_num_threads(1)
PARAMS = {"width": 16, "hidden": [16, 16], "emb_dim": 4, "fanouts": [5, 5]}
TRAIN = TrainConfig(epochs=6, batch_size=128, lr=3e-3, patience=3, monitor="customer_loglik", progress=False, seed=3)


def _model(name: str = "gnn-hazard") -> IncentiveModel:
    # no refit: the in-memory model is compared on the held-out customers with one trained over parts (never refit)
    return IncentiveModel(name, PARAMS, TRAIN, test_fraction=0.2, refit=False)


def _write(pieces, folder):
    folder.mkdir(parents=True)
    for k, piece in enumerate(pieces):
        piece.to_parquet(folder / f"part-{k:05d}.parquet", index=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A world of 1,500 customers (a fifth unlabelled) in 3 parts with their edges, merchants in 2 parts, and its
    tables whole."""
    world = make_world(1500, 100, seed=4)
    world.customers.loc[np.random.default_rng(1).random(1500) < 0.2, ["redeemed", "level"]] = np.nan
    root = tmp_path_factory.mktemp("graph")
    owner = np.random.default_rng(0).integers(0, 3, 1500)
    part_of = dict(zip(world.customers.customer_id, owner))
    for name, table in (("customers", world.customers), ("edges", world.edges)):
        _write([table[table.customer_id.map(part_of) == k] for k in range(3)], root / name)
    _write([world.merchants.iloc[:60], world.merchants.iloc[60:]], root / "merchants")
    tables = check_tables(world.customers, world.merchants, world.edges)
    return root, tables


@pytest.fixture(scope="module")
def trained(world, tmp_path_factory):
    root, _ = world
    model = _model()
    counts = train_parts(model, root / "customers", root / "merchants", root / "edges",
                         tmp_path_factory.mktemp("scratch"), LocalExecutor())
    return model, counts


def _held_out_auc(model: IncentiveModel, tables) -> float:
    from promokit.metrics import auc

    rows = model.held_out(tables)[0]
    f_c = model.responses(tables).customers[rows]
    return auc(tables.redeemed[rows], f_c[np.arange(len(rows)), tables.customer_level[rows]])


def test_encoders_from_the_shards_equal_those_of_the_whole_graph(world, trained):
    _, tables = world
    model, _ = trained
    whole = InputEncoders.fit(tables)
    for name in ("customers", "merchants", "customer_structure", "merchant_structure"):
        mine, theirs = getattr(model.encoders_, name), getattr(whole, name)
        assert mine.cardinalities == theirs.cardinalities, name
        assert list(mine.numeric) == list(theirs.numeric), name
        np.testing.assert_allclose(mine.transform(_frame(tables, name)).numeric,
                                   theirs.transform(_frame(tables, name)).numeric, rtol=1e-5, atol=1e-6)


def _frame(tables, name: str) -> pd.DataFrame:
    from promokit.incentive.inputs import _structure_frames

    customers, merchants = _structure_frames(tables)
    return {"customers": tables.customers, "merchants": tables.merchants, "customer_structure": customers,
            "merchant_structure": merchants}[name]


def test_roles_partition_the_labelled_customers_by_their_ids(world, trained):
    _, tables = world
    model, counts = trained
    labelled = tables.labelled_customers
    assert sum(counts["seeds"].values()) == len(labelled) == model.holdout_["rows"]
    valid_fraction = model.holdout_["valid_fraction"]
    roles = hashed_roles(tables.customers.customer_id.to_numpy()[labelled], 0.2, valid_fraction, TRAIN.seed)
    assert counts["seeds"]["test"] == np.sum(roles == TEST) == len(model.held_out(tables)[0])
    assert 0.15 < counts["seeds"]["test"] / len(labelled) < 0.25
    merchant_roles = hashed_roles(tables.merchants.merchant_id.to_numpy(), 0.2, valid_fraction, TRAIN.seed)
    assert counts["merchant_seeds"] == {name: int(np.sum(merchant_roles == role))
                                        for name, role in (("train", TRAIN_ROLE), ("valid", VALID), ("test", TEST))}
    assert counts["merchant_seeds"]["test"] == len(model.held_out(tables)[1]) == model.holdout_["held_out_merchants"]
    assert counts["records"] == sum(counts[s]["train"] + counts[s]["valid"] for s in ("seeds", "merchant_seeds"))


def test_the_model_learns_like_the_in_memory_model_and_serves(world, trained, tmp_path):
    _, tables = world
    model, _ = trained
    in_memory = _model().fit(tables)
    auc = {"parts": _held_out_auc(model, tables), "memory": _held_out_auc(in_memory, tables)}
    assert auc["parts"] > 0.75 and abs(auc["parts"] - auc["memory"]) < 0.05, auc
    model.save(tmp_path / "model")
    loaded = IncentiveModel.load(tmp_path / "model")
    pd.testing.assert_frame_equal(loaded.predict(tables), model.predict(tables))
    assert loaded.evaluate(tables, held_out=True).metrics["customers"] == model.holdout_["held_out"]


def test_the_merchant_term_trains_from_merchant_records(world, trained):
    """Labelled merchants get records of their own: the merchant term of eq. 7 trains the merchant head, whose f_m
    at the offered commission is nearer y^m than the mean is, as near as the in-memory model's (every merchant: the
    two hold out different ones)."""
    _, tables = world
    model, _ = trained
    in_memory = _model().fit(tables)
    assert model.merchants_trained and in_memory.merchants_trained
    assert "mae_m" in model.evaluate(tables).metrics
    target, rows = tables.merchant_target(), np.arange(len(tables.merchants))
    mae = {name: float(np.abs(m.responses(tables).merchants[rows, tables.merchant_level] - target).mean())
           for name, m in (("parts", model), ("memory", in_memory))}
    mae["mean"] = float(np.abs(target - target.mean()).mean())
    assert mae["parts"] < 0.95 * mae["mean"] and mae["parts"] < 1.1 * mae["memory"], mae


def test_without_labelled_merchants_the_merchant_responses_are_nan(world, tmp_path):
    """Merchant parts without labels give no merchant records: the merchant head never trains, so f_m is NaN in
    memory and over parts, and evaluation reports no merchant metric."""
    root, tables = world
    unlabelled = tmp_path / "merchants"
    unlabelled.mkdir()
    for path in sorted((root / "merchants").glob("*.parquet")):
        pd.read_parquet(path).drop(columns=["level", "shares"]).to_parquet(unlabelled / path.name)
    model = _model()
    model.train_config = replace(model.train_config, epochs=1)
    counts = train_parts(model, root / "customers", unlabelled, root / "edges", tmp_path / "scratch", LocalExecutor())
    assert sum(counts["merchant_seeds"].values()) == 0 and not model.merchants_trained
    responses = model.responses(tables)
    assert np.isnan(responses.merchants).all() and np.isfinite(responses.customers).all()
    metrics = model.evaluate(tables, held_out=False).metrics
    assert "mae_m" not in metrics and metrics["auc_c"] > 0.5
    model.save(tmp_path / "model")
    assert not IncentiveModel.load(tmp_path / "model").merchants_trained
    from promokit.incentive.parts import predict_parts

    predict_parts(tmp_path / "model", root / "customers", unlabelled, root / "edges", tmp_path / "scores",
                  LocalExecutor())
    merchants = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "scores" / "merchants").glob("*.parquet"))])
    customers = pd.concat([pd.read_parquet(p) for p in sorted((tmp_path / "scores" / "customers").glob("*.parquet"))])
    assert len(merchants) == 100 and merchants.filter(like="score_").isna().all().all()
    assert customers.filter(like="score_").notna().all().all()


def test_over_parts_the_refit_trains_on_every_labelled_node_and_evaluate_says_so(world, trained, tmp_path):
    """By default the selected model (``trained`` is it, with refit=False) is trained again from the records of
    every labelled customer and merchant, training, validation and test, for the epochs it kept; no held-out metrics
    are kept, and ``incentive evaluate`` warns that the nodes it scores were learnt."""
    root, tables = world
    selected, _ = trained
    model = IncentiveModel("gnn-hazard", PARAMS, TRAIN, test_fraction=0.2)
    counts = train_parts(model, root / "customers", root / "merchants", root / "edges", tmp_path / "scratch",
                         LocalExecutor())
    assert model.history_.epochs[-1]["valid_loss"] == selected.history_.epochs[-1]["valid_loss"]  # the same selection
    refit, report = model.holdout_["refit"], model.report_
    assert refit["rows"] == report.n_train + report.n_valid + report.n_test == len(tables.labelled_customers)
    assert refit["epochs"] == selected.history_.best_epoch + 1 and refit["evaluation"] is None
    assert counts["records"] == sum(sum(counts[side].values()) for side in ("seeds", "merchant_seeds"))
    assert len(model.training_ids_) == len(tables.labelled_customers) > len(selected.training_ids_)
    assert "refit" not in selected.holdout_
    weights = zip(model.net_.state_dict().values(), selected.net_.state_dict().values())
    assert not all(torch.equal(a, b) for a, b in weights)
    model.save(tmp_path / "model")
    evaluated = CliRunner().invoke(app, ["incentive", "evaluate", "--model", str(tmp_path / "model"),
                                         *(f"--{name}={root / name}" for name in ("customers", "merchants", "edges")),
                                         "--out", str(tmp_path / "eval")])
    assert evaluated.exit_code == 0, evaluated.output
    assert "refit on every row, the held-out ones too, over parts" in " ".join(evaluated.output.split())


def test_a_refit_over_parts_that_cannot_run_keeps_the_selected_model_with_one_warning(world, tmp_path):
    root, _ = world
    model = IncentiveModel("gnn-hazard", PARAMS, replace(TRAIN, epochs=1), test_fraction=0.2)
    with pytest.warns(UserWarning) as caught:
        train_parts(model, root / "customers", root / "merchants", root / "edges", tmp_path / "scratch", TrainsOnce())
    refits = [str(w.message) for w in caught if "refit" in str(w.message)]
    assert refits == ["the refit on every row failed, so the selected model is kept: the executor is gone"]
    assert "refit" not in model.holdout_ and len(model.training_ids_) == model.report_.n_train


def test_with_nothing_held_out_every_labelled_customer_trains(world, tmp_path):
    root, tables = world
    model = IncentiveModel("gnn-hazard", PARAMS, replace(TRAIN, epochs=1), test_fraction=0.0)
    counts = train_parts(model, root / "customers", root / "merchants", root / "edges", tmp_path / "scratch",
                         LocalExecutor(), validation=0.0)
    assert counts["seeds"]["train"] == len(tables.labelled_customers) == model.report_.n_train
    assert "refit" not in model.holdout_  # nothing held out: nothing to refit on


def test_the_refit_over_parts_runs_on_ray_train(ray_cluster, world, tmp_path):
    from promokit.scale import RayExecutor

    root, tables = world
    model = IncentiveModel("gnn-hazard", PARAMS, replace(TRAIN, epochs=1), test_fraction=0.2)
    train_parts(model, root / "customers", root / "merchants", root / "edges", tmp_path / "scratch",
                RayExecutor(workers=2))
    assert model.holdout_["refit"]["rows"] == len(tables.labelled_customers) > model.report_.n_train
    assert len(model.training_ids_) == len(tables.labelled_customers)


def test_the_command_trains_over_parts(world, tmp_path):
    root, _ = world
    result = CliRunner().invoke(app, ["incentive", "train", "--customers", str(root / "customers"), "--merchants",
                                      str(root / "merchants"), "--edges", str(root / "edges"), "--out",
                                      str(tmp_path / "m"), "--epochs", "2", "--params",
                                      '{"width": 8, "hidden": [8], "emb_dim": 4, "fanouts": [3, 3]}', "--draws", "2"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "trained over 3 parts" in text and "model written to" in text, text
    assert IncentiveModel.load(tmp_path / "m").holdout_["rule"] == "hashed"


def test_bad_calls_are_one_line_errors(world, tmp_path):
    root, _ = world
    with pytest.raises(DataError, match=r"^model 'dnn-h' reads no graph, so it trains on the tables read whole"):
        train_parts(_model("dnn-h"), root / "customers", root / "merchants", root / "edges", tmp_path / "s",
                    LocalExecutor())
    with pytest.raises(DataError, match=r"^draws must be a whole number ≥ 1, got 0$"):
        train_parts(_model(), root / "customers", root / "merchants", root / "edges", tmp_path / "s",
                    LocalExecutor(), draws=0)
    fewer = tmp_path / "edges"
    _write([pd.read_parquet(root / "edges" / "part-00000.parquet")], fewer)
    with pytest.raises(DataError, match=r"edges: 1 parts, but .*customers has 3: in parts, the edges are "
                                        r"co-partitioned with the customers"):
        train_parts(_model(), root / "customers", root / "merchants", fewer, tmp_path / "s", LocalExecutor())


def test_bad_parts_are_one_line_errors_naming_the_part(world, tmp_path):
    root, _ = world
    customers = [pd.read_parquet(p) for p in sorted((root / "customers").glob("*.parquet"))]
    spoiled = [frame.copy() for frame in customers]
    spoiled[1].iloc[3, spoiled[1].columns.get_loc("c_x0")] = np.inf
    _write(spoiled, tmp_path / "inf")
    with pytest.raises(DataError, match=r"inf/part-00001\.parquet: numeric column "
                                        r"'c_x0' has 1 infinite values in \d+ rows, e.g. row 3"):
        train_parts(_model(), tmp_path / "inf", root / "merchants", root / "edges", tmp_path / "s", LocalExecutor())
    one_class = [frame.assign(redeemed=frame.redeemed * 0) for frame in customers]
    _write(one_class, tmp_path / "one")
    with pytest.raises(DataError, match=r"^customers: the [\d,]+ training customers \(drawn by id among [\d,]+ "
                                        r"labelled\) need redemptions and non-redemptions"):
        train_parts(_model(), tmp_path / "one", root / "merchants", root / "edges", tmp_path / "s", LocalExecutor())

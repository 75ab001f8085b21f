"""Training the incentive GNN from training records: on a synthetic world it learns (held-out AUC_c well above 0.5,
near the in-memory model's on the same split and seed), is deterministic, saves, loads and predicts like a fitted
model; records of other fanouts, an empty folder and a non-GNN model are one-line errors."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from promokit.data.errors import DataError
from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.incentive.record_training import fit_from_records
from promokit.incentive.records import RecordSpec, write_records
from promokit.metrics import auc
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig

torch.set_num_threads(1)
PARAMS = {"width": 16, "hidden": [16, 16], "emb_dim": 4, "fanouts": [5, 5]}
TRAIN = TrainConfig(epochs=8, batch_size=128, lr=3e-3, lr_decay=0.95, patience=3, monitor="customer_loglik",
                    progress=False, seed=3)


def _model(**params) -> IncentiveModel:
    # no refit: the in-memory model is compared on the held-out customers with one trained from records (never refit)
    return IncentiveModel("gnn-hazard", {**PARAMS, **params}, TRAIN, test_fraction=0.2, refit=False)


def write_split_records(model: IncentiveModel, world, root, draws=(0, 1, 2)) -> tuple:
    """The records of the training and of the validation customers of ``model.split`` of the ``world``'s tables
    (labels of the other customers removed), drawn with the model's fanouts, in ``root/train`` and ``root/valid``."""
    split = model.split_rows(check_tables(world.customers, world.merchants, world.edges))
    for name in ("merchants", "edges"):
        (root / name).mkdir(parents=True)
    world.merchants.to_parquet(root / "merchants" / "part-00000.parquet", index=False)
    world.edges.to_parquet(root / "edges" / "part-00000.parquet", index=False)
    out = []
    for name, rows, merchants, kept_draws in (("train", split.train_customers, split.train_merchants, draws),
                                              ("valid", split.valid_customers, split.valid_merchants, (0,))):
        customers = world.customers.copy()
        unlabelled = ~np.isin(np.arange(len(customers)), rows)
        customers.loc[unlabelled, ["level", "redeemed"]] = np.nan
        (root / f"{name}_customers").mkdir()
        customers.to_parquet(root / f"{name}_customers" / "part-00000.parquet", index=False)
        spec = RecordSpec(tuple(model.levels_), model.customer_spec_, model.merchant_spec_,
                          tuple(model.model_params_["fanouts"]), seed=model.train_config.seed, draws=tuple(kept_draws))
        write_records(root / f"{name}_customers", root / "merchants", root / "edges", root / name, model.encoders_,
                      spec, LocalExecutor())
        keep_merchants(root / name / "merchants", world.merchants.merchant_id.to_numpy()[merchants])
        out.append(root / name)
    return split, *out


def keep_merchants(folder, ids) -> None:
    """Keep only the records of the merchants ``ids`` (the split's merchants of a role) in ``folder``: merchant
    labels are all or none in a table, so the others' records are dropped after writing."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for path in sorted(Path(folder).glob("part-*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.filter(pc.is_in(table.column("merchant_id"), pa.array(ids))), path)


def held_out_auc(model: IncentiveModel, tables, rows: np.ndarray) -> float:
    f_c = model.responses(tables).customers[rows]
    return auc(tables.redeemed[rows], f_c[np.arange(len(rows)), tables.customer_level[rows]])


@pytest.fixture(scope="module")
def synthetic():
    return make_world(1500, 100, seed=4)


@pytest.fixture(scope="module")
def world(synthetic):
    return check_tables(synthetic.customers, synthetic.merchants, synthetic.edges)


@pytest.fixture(scope="module")
def trained(synthetic, world, tmp_path_factory):
    model = _model()
    model.prepare(world)
    split, train, valid = write_split_records(model, synthetic, tmp_path_factory.mktemp("records"))
    return fit_from_records(model, train, valid), split, train, valid


def test_records_training_learns_like_the_in_memory_model(world, trained):
    model, split, _, _ = trained
    in_memory = _model().fit(world)
    np.testing.assert_array_equal(in_memory.split_rows(world).test_customers, split.test_customers)
    ours, theirs = held_out_auc(model, world, split.test_customers), held_out_auc(in_memory, world, split.test_customers)
    print(f"held-out AUC_c: from records {ours:.4f}, in memory {theirs:.4f}")
    assert ours > 0.62 and abs(ours - theirs) < 0.05
    assert model.history_.best_epoch >= 1 and "valid_auc_c" in model.history_.epochs[0]
    assert len(model.training_ids_) == len(split.train_customers)


def test_records_training_is_deterministic(world, trained):
    model, _, train, valid = trained
    again = _model()
    again.prepare(world)
    fit_from_records(again, train, valid)
    for name, value in model.net_.state_dict().items():
        assert torch.equal(value, again.net_.state_dict()[name]), name
    assert again.history_.epochs[-1]["train_loss"] == model.history_.epochs[-1]["train_loss"]


def test_a_model_from_records_saves_loads_and_predicts(world, trained, tmp_path):
    model = trained[0]
    model.save(tmp_path / "model")
    loaded = IncentiveModel.load(tmp_path / "model")
    pd.testing.assert_frame_equal(loaded.predict(world), model.predict(world))
    assert loaded.holdout_["held_out"] == 0 and loaded.test_fraction == 0.0


def test_epochs_cycle_the_draws_written(trained):
    """Epoch e trains on draw e mod S: epochs 0 and 3 of three draws read the same neighbourhoods."""
    import copy

    from promokit.incentive.record_training import RecordJob, RecordParts, input_widths

    model = copy.copy(trained[0])
    model.train_config = replace(model.train_config, batch_size=10_000)
    parts = RecordParts(trained[2], "records", PARAMS["fanouts"], input_widths(model))
    batches = RecordJob(model, parts, None).batches(0, 1)
    first, fourth, second = (next(iter(batches.train(torch.Generator().manual_seed(0), e))) for e in (0, 3, 1))
    assert torch.equal(first["record"].sub.merchants, fourth["record"].sub.merchants)
    assert not torch.equal(first["record"].sub.merchants, second["record"].sub.merchants)
    assert batches.rows == len(parts.customer_ids()) and batches.steps == 1


def test_bad_records_are_one_line_errors(synthetic, world, trained, tmp_path):
    _, _, train, valid = trained
    other = _model(fanouts=[4, 4])
    other.prepare(world)
    with pytest.raises(DataError, match=r"^records: .*part-00000\.parquet holds records drawn with fanouts \[5, 5\], "
                                        r"but the model's fanouts are \[4, 4\]; write the records with the model's "
                                        r"fanouts$"):
        fit_from_records(other, train, valid)
    model = _model()
    model.prepare(world)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"^validation: no records parts \(part-\*\.parquet\) in .*empty; write them "
                                        r"with promokit\.incentive\.records\.write_records$"):
        fit_from_records(model, train, tmp_path / "empty")
    with pytest.raises(DataError, match=r"^model 'dnn' is no GNN: training from records needs one of the gnn models$"):
        dnn = IncentiveModel("dnn", train=replace(TRAIN, epochs=1))
        dnn.prepare(world)
        fit_from_records(dnn, train)
    with pytest.raises(DataError, match=r"^model: prepare it"):
        fit_from_records(_model(), train)
    fewer = _model()
    fewer.prepare(check_tables(synthetic.customers.drop(columns="c_x0"), synthetic.merchants, synthetic.edges))
    with pytest.raises(DataError, match=r"^records: .*part-00000\.parquet holds inputs of widths \{.*'customer_num': 6"
                                        r".*\}, but the model's encoders give \{.*'customer_num': 5.*\}; write the "
                                        r"records with the model's encoders$"):
        fit_from_records(fewer, train)

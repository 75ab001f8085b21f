"""Which subjects a model trained on: ``training_ids.npy`` in the model directory holds the hashes of exactly the
training split's ids (one process or counted over parts), and a model directory written before it loads as ever."""

import numpy as np
import pytest
import torch

from conftest import make_impressions, write_parts, write_value_parts
from promokit.conversion.estimator import ConversionModel
from promokit.conversion.parts import plan
from promokit.data import DataError
from promokit.data.ids import id_hashes, share_in
from promokit.experiments.incentive.world import make_world as make_incentive_world
from promokit.experiments.value.world import make_world as make_value_world
from promokit.experiments.voucher.world import make_world as make_voucher_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.scale.executor import LocalExecutor
from promokit.training import TrainConfig, read_training_ids
from promokit.training.artifact import TRAINING_IDS
from promokit.value.contract import read_folder, table_paths
from promokit.value.estimator import ValueModel
from promokit.value.parts import _plan
from promokit.voucher.estimator import VoucherModel
from promokit.voucher.history import default_cuts, split_by_time

torch.set_num_threads(1)
ONE_EPOCH = TrainConfig(epochs=1, batch_size=256, progress=False)
VALUE_NET = {"expert_hidden": [8], "expert_dim": 8, "tower_hidden": [4], "emb_dim": 4, "max_len": 4}


@pytest.fixture(scope="module")
def incentive_model(tmp_path_factory):
    world = make_incentive_world(600, 60, seed=2)
    tables = check_tables(world.customers, world.merchants, world.edges)
    # the selected model: a refit on every node records them all (tests/training/test_refit.py)
    model = IncentiveModel("lr", None, ONE_EPOCH, refit=False).fit(tables)
    folder = tmp_path_factory.mktemp("incentive") / "model"
    model.save(folder)
    return model, tables, folder


def test_an_incentive_model_records_its_training_customers_and_merchants(incentive_model):
    model, tables, folder = incentive_model
    split = model.split_rows(tables)
    customers, merchants = tables.customers["customer_id"].to_numpy(), tables.merchants["merchant_id"].to_numpy()
    recorded = read_training_ids(folder)
    expected = id_hashes(np.concatenate([customers[split.train_customers], merchants[split.train_merchants]]))
    assert recorded.dtype == np.uint64 and np.array_equal(recorded, expected)
    assert share_in(customers[split.test_customers], recorded) == 0
    assert share_in(customers[split.valid_customers], recorded) == 0


def test_a_model_directory_written_before_loads_and_records_nothing(incentive_model, tmp_path):
    model, tables, folder = incentive_model
    model.save(tmp_path / "old")
    (tmp_path / "old" / TRAINING_IDS).unlink()
    assert read_training_ids(tmp_path / "old") is None
    loaded = IncentiveModel.load(tmp_path / "old")
    np.testing.assert_allclose(loaded.responses(tables).customers, model.responses(tables).customers, atol=1e-6)


def test_what_is_not_a_record_of_training_ids_is_a_one_line_error(incentive_model, tmp_path):
    with pytest.raises(DataError, match="not a promokit model directory"):
        read_training_ids(tmp_path)
    _, _, folder = incentive_model
    for name, content in (("text", b"not an array"), ("floats", None)):
        broken = tmp_path / name
        broken.mkdir()
        (broken / "config.json").write_text("{}")
        if content is None:
            np.save(broken / TRAINING_IDS, np.array([2.0, 1.0]))
        else:
            (broken / TRAINING_IDS).write_bytes(content)
        with pytest.raises(DataError, match=TRAINING_IDS) as error:
            read_training_ids(broken)
        assert "\n" not in str(error.value)


@pytest.fixture(scope="module")
def value_data(tmp_path_factory):
    return write_value_parts(make_value_world(300, seed=5), tmp_path_factory.mktemp("value"), [120, 0, 180])


def test_a_value_model_records_its_training_deliveries_users_in_one_folder_and_in_parts(value_data, tmp_path):
    tables = read_folder(value_data / "whole")
    model = ValueModel("dnn", VALUE_NET, ONE_EPOCH, refit=False).fit(tables)  # _plan is the selection's
    train = model.split_rows(tables)[0]
    model.save(tmp_path / "model")
    expected = id_hashes(tables.deliveries["user_id"].to_numpy()[train])
    assert np.array_equal(read_training_ids(tmp_path / "model"), expected)
    counted = ValueModel("dnn", VALUE_NET, ONE_EPOCH)
    _plan(counted, table_paths(value_data / "parts"), LocalExecutor(), tmp_path / "keys", False)
    assert np.array_equal(counted.training_ids_, expected)


def test_a_conversion_model_records_its_training_rows_users_in_one_table_and_in_parts(tmp_path):
    table = make_impressions()
    model = ConversionModel("lr").fit(table, validation=0)
    assert np.array_equal(model.training_ids_, id_hashes(table["user_id"]))
    counted = ConversionModel("esmm", {"emb_dim": 4, "hidden": (8,)}, ONE_EPOCH)
    plan(counted, write_parts(table, tmp_path / "parts", [1500, 0, 2500]), LocalExecutor(), 1, valid_fraction=0)
    assert np.array_equal(counted.training_ids_, model.training_ids_)
    model.save(tmp_path / "model")
    assert np.array_equal(read_training_ids(tmp_path / "model"), model.training_ids_)


def test_a_voucher_model_records_its_training_sessions_users(tmp_path):
    world = make_voucher_world(n_users=200, n_vouchers=20, n_items=100, n_sessions=1500, seed=1)
    sessions = world.tables.sessions
    cuts = default_cuts(sessions)
    split = split_by_time(sessions, cuts.valid_from, cuts.test_from)
    VoucherModel("lr", None, ONE_EPOCH).fit(world.tables, rows=split.train, validation=split.valid).save(tmp_path / "model")
    assert np.array_equal(read_training_ids(tmp_path / "model"),
                          id_hashes(sessions["user_id"].to_numpy()[split.train]))


@pytest.mark.parametrize("domain", ["conversion", "voucher", "incentive", "value"])
def test_a_model_loaded_and_saved_again_keeps_every_file(domain, request, tmp_path):
    """history.json and training_ids.npy too: policy evaluate --model warns of training subjects from them."""
    import warnings

    from promokit.value.estimator import ValueModel
    from promokit.voucher.estimator import VoucherModel

    quiet = {"progress": False}
    model, data = {"conversion": (ConversionModel("lr", train=quiet), "impressions"),
                   "voucher": (VoucherModel("lr", train=quiet), "voucher_tables"),
                   "incentive": (IncentiveModel("lr", train=quiet), "incentive_tables"),
                   "value": (ValueModel("hurdle", {"n_trees": 20}, quiet), "value_tables")}[domain]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(request.getfixturevalue(data)).save(tmp_path / "first")
    type(model).load(tmp_path / "first").save(tmp_path / "again")
    files = {p.name for p in (tmp_path / "first").iterdir()}
    assert {"history.json", "training_ids.npy"} <= files
    assert {p.name for p in (tmp_path / "again").iterdir()} == files
    for name in ("history.json", "training_ids.npy"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "first" / name).read_bytes()


def test_an_id_hashes_as_its_text_whatever_its_type():
    """Numbers are hashed once per distinct value, as the text they read as: 17 and "17" are one id."""
    numbers = np.array([17, 3, 17, 3, 250], dtype=np.int32)
    assert np.array_equal(id_hashes(numbers), id_hashes(["3", "17", "250"]))
    assert np.array_equal(id_hashes(numbers), id_hashes(np.array([17, "3", 250], dtype=object)))
    assert len(id_hashes(numbers)) == 3

"""The predict commands of the domains over tables in parts on S3 (moto, started by conftest's ``s3_endpoint``):
inputs read part by part from URIs, the predictions' parts and summary.json written to an ``--out`` URI, marked
``_SUCCESS`` last, equal to the local run's."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from promokit.cli import app
from promokit.data.io import read_table
from promokit.data.parts import list_parts
from promokit.data.uris import INCOMPLETE, SUCCESS, as_path, read_bytes, write_bytes

pytest.importorskip("moto.server")
torch.set_num_threads(1)


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _upload(folder: Path, uri: str) -> str:
    """Every file under the local ``folder`` copied to the same names under ``uri``."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        write_bytes(path.read_bytes(), as_path(f"{uri}/{path.relative_to(folder).as_posix()}"))
    return uri


def _summary(uri: str) -> dict:
    return json.loads(read_bytes(as_path(uri)))


def _same_parts(remote: str, local: Path) -> None:
    """The parts under ``remote`` are the local ones (names, rows, values) and the manifest lists them."""
    names = [p.name for p in list_parts(local)]
    assert [p.name for p in list_parts(remote)] == names
    assert json.loads(read_bytes(as_path(f"{remote}/{SUCCESS}")))["parts"] == names
    assert not as_path(f"{remote}/{INCOMPLETE}").exists()
    pd.testing.assert_frame_equal(read_table(remote), read_table(local))


# --------------------------------------------------------------------------------------------------------- voucher


@pytest.fixture(scope="module")
def voucher_world(tmp_path_factory):
    """A small voucher world in three parts by user (sessions, session-keyed events), the items, a DMBGN model."""
    from promokit.experiments.voucher.world import make_world
    from promokit.training import TrainConfig
    from promokit.voucher.estimator import VoucherModel

    folder = tmp_path_factory.mktemp("voucher_s3")
    tables = make_world(n_users=60, n_vouchers=8, n_items=100, n_sessions=300, seed=5).tables
    graph = {"emb_dim": 4, "hidden": [8], "dropout": 0.0, "uvg_dim": 4, "attention_units": 4, "gnn_layers": 1}
    VoucherModel("dmbgn", graph, TrainConfig(epochs=1, batch_size=128, progress=False)).fit(tables).save(
        folder / "model")
    sessions, events = tables.sessions, tables.events.drop(columns=["session", "pre"])
    part = sessions["user_id"] % 3
    event_part = events["session_id"].map(dict(zip(sessions["session_id"], part)))
    for name, frame, where in (("sessions", sessions, part), ("events", events, event_part)):
        (folder / "in" / name).mkdir(parents=True)
        for k in range(3):
            frame[where.to_numpy() == k].to_parquet(folder / "in" / name / f"part-{k:05d}.parquet", index=False)
    tables.items.to_parquet(folder / "in" / "items.parquet", index=False)
    return folder


def test_voucher_predict_over_parts_on_s3_equals_the_local_run(voucher_world, bucket):
    inputs = _upload(voucher_world / "in", f"{bucket}/voucher")
    runs = {"local": (voucher_world / "in", voucher_world / "out"), "s3": (inputs, f"{bucket}/out")}
    for source, out in runs.values():
        result = _invoke("voucher", "predict", "--model", voucher_world / "model", "--sessions", f"{source}/sessions",
                         "--events", f"{source}/events", "--items", f"{source}/items.parquet", "--out", out)
        assert result.exit_code == 0, result.output
    assert f"{bucket}/out/predictions" in result.output
    _same_parts(f"{bucket}/out/predictions", voucher_world / "out" / "predictions")
    local = json.loads((voucher_world / "out" / "summary.json").read_text())
    assert _summary(f"{bucket}/out/summary.json") == local and local["rows"] > 0 and local["parts"] == 3
    assert not Path("s3:").exists() and not (voucher_world / "out" / ".user-keys").exists()


# ----------------------------------------------------------------------------------------------------------- value


@pytest.fixture(scope="module")
def value_world(tmp_path_factory):
    """A small value dataset in three parts by user (one empty), and an ESDPM model, which reads the consumption
    graph (its e_c computed over the parts in a scratch folder)."""
    from conftest import write_value_parts

    from promokit.experiments.value.world import make_world
    from promokit.training import TrainConfig
    from promokit.value.contract import check_tables
    from promokit.value.estimator import ValueModel

    folder = tmp_path_factory.mktemp("value_s3")
    world = make_world(200, seed=4)
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    small = {"expert_hidden": [8], "expert_dim": 8, "tower_hidden": [4], "emb_dim": 4, "max_len": 8}
    ValueModel("esdpm", small, TrainConfig(epochs=1, batch_size=256, progress=False)).fit(tables).save(
        folder / "model")
    write_value_parts(world, folder, [90, 0, 110])
    return folder


def test_value_predict_over_parts_on_s3_equals_the_local_run(value_world, bucket):
    inputs = _upload(value_world / "parts", f"{bucket}/value")
    for data, out in ((value_world / "parts", value_world / "out"), (inputs, f"{bucket}/out")):
        result = _invoke("value", "predict", "--model", value_world / "model", "--data", data, "--out", out)
        assert result.exit_code == 0, result.output
    for folder in ("scores", "deliveries"):
        _same_parts(f"{bucket}/out/{folder}", value_world / "out" / folder)
    local = json.loads((value_world / "out" / "summary.json").read_text())
    assert _summary(f"{bucket}/out/summary.json") == local and local["users"] == 200
    assert f"written to {bucket}/out;" in " ".join(result.output.split())  # the URI whole
    assert not Path("s3:").exists() and not (value_world / "out" / ".graph").exists()


# ------------------------------------------------------------------------------------------------------- incentive


@pytest.fixture(scope="module")
def incentive_world(tmp_path_factory):
    """A small incentive graph in parts (customers with their edges in three parts, one empty; merchants in two)
    and a GNN-hazard model, whose layers exchange states through the shards' scratch folder."""
    from promokit.experiments.incentive.world import make_world
    from promokit.incentive.contract import check_tables
    from promokit.incentive.estimator import IncentiveModel
    from promokit.training import TrainConfig

    folder = tmp_path_factory.mktemp("incentive_s3")
    world = make_world(200, 20, seed=6)
    IncentiveModel("gnn-hazard", {"width": 8, "hidden": [8], "emb_dim": 4},
                   TrainConfig(epochs=1, batch_size=256, progress=False)).fit(
        check_tables(world.customers, world.merchants, world.edges)).save(folder / "model")
    part_of = dict(zip(world.customers.customer_id, np.arange(len(world.customers)) % 2 * 2))  # part 1 empty
    for name, table in (("customers", world.customers), ("edges", world.edges)):
        (folder / "in" / name).mkdir(parents=True)
        for k in range(3):
            table[table.customer_id.map(part_of) == k].to_parquet(folder / "in" / name / f"part-{k:05d}.parquet",
                                                                   index=False)
    (folder / "in" / "merchants").mkdir()
    for k, rows in enumerate((slice(0, 12), slice(12, None))):
        world.merchants.iloc[rows].to_parquet(folder / "in" / "merchants" / f"part-{k:05d}.parquet", index=False)
    return folder


def test_incentive_predict_over_parts_on_s3_equals_the_local_run(incentive_world, bucket):
    inputs = _upload(incentive_world / "in", f"{bucket}/incentive")
    for source, out in ((incentive_world / "in", incentive_world / "out"), (inputs, f"{bucket}/out")):
        result = _invoke("incentive", "predict", "--model", incentive_world / "model", "--customers",
                         f"{source}/customers", "--merchants", f"{source}/merchants", "--edges", f"{source}/edges",
                         "--out", out)
        assert result.exit_code == 0, result.output
    for folder in ("customers", "merchants"):
        _same_parts(f"{bucket}/out/{folder}", incentive_world / "out" / folder)
    local = json.loads((incentive_world / "out" / "summary.json").read_text())
    assert _summary(f"{bucket}/out/summary.json") == local
    assert local["customers"] == 200 and local["customer_parts"] == 3 and local["merchant_parts"] == 2
    assert f"written to {bucket}/out;" in " ".join(result.output.split())  # the URI whole
    assert not Path("s3:").exists() and not (incentive_world / "out" / ".graph").exists()


def test_an_unknown_scheme_or_a_missing_uri_is_a_one_line_error(value_world, bucket):
    for data, out, expected in ((value_world / "parts", "ftp://host/out", "ftp://host/out: unknown storage scheme"),
                                (f"{bucket}/nowhere", f"{bucket}/out", f"data: {bucket}/nowhere is not a folder")):
        result = _invoke("value", "predict", "--model", value_world / "model", "--data", data, "--out", out)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and expected in lines[0], result.output
    assert not Path("ftp:").exists()

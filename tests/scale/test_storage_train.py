"""The graph models trained over tables in parts on S3 (moto, started by conftest's ``s3_endpoint``): each part read
on its own from its URI, they train the model the same parts on local disk train (the same weights), and write
nothing to the bucket; the records, the checkpoint and the model directory stay local, and a URI there is a one-line
error before anything is read."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import promokit.data.parts
from promokit.cli import app
from promokit.data.errors import DataError
from promokit.data.uris import as_path, write_bytes
from promokit.scale.executor import LocalExecutor

pytest.importorskip("moto.server")
torch.set_num_threads(1)


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _upload(folder: Path, uri: str) -> set[str]:
    """Every file under the local ``folder`` copied to the same names under ``uri``; their URIs."""
    uris = {path: f"{uri}/{path.relative_to(folder).as_posix()}" for path in folder.rglob("*") if path.is_file()}
    for path, target in uris.items():
        write_bytes(path.read_bytes(), as_path(target))
    return set(uris.values())


def _write(pieces, folder: Path) -> None:
    folder.mkdir(parents=True)
    for k, piece in enumerate(pieces):
        piece.to_parquet(folder / f"part-{k:05d}.parquet", index=False)


def _same_weights(a: Path, b: Path) -> None:
    """The two model directories hold the same weights, tensor by tensor."""
    left, right = load_file(a / "weights.safetensors"), load_file(b / "weights.safetensors")
    assert sorted(left) == sorted(right) and left
    for name, tensor in left.items():
        torch.testing.assert_close(right[name], tensor, rtol=0, atol=1e-6, msg=name)


def _trains_alike(args: list, folder: Path, bucket: str, monkeypatch) -> None:
    """``args`` (the parts' folder as ``{source}``) trains into ``folder/local`` from ``folder/in`` and into
    ``folder/s3`` from a copy of it on S3, reading each object of the copy whole and on its own: the same weights,
    nothing written to the bucket, no folder named after the URI."""
    uploaded, read, reader = _upload(folder / "in", f"{bucket}/in"), [], promokit.data.parts.read_parquet

    def read_object(path, *args):  # every Parquet object at a URI is read through promokit.data.parts.read_parquet
        read.append(str(path))
        return reader(path, *args)

    monkeypatch.setattr(promokit.data.parts, "read_parquet", read_object)
    for name, source in (("local", folder / "in"), ("s3", f"{bucket}/in")):
        result = _invoke(*[str(a).replace("{source}", str(source)) for a in args], "--out", folder / name)
        assert result.exit_code == 0, result.output
    assert set(read) == uploaded
    _same_weights(folder / "local", folder / "s3")
    assert _objects(bucket) == uploaded and not Path("s3:").exists()


def _objects(bucket: str) -> set[str]:
    """The URIs of the objects in ``bucket``."""
    import pyarrow.fs as pafs

    from promokit.data.uris import filesystem

    fs, inner = filesystem(as_path(bucket))
    infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True))
    return {f"s3://{info.path}" for info in infos if info.type == pafs.FileType.File}


# ------------------------------------------------------------------------------------------------------- incentive

INCENTIVE = ["incentive", "train", "--customers", "{source}/customers", "--merchants", "{source}/merchants",
             "--edges", "{source}/edges", "--epochs", 2, "--batch-size", 128, "--draws", 2,
             "--params", json.dumps({"width": 8, "hidden": [8], "emb_dim": 4, "fanouts": [3, 3]})]


@pytest.fixture
def incentive_world(tmp_path):
    """A small incentive graph in parts: customers (some unlabelled) with their edges in three parts, one empty;
    merchants in two."""
    from promokit.experiments.incentive.world import make_world

    world = make_world(300, 20, seed=6)
    world.customers.loc[np.random.default_rng(1).random(300) < 0.2, ["redeemed", "level"]] = np.nan
    part_of = dict(zip(world.customers.customer_id, np.arange(300) % 2 * 2))  # part 1 empty
    for name, table in (("customers", world.customers), ("edges", world.edges)):
        _write([table[table.customer_id.map(part_of) == k] for k in range(3)], tmp_path / "in" / name)
    _write([world.merchants.iloc[:12], world.merchants.iloc[12:]], tmp_path / "in" / "merchants")
    return tmp_path


def test_incentive_trains_over_parts_on_s3_as_on_local_disk(incentive_world, bucket, monkeypatch):
    _trains_alike(INCENTIVE, incentive_world, bucket, monkeypatch)


# ----------------------------------------------------------------------------------------------------------- value

VALUE = ["value", "train", "--data", "{source}", "--model", "esdpm", "--epochs", 2, "--batch-size", 256,
         "--params", json.dumps({"expert_hidden": [8], "expert_dim": 8, "tower_hidden": [4], "emb_dim": 4,
                                 "max_len": 8, "fanouts": [3, 2]})]


@pytest.fixture
def value_world(tmp_path):
    """A small value dataset in three parts by user, one empty."""
    from promokit.experiments.value.world import make_world, write_world_parts

    write_world_parts(make_world(200, seed=4), tmp_path / "in", [90, 0, 110])
    return tmp_path


def test_value_trains_over_parts_on_s3_as_on_local_disk(value_world, bucket, monkeypatch):
    _trains_alike(VALUE, value_world, bucket, monkeypatch)


# --------------------------------------------------------------------------------------------------------- voucher

VOUCHER = ["voucher", "train", "--sessions", "{source}/sessions", "--events", "{source}/events", "--items",
           "{source}/items.parquet", "--model", "dmbgn", "--epochs", 2, "--batch-size", 128,
           "--params", json.dumps({"emb_dim": 4, "hidden": [8], "dropout": 0.0, "uvg_dim": 4,
                                   "attention_units": 4, "gnn_layers": 1, "pretrain": 0})]


@pytest.fixture
def voucher_world(tmp_path):
    """A small voucher world in three parts by user (sessions, session-keyed events) and its items."""
    from promokit.experiments.voucher.world import make_world

    tables = make_world(n_users=60, n_vouchers=8, n_items=100, n_sessions=400, seed=5).tables
    sessions, events = tables.sessions, tables.events.drop(columns=["session", "pre"])
    part = (sessions["user_id"] % 3).to_numpy()
    event_part = events["session_id"].map(dict(zip(sessions["session_id"], part))).to_numpy()
    for name, frame, where in (("sessions", sessions, part), ("events", events, event_part)):
        _write([frame[where == k] for k in range(3)], tmp_path / "in" / name)
    tables.items.to_parquet(tmp_path / "in" / "items.parquet", index=False)
    return tmp_path


def test_voucher_trains_over_parts_on_s3_as_on_local_disk(voucher_world, bucket, monkeypatch):
    _trains_alike(VOUCHER, voucher_world, bucket, monkeypatch)


# ---------------------------------------------------------------------------------------------------- local folders


@pytest.mark.parametrize("domain, args", [("incentive", INCENTIVE), ("value", VALUE), ("voucher", VOUCHER)])
def test_a_model_directory_on_s3_is_a_one_line_error_before_training(domain, args, request, bucket):
    folder = request.getfixturevalue(f"{domain}_world") / "in"
    result = _invoke(*[str(a).replace("{source}", str(folder)) for a in args], "--out", f"{bucket}/model")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "epoch" not in result.output, result.output
    assert f"--out` is {bucket}/model" in lines[0] and "writes to a local folder only" in lines[0], lines[0]
    assert not _objects(bucket) and not Path("s3:").exists()


def test_records_on_s3_are_a_one_line_error_naming_the_argument(incentive_world, value_world, voucher_world):
    from promokit.incentive.estimator import IncentiveModel
    from promokit.incentive.parts_training import train_parts as train_incentive
    from promokit.training import TrainConfig
    from promokit.value.contract import table_paths
    from promokit.value.estimator import ValueModel
    from promokit.value.parts import train_parts as train_value
    from promokit.voucher.estimator import VoucherModel
    from promokit.voucher.train_parts import train_parts as train_voucher

    config, scratch = TrainConfig(epochs=1, progress=False), "s3://nowhere/records"
    graphs = {name: json.loads(args[args.index("--params") + 1]) for name, args in
              (("incentive", INCENTIVE), ("value", VALUE), ("voucher", VOUCHER))}
    runs = [lambda: train_incentive(IncentiveModel("gnn-hazard", graphs["incentive"], config),
                                    *(incentive_world / "in" / n for n in ("customers", "merchants", "edges")),
                                    scratch, LocalExecutor()),
            lambda: train_value(ValueModel("esdpm", graphs["value"], config), table_paths(value_world / "in"),
                                LocalExecutor(), scratch),
            lambda: train_voucher(VoucherModel("dmbgn", graphs["voucher"], config),
                                  voucher_world / "in" / "sessions", voucher_world / "in" / "events",
                                  voucher_world / "in" / "items.parquet", None, LocalExecutor(), scratch, options={})]
    for run in runs:
        with pytest.raises(DataError, match=rf"^`scratch` is {scratch}: this writes to a local folder only"):
            run()
    assert not Path("s3:").exists()


def test_records_and_checkpoints_given_a_uri_are_refused_before_any_work(tmp_path, monkeypatch):
    from promokit.incentive.estimator import IncentiveModel
    from promokit.incentive.record_training import fit_from_records
    from promokit.incentive.records import write_records
    from promokit.training import Trainer

    monkeypatch.chdir(tmp_path)  # a URI taken for a local path would be written here, as ./s3:/…
    model = IncentiveModel("gnn-hazard")
    with pytest.raises(DataError, match=r"^`checkpoint_dir` is s3://bucket/ckpt: this writes to a local folder only"):
        fit_from_records(model, "rec/train", checkpoint_dir="s3://bucket/ckpt", executor=LocalExecutor())
    with pytest.raises(DataError, match=r"^`checkpoint_dir` is s3://bucket/ckpt: "):
        Trainer(checkpoint_dir="s3://bucket/ckpt")
    with pytest.raises(DataError, match=r"^`out` is s3://bucket/records: "):
        write_records("c", "m", "e", "s3://bucket/records", None, None, LocalExecutor())
    assert not Path("s3:").exists()

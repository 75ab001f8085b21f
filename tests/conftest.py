import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from promokit.scale.executor import LocalExecutor
from promokit.training.threads import set_threads

set_threads(1)  # the tests' own choice, which training keeps (promokit.training.threads)

#: The test folders, one per package of src/promokit, and this one. A test module may import another's helpers by its
#: (unique) module name whichever folder holds it, here and on the Ray workers (``ray_cluster``).
TEST_FOLDERS = [str(Path(__file__).resolve().parent),
                *sorted(str(p.parent) for p in Path(__file__).resolve().parent.glob("*/test_*.py"))]
TEST_FOLDERS = list(dict.fromkeys(TEST_FOLDERS))
sys.path[:0] = [folder for folder in TEST_FOLDERS if folder not in sys.path]


def pytest_configure(config):
    config.addinivalue_line("markers", "extra(name): the test needs promokit[name]; it skips where that extra is "
                                       "not installed (make test-lowest installs the core alone)")
    for extra, why in _missing_extras().items():
        config.issue_config_time_warning(pytest.PytestWarning(
            f"not collected: {', '.join(EXTRA_MODULES[extra])}: {why}"), stacklevel=2)


#: test modules that import an extra's libraries when collected: left out, and said so, where it is missing
EXTRA_MODULES = {"serve": ["serve/test_serve*.py", "campaign/test_campaign_export.py", "campaign/test_campaign_build_parts.py",
                           "data/test_uri_outputs.py"]}


def _missing_extras() -> dict[str, str]:
    from promokit.extras import MissingExtra, require_extra

    missing = {}
    for extra in EXTRA_MODULES:
        try:
            require_extra(extra, "its test modules")
        except MissingExtra as exc:
            missing[extra] = str(exc)
    return missing


collect_ignore_glob = [glob for extra in _missing_extras() for glob in EXTRA_MODULES[extra]]



def pytest_collection_modifyitems(items):
    """The ``ray`` and ``serve`` markers, from what a test uses; the Ray tests share one xdist worker
    (``--dist loadgroup``), so the session starts one cluster."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.xdist_group("ray"))
        if item.module is not None and item.module.__name__.startswith("test_serve"):
            item.add_marker(pytest.mark.serve)


def pytest_runtest_setup(item):
    from promokit.extras import MissingExtra, require_extra

    for mark in item.iter_markers("extra"):
        try:
            require_extra(mark.args[0], item.name)
        except MissingExtra as exc:
            pytest.skip(str(exc))


@pytest.fixture
def impressions() -> pd.DataFrame:
    return make_impressions()


def make_impressions() -> pd.DataFrame:
    """A small impression log whose click and purchase depend on a user feature and an item price."""
    rng = np.random.default_rng(0)
    n = 4000
    user = rng.integers(0, 50, n)
    item = rng.integers(0, 30, n)
    segment = user % 3
    price = rng.normal(50, 10, n)
    logit = -1.5 + 1.2 * (segment == 1) - 0.04 * (price - 50)
    click = rng.random(n) < 1 / (1 + np.exp(-logit))
    daction = click & (rng.random(n) < 0.3 + 0.3 * (segment == 2))
    purchase = click & (rng.random(n) < np.where(daction, 0.5, 0.1))
    return pd.DataFrame({"user_id": user, "item_id": item, "segment": [f"s{s}" for s in segment],
                         "price": price, "click": click.astype(int), "daction": daction.astype(int),
                         "purchase": purchase.astype(int)})


@pytest.fixture(scope="module")
def split(world):
    """Train / validation / test rows of the module's voucher ``world`` fixture, 80/10/10 by collection time."""
    from promokit.voucher.history import default_cuts, split_by_time

    cuts = default_cuts(world.tables.sessions)
    return split_by_time(world.tables.sessions, cuts.valid_from, cuts.test_from)


POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def postgres_url():
    """A fresh database on the machine's PostgreSQL server (dropped afterwards), or a skip saying why none."""
    import uuid

    pytest.importorskip("sqlalchemy")
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    admin = create_engine(POSTGRES_ADMIN.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    name = f"promokit_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    except OperationalError as exc:
        admin.dispose()
        pytest.skip(f"no PostgreSQL server at 127.0.0.1:5432 ({str(exc).splitlines()[0]}); .ci/run starts one")
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path):
    """A ledger of each kind: SQLite in the test's folder, and a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def s3_endpoint():
    """An S3-compatible server (moto) on a free local port, started once for the whole test session."""
    import logging
    import socket

    moto_server = pytest.importorskip("moto.server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


BUCKETS = itertools.count()


@pytest.fixture
def bucket(s3_endpoint, monkeypatch):
    """A fresh bucket; the endpoint and dummy credentials in the environment, as the AWS SDKs read them."""
    boto3 = pytest.importorskip("boto3")
    for name, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing-secret", "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    name = f"promokit-{next(BUCKETS)}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return f"s3://{name}"


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray cluster of two local nodes with one CPU each, started once for the whole test session, with this
    process connected to it (promokit's Ray executor reuses the connection)."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    store = 256 << 20  # the tests move kilobytes; don't reserve Ray's default 30 % of memory per node
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "object_store_memory": store})
    cluster.add_node(num_cpus=1, object_store_memory=store)
    # the tests' own module-level functions run on the workers
    ray.init(address=cluster.address, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(TEST_FOLDERS)}})
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def spoil(column, row, value):
    """A table edit for error sweeps: ``value`` (any type) at ``row`` of ``column``."""
    def edit(frame):
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = value
        return frame
    return edit


def write_parts(table: pd.DataFrame, folder: Path, sizes: list[int]) -> Path:
    """``table`` cut in order into Parquet parts of ``sizes`` rows (0: an empty part) in a new ``folder``."""
    folder.mkdir(parents=True)
    start = 0
    for k, size in enumerate(sizes):
        table.iloc[start:start + size].to_parquet(folder / f"part-{k:05d}.parquet", index=False)
        start += size
    assert start == len(table)
    return folder


def write_value_parts(world, root: Path, part_users: list[int]) -> Path:
    """A value ``world`` as a dataset in parts, ``root/parts``, and as the one-folder dataset it means, ``root/whole``
    (:func:`promokit.experiments.value.world.write_world_folders`)."""
    from promokit.experiments.value.world import write_world_folders

    return write_world_folders(world, root, part_users)


@pytest.fixture(scope="session")
def voucher_tables():
    """A small voucher world's tables (2,500 sessions)."""
    from promokit.experiments.voucher.world import make_world

    return make_world(n_users=300, n_vouchers=30, n_items=200, n_sessions=2500, seed=1).tables


@pytest.fixture(scope="session")
def incentive_tables():
    """A small incentive world's tables (400 customers, 40 merchants)."""
    from promokit.experiments.incentive.world import make_world
    from promokit.incentive.contract import read_tables

    world = make_world(400, 40, seed=1)
    return read_tables({"customers": world.customers, "merchants": world.merchants, "edges": world.edges})


@pytest.fixture(scope="session")
def value_tables():
    """A small value world's tables (300 users)."""
    from promokit.experiments.value.world import make_world
    from promokit.value.contract import check_tables

    world = make_world(300, seed=5)
    return check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)


class TrainsOnce(LocalExecutor):
    """A local executor whose trainings after the first fail, as a cluster lost once the model is selected: the
    refit on every row (its second training) cannot run."""

    trainings = 0

    def train(self, job, checkpoint_dir=None, resume=False):
        self.trainings += 1
        if self.trainings > 1:
            raise RuntimeError("the executor is gone")
        return super().train(job, checkpoint_dir, resume)

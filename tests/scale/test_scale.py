"""promokit.scale: partitioned tables, the local and Ray executors, and partitioned batch scoring."""

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import make_impressions, write_parts
from promokit.cli import app
from promokit.conversion.estimator import ConversionModel
from promokit.data import DataError
from promokit.data.io import read_table
from promokit.data.parts import list_parts
from promokit.scale.executor import LocalExecutor, make_executor
from promokit.training import TrainConfig

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    table = make_impressions()
    path = tmp_path_factory.mktemp("model") / "esm2"
    model = ConversionModel("esm2", {"emb_dim": 4, "hidden": (16,), "dropout": 0.0},
                            TrainConfig(epochs=2, batch_size=500, lr=0.01, progress=False))
    model.fit(table).save(path)
    return path


# ---------------------------------------------------------------------------------------------- tables in parts


def test_a_directory_lists_its_parts_in_path_order_skipping_hidden_files(tmp_path):
    frame = pd.DataFrame({"x": range(6)})
    for name in ("b/part-1.parquet", "a=1/part-0.parquet", "_SUCCESS", ".part-2.parquet.tmp", "c/notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    frame.iloc[:3].to_parquet(tmp_path / "a=1/part-0.parquet")
    frame.iloc[3:].to_parquet(tmp_path / "b/part-1.parquet")
    assert [p.relative_to(tmp_path).as_posix() for p in list_parts(tmp_path)] == ["a=1/part-0.parquet",
                                                                                   "b/part-1.parquet"]
    assert read_table(tmp_path)["x"].tolist() == list(range(6))
    assert [p.name for p in list_parts(tmp_path / "*/part-*.parquet")] == ["part-0.parquet", "part-1.parquet"]
    with pytest.raises(DataError, match="no table parts"):
        list_parts(tmp_path / "c")


def test_a_bad_part_is_named_in_the_error(tmp_path, impressions, model_dir):
    parts = write_parts(impressions, tmp_path / "in", [2000, 2000])
    spoiled = impressions.iloc[2000:].copy()
    spoiled.iloc[7, spoiled.columns.get_loc("price")] = np.inf
    spoiled.to_parquet(parts / "part-00001.parquet", index=False)
    result = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{parts / 'part-00001.parquet'}: " in result.output and "'price' has 1 infinite" in result.output


# ---------------------------------------------------------------------------------------------------- executors


def _square(x):
    return x * x


def _pid():
    return os.getpid()


def _with_pid(pid, x):
    return x + 1, pid


def _refuse(pid, x):
    if x == 2:
        raise DataError(f"part {x} is bad")
    return x


def _die_once(marker_and_x):
    marker, x = marker_and_x
    if x == 1 and not Path(marker).exists():
        Path(marker).write_text("died")
        os._exit(1)  # the worker process dies mid-partition
    return x * 10


def _die_once_in_actor(pid, marker_and_x):
    return _die_once(marker_and_x)


def test_executor_options_are_checked():
    """The library's errors name its arguments (the commands name their flags: test_quota_parts)."""
    with pytest.raises(DataError, match=r"^`kind` must be one of \['local', 'ray'\], got 'spark'$"):
        make_executor("spark")
    with pytest.raises(DataError, match="^`workers` must be at least 1, got 0$"):
        make_executor("ray", workers=0)
    with pytest.raises(DataError, match="^`address` names a Ray cluster, for the ray executor only"):
        make_executor("local", address="127.0.0.1:6379")


@pytest.mark.extra("scale")
def test_an_address_nothing_listens_on_fails_at_once(monkeypatch):
    import socket

    import ray

    with socket.socket() as probe:  # a free port: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(DataError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        make_executor("ray", address=f"127.0.0.1:{port}")


def test_local_executor_runs_setup_once_and_keeps_order():
    assert LocalExecutor().map(_with_pid, [3, 1, 2], setup=_pid) == [(4, os.getpid()), (2, os.getpid()),
                                                                 (3, os.getpid())]


def test_ray_executor_keeps_order_and_loads_state_once_per_actor(ray_cluster):
    executor = make_executor("ray", workers=2)
    assert executor.workers == 2
    assert executor.map(_square, range(7)) == [x * x for x in range(7)]
    answers = executor.map(_with_pid, range(9), setup=_pid)
    assert [a for a, _ in answers] == list(range(1, 10))
    assert 1 <= len({pid for _, pid in answers}) <= 2 and os.getpid() not in {pid for _, pid in answers}


def _span(x):
    import time

    start = time.time()
    time.sleep(0.3)
    return start, time.time()


def test_workers_bounds_how_many_partitions_run_at_once(ray_cluster):
    """With --workers 1 on a 2-CPU cluster a stateless map runs its partitions one after another."""
    spans = sorted(make_executor("ray", workers=1).map(_span, range(4)))
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))


def test_a_data_error_on_a_worker_comes_back_as_the_same_one_line_error(ray_cluster):
    with pytest.raises(DataError, match="^part 2 is bad$"):
        make_executor("ray").map(_refuse, range(4), setup=_pid)


@pytest.mark.parametrize("stateful", [False, True])
def test_a_worker_that_dies_is_retried_and_the_result_is_unchanged(ray_cluster, tmp_path, stateful):
    items = [(str(tmp_path / "marker"), x) for x in range(4)]
    executor = make_executor("ray")
    results = executor.map(_die_once_in_actor, items, setup=_pid) if stateful else executor.map(_die_once, items)
    assert results == [0, 10, 20, 30] and (tmp_path / "marker").exists()


# ------------------------------------------------------------------------------------------ partitioned predict


def test_partitioned_predict_equals_the_one_file_predict_part_by_part(tmp_path, impressions, model_dir):
    whole = tmp_path / "whole.parquet"
    impressions.to_parquet(whole, index=False)
    parts = write_parts(impressions, tmp_path / "in", [1500, 0, 1000, 1500])  # an empty partition too
    assert _invoke("conversion", "predict", "--model", model_dir, "--data", whole, "--out",
                   tmp_path / "whole_out").exit_code == 0
    result = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "out" / "predictions").iterdir())
    assert [p.name for p in written] == [f"part-{k:05d}.parquet" for k in range(4)]
    assert [len(pd.read_parquet(p)) for p in written] == [1500, 0, 1000, 1500]
    expected = pd.read_parquet(tmp_path / "whole_out" / "predictions.parquet")
    got = pd.concat([pd.read_parquet(p) for p in written], ignore_index=True)
    assert got[["user_id", "item_id"]].equals(expected[["user_id", "item_id"]])
    assert np.abs(got.filter(like="p_").to_numpy() - expected.filter(like="p_").to_numpy()).max() <= 1e-6
    summary = pd.read_json(tmp_path / "out" / "summary.json", typ="series")
    assert summary["rows"] == 4000 and summary["parts"] == 4


def test_engine_is_the_deprecated_name_of_executor(tmp_path, impressions, model_dir):
    """``--engine`` still works for one release, with a one-line warning naming --executor; given with another
    --executor it is an error."""
    parts = write_parts(impressions, tmp_path / "in", [2000, 2000])
    outputs = {}
    for flag in ("--executor", "--engine"):
        result = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / flag,
                         flag, "local")
        assert result.exit_code == 0, result.output
        warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
        assert warned == (["warning: --engine is deprecated: the same option is now --executor (--executor local)"]
                          if flag == "--engine" else [])
        outputs[flag] = pd.read_parquet(tmp_path / flag / "predictions")
        assert json.loads((tmp_path / flag / "summary.json").read_text())["executor"] == "local"
    pd.testing.assert_frame_equal(outputs["--engine"], outputs["--executor"])
    result = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / "both",
                     "--executor", "ray", "--engine", "local")
    assert result.exit_code == 2 and "error: --engine is the former name of --executor: give --executor alone" in \
        result.output, result.output
    assert "--engine" not in _invoke("conversion", "predict", "--help").output  # hidden: --executor is the name


@pytest.mark.parametrize("command", ["conversion train", "conversion predict", "voucher predict", "incentive predict",
                                     "value train", "value predict", "allocate budget", "allocate quota"])
def test_every_command_with_an_executor_takes_the_deprecated_engine(command, tmp_path):
    """The required options given as paths that do not exist: the warning comes first, then the command's error."""
    import typer

    group = typer.main.get_command(app)
    for name in command.split():
        group = group.commands[name]
    options = {param.opts[0]: param for param in group.params}
    assert "--executor" in options and options["--engine"].hidden
    required = [str(a) for param in group.params if param.required for a in (param.opts[0], tmp_path / "nowhere")]
    result = _invoke(*command.split(), *required, "--engine", "ray")
    assert result.output.startswith("warning: --engine is deprecated: the same option is now --executor "
                                    "(--executor ray)\n"), result.output


def test_executor_errors_name_the_flags(tmp_path, impressions, model_dir):
    parts = write_parts(impressions, tmp_path / "in", [2000, 2000])
    for args, message in ((["--executor", "spark"], "--executor must be one of ['local', 'ray'], got 'spark'"),
                          (["--executor", "ray", "--workers", 0], "--workers must be at least 1, got 0"),
                          (["--address", "127.0.0.1:1"], "--address names a Ray cluster, for the ray executor only "
                                                         "(--executor 'ray'), got '127.0.0.1:1'")):
        result = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / "o", *args)
        assert result.exit_code == 2 and f"error: {message}" in result.output, result.output


def test_ray_predict_equals_local_predict(ray_cluster, tmp_path, impressions, model_dir):
    parts = write_parts(impressions, tmp_path / "in", [1000, 1000, 1000, 1000])
    local = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / "local")
    assert local.exit_code == 0, local.output
    on_ray = _invoke("conversion", "predict", "--model", model_dir, "--data", parts, "--out", tmp_path / "ray",
                     "--executor", "ray", "--workers", 2)
    assert on_ray.exit_code == 0, on_ray.output
    for k in range(4):
        a = pd.read_parquet(tmp_path / "local" / "predictions" / f"part-{k:05d}.parquet")
        b = pd.read_parquet(tmp_path / "ray" / "predictions" / f"part-{k:05d}.parquet")
        assert a[["user_id", "item_id"]].equals(b[["user_id", "item_id"]])
        assert np.abs(a.filter(like="p_").to_numpy() - b.filter(like="p_").to_numpy()).max() <= 1e-6


# ----------------------------------------------------------------------------------------- partitioned allocate


def test_ray_budget_allocation_equals_the_local_one(ray_cluster, tmp_path):
    """60k requests in 6 uneven parts (one empty): the sampled λ* path, every map on the 2-node cluster."""
    from promokit.experiments.allocation.instances import make_budget_instance

    instance = make_budget_instance(60_000, seed=3)
    table = pd.DataFrame({"user_id": np.arange(60_000),
                          **{f"score_{v:g}": instance.scores[:, j] for j, v in enumerate(instance.levels)}})
    parts = write_parts(table, tmp_path / "scores", [20_000, 0, 5_000, 15_000, 12_000, 8_000])
    reports = {}
    for executor in ("local", "ray"):
        result = _invoke("allocate", "budget", "--scores", parts, "--ratio", 3, "--out", tmp_path / executor,
                         "--executor", executor, "--workers", 2)
        assert result.exit_code == 0, result.output
        reports[executor] = json.loads((tmp_path / executor / "report.json").read_text())
    assert reports["ray"]["lam"] == reports["local"]["lam"] and reports["ray"]["objective"] == reports["local"]["objective"]
    for k in range(6):
        name = f"part-{k:05d}.parquet"
        assert pd.read_parquet(tmp_path / "ray" / "plan" / name).equals(pd.read_parquet(tmp_path / "local" / "plan" / name))


def test_ctrl_c_cancels_the_running_partitions_and_exits(ray_cluster, tmp_path):
    """SIGINT to a driver mid-map: it exits at once and the cluster's CPUs are free again (its tasks cancelled)."""
    import signal
    import subprocess
    import sys
    import time

    import ray

    script = tmp_path / "driver.py"
    # the driver stands for a foreground process, which Ctrl-C reaches: a test run launched in the background (`cmd &`)
    # hands its children SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    script.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from promokit.scale.executor import make_executor\n"
        "def slow(x):\n"
        f"    open({str(tmp_path)!r} + f'/running-{{x}}', 'w').close()\n"
        "    time.sleep(120)\n"
        "executor = make_executor('ray', address=sys.argv[1])\n"
        "print('started', flush=True)\n"
        "try:\n"
        "    executor.map(slow, range(4))\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(130)\n")
    driver = subprocess.Popen([sys.executable, str(script), ray_cluster.address], stdout=subprocess.PIPE, text=True,
                              cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        assert driver.stdout.readline().strip() == "started"
        deadline = time.time() + 60  # the tasks are running (starting the workers takes a while on a loaded machine)
        while not list(tmp_path.glob("running-*")) and time.time() < deadline:
            time.sleep(0.2)
        driver.send_signal(signal.SIGINT)
        assert driver.wait(timeout=30) == 130 and "interrupted" in driver.stdout.read()  # not the tasks' 120 s
    finally:
        driver.kill()  # a failed run must not leave its tasks holding the session cluster's CPUs
    deadline = time.time() + 20
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2

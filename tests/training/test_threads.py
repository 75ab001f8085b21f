"""Torch's threads default to the cores free now, in the library (promokit.training.threads) and on every train and
predict command (``--threads``); a count the user chose stays."""

import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from promokit.cli import app, support
from promokit.data import DataError
from promokit.training import threads

runner = CliRunner()


@pytest.fixture
def four_cores(monkeypatch):
    """A 4-core machine where nobody chose a count yet: torch at its default, no OMP_NUM_THREADS; the load is set by
    ``load`` (1-minute average, tasks running now)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(threads, "torch_default_threads", lambda: 4)
    monkeypatch.setattr(threads, "_given", None)
    monkeypatch.setattr(threads, "_automatic", None)
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    torch.set_num_threads(4)
    yield lambda load, running=1: monkeypatch.setattr(threads, "_load_now", lambda: (load, running))
    torch.set_num_threads(1)  # as conftest leaves it


@pytest.mark.parametrize("load, running, usable, total, free", [
    (0.0, 1, 4, 4, 4), (1.4, 1, 4, 4, 3), (1.6, 1, 4, 4, 2), (3.5, 1, 4, 4, 1), (9.0, 1, 4, 4, 1),
    (0.2, 3, 4, 4, 2),    # two jobs started a moment ago: the average has not seen them yet
    (0.0, 1, 2, 2, 2), (2.0, 3, 2, 2, 1),
    (32.0, 1, 4, 64, 2),  # 4 cores of 64 carry a sixteenth of the machine's load
])
def test_free_cores_are_the_usable_cores_less_their_share_of_the_busy(load, running, usable, total, free):
    assert threads.free_cores(load, running, usable, total) == free


@pytest.mark.parametrize("load, free", [(0.0, 4), (1.4, 3), (3.5, 1)])
def test_the_automatic_count_follows_the_free_cores(four_cores, load, free):
    four_cores(load)
    assert support.free_cores() == free
    assert support.set_threads(None) == free and torch.get_num_threads() == free
    four_cores(0.0)  # the load went: promokit's own earlier choice is no user's, the next one replaces it
    assert threads.set_threads() == 4 and torch.get_num_threads() == 4


def test_threads_given_win_and_must_be_positive(four_cores):
    four_cores(0.0)
    assert support.set_threads(3) == 3 and torch.get_num_threads() == 3
    assert support.set_threads(None) == 3, "a count given stays the user's choice"
    for bad in (0, -2):
        with pytest.raises(DataError, match=f"^--threads must be at least 1, got {bad}$"):
            support.set_threads(bad)
        with pytest.raises(DataError, match=f"^`threads` must be at least 1, got {bad}$"):
            threads.set_threads(bad)


def test_a_count_set_through_torch_or_the_environment_stays(four_cores, monkeypatch):
    four_cores(3.0)
    torch.set_num_threads(3)  # the user's own torch.set_num_threads
    assert threads.user_threads() == 3 and threads.set_threads() == 3 and torch.get_num_threads() == 3
    torch.set_num_threads(4)  # torch's default again: nobody's choice
    assert threads.user_threads() is None and threads.set_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    torch.set_num_threads(4)
    assert threads.user_threads() == 4 and threads.set_threads() == 4 and torch.get_num_threads() == 4


def test_a_fit_runs_under_the_automatic_count_and_leaves_torch_as_it_was(four_cores):
    four_cores(2.0)
    with threads.training_threads() as count:
        assert count == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 4 and threads.user_threads() is None
    with threads.training_threads(3) as count:
        assert count == 3 and torch.get_num_threads() == 3
    assert torch.get_num_threads() == 4 and threads.user_threads() is None, "a fit's own count is not kept"
    torch.set_num_threads(1)
    with threads.training_threads() as count:
        assert count == 1, "the user's torch.set_num_threads(1) stays"


def test_openmp_threads_sleep_at_once_unless_the_user_said_or_torch_is_loaded(monkeypatch):
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in threads.WAIT_VARIABLES})
    assert not threads.prefer_passive_wait() and "OMP_WAIT_POLICY" not in os.environ, "torch is loaded: too late"
    monkeypatch.delitem(sys.modules, "torch")
    assert threads.prefer_passive_wait() and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    os.environ.pop("OMP_WAIT_POLICY")
    os.environ["GOMP_SPINCOUNT"] = "10000"
    assert not threads.prefer_passive_wait() and "OMP_WAIT_POLICY" not in os.environ, "the user's own setting"


def test_the_default_count_is_torchs_own():
    """What user_threads takes for nobody's choice is what a fresh torch starts with here."""
    env = {k: v for k, v in os.environ.items() if k not in threads.THREAD_VARIABLES}
    fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                           capture_output=True, text=True, check=True)
    assert int(fresh.stdout) == threads.torch_default_threads()


@pytest.mark.parametrize("command", [
    ("conversion", "train"), ("conversion", "predict"), ("conversion", "bench"),
    ("voucher", "train"), ("voucher", "predict"), ("voucher", "bench"),
    ("incentive", "train"), ("incentive", "predict"), ("incentive", "bench"),
    ("value", "train"), ("value", "predict"), ("value", "bench"),
])
def test_every_train_predict_and_bench_command_takes_threads(tmp_path, command):
    """--threads 0 is refused in one line before any table is read (the paths need not exist)."""
    required = {"train": ["--out", tmp_path / "m"], "predict": ["--model", tmp_path / "m", "--out", tmp_path / "p"],
                "bench": []}[command[1]]
    tables = {"conversion": ["--data", tmp_path / "t.csv"],
              "voucher": ["--sessions", tmp_path / "s.csv", "--items", tmp_path / "i.csv"],
              "incentive": ["--customers", tmp_path / "c.csv", "--merchants", tmp_path / "m.csv",
                            "--edges", tmp_path / "e.csv"],
              "value": ["--data", tmp_path]}[command[0]]
    args = [*command, *([] if command[1] == "bench" else tables), *required, "--threads", "0"]
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2 and "error: --threads must be at least 1, got 0" in result.output, result.output

"""``--threads``: torch's threads default to the cores free now, on every train and predict command."""

import os

import pytest
import torch
from typer.testing import CliRunner

from promokit.cli import app
from promokit.cli_support import free_cores, set_threads
from promokit.data import DataError

runner = CliRunner()


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    yield
    torch.set_num_threads(1)  # as conftest leaves it


@pytest.mark.parametrize("load, free", [(0.0, 4), (1.4, 3), (1.6, 2), (3.5, 1), (9.0, 1)])
def test_free_cores_are_the_usable_cores_minus_the_load(monkeypatch, four_cores, load, free):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert free_cores() == free
    assert set_threads(None) == free and torch.get_num_threads() == free


def test_threads_given_win_and_must_be_positive(four_cores):
    assert set_threads(3) == 3 and torch.get_num_threads() == 3
    for bad in (0, -2):
        with pytest.raises(DataError, match=f"--threads must be at least 1, got {bad}"):
            set_threads(bad)


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

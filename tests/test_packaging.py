"""Installable beside a user's stack: compatible ranges in pyproject.toml, the exact lock and the lowest versions
CI tests, the version, and optional extras named in one line when missing."""

import os
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from typer.testing import CliRunner

from conftest import make_impressions

import promokit
from promokit.cli import app
from promokit.extras import EXTRAS, MissingExtra, require_extra

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(name: str) -> dict[str, Version]:
    lines = (ROOT / "constraints" / name).read_text().splitlines()
    return {Requirement(line).name.lower(): Version(line.split("==")[1])
            for line in lines if line and not line.startswith("#")}


#: the core's upper bounds: releases known to break a supported stack (pyarrow 26 refuses NumPy 1.x at import)
UPPER = {"pyarrow": Version("26")}


def lower_bound(requirement: Requirement) -> Version:
    """The ``>=`` bound of a core requirement, checking that its only other bound is the one :data:`UPPER` names."""
    bounds = {spec.operator: Version(spec.version) for spec in requirement.specifier}
    assert set(bounds) == ({">=", "<"} if requirement.name in UPPER else {">="}), requirement
    assert bounds.get("<") == UPPER.get(requirement.name), requirement
    return bounds[">="]


def test_core_dependencies_are_lower_bounds_and_the_lowest_set_pins_each_at_its_bound():
    lowest = pins("lowest.txt")
    for text in PROJECT["dependencies"]:
        requirement = Requirement(text)
        assert lowest[requirement.name.lower()] == lower_bound(requirement), text
    assert PROJECT["requires-python"] == ">=3.11"
    assert {name: Version(v) for name, v in (("numpy", "1.26"), ("pandas", "2.2"), ("pyarrow", "15"),
                                             ("scikit-learn", "1.4"))}.items() <= {
        Requirement(t).name: lower_bound(Requirement(t)) for t in PROJECT["dependencies"]}.items()


def test_the_lock_pins_torch_2_13_0_and_satisfies_every_range():
    lock = pins("lock.txt")
    assert lock["torch"] == Version("2.13.0")
    extras = PROJECT["optional-dependencies"]
    for text in [*PROJECT["dependencies"], *(t for name, ts in extras.items() if name != "all" for t in ts)]:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate():
            assert requirement.name.lower() in lock, text
            assert requirement.specifier.contains(lock[requirement.name.lower()], prereleases=True), text


def test_heavy_stacks_are_extras_not_core():
    core = {Requirement(t).name.lower() for t in PROJECT["dependencies"]}
    assert not core & {"ray", "fastapi", "uvicorn", "sqlalchemy", "psycopg", "optuna", "ortools"}
    extras = PROJECT["optional-dependencies"]
    assert extras["all"] == ["promokit[allocation,serve,scale,tune]"]
    for extra, modules in EXTRAS.items():
        names = {Requirement(t).name.lower().replace("-", "_") for t in extras[extra]}
        assert set(modules) <= names | {"prometheus_client"}, extra


def test_version_is_stated_once_and_printed():
    assert promokit.__version__ == version("promokit")
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"promokit {promokit.__version__}\n"


def test_a_missing_extra_is_a_one_line_error_naming_it(monkeypatch):
    monkeypatch.setitem(EXTRAS, "scale", ("promokit_no_such_module",))
    with pytest.raises(MissingExtra, match=r"^the Ray executor needs promokit\[scale\] \(promokit_no_such_module not "
                                           r"installed\): pip install 'promokit\[scale\]'$"):
        require_extra("scale", "the Ray executor")


def test_the_allocation_extra_says_how_to_keep_numpy_1(monkeypatch):
    monkeypatch.setitem(EXTRAS, "allocation", ("promokit_no_such_module",))
    with pytest.raises(MissingExtra) as error:
        require_extra("allocation", "the exact quota method")
    assert str(error.value) == ("the exact quota method needs promokit[allocation] (promokit_no_such_module not "
                                "installed): pip install 'promokit[allocation]' (add 'numpy<2' on the same line to keep "
                                "NumPy 1.x: pip then takes OR-Tools 9.14, as OR-Tools 9.15 needs NumPy 2)")


def test_the_cli_prints_a_missing_extra_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(EXTRAS, "tune", ("promokit_no_such_module",))
    table = tmp_path / "impressions.csv"
    make_impressions().to_csv(table, index=False)
    result = CliRunner().invoke(app, ["conversion", "tune", "--data", str(table), "--out", str(tmp_path / "o"),
                                      "--model", "lr", "--trials", "1"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == ("error: tuning needs promokit[tune] (promokit_no_such_module "
                                                     "not installed): pip install 'promokit[tune]'")


def test_import_promokit_loads_no_heavy_library():
    code = ("import sys, promokit, promokit.cli; heavy = [m for m in ('torch', 'ray', 'fastapi', 'sqlalchemy', "
            "'optuna', 'ortools', 'torch_geometric', 'lightgbm') if m in sys.modules]; assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)
    bare = "import sys, promokit; assert 'pandas' not in sys.modules and 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", bare], check=True)


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_import_promokit_has_openmp_threads_sleep_unless_the_user_chose(given):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    env.update({"OMP_WAIT_POLICY": given} if given else {})
    code = "import os, promokit; print(os.environ.get('OMP_WAIT_POLICY'))"
    printed = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert printed.stdout.strip() == (given or "PASSIVE")


def run_without(modules: list[str], code: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter where importing any of ``modules`` fails, as where an extra is not installed."""
    hide = "import sys; " + "; ".join(f"sys.modules[{m!r}] = None" for m in modules) + "; "
    return subprocess.run([sys.executable, "-c", hide + code], capture_output=True, text=True)


@pytest.mark.extra("serve")
def test_a_public_name_whose_extra_is_missing_says_which_extra():
    result = run_without(["fastapi"], "import promokit as pk\ntry:\n    pk.serve.create_app\n"
                                      "except ImportError as error:\n    print(type(error).__name__, error)")
    assert result.stdout == ("MissingExtra promokit.serve.create_app needs promokit[serve] (fastapi not installed): "
                             "pip install 'promokit[serve]'\n"), result.stderr


@pytest.mark.extra("serve")
def test_a_command_whose_extra_is_missing_exits_2_naming_it(tmp_path):
    result = run_without(["fastapi", "sqlalchemy"], "from promokit.cli import main; import sys; "
                         f"sys.argv = ['promokit', 'serve', '--campaign', {str(tmp_path)!r}]; main()")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: this command needs promokit[serve] (fastapi not installed): "
                                     "pip install 'promokit[serve]'")

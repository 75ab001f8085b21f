"""Every name the API reference documents is what it says it is, however it is reached: ``from promokit.x import
name`` and ``pk.x.name``, before and after every module of its package is imported (a submodule of the same name
would otherwise replace a lazily exported function once something imports it)."""

import importlib
import pkgutil
import types
from pathlib import Path

import pytest

from promokit.extras import MissingExtra

API = Path(__file__).resolve().parents[1] / "docs" / "api"
ENTRIES = sorted({line[4:].strip() for page in API.glob("*.md") for line in page.read_text().splitlines()
                  if line.startswith("::: ")})


def _module(path: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name is not None and path.startswith(exc.name) and exc.name != path.split(".")[0]:
            return None  # not a module: a name in one
        raise


def _import_every_module(package: types.ModuleType) -> None:
    for info in pkgutil.iter_modules(getattr(package, "__path__", [])):
        importlib.import_module(f"{package.__name__}.{info.name}")


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_documented_name_is_the_same_object_both_ways_before_and_after_its_modules_load(entry):
    parent_path, _, name = entry.rpartition(".")
    try:
        parent = importlib.import_module(parent_path) if parent_path else None
        lazy = getattr(parent, "_EXPORTS", {})
        module = _module(entry)
        if module is not None:  # a module or package, documented as such, which no export of its parent shadows
            assert name not in lazy, f"{entry} is both a module and an export of {parent_path} ({lazy[name]})"
            return
        first = getattr(parent, name)
        _import_every_module(parent)
    except (MissingExtra, ModuleNotFoundError) as missing:  # make test-lowest: the core without its extras
        if (getattr(missing, "name", None) or "").startswith("promokit"):
            raise
        pytest.skip(f"{entry}: {missing}")
    again = getattr(importlib.import_module(parent_path), name)
    imported = getattr(__import__(parent_path, fromlist=[name]), name)
    assert first is again is imported, f"{entry} is {again!r} once {parent_path}'s modules load, not {first!r}"
    assert not isinstance(first, types.ModuleType), f"{entry} is a module, documented as a name"

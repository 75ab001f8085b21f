"""Package exports that load on first use (PEP 562), so ``promokit --help`` imports no heavy library."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str]):
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) when ``name`` is first used."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__

"""Package exports that load on first use (PEP 562), so ``promokit --help`` imports no heavy library."""

from __future__ import annotations

import importlib

from promokit.extras import missing_extra


def lazy_exports(package: str, exports: dict[str, str], subpackages: tuple[str, ...] = ()):
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) when ``name`` is first used, and
    the subpackage ``package.name`` for a name of ``subpackages``. A module that needs an extra which is not
    installed is a :class:`~promokit.extras.MissingExtra` naming it."""

    def __getattr__(name: str):
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(exports[name])
        except ModuleNotFoundError as error:
            raise (missing_extra(error, f"{package}.{name}") or error) from None
        return getattr(module, name)

    return __getattr__

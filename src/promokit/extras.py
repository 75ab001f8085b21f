"""Optional dependencies. Fitting and predicting need only the core; the quota solver's min-cost flow, the decision
service, the Ray executor and tuning are extras (``pip install 'promokit[serve]'`` …), and using one that is not
installed is a one-line error naming it."""

from __future__ import annotations

import importlib.util

#: extra → the modules it brings that promokit imports
EXTRAS = {
    "allocation": ("ortools",),
    "serve": ("fastapi", "pydantic", "uvicorn", "sqlalchemy", "psycopg", "prometheus_client"),
    "scale": ("ray",),
    "tune": ("optuna",),
}


#: what an extra's install line says besides, where the extra would upgrade a package a notebook already has
NOTES = {"allocation": " (add 'numpy<2' on the same line to keep NumPy 1.x: pip then takes OR-Tools 9.14, as OR-Tools "
                       "9.15 needs NumPy 2)"}


class MissingExtra(ImportError):
    """A feature's optional dependencies are not installed; the message says which extra brings them."""

    @classmethod
    def of(cls, extra: str, feature: str, missing: list[str]) -> MissingExtra:
        return cls(f"{feature} needs promokit[{extra}] ({', '.join(missing)} not installed): "
                   f"pip install 'promokit[{extra}]'{NOTES.get(extra, '')}")


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` can be imported; ``feature`` says what needs
    it, e.g. ``"the Ray executor"``."""
    missing = [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingExtra.of(extra, feature, missing)


def missing_extra(error: ModuleNotFoundError, feature: str) -> MissingExtra | None:
    """``error`` (``feature`` could not be imported) as the :class:`MissingExtra` that names the extra bringing the
    missing module; None when no extra brings it (a real error)."""
    top = (error.name or "").split(".")[0]
    for extra, modules in EXTRAS.items():
        if top in modules:
            return MissingExtra.of(extra, feature, [top])
    return None

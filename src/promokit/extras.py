"""Optional dependencies. Fitting and predicting need only the core; the quota solver's min-cost flow, the decision
service, the Ray engine and tuning are extras (``pip install 'promokit[serve]'`` …), and using one that is not
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


class MissingExtra(ImportError):
    """A feature's optional dependencies are not installed; the message says which extra brings them."""


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` can be imported; ``feature`` says what needs
    it, e.g. ``"the Ray engine"``."""
    missing = [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]
    if missing:
        raise MissingExtra(f"{feature} needs promokit[{extra}] ({', '.join(missing)} not installed): "
                           f"pip install 'promokit[{extra}]'")

"""Model parameters checked against the model class before anything is built."""

from __future__ import annotations

import difflib
import inspect

from promokit.data.errors import DataError


def check_model_params(name: str, model_class, params: dict, own=()) -> None:
    """Raise a one-line :class:`DataError` for a key of ``params`` that is neither an argument of
    ``model_class`` (after the inputs every model of its domain receives) nor one of the estimator's ``own``
    keys, with the closest valid name."""
    accepted = _keyword_defaults(model_class) + list(own)
    unknown = [k for k in params if k not in accepted]
    if unknown:
        close = difflib.get_close_matches(unknown[0], accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise DataError(f"model {name!r} has no parameter {unknown[0]!r}{hint}; its parameters are {sorted(accepted)}")


def without_foreign_wide(model_class, params: dict) -> dict:
    """``params`` without ``wide`` when ``model_class`` has no wide term to set (a bench's ``--wide`` reaches only
    the models that have one: not ``lr``, ``gbdt`` or WDL, whose own wide term is always on)."""
    return {k: v for k, v in params.items() if k != "wide" or "wide" in _keyword_defaults(model_class)}


def saved_params(model_class, params: dict) -> dict:
    """A model directory's parameters as the model class reads them today: a network saved before it had a wide term
    was trained without one (``wide: none``), whatever the default has become since."""
    if model_class is not None and "wide" in _keyword_defaults(model_class) and "wide" not in params:
        return {**params, "wide": "none"}
    return params


def _keyword_defaults(model_class) -> list[str]:
    """The arguments with defaults of ``model_class.__init__``, and of its bases' when it passes ``**params`` on."""
    names = []
    for cls in model_class.__mro__:
        if "__init__" not in vars(cls):
            continue
        signature = inspect.signature(cls.__init__).parameters
        names += [k for k, p in signature.items() if p.default is not inspect.Parameter.empty and k not in names]
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values()):
            break
    return names

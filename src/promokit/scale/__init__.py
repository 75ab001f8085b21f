"""Scale-out: the executors that map work over table parts and train a planned job, in this process or on a Ray
cluster (Ray Train). Domains never import this package: an executor (or its ``map``) is passed in.

Exports load lazily (PEP 562) so that ``promokit --help`` imports neither Ray nor torch.
"""

from promokit.lazy import lazy_exports

_EXPORTS = {
    "make_executor": "promokit.scale.executor",
    "LocalExecutor": "promokit.scale.executor",
    "RayExecutor": "promokit.scale.executor",
    "ProcessGroupExecutor": "promokit.scale.process_group",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)

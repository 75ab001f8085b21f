"""The optimisation settings every neural model trains with. Imports nothing heavy, so the command line can show a
domain's defaults in ``--help`` without loading torch."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace


@dataclass
class TrainConfig:
    """Optimisation settings; the defaults are ESM²'s Table 2 (Adam, lr 0.0005, batch 1000).

    A config remembers which settings its constructor was given (:meth:`given`): an estimator merges exactly those
    over its domain's defaults (:meth:`over`), so ``TrainConfig(epochs=3)`` changes the epochs and nothing else.

    ``weight_decay`` is decoupled L2 on the dense parameters (AdamW); ``embedding_decay`` the same on the rows
    of sparse embedding tables, applied lazily to the rows a batch touches (:class:`LazyWeightDecay`).

    ``lr_decay`` is exponential learning-rate decay by epoch: epoch e trains at ``lr · lr_decay**e`` (the
    joint-incentive paper's section 5 uses 0.95; 1 keeps the rate constant).

    ``monitor`` is what early stopping and the kept epoch follow on the validation rows: ``"loss"`` (lowest
    validation loss) or the name of a metric passed to :meth:`Trainer.fit` (highest value, e.g. ``"auc"``).

    ``device`` is where training and prediction run: ``"auto"`` (CUDA when torch finds a CUDA device, else the CPU),
    ``"cpu"``, ``"cuda"`` or ``"cuda:<n>"`` (:func:`check_device`; resolved by
    :func:`promokit.training.device.resolve_device`). A saved model records it, and loads on any device
    (:meth:`loaded`).

    ``decay_rows`` > 0 makes ``embedding_decay`` follow the table's size: it is the decay at ``decay_rows`` training
    rows, and a table of n > ``decay_rows`` rows gets ``embedding_decay · decay_rows / n``
    (:func:`embedding_decay_for`).
    """

    epochs: int = 10
    batch_size: int = 1000
    lr: float = 5e-4
    lr_decay: float = 1.0
    weight_decay: float = 0.0
    embedding_decay: float = 0.0
    patience: int = 2
    seed: int = 0
    eval_batch_size: int = 16384
    progress: bool = True
    monitor: str = "loss"
    decay_rows: int = 0
    device: str = "auto"

    def given(self) -> dict:
        """The settings this config's constructor was given, by name (``TrainConfig(epochs=3).given()`` is
        ``{"epochs": 3}``); a config made by :func:`dataclasses.replace` or :meth:`loaded` was given every one."""
        return {name: getattr(self, name) for name in self.to_dict() if name in self._given}

    def over(self, defaults: TrainConfig) -> TrainConfig:
        """``defaults`` with the settings this config was given, as a new config given every setting; ``self`` when
        it was given every setting already (a merged config merges into itself, as scikit-learn's ``clone``
        requires)."""
        return self if len(self._given) == len(fields(self)) else replace(defaults, **self.given())

    @classmethod
    def loaded(cls, saved: Mapping) -> TrainConfig:
        """The settings a model directory recorded, with the device ``auto``: a model trained on one device runs on
        whichever the loading machine has (its weights are saved from CPU tensors)."""
        return cls(**{**saved, "device": "auto"})

    def to_dict(self) -> dict:
        return asdict(self)

    def merged(self, params: Mapping | None) -> tuple[TrainConfig, dict]:
        """Flat parameters (``--params``, or what ``tune`` writes) split into this config with their TrainConfig
        fields replaced (``lr``, ``embedding_decay`` …) and the remaining (model) parameters."""
        params = dict(params or {})
        names = set(self.to_dict())
        return (TrainConfig(**{**self.to_dict(), **{k: v for k, v in params.items() if k in names}}),
                {k: v for k, v in params.items() if k not in names})


def _recording_given(init):
    """The dataclass's ``__init__``, recording the names of the settings it is given (:meth:`TrainConfig.given`)."""
    names = [f.name for f in fields(TrainConfig)]

    def __init__(self, *args, **kwargs):
        self._given = frozenset(names[:len(args)]) | frozenset(kwargs)
        init(self, *args, **kwargs)

    __init__.__doc__, __init__.__signature__ = init.__doc__, inspect.signature(init)
    return __init__


TrainConfig.__init__ = _recording_given(TrainConfig.__init__)

#: The forms of the ``device`` setting, for messages.
DEVICE_FORMS = "'auto', 'cpu', 'cuda' or 'cuda:<n>'"


def check_device(value) -> str:
    """``value`` as a device setting (:class:`TrainConfig`'s ``device``, lower case), or a one-line DataError listing
    the forms. Whether the machine has that device is checked where it is used
    (:func:`promokit.training.device.resolve_device`): a model saved on one machine loads on another."""
    from promokit.data.errors import DataError

    text = value.strip().lower() if isinstance(value, str) else None
    if text is None or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise DataError(f"device must be {DEVICE_FORMS}, got {value!r}")
    return text

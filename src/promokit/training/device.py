"""Where a network trains and predicts: the ``device`` setting (:class:`~promokit.training.TrainConfig`) resolved to a
torch device, and what follows it there: the network with the node inputs it holds (:func:`place`), each batch
(:func:`to_device`), the tensors the models create as they run (:func:`device_scope`), and the outputs, brought back
to the CPU (:func:`to_cpu`).

On the CPU every step is the identity (no copy, no default device), so a CPU run computes exactly what it would
with no device handling at all. Weights are saved from CPU tensors and loaded to the CPU
(:mod:`promokit.training.artifact`), so a model trained on one device loads on any.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Mapping

import torch
from torch import nn

from promokit.data.errors import DataError
from promokit.training.config import check_device

CPU = torch.device("cpu")

_chosen: str | None = None  # what ``auto`` means in this process (set_device), None: CUDA when present


def set_device(setting: str | None) -> None:
    """Make ``auto`` mean ``setting`` in this process (None: CUDA when present, else the CPU), e.g. for the models a
    command loads, whose device is ``auto`` (:meth:`~promokit.training.TrainConfig.loaded`); checked at once
    (:func:`resolve_device`). A setting a model was given explicitly still wins."""
    global _chosen
    if setting is not None:
        resolve_device(setting)
    _chosen = None if setting is None or check_device(setting) == "auto" else check_device(setting)


def resolve_device(setting: str = "auto") -> torch.device:
    """The torch device of a ``device`` setting: ``auto`` is ``cuda`` (the current CUDA device) when torch finds one,
    else the CPU (or what :func:`set_device` chose); ``cuda`` / ``cuda:<n>`` on a machine without it is a one-line
    DataError, as is a malformed setting (:func:`~promokit.training.config.check_device`)."""
    setting = check_device(setting)
    if setting == "auto" and _chosen is not None:
        setting = _chosen
    available = torch.cuda.is_available()
    if setting == "auto":
        return torch.device("cuda") if available else CPU
    if setting == "cpu":
        return CPU
    if not available:
        raise DataError(f"device {setting!r}: torch finds no CUDA device on this machine (torch {torch.__version__}); "
                        "use 'auto' or 'cpu'")
    device = torch.device(setting)
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise DataError(f"device {setting!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                        f"numbered from 0")
    return device


def to_device(value, device: torch.device):
    """``value`` with every tensor it holds on ``device``: a tensor, or a mapping, list, tuple or dataclass of them
    (nested; other values as they are). Unchanged, not copied, where everything is there already (always on the CPU
    for CPU tensors)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(to_device(v, device) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    if hasattr(value, "to") and hasattr(value, "num_graphs"):  # a PyG batch of graphs
        return value.to(device)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        moved = {f.name: to_device(getattr(value, f.name), device) for f in dataclasses.fields(value)}
        if all(moved[name] is getattr(value, name) for name in moved):
            return value
        out = copy.copy(value)  # not replace(): a dataclass's __post_init__ may check or derive what it holds
        for name, field_value in moved.items():
            object.__setattr__(out, name, field_value)
        return out
    return value


def to_cpu(value):
    """:func:`to_device` on the CPU: outputs for NumPy, metrics and files."""
    return to_device(value, CPU)


#: The attributes that hold a network's attached inputs (the graph and node features it reads, not weights) and what
#: it derived from them (node states cached for evaluation, states given from elsewhere): moved with the network by
#: :func:`place`.
ATTACHED = ("inputs", "_states", "_given")


def place(net: nn.Module, device: torch.device) -> nn.Module:
    """``net`` on ``device``: its weights and buffers, and the inputs it and its submodules hold (:data:`ATTACHED`,
    e.g. an incentive network's graph, attached with ``attach``). A model that is not a torch module (trees) stays
    where it is."""
    if not isinstance(net, nn.Module):
        return net
    net.to(device)
    for module in net.modules():
        for name in ATTACHED:
            held = getattr(module, name, None)
            if held is not None:
                object.__setattr__(module, name, to_device(held, device))
    return net


def net_device(net: nn.Module) -> torch.device:
    """The device of ``net``'s weights (the CPU for a network without any, or a model that is not a torch module)."""
    if not isinstance(net, nn.Module):
        return CPU
    return next((p.device for p in net.parameters()), CPU)


def ddp_backend(device: torch.device) -> str:
    """The process group's backend of data-parallel workers on ``device``: NCCL between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


def device_scope(device: torch.device):
    """A context in which the tensors the models create as they run (``torch.zeros``, ``torch.arange`` …) are made
    on ``device``; nothing on the CPU (torch's own default)."""
    return contextlib.nullcontext() if device.type == "cpu" else torch.device(device)


def on_cpu():
    """A context in which the tensors code creates are made on the CPU whatever :func:`device_scope` the block runs
    in: for the code that reads and assembles batches, which then move to the network's device whole
    (:func:`to_device`). Nothing where the CPU is the default device already."""
    return contextlib.nullcontext() if torch.get_default_device().type == "cpu" else torch.device("cpu")


_END = object()


def made_on_cpu(items):
    """The items of the iterable ``items`` (e.g. a generator of batches), each made under :func:`on_cpu`."""
    with on_cpu():
        iterator = iter(items)
    while True:
        with on_cpu():
            item = next(iterator, _END)
        if item is _END:
            return
        yield item


@contextlib.contextmanager
def running_on(net: nn.Module, device: torch.device):
    """Run ``net`` on ``device`` (:func:`resolve_device`) for the block: the network placed there (:func:`place`),
    the tensors made in the block made there (:func:`device_scope`), and the network back where it was after it (the
    CPU, where the code that reads a fitted network outside the trainer finds it: saving, scoring over parts)."""
    before = net_device(net)
    place(net, device)
    try:
        with device_scope(device):
            yield device
    finally:
        place(net, before)


def run_on(net: nn.Module, setting: str, fn, *args):
    """``fn(*args)`` with ``net`` on the device of ``setting`` (:func:`running_on`) and the tensors of ``args`` moved
    there (:func:`to_device`); the result on the CPU. For a pass of a network's parts outside the trainer, e.g. a GNN
    layer over one shard of a graph in parts."""
    with running_on(net, resolve_device(setting)) as device:
        return to_cpu(fn(*to_device(args, device)))

"""Batches cut from tensors prepared once: no per-row Dataset, no DataLoader."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

Batch = dict[str, Tensor]


def n_rows(tensors: Batch) -> int:
    return len(next(iter(tensors.values())))


def take(tensors: Batch, index: Tensor) -> Batch:
    return {name: t[index] for name, t in tensors.items()}


def iterate_batches(tensors: Batch, batch_size: int, generator: torch.Generator | None = None) -> Iterator[Batch]:
    """Yield batches by slicing a permutation (``generator`` given: training) or the natural order (``None``).
    In training a last batch of one row is joined to the one before."""
    n = n_rows(tensors)
    if generator is None:
        for start in range(0, n, batch_size):
            yield {name: t[start:start + batch_size] for name, t in tensors.items()}
        return
    order = torch.randperm(n, generator=generator)
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] == 1:  # a one-row batch breaks batch normalisation: join the previous
        starts.pop()
    for start, end in zip(starts, [*starts[1:], n]):
        yield take(tensors, order[start:end])

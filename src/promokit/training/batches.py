"""Batches cut from tensors prepared once: no per-row Dataset, no DataLoader."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

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
    order = torch.randperm(n, generator=generator, device=generator.device)  # batches are cut on the CPU
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] == 1:  # a one-row batch breaks batch normalisation: join the previous
        starts.pop()
    for start, end in zip(starts, [*starts[1:], n]):
        yield take(tensors, order[start:end])


def stream_batches(chunks: Iterable[Batch], batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
    """Training batches cut from a stream of tables (e.g. a table's parts, one at a time): each chunk's rows
    shuffled by ``generator``, the rows left over carried into the next chunk, so every batch but the last has
    ``batch_size`` rows whatever the chunks' sizes; as in :func:`iterate_batches`, a last batch of one row is joined
    to the one before. Memory: one chunk and one batch."""
    carry: Batch | None = None
    held: Batch | None = None  # the last full batch, held back until we know whether a one-row tail follows
    for chunk in chunks:
        if n_rows(chunk) == 0:
            continue
        chunk = take(chunk, torch.randperm(n_rows(chunk), generator=generator, device=generator.device))
        if carry is not None:
            chunk = {name: torch.cat([carry[name], t]) for name, t in chunk.items()}
        n = n_rows(chunk)
        full = n - n % batch_size
        for start in range(0, full, batch_size):
            if held is not None:
                yield held
            held = {name: t[start:start + batch_size] for name, t in chunk.items()}
        carry = {name: t[full:] for name, t in chunk.items()} if full < n else None
    if carry is not None and held is not None and n_rows(carry) == 1:
        yield {name: torch.cat([t, carry[name]]) for name, t in held.items()}
        return
    if held is not None:
        yield held
    if carry is not None:
        yield carry

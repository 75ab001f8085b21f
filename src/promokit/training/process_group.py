"""The communicator of one data-parallel worker in a ``torch.distributed`` process group (started by ``torchrun``,
Ray Train or the user's own launcher): DDP over the group's backend (NCCL between GPUs, gloo between CPUs,
:func:`~promokit.training.device.ddp_backend`), the epoch's sums, the validation outputs gathered on rank 0 and
its record broadcast (:func:`~promokit.training.trainer.train_epochs`). Checkpoints as one process keeps them
(:class:`~promokit.training.trainer.LocalComm`): rank 0 writes ``checkpoint_dir/checkpoint.pt`` each epoch and every
rank reads it to resume, so the folder must be one every worker reaches.

With NCCL every collective runs on the worker's GPU: the sums are allreduced there and the gathered objects are
staged there by torch, which is why :class:`ProcessGroupComm` makes its device the current CUDA device.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from promokit.data.io import atomic_path
from promokit.training.trainer import CHECKPOINT, resumed_state


class ProcessGroupComm:
    """Worker ``torch.distributed.get_rank()`` of ``get_world_size()`` on ``device`` (its GPU, or the CPU), with its
    checkpoint in ``checkpoint_dir`` (None: none), continued from with ``resume``. Rank 0 shows the progress (a line
    per epoch in a launcher's log); the others train silently."""

    def __init__(self, device: torch.device, checkpoint_dir: Path | None = None, resume: bool = False):
        import torch.distributed as dist

        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.interactive = self.rank == 0
        self.device = device
        self.checkpoint_dir, self.resume = checkpoint_dir, resume
        if device.type == "cuda":
            torch.cuda.set_device(device)

    def wrap(self, net: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        if self.world == 1:
            return net
        return DistributedDataParallel(net, device_ids=[self.device] if self.device.type == "cuda" else None)

    def sum(self, values: list[float]) -> list[float]:
        import torch.distributed as dist

        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.tolist()

    def gather(self, obj) -> list | None:
        import torch.distributed as dist

        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def broadcast(self, obj):
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def load(self) -> dict | None:
        return resumed_state(self.checkpoint_dir, self.resume)

    def save(self, state: Callable[[], dict], record: dict) -> None:
        if self.rank == 0 and self.checkpoint_dir is not None:
            with atomic_path(self.checkpoint_dir / CHECKPOINT) as tmp:
                torch.save(state(), tmp)

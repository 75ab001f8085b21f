"""Training a planned job data-parallel on the processes of a ``torch.distributed`` launch, without Ray: ``torchrun
--nproc_per_node N script.py`` (or a Kubernetes PyTorchJob, Slurm's ``srun``) starts N copies of a script that calls
the same ``fit_from_records(model, records, validation, executor=ProcessGroupExecutor())``; each process trains its
shard (:func:`promokit.training.shard_loop.run_shard`) with DDP over NCCL on its GPU (``cuda:$LOCAL_RANK`` when the
job's ``device`` resolves to CUDA) or gloo on the CPU, and every process returns the same kept network.

The executor trains only: a records pass maps over parts, which N copies of one script would each repeat, so the
records are written first (by one process or on Ray) and read by every worker from storage they all reach.
"""

from __future__ import annotations

import os

import torch

from promokit.data.errors import DataError
from promokit.training.device import ddp_backend, resolve_device
from promokit.training.process_group import ProcessGroupComm
from promokit.training.shard_loop import checkpoint_folder, fresh_checkpoint_dir, run_shard

#: What ``torch.distributed.init_process_group`` reads from the environment (``env://``), as torchrun sets it.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class ProcessGroupExecutor:
    """The processes of a ``torch.distributed`` launch as the workers of :meth:`train` (module docstring). The
    process group is the one already initialised, else one initialised from torchrun's environment variables with
    the backend of the job's device."""

    name = "process-group"

    @property
    def workers(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))

    def map(self, fn, items, setup=None, label: str = "partitions") -> list:
        raise DataError("executor: a process-group executor only trains; write the records with the local or ray "
                        "executor first")

    def train(self, job, checkpoint_dir: str | os.PathLike | None = None, resume: bool = False):
        """Train ``job`` as this process's worker of the group, the checkpoint in ``checkpoint_dir`` (rank 0 writes
        it; ``resume``: every rank continues from it): the kept network (evaluation mode) and the history."""
        import torch.distributed as dist

        checkpoint_folder(checkpoint_dir)  # a local folder: a URI is refused before the group starts
        device = resolve_device(job.estimator.train_config.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        if device.type == "cuda":
            torch.cuda.set_device(device)  # NCCL's barrier and object collectives run on the current device
        if not dist.is_initialized():
            missing = [name for name in LAUNCH_VARIABLES if name not in os.environ]
            if missing:
                raise DataError(f"executor: no torch.distributed process group and {', '.join(missing)} unset; "
                                "launch with torchrun or call torch.distributed.init_process_group first")
            dist.init_process_group(backend=ddp_backend(device), device_id=device if device.type == "cuda" else None)
        folder = fresh_checkpoint_dir(checkpoint_dir, resume) if dist.get_rank() == 0 else \
            checkpoint_folder(checkpoint_dir)  # emptied by rank 0 alone
        dist.barrier()
        return run_shard(job, ProcessGroupComm(device, folder, resume))

    def release(self) -> None:
        """Nothing to stop: the launcher owns the processes and their group."""

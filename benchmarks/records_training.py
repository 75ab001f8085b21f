"""The incentive GNN trained from training records (:func:`promokit.incentive.record_training.fit_from_records`)
against the same model trained in memory (:meth:`IncentiveModel.fit`), on a synthetic world with known response
curves: the same split (the model's, by its seed), network, optimiser and epoch loop.

Per seed: the training customers' and merchants' records (``--draws`` draws, cycled by epoch) and the validation
ones' (one draw) are written from the world as one part, then both models are scored on the held-out customers:
AUC_c (f_c at the offered value against the redemption) and curve MAE (f_c against the true curve at every value),
and on the held-out merchants: MAE_m (f_m at the offered commission against y^m), with the epochs run and the
training seconds. The in-memory path samples with ``sample_neighbours`` (a fresh draw per
step), the records path reads the keyed draws written: the neighbourhoods differ, the network and loss do not.
With ``--workers``, the records path also trains data-parallel on that many Ray Train workers (DDP over gloo, one
CPU each, the same global batch); ``samples/s`` is the mean over epochs of the training records per second of the
epoch loop (every worker's together), ``seconds`` the whole fit (with Ray Train's start for the Ray rows).
``--devices cpu cuda`` runs the in-memory and records paths on each device in turn (the TrainConfig ``device``);
``--process-group`` also trains from records as the one worker of a ``torch.distributed`` group
(``ProcessGroupExecutor``) with the device's backend, NCCL on a GPU, gloo on the CPU.

Usage::

    .venv/bin/python benchmarks/records_training.py                       # 20,000 customers, seeds 0 1 2
    .venv/bin/python benchmarks/records_training.py --customers 5000 --seeds 0
    .venv/bin/python benchmarks/records_training.py --workers 1 2     # also on Ray Train, 1 and 2 workers
    python benchmarks/records_training.py --seeds 0 --epochs 5 --devices cpu cuda --process-group  # a GPU machine
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.experiments.incentive.world import make_world
from promokit.incentive.contract import check_tables
from promokit.incentive.estimator import IncentiveModel
from promokit.incentive.record_training import fit_from_records
from promokit.incentive.records import RecordSpec, write_records
from promokit.metrics import auc
from promokit.scale.executor import LocalExecutor, RayExecutor
from promokit.scale.process_group import ProcessGroupExecutor
from promokit.training import TrainConfig
from promokit.training.device import ddp_backend, resolve_device

PARAMS = {"width": 32, "hidden": [64, 32], "fanouts": [5, 10]}


def write_split_records(model: IncentiveModel, world, root: Path, draws: tuple[int, ...]) -> tuple[Path, Path]:
    """The records of the training and of the validation customers of ``model.split_rows`` (other customers' labels
    removed: they pass messages only), drawn with the model's fanouts and seed, in ``root/train`` and
    ``root/valid``."""
    split = model.split_rows(check_tables(world.customers, world.merchants, world.edges))
    for name in ("merchants", "edges"):
        (root / name).mkdir(parents=True)
        getattr(world, name).to_parquet(root / name / "part-00000.parquet", index=False)
    for name, rows, merchants, kept in (("train", split.train_customers, split.train_merchants, draws),
                                        ("valid", split.valid_customers, split.valid_merchants, (0,))):
        customers = world.customers.copy()
        customers.loc[~np.isin(np.arange(len(customers)), rows), ["level", "redeemed"]] = np.nan
        (root / f"{name}_customers").mkdir()
        customers.to_parquet(root / f"{name}_customers" / "part-00000.parquet", index=False)
        spec = RecordSpec(tuple(model.levels_), model.customer_spec_, model.merchant_spec_,
                          tuple(model.model_params_["fanouts"]), seed=model.train_config.seed, draws=kept)
        write_records(root / f"{name}_customers", root / "merchants", root / "edges", root / name, model.encoders_,
                      spec, LocalExecutor())
        keep_merchants(root / name / "merchants", world.merchants.merchant_id.to_numpy()[merchants])
    return root / "train", root / "valid"


def keep_merchants(folder, ids) -> None:
    """Keep only the records of the merchants ``ids`` (the split's merchants of a role) in ``folder``: merchant
    labels are all or none in a table, so the others' records are dropped after writing."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for path in sorted(Path(folder).glob("part-*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.filter(pc.is_in(table.column("merchant_id"), pa.array(ids))), path)


def scores(model: IncentiveModel, tables, truth: np.ndarray, split) -> dict:
    """AUC_c and curve MAE on the split's test customers, MAE_m (f_m at the offered commission against y^m) on its
    test merchants."""
    responses, rows, merchants = model.responses(tables), split.test_customers, split.test_merchants
    f_c = responses.customers[rows]
    f_m = responses.merchants[merchants, tables.merchant_level[merchants]]
    epochs = model.history_.epochs
    return {"auc_c": auc(tables.redeemed[rows], f_c[np.arange(len(rows)), tables.customer_level[rows]]),
            "curve_mae": float(np.abs(f_c - truth[rows]).mean()),
            "mae_m": float(np.abs(f_m - tables.merchant_target()[merchants]).mean()), "epochs": len(epochs),
            "samples/s": float(np.mean([e["samples_per_second"] for e in epochs]))}


def one_process_group(device: str):
    """A ``torch.distributed`` group of this process alone, with the backend of ``device``."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    placed = resolve_device(device)
    dist.init_process_group(ddp_backend(placed), init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=placed if placed.type == "cuda" else None)


def executors(workers: list[int], device: str, process_group: bool) -> list[tuple[str, object]]:
    """The records paths to run: this process, the process group if asked, and Ray Train's workers on the CPU."""
    paths = [("", None)] + ([(", process group", ProcessGroupExecutor())] if process_group else [])
    return paths + [(f", ray {n}", RayExecutor(workers=n)) for n in workers if device == "cpu"]


def run(customers: int, seed: int, epochs: int, draws: int, workers: list[int], device: str,
        process_group: bool) -> list[dict]:
    world = make_world(customers, customers // 10, seed=seed)
    tables = check_tables(world.customers, world.merchants, world.edges)
    train = TrainConfig(epochs=epochs, batch_size=512, lr=1e-3, lr_decay=0.95, patience=3,
                        monitor="customer_loglik", progress=False, seed=seed, device=device)
    rows = []
    started = time.perf_counter()
    in_memory = IncentiveModel("gnn-hazard", PARAMS, train).fit(tables)
    test = in_memory.split_rows(tables)
    rows.append({"seed": seed, "device": device, "path": "in memory",
                 **scores(in_memory, tables, world.customer_truth, test), "seconds": time.perf_counter() - started})
    model = IncentiveModel("gnn-hazard", PARAMS, train)
    model.prepare(tables)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        records, valid = write_split_records(model, world, Path(tmp), tuple(range(draws)))
        written = time.perf_counter() - started
        for label, executor in executors(workers, device, process_group):
            model = IncentiveModel("gnn-hazard", PARAMS, train)
            model.prepare(tables)
            if isinstance(executor, ProcessGroupExecutor):
                one_process_group(device)
            started = time.perf_counter()
            fit_from_records(model, records, valid, executor=executor)
            seconds = time.perf_counter() - started
            if isinstance(executor, ProcessGroupExecutor):
                import torch.distributed as dist

                dist.destroy_process_group()
            rows.append({"seed": seed, "device": device, "path": f"records ×{draws}{label}",
                         **scores(model, tables, world.customer_truth, test), "seconds": seconds,
                         "records_seconds": written})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--customers", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--draws", type=int, default=3, help="draws written for the training customers")
    parser.add_argument("--workers", type=int, nargs="*", default=[], help="Ray Train workers to train with too")
    parser.add_argument("--devices", nargs="+", default=["cpu"], help="devices to train on (cpu, cuda, cuda:<n>)")
    parser.add_argument("--process-group", action="store_true",
                        help="also train from records as a one-process torch.distributed group")
    args = parser.parse_args()
    if args.workers:
        import ray

        ray.init(address="local", num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False)
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"uptime: {os.getloadavg()[0]:.2f} (load average, 1 min); torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs; GPU: {gpu}")
    table = pd.DataFrame([row for seed in args.seeds for device in args.devices
                          for row in run(args.customers, seed, args.epochs, args.draws, args.workers, device,
                                         args.process_group)])
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    summary = table.groupby(["device", "path"], sort=False)[["auc_c", "curve_mae", "mae_m", "epochs", "samples/s",
                                                              "seconds"]]
    print(summary.agg(["mean", "std"]).to_string(float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()

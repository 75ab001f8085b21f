"""Samples per second of each domain's paper model on each device this machine has: the CPU, and CUDA when torch finds
a GPU, in the same run (TrainConfig ``device``, docs/training.md).

Models, each with its default (paper) parameters, on a small synthetic world of its domain: ESM² (conversion),
DMBGN (voucher, without pre-training), GNN-hazard (incentive) and ESDPM (value). For each model and device, one
training run of ``--epochs`` epochs (training samples/s: the trainer's own figure, rows over the epoch's seconds, of
the last epoch, so a first epoch's warm-up is left out when there are two) and one prediction over the whole world
(rows over seconds, the model already on the device once). Torch uses ``--threads`` threads on the CPU.

Usage::

    .venv/bin/python benchmarks/device_throughput.py             # about 2 minutes on 2 cores
    .venv/bin/python benchmarks/device_throughput.py --scale 4   # worlds 4 times larger
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from promokit.training import TrainConfig

DOMAINS = {"conversion": "esm2", "voucher": "dmbgn", "incentive": "gnn-hazard", "value": "esdpm"}


def world(domain: str, scale: float):
    """The estimator class and the data of a small synthetic world of ``domain`` (rows ∝ ``scale``)."""
    if domain == "conversion":
        from promokit.conversion.estimator import ConversionModel
        from promokit.experiments.conversion.world import make_world

        return ConversionModel, make_world(int(2000 * scale), 800, int(100_000 * scale), seed=0).table
    if domain == "voucher":
        from promokit.experiments.voucher.world import make_world
        from promokit.voucher.estimator import VoucherModel

        return VoucherModel, make_world(n_users=int(1500 * scale), n_sessions=int(10_000 * scale), seed=0).tables
    if domain == "incentive":
        from promokit.experiments.incentive.world import make_world
        from promokit.incentive.contract import check_tables
        from promokit.incentive.estimator import IncentiveModel

        found = make_world(int(10_000 * scale), int(1000 * scale), seed=0)
        return IncentiveModel, check_tables(found.customers, found.merchants, found.edges)
    from promokit.experiments.value.world import make_world
    from promokit.value.contract import check_tables
    from promokit.value.estimator import ValueModel

    found = make_world(int(4000 * scale), seed=0)
    return ValueModel, check_tables(found.deliveries, found.users, found.funds, found.behaviors, found.consumption)


def measure(domain: str, data, estimator, device: str, epochs: int) -> dict:
    """Training and prediction samples/s of the domain's paper model on ``device``."""
    config = TrainConfig(epochs=epochs, patience=epochs, progress=False, device=device)
    params = {"pretrain": 0} if domain == "voucher" else None
    model = estimator(DOMAINS[domain], params, config)
    model.fit(data)
    history = model.history_
    last = history.epochs[-1]
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    predicted = len(model.predict(data))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {"train": last["samples_per_second"], "epoch_s": last["seconds"], "predict": predicted / seconds,
            "predicted": predicted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="world size factor")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--domains", default=",".join(DOMAINS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (torch finds no CUDA device)"
    print(f"torch {torch.__version__}, {platform.machine()}, {args.threads} CPU threads, scale {args.scale:g}, "
          f"{args.epochs} epochs; GPU: {gpu}", flush=True)
    print("| domain | model | device | train samples/s | epoch s | predict samples/s | rows predicted |")
    print("|---|---|---|---:|---:|---:|---:|", flush=True)
    for domain in args.domains.split(","):
        estimator, data = world(domain, args.scale)
        for device in devices:
            got = measure(domain, data, estimator, device, args.epochs)
            print(f"| {domain} | {DOMAINS[domain]} | {device} | {got['train']:,.0f} | {got['epoch_s']:.2f} | "
                  f"{got['predict']:,.0f} | {got['predicted']:,} |", flush=True)

if __name__ == "__main__":
    main()

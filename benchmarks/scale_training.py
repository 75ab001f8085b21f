"""Training over parts: the local trainer against 1 and 2 DDP workers on Ray Train, on the same data in one run.

``--rows`` synthetic impressions (``promokit.conversion.synthetic.make_world``; one world, of which a further tenth
is held out as the test rows) are written as ``--parts`` Parquet parts, and ESM² (the default network and
training settings: embeddings 16, towers 256-128-64, dropout 0.3, Adam lr 0.001, batch 1,000, lazy embedding
decay 10) trains for ``--epochs`` epochs (no early stopping) four ways:

- **local trainer**: ``ConversionModel.fit`` on the parts read into one frame (the in-memory Trainer);
- **local, parts**: ``conversion train --data DIR`` in this process: the same loop as a Ray worker's, streaming
  the parts (validation: a seeded tenth of each part);
- **ray × 1** and **ray × 2**: ``conversion train --data DIR --engine ray --workers N`` on a local Ray cluster of
  2 CPUs, DDP over gloo, the global batch kept at 1,000 (500 rows per worker and step with 2).

Reported: the training samples per second (the mean over epochs of rows / seconds of the optimisation steps, all
workers together: validation, start-up and the vocabulary count are not in it), the wall seconds of the whole
fit (those included), and the test AUCs each model reaches, with ``uptime`` before and after. Every process runs
torch on one thread: a per-core comparison. ``--embedding dense`` trains the embedding tables with dense gradients
(``{"sparse": false}``; DDP then allreduces the whole table each step), ``both`` adds those runs.

``--ddp-probe`` instead answers what DDP does with ``nn.Embedding(sparse=True)`` over gloo, without Ray: two
processes each take half of a batch through a DDP-wrapped embedding and linear layer; the embedding's gradient
after backward is compared with the one process's gradient of the whole batch (is it still sparse, is it the
average), then the milliseconds per SparseAdam (sparse) or Adam (dense) step for tables of 10⁴ and 10⁶ rows × 16
with 500 rows × 20 fields per worker.

Usage::

    .venv/bin/python benchmarks/scale_training.py                        # 10⁶ rows in 20 parts, 2 epochs
    .venv/bin/python benchmarks/scale_training.py --rows 40000 --parts 4 --epochs 1
    .venv/bin/python benchmarks/scale_training.py --ddp-probe
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from promokit.conversion.estimator import DEFAULT_TRAIN, ConversionModel
from promokit.conversion.synthetic import make_world
from promokit.data import FeatureSpec
from promokit.scale.parts import read_parts
from promokit.scale.train import fit_parts


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def write_parts(folder: Path, rows: int, parts: int, seed: int):
    """The world's first ``rows`` impressions in ``parts`` parts; the rest (a tenth more) is the test table."""
    world = make_world(n_impressions=rows + rows // 10, seed=seed)
    table = world.table
    folder.mkdir(parents=True)
    bounds = np.linspace(0, rows, parts + 1).astype(int)
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        table.iloc[a:b].to_parquet(folder / f"part-{k:05d}.parquet", index=False)
    spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id")
    return table.iloc[rows:].reset_index(drop=True), spec


def run(name: str, parts: Path, test, spec, epochs: int, params: dict, engine: str | None, workers: int) -> dict:
    config = replace(DEFAULT_TRAIN, epochs=epochs, patience=epochs, progress=False)
    model = ConversionModel("esm2", params, config, spec)
    started = time.perf_counter()
    if engine is None:
        model.fit(read_parts(parts))
    else:
        fit_parts(model, parts, engine, workers=workers)
    wall = time.perf_counter() - started
    metrics = model.evaluate(test)
    epochs_run = model.report.history.epochs
    speed = float(np.mean([e["samples_per_second"] for e in epochs_run]))
    row = {"run": name, "workers": workers, "wall": wall, "speed": speed, "per_worker": speed / workers,
           "ctr": metrics["ctr_auc"], "cvr": metrics["cvr_auc"], "ctcvr": metrics["ctcvr_auc"],
           "train_rows": model.report.n_train}
    print(f"  {name}: {speed:,.0f} samples/s, {wall:.0f} s, test CTCVR AUC {row['ctcvr']:.4f}", flush=True)
    return row


class _Probe:
    """An embedding table (sparse or dense gradients) into a linear layer: the smallest DDP model with a table."""

    @staticmethod
    def net(rows: int, sparse: bool, fields: int = 2, dim: int = 4):
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(rows, dim, sparse=sparse)
                self.lin = nn.Linear(fields * dim, 1)

            def forward(self, x):
                return self.lin(self.emb(x).flatten(1)).squeeze(1)

        return Net()

    @staticmethod
    def batch(rows: int, n: int, fields: int, seed: int):
        import torch

        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, rows, (n, fields), generator=g), torch.rand(n, generator=g)


def _probe_worker(rank: int, sparse: bool, port: int, queue) -> None:
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    net = _Probe.net(50, sparse)
    ddp = DistributedDataParallel(net)  # kept alive through backward: its hooks allreduce the gradients
    x, y = _Probe.batch(50, 8, 2, seed=1)
    ((ddp(x[rank * 4:rank * 4 + 4]) - y[rank * 4:rank * 4 + 4]) ** 2).mean().backward()
    grad = net.emb.weight.grad
    queue.put(("grad", rank, grad.is_sparse, (grad.to_dense() if grad.is_sparse else grad).numpy().copy()))
    for rows in (10_000, 1_000_000):
        torch.manual_seed(0)
        net = _Probe.net(rows, sparse, 20, 16)
        ddp = DistributedDataParallel(net)
        opt = (torch.optim.SparseAdam if sparse else torch.optim.Adam)([net.emb.weight], lr=1e-3)
        x, y = _Probe.batch(rows, 500, 20, seed=rank + 10)
        for step in range(23):
            if step == 3:
                started = time.perf_counter()
            opt.zero_grad()
            ((ddp(x) - y) ** 2).mean().backward()
            opt.step()
        queue.put(("step", rank, rows, (time.perf_counter() - started) / 20))
    dist.barrier()
    dist.destroy_process_group()


def ddp_probe() -> None:
    import socket

    import torch
    import torch.multiprocessing as mp

    print(f"torch {torch.__version__}, DDP over gloo, 2 processes; uptime: `{uptime()}`\n")
    print("| embedding | gradient after DDP's backward | max abs(DDP − whole-batch gradient) | ms/step, 10⁴ rows "
          "| ms/step, 10⁶ rows |")
    print("| --- | --- | ---: | ---: | ---: |")
    for sparse in (True, False):
        torch.manual_seed(0)
        reference = _Probe.net(50, sparse)
        x, y = _Probe.batch(50, 8, 2, seed=1)
        ((reference(x) - y) ** 2).mean().backward()
        whole = reference.emb.weight.grad
        whole = (whole.to_dense() if sparse else whole).numpy()
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]
        context = mp.get_context("spawn")
        queue = context.Queue()
        workers = [context.Process(target=_probe_worker, args=(r, sparse, port, queue)) for r in range(2)]
        for w in workers:
            w.start()
        results = [queue.get() for _ in range(6)]
        for w in workers:
            w.join()
        grads = [r for r in results if r[0] == "grad"]
        steps = {rows: max(s for kind, _, n, s in results if kind == "step" and n == rows)
                 for rows in (10_000, 1_000_000)}
        error = max(float(np.abs(g[3] - whole).max()) for g in grads)
        kind = "sparse" if grads[0][2] else "dense"
        print(f"| {'sparse=True' if sparse else 'sparse=False'} | {kind} on both workers | {error:.1e} | "
              f"{steps[10_000] * 1000:.1f} | {steps[1_000_000] * 1000:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--parts", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--embedding", choices=("sparse", "dense", "both"), default="sparse")
    parser.add_argument("--ddp-probe", action="store_true", help="only the DDP × sparse embedding probe")
    args = parser.parse_args()
    if args.ddp_probe:
        ddp_probe()
        return
    import torch

    torch.set_num_threads(1)  # one core per worker, the same in this process: a per-core comparison
    before = uptime()
    rows = []
    with tempfile.TemporaryDirectory(prefix="promokit-scale-train-") as tmp:
        started = time.perf_counter()
        test, spec = write_parts(Path(tmp) / "parts", args.rows, args.parts, args.seed)
        parts = Path(tmp) / "parts"
        print(f"{args.rows:,} training rows written in {args.parts} parts (+ {len(test):,} test rows) in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        kinds = ("sparse", "dense") if args.embedding == "both" else (args.embedding,)
        for kind in kinds:
            params = {} if kind == "sparse" else {"sparse": False}
            tag = "" if len(kinds) == 1 else f" ({kind})"
            rows.append(run(f"local trainer{tag}", parts, test, spec, args.epochs, params, None, 1))
            rows.append(run(f"local, parts{tag}", parts, test, spec, args.epochs, params, "local", 1))
            for workers in (1, 2):
                rows.append(run(f"ray × {workers}{tag}", parts, test, spec, args.epochs, params, "ray", workers))
        ray.shutdown()
    print(f"\nESM² (emb 16, towers 256-128-64, batch 1,000 global), {args.rows:,} rows in {args.parts} parts, "
          f"{args.epochs} epochs, 2 cores, torch on 1 thread per process\n")
    print(f"uptime before: `{before}`  \nuptime after: `{uptime()}`\n")
    print("| run | workers | samples/s (training) | per worker | wall s (whole fit) | test CTR AUC | test CVR AUC "
          "| test CTCVR AUC |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['run']} | {r['workers']} | {r['speed']:,.0f} | {r['per_worker']:,.0f} | {r['wall']:.0f} | "
              f"{r['ctr']:.4f} | {r['cvr']:.4f} | {r['ctcvr']:.4f} |")
    first = {r["run"]: r for r in rows}
    for kind in kinds:
        tag = "" if len(kinds) == 1 else f" ({kind})"
        one, two, local = first[f"ray × 1{tag}"], first[f"ray × 2{tag}"], first[f"local trainer{tag}"]
        print(f"\n{kind} embeddings: speed-up from 1 to 2 workers {two['speed'] / one['speed']:.2f}×; "
              f"2 workers against the local trainer {two['speed'] / local['speed']:.2f}×")


if __name__ == "__main__":
    main()

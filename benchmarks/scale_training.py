"""Training over parts: the local trainer against 1 and 2 DDP workers on Ray Train, on the same data in one run;
``conversion train`` (the default) or ``value train`` (``--domain value``).

- **conversion**: ``--rows`` synthetic impressions (``promokit.experiments.conversion.world.make_world``; one world, of
  which a further tenth is held out as the test rows) are written as ``--parts`` Parquet parts, and ESM² (the
  default network and training settings: embeddings 16, towers 256-128-64, dropout 0.3, Adam lr 0.001, batch 1,000,
  lazy embedding decay 10) trains for ``--epochs`` epochs (no early stopping). Validation over parts: a seeded
  tenth of each part.
- **value**: a fund world of ``--users`` users (``promokit.experiments.value.world.make_world``, 5 deliveries and 20
  behaviours per user) is written as a dataset in ``--parts`` co-partitioned parts
  (``promokit.experiments.value.world.write_world_parts``: users/, deliveries/, behaviors/, consumption/ and one funds
  table), and ESDPM-NCG (ESDPM without the consumption graph, which a part cannot hold; emb 8, 4 experts 64-32,
  towers 32, sequences of 20; Adam lr 0.001, batch 512) trains for ``--epochs`` epochs (no early stopping) on the
  one-folder time split: the latest tenth of the deliveries held out as the test, the latest tenth of the rest
  validating.

Each trains four ways:

- **local trainer**: ``fit`` on the tables read into memory (the one-file / one-folder path, the in-memory Trainer);
- **local, parts**: ``train --data DIR`` in this process: the same loop as a Ray worker's, streaming the parts;
- **ray × 1** and **ray × 2**: ``train --data DIR --executor ray --workers N`` on a local Ray cluster of 2 CPUs, DDP
  over gloo, the global batch kept (half the rows per worker and step with 2).

Reported: the training samples per second (the mean over epochs of rows / seconds of the optimisation steps, all
workers together; for the streaming runs that includes reading and encoding the parts each epoch, which the local
trainer does once before its first epoch; validation, start-up and the counting maps are not in it), the wall
seconds of the whole fit (those included), and the AUCs each model reaches — conversion: the test CTR, CVR and
CTCVR AUCs; value: the validation AUC of pCTCVR against ``convert`` at the kept epoch and, on the held-out test
deliveries, that AUC and the normalised Gini of ETV against the amount (``value evaluate``'s metrics) — with
``uptime`` before and after. Every process runs torch on one thread: a per-core comparison. ``--embedding dense``
trains the embedding tables with dense gradients (``{"sparse": false}``; DDP then allreduces the whole table each
step; conversion only), ``both`` adds those runs.

``--ddp-probe`` instead answers what DDP does with ``nn.Embedding(sparse=True)`` over gloo, without Ray: two
processes each take half of a batch through a DDP-wrapped embedding and linear layer; the embedding's gradient
after backward is compared with the one process's gradient of the whole batch (is it still sparse, is it the
average), then the milliseconds per SparseAdam (sparse) or Adam (dense) step for tables of 10⁴ and 10⁶ rows × 16
with 500 rows × 20 fields per worker.

Usage::

    .venv/bin/python benchmarks/scale_training.py                        # 10⁶ rows in 20 parts, 2 epochs
    .venv/bin/python benchmarks/scale_training.py --rows 40000 --parts 4 --epochs 1
    .venv/bin/python benchmarks/scale_training.py --domain value --seeds 0,1,2     # 40,000 users in 8 parts: 5.5 min
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


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


class Conversion:
    """``conversion train`` of ESM² over impression parts."""

    metrics = (("ctr", "test CTR AUC"), ("cvr", "test CVR AUC"), ("ctcvr", "test CTCVR AUC"))

    def __init__(self, args):
        self.rows, self.epochs = args.rows, args.epochs
        self.kinds = ("sparse", "dense") if args.embedding == "both" else (args.embedding,)

    def title(self, parts: int) -> str:
        return (f"ESM² (emb 16, towers 256-128-64, batch 1,000 global), {self.rows:,} rows in {parts} parts, "
                f"{self.epochs} epochs")

    def write(self, folder: Path, parts: int, seed: int) -> str:
        """The world's first ``rows`` impressions in ``parts`` parts; the rest (a tenth more) is the test table."""
        from promokit.data import FeatureSpec
        from promokit.experiments.conversion.world import make_world

        world = make_world(n_impressions=self.rows + self.rows // 10, seed=seed)
        table = world.table
        folder.mkdir(parents=True)
        bounds = np.linspace(0, self.rows, parts + 1).astype(int)
        for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
            table.iloc[a:b].to_parquet(folder / f"part-{k:05d}.parquet", index=False)
        self.test = table.iloc[self.rows:].reset_index(drop=True)
        self.spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id")
        return f"{self.rows:,} training rows (+ {len(self.test):,} test rows)"

    def fit(self, parts: Path, kind: str, executor: str | None, workers: int, seed: int) -> dict:
        from promokit.conversion.estimator import DEFAULT_TRAIN, ConversionModel
        from promokit.conversion.parts import fit_parts
        from promokit.scale.executor import make_executor

        config = replace(DEFAULT_TRAIN, epochs=self.epochs, patience=self.epochs, progress=False, seed=seed)
        model = ConversionModel("esm2", {} if kind == "sparse" else {"sparse": False}, config, self.spec,
                                test_fraction=0)
        if executor is None:
            model.fit(parts)
        else:
            fit_parts(model, parts, make_executor(executor, workers=workers))
        metrics = model.evaluate(self.test)
        return {"history": model.history_, "ctr": metrics["ctr_auc"], "cvr": metrics["cvr_auc"],
                "ctcvr": metrics["ctcvr_auc"]}


class Value:
    """``value train`` of ESDPM-NCG over a dataset in parts."""

    network = {"emb_dim": 8, "expert_hidden": [64], "expert_dim": 32, "tower_hidden": [32], "max_len": 20}
    metrics = (("valid_auc", "valid AUC"), ("auc", "test AUC"), ("gini", "test Gini"))
    kinds = ("sparse",)

    def __init__(self, args):
        self.users, self.epochs = args.users, args.epochs

    def title(self, parts: int) -> str:
        return (f"ESDPM-NCG (emb 8, experts 64-32, towers 32, sequences of 20, batch 512 global), {self.users:,} users "
                f"in {parts} parts, {self.epochs} epochs")

    def write(self, folder: Path, parts: int, seed: int) -> str:
        from promokit.experiments.value.world import make_world, write_world_parts
        from promokit.value.contract import read_folder
        from promokit.value.estimator import delivery_split

        world = make_world(self.users, seed=seed)
        cut = np.full(parts, self.users // parts)
        cut[: self.users % parts] += 1
        write_world_parts(world, folder, cut.tolist(), seed)
        self.tables = read_folder(folder)  # the one-folder dataset: the local trainer's input, and the test rows
        self.rows = delivery_split(self.tables)  # what ValueModel.fit makes by default
        return f"{len(self.tables.deliveries):,} deliveries ({len(self.rows[0]):,} training, {len(self.rows[2]):,} test)"

    def fit(self, parts: Path, kind: str, executor: str | None, workers: int, seed: int) -> dict:
        from promokit.scale.executor import make_executor
        from promokit.value.contract import table_paths
        from promokit.value.estimator import DEFAULT_TRAIN, ValueModel
        from promokit.value.parts import train_parts

        config = replace(DEFAULT_TRAIN, epochs=self.epochs, patience=self.epochs, progress=False, seed=seed)
        model = ValueModel("esdpm-ncg", self.network, config)
        if executor is None:
            model.fit(self.tables)
        else:
            with tempfile.TemporaryDirectory(prefix="promokit-keys-") as scratch:
                train_parts(model, table_paths(parts), make_executor(executor, workers=workers), Path(scratch))
        metrics = model.evaluate(self.tables, rows=self.rows[2])
        kept = model.history_.epochs[model.history_.best_epoch]
        return {"history": model.history_, "valid_auc": kept["valid_auc"], "auc": metrics["auc"],
                "gini": metrics["gini"]}


DOMAINS = {"conversion": Conversion, "value": Value}


def run(domain, name: str, parts: Path, kind: str, executor: str | None, workers: int, seed: int) -> dict:
    started = time.perf_counter()
    row = domain.fit(parts, kind, executor, workers, seed)
    wall = time.perf_counter() - started
    speed = float(np.mean([e["samples_per_second"] for e in row.pop("history").epochs]))
    row.update(run=name, workers=workers, seed=seed, wall=wall, speed=speed, per_worker=speed / workers)
    print(f"  {name}: {speed:,.0f} samples/s, {wall:.0f} s, "
          + ", ".join(f"{label} {row[key]:.4f}" for key, label in domain.metrics), flush=True)
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
    parser.add_argument("--domain", choices=sorted(DOMAINS), default="conversion")
    parser.add_argument("--rows", type=int, default=1_000_000, help="conversion: training impressions")
    parser.add_argument("--users", type=int, default=40_000, help="value: users of the world")
    parser.add_argument("--parts", type=int, default=None, help="parts (default: 20 conversion, 8 value)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the synthetic world's seed")
    parser.add_argument("--seeds", default="0", help="training seeds: the first runs every way, the others (for the "
                        "seed spread) the streaming loop in this process (= Ray Train × 1) and Ray Train × 2")
    parser.add_argument("--embedding", choices=("sparse", "dense", "both"), default="sparse")
    parser.add_argument("--ddp-probe", action="store_true", help="only the DDP × sparse embedding probe")
    args = parser.parse_args()
    if args.ddp_probe:
        ddp_probe()
        return
    import torch

    torch.set_num_threads(1)  # one core per worker, the same in this process: a per-core comparison
    domain = DOMAINS[args.domain](args)
    n_parts = args.parts or (20 if args.domain == "conversion" else 8)
    before = uptime()
    rows = []
    with tempfile.TemporaryDirectory(prefix="promokit-scale-train-") as tmp:
        started = time.perf_counter()
        parts = Path(tmp) / "parts"
        written = domain.write(parts, n_parts, args.seed)
        print(f"{written} written in {n_parts} parts in {time.perf_counter() - started:.0f} s", flush=True)
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        seeds = [int(s) for s in args.seeds.split(",")]
        for kind in domain.kinds:
            tag = "" if len(domain.kinds) == 1 else f" ({kind})"
            for seed in seeds:
                if seed == seeds[0]:
                    rows.append(run(domain, f"local trainer{tag}", parts, kind, None, 1, seed))
                rows.append(run(domain, f"local, parts{tag}", parts, kind, "local", 1, seed))
                for workers in (1, 2) if seed == seeds[0] else (2,):
                    rows.append(run(domain, f"ray × {workers}{tag}", parts, kind, "ray", workers, seed))
        ray.shutdown()
    print(f"\n{domain.title(n_parts)}, 2 cores, torch on 1 thread per process\n")
    print(f"uptime before: `{before}`  \nuptime after: `{uptime()}`\n")
    labels = [label for _, label in domain.metrics]
    print("| run | workers | seed | samples/s (training) | per worker | wall s (whole fit) | " + " | ".join(labels)
          + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in labels) + " |")
    for r in rows:
        print(f"| {r['run']} | {r['workers']} | {r['seed']} | {r['speed']:,.0f} | {r['per_worker']:,.0f} | "
              f"{r['wall']:.0f} | " + " | ".join(f"{r[key]:.4f}" for key, _ in domain.metrics) + " |")
    if len(seeds) > 1:
        print()
        for name in ("local, parts", "ray × 2"):
            for key, label in domain.metrics:
                values = [r[key] for r in rows if r["run"].startswith(name)]
                print(f"{name}, {label} over seeds {args.seeds}: mean {np.mean(values):.4f}, range "
                      f"{min(values):.4f}–{max(values):.4f}")
    first = {r["run"]: r for r in rows if r["seed"] == seeds[0]}
    for kind in domain.kinds:
        tag = "" if len(domain.kinds) == 1 else f" ({kind})"
        one, two, local = first[f"ray × 1{tag}"], first[f"ray × 2{tag}"], first[f"local trainer{tag}"]
        print(f"\n{kind} embeddings: speed-up from 1 to 2 workers {two['speed'] / one['speed']:.2f}×; "
              f"2 workers against the local trainer {two['speed'] / local['speed']:.2f}×")


if __name__ == "__main__":
    main()

"""Training speed of promokit's ESM² (and ESMM) next to a bare hand-written PyTorch loop.

Both paths train the same network on the same encoded tensors for one epoch: batches cut by
``torch.randperm`` index slicing, SparseAdam for the embedding table, Adam for everything else. The
bare loop is what one would write by hand without a library, so the ratio bare/promokit is the
library's overhead (target: at most 1.3). It is seeded like promokit's Trainer, so it replays the same
training step for step and both report the same mean loss: a check that they compute the same thing.
A dense-Adam variant of the bare loop (``sparse=False``) shows what sparse embedding gradients buy.

Usage::

    .venv/bin/python benchmarks/speed_esm2.py            # 1M rows, batch 2048: 4–5 minutes on 2 cores, + 8 for GMCM
    .venv/bin/python benchmarks/speed_esm2.py --quick    # 100k rows: a smoke run
    .venv/bin/python benchmarks/speed_esm2.py --gmcm-only --repeats 2   # ESM² beside GMCM, best of 2: 23 minutes

GMCM settings (``--micro N``, 10 by default; 0 skips them): the ESM² setting's table plus ``N`` synthetic 0/1
micro-behaviour columns (0 on unclicked rows; on clicked rows more frequent when the row purchased), GMCM trained
by promokit's ConversionModel/Trainer for one epoch exactly like promokit's ESM², twice: with GMCM's own (paper)
networks, CTR (512, 256, 128, 64) and CVR (512, 256, 128) with batch normalisation, node embeddings of 64 and two
GCN layers of 64; and with both towers set to the ESM² setting's ``--hidden`` (a comparison of equal widths). A last
table gives each one's seconds per epoch beside ESM²'s (target: GMCM within 2×). There is no bare GMCM loop.
``--gmcm-only`` times just that comparison: promokit's ESM² and the GMCM settings (no ESMM, no bare loops).

``--rechub`` also times torch-rechub 0.9.0's ESMM with its own trainer and DataLoader on the same
ESMM data, when ``torch_rechub`` can be imported (see benchmarks/conversion.md). Without it, the peer
figures printed at the end are the issue author's, not measured in this run.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import math
import os
import platform
import resource
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor, nn

from promokit.conversion.estimator import DEFAULT_TRAIN, ConversionModel
from promokit.conversion.models import GMCM
from promokit.data import FeatureSpec
from promokit.training import TrainConfig

#: Figures from the issue, measured by its author (7-field ESMM, batch 2048, tower sizes not stated).
PEER_REFERENCE = {"torch-rechub 0.9.0": 55_000, "DeepCTR-Torch 0.3.0": 58_000, "bare index-slicing loop": 120_000}
EPS = 1e-7  # the clamp of promokit.nn.binary_log_loss
WARMUP_BATCHES = 5
LABELS = ("click", "daction", "purchase")
RECHUB_TOWERS = [16, 8]  # the ESMM towers of torch-rechub's own Ali-CCP example


@dataclass
class Setting:
    name: str
    kind: str  # esm2 | esmm | gmcm
    fields: int
    numeric: int
    hidden: list[int]
    params: dict | None = None  # model parameters besides emb_dim and dropout (GMCM: its towers); None: hidden
    micro: int = 0  # micro-behaviour columns the model learns from (GMCM)

    @property
    def towers(self) -> str:
        if self.kind != "gmcm":
            return ",".join(map(str, self.hidden))
        defaults = inspect.signature(GMCM).parameters
        params = {k: defaults[k].default for k in ("ctr_hidden", "cvr_hidden")} | (self.params or {})
        return f"ctr {','.join(map(str, params['ctr_hidden']))}; cvr {','.join(map(str, params['cvr_hidden']))}"


# ------------------------------------------------------------------------------------------ data
def make_table(rows: int, fields: int, numeric: int, cardinality: int, seed: int) -> pd.DataFrame:
    """Synthetic impressions: ``fields`` integer id columns uniform in [0, cardinality), ``numeric``
    standard-normal columns, and nested labels (daction and purchase only on clicked rows)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, np.ndarray] = {}
    for j in range(fields):
        columns[f"c{j}"] = rng.integers(0, cardinality, size=rows, dtype=np.int64)
    for j in range(numeric):
        columns[f"n{j}"] = rng.standard_normal(rows)

    def sigmoid(z):
        return 1.0 / (1.0 + np.exp(-z))

    # A few columns carry the signal: residues of two id columns and, if any, two numeric columns.
    signal = 0.4 * ((columns["c0"] % 5) == 0) - 0.3 * ((columns[f"c{min(1, fields - 1)}"] % 7) == 0)
    if numeric:
        signal = signal + 0.5 * columns["n0"] - 0.3 * columns[f"n{min(1, numeric - 1)}"]
    click = rng.random(rows) < sigmoid(-1.5 + signal)
    daction = click & (rng.random(rows) < sigmoid(-1.0 + 0.5 * signal))
    purchase = click & (rng.random(rows) < sigmoid(-2.5 + 1.5 * daction + 0.5 * signal))
    columns.update(click=click.astype(np.int64), daction=daction.astype(np.int64), purchase=purchase.astype(np.int64))
    return pd.DataFrame(columns)


def add_micro_behaviors(table: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``table`` with ``n`` 0/1 micro-behaviour columns ``m0`` … (cart, favourite …): 0 on unclicked rows; on
    clicked rows Bernoulli with a rate that rises with the node's index and is higher when the row purchased."""
    rng = np.random.default_rng(seed + 7)
    click, purchase = table["click"].to_numpy() == 1, table["purchase"].to_numpy() == 1
    columns = {}
    for j in range(n):
        base = -2.5 + 2.0 * j / max(n - 1, 1)  # from about 8 % to 38 % of the clicked, non-purchased rows
        rate = 1.0 / (1.0 + np.exp(-(base + 2.0 * purchase)))
        columns[f"m{j}"] = (click & (rng.random(len(table)) < rate)).astype(np.int64)
    return table.assign(**columns)


# ------------------------------------------------------------------------------------------ CPU contention
def _busy_seconds() -> float | None:
    """CPU seconds all processes of the machine have used (Linux), steal time included."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Watch:
    """Wall time of a block, and the share of the machine's CPUs other processes used meanwhile
    (another job on a 2-core machine makes any figure here meaningless)."""

    def __enter__(self) -> Watch:
        self.busy, self.own, self.started = _busy_seconds(), _own_seconds(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.started
        busy = _busy_seconds()
        if busy is None or self.busy is None:
            self.others = 0.0
        else:
            others = max(0.0, (busy - self.busy) - (_own_seconds() - self.own))
            # under half a CPU-second is clock-tick noise (short paths) or the kernel's housekeeping
            self.others = others / (max(self.seconds, 1e-9) * (os.cpu_count() or 1)) if others > 0.5 else 0.0


# ------------------------------------------------------------------------------------------ bare loop
def mlp(in_dim: int, hidden: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(in_dim, size), nn.ReLU()]
        in_dim = size
    return nn.Sequential(*layers, nn.Linear(in_dim, 1))


def logloss(p: Tensor, y: Tensor) -> Tensor:
    p = p.clamp(EPS, 1 - EPS)
    return -(y * p.log() + (1 - y) * (1 - p).log()).mean()


class BareNet(nn.Module):
    """ESM² (four towers) or ESMM (two towers) over one embedding table with per-field offsets."""

    def __init__(self, kind: str, cardinalities: list[int], n_numeric: int, dim: int, hidden: list[int],
                 sparse: bool):
        super().__init__()
        self.kind = kind
        self.embedding = nn.Embedding(sum(cardinalities), dim, sparse=sparse)
        nn.init.normal_(self.embedding.weight, std=0.05)
        self.register_buffer("offsets", torch.tensor([0, *cardinalities[:-1]]).cumsum(0))
        self.n_numeric = n_numeric
        width = len(cardinalities) * dim + n_numeric
        self.towers = nn.ModuleList(mlp(width, hidden) for _ in range(4 if kind == "esm2" else 2))

    def forward(self, cat: Tensor, num: Tensor) -> list[Tensor]:
        g = self.embedding(cat + self.offsets).flatten(1)
        if self.n_numeric:
            g = torch.cat([g, num], dim=1)
        return [torch.sigmoid(tower(g)).squeeze(1) for tower in self.towers]

    def loss(self, cat: Tensor, num: Tensor, click: Tensor, daction: Tensor, purchase: Tensor) -> Tensor:
        if self.kind == "esm2":
            y1, y2, y3, y4 = self(cat, num)
            p_cvr = y4 * (1 - y2) + y3 * y2
            return logloss(y1, click) + logloss(y1 * y2, daction) + logloss(y1 * p_cvr, purchase)
        p_ctr, p_cvr = self(cat, num)
        return logloss(p_ctr, click) + logloss(p_ctr * p_cvr, purchase)


def bare_epoch(setting: Setting, tensors: dict[str, Tensor], cardinalities: list[int], args, sparse: bool,
               rows: int | None = None) -> dict:
    """One epoch (or its first ``rows`` rows) of the hand-written loop, after a warm-up on a throwaway copy.

    The network is initialised after ``torch.manual_seed(seed)`` and the rows are shuffled by a generator
    seeded as promokit's Trainer seeds epoch 0, so with ``sparse=True`` it replays promokit's training.
    """

    def build() -> tuple[BareNet, list[torch.optim.Optimizer]]:
        net = BareNet(setting.kind, cardinalities, tensors["num"].shape[1], args.emb_dim, setting.hidden, sparse)
        if sparse:
            rest = [p for name, p in net.named_parameters() if name != "embedding.weight"]
            return net, [torch.optim.SparseAdam([net.embedding.weight], lr=args.lr), torch.optim.Adam(rest, lr=args.lr)]
        return net, [torch.optim.Adam(net.parameters(), lr=args.lr)]

    cat, num = tensors["cat"], tensors["num"]
    click, daction, purchase = tensors["click"], tensors["daction"], tensors["purchase"]
    n, bs = len(cat), args.batch_size

    def step(net: BareNet, optimizers: list[torch.optim.Optimizer], index: Tensor) -> Tensor:
        loss = net.loss(cat[index], num[index], click[index], daction[index], purchase[index])
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in optimizers:
            opt.step()
        return loss.detach()

    warm_net, warm_optimizers = build()  # warms kernels, allocator and thread pool, then is thrown away
    warm = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + 1))[: WARMUP_BATCHES * bs]
    for start in range(0, len(warm), bs):
        step(warm_net, warm_optimizers, warm[start:start + bs])
    del warm_net, warm_optimizers

    torch.manual_seed(args.seed)  # as promokit: seed_everything(seed), then the network is built
    net, optimizers = build()
    net.train()
    torch.manual_seed(args.seed * 100_003)  # as promokit's Trainer at epoch 0 (only dropout would draw)
    generator = torch.Generator().manual_seed(args.seed * 1_000_003)
    rows = n if rows is None else min(rows, n)
    total, seen = torch.zeros(()), 0
    with Watch() as watch:
        order = torch.randperm(n, generator=generator)
        for start in range(0, rows, bs):
            index = order[start:min(start + bs, rows)]
            total += step(net, optimizers, index) * len(index)
            seen += len(index)
    return {"samples_per_second": seen / watch.seconds, "seconds": watch.seconds, "rows": seen,
            "train_loss": total.item() / seen, "other_cpu": watch.others}


# ------------------------------------------------------------------------------------------ promokit
def promokit_model(setting: Setting, table: pd.DataFrame, args, embedding_decay: float = 0.0) -> ConversionModel:
    categorical = [c for c in table.columns if c.startswith("c") and c[1:].isdigit()]
    numeric = [c for c in table.columns if c.startswith("n") and c[1:].isdigit()]
    micro = [f"m{j}" for j in range(setting.micro)]
    model_params = {"hidden": tuple(setting.hidden)} if setting.params is None else setting.params
    return ConversionModel(setting.kind, params={"emb_dim": args.emb_dim, **model_params, "dropout": 0.0},
                           train=TrainConfig(epochs=1, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                                             embedding_decay=embedding_decay, progress=False),
                           spec=FeatureSpec(categorical=categorical, numeric=numeric, group_key=None,
                                            micro_behaviors=micro), test_fraction=0)


def promokit_run(setting: Setting, table: pd.DataFrame, args,
                 embedding_decay: float = 0.0) -> tuple[dict, ConversionModel]:
    """``ConversionModel.fit`` (encoding + one epoch, no validation split), then ``predict`` on the table."""
    # Warm-up: a fit of a few batches (kernels, allocator, thread pool), untimed.
    promokit_model(setting, table, args, embedding_decay).fit(table.iloc[: WARMUP_BATCHES * args.batch_size],
                                                              validation=0)

    fitted = promokit_model(setting, table, args, embedding_decay)
    with Watch() as watch:
        fitted.fit(table, validation=0)
    epoch = fitted.history_.epochs[0]
    with Watch() as predict_watch:
        predictions = fitted.predict(table, keep=[])
    assert len(predictions) == len(table) and np.isfinite(predictions.to_numpy()).all()
    return {"samples_per_second": epoch["samples_per_second"], "seconds": epoch["seconds"],
            "train_loss": epoch["train_loss"], "fit_seconds": watch.seconds,
            "end_to_end_rows_per_second": len(table) / watch.seconds,
            "predict_rows_per_second": len(table) / predict_watch.seconds,
            "other_cpu": max(watch.others, predict_watch.others)}, fitted


def encoded_tensors(fitted: ConversionModel, table: pd.DataFrame) -> dict[str, Tensor]:
    """The tensors promokit trains on, rebuilt with its fitted encoder."""
    x = fitted.encoder_.transform(table)
    tensors = {"cat": torch.from_numpy(x.categorical), "num": torch.from_numpy(x.numeric)}
    for role in LABELS:
        tensors[role] = torch.from_numpy(table[role].to_numpy(dtype=np.float32))
    return tensors


# ------------------------------------------------------------------------------------------ torch-rechub
def rechub_epoch(setting: Setting, table: pd.DataFrame, args) -> dict | None:
    """torch-rechub's ESMM trained by its ``MTLTrainer`` on its ``DataGenerator``'s DataLoader, one epoch.

    Its network differs from promokit's in ways of its own design: BatchNorm after every hidden layer,
    one embedding table per field, dense Adam on every parameter. ``None`` if it is not installed.
    """
    try:
        from torch_rechub.basic.features import SparseFeature
        from torch_rechub.models.multi_task import ESMM as RechubESMM
        from torch_rechub.trainers import MTLTrainer
        from torch_rechub.utils.data import DataGenerator
    except ImportError:
        return None
    names = [f"c{j}" for j in range(setting.fields)]
    features = [SparseFeature(name, vocab_size=args.cardinality, embed_dim=args.emb_dim) for name in names]
    half = max(1, len(features) // 2)  # its ESMM wants user and item features; the split changes nothing
    torch.manual_seed(args.seed)
    tower = {"dims": list(setting.hidden), "dropout": 0.0}
    model = RechubESMM(features[:half], features[half:], cvr_params=tower, ctr_params=tower)
    quiet = contextlib.ExitStack()
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))  # it prints the loss, tqdm draws bars
    quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    with quiet:
        trainer = MTLTrainer(model, task_types=["classification"] * 3,
                             optimizer_params={"lr": args.lr, "weight_decay": 0.0}, n_epoch=1, model_path="/tmp")
        x = {name: table[name].to_numpy() for name in names}
        y = table[["purchase", "click", "purchase"]].to_numpy(dtype=np.float32)  # cvr (unused), ctr, ctcvr
        dataset = DataGenerator(x, y).dataset
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True)  # as generate_dataloader
        warm = torch.utils.data.Subset(dataset, range(min(len(dataset), WARMUP_BATCHES * args.batch_size)))
        trainer.train_one_epoch(torch.utils.data.DataLoader(warm, batch_size=args.batch_size))
        with Watch() as watch:
            trainer.train_one_epoch(loader)
        with Watch() as load_watch:
            for _ in loader:
                pass
    return {"samples_per_second": len(table) / watch.seconds, "seconds": watch.seconds,
            "dataloader_share": load_watch.seconds / watch.seconds, "other_cpu": watch.others}


# ------------------------------------------------------------------------------------------ main
def gmcm_table(results: list[dict], args) -> Table:
    """Seconds per epoch and rows/s of promokit's ESM² and GMCM settings, with GMCM's time over ESM²'s."""
    esm2 = next(r for r in results if r["model"] == "esm2")
    table = Table(title=f"GMCM beside ESM², promokit, {args.rows:,} rows, batch {args.batch_size}, "
                        f"{args.threads} threads, one epoch")
    paths = [("promokit", "")] + ([("promokit_l2", " + L2")] if args.embedding_decay > 0 else [])
    for column in ("model", "towers", "s / epoch", "rows/s", "ratio to ESM²"):
        table.add_column(column, justify="left" if column in ("model", "towers") else "right")
    for r in [esm2] + [r for r in results if r["model"] == "gmcm"]:
        for key, suffix in paths:
            run, reference = r[key], esm2[key]
            ratio = run["seconds"] / reference["seconds"]
            r[f"ratio_seconds_over_esm2{suffix.replace(' + L2', '_l2')}"] = ratio
            table.add_row(r["setting"] + suffix, r["towers"], f"{run['seconds']:.1f}",
                          f"{run['samples_per_second']:,.0f}",
                          f"[{'green' if ratio <= 2 else 'red'}]{ratio:.2f}×[/]")
    return table


def best(runs: list[dict]) -> dict:
    return max(runs, key=lambda r: r["samples_per_second"])


def run_setting(setting: Setting, table: pd.DataFrame, args, console: Console) -> dict:
    result: dict = {"setting": setting.name, "model": setting.kind, "fields": setting.fields,
                    "numeric": setting.numeric, "hidden": setting.hidden, "towers": setting.towers,
                    "params": setting.params, "micro": setting.micro, "rows": len(table)}
    console.print(f"[bold]{setting.name}[/], towers {setting.towers}")
    runs = [promokit_run(setting, table, args) for _ in range(args.repeats)]
    result["promokit"], fitted = max(runs, key=lambda r: r[0]["samples_per_second"])
    p = result["promokit"]
    console.print(f"  promokit     {p['samples_per_second']:>9,.0f} samples/s training ({p['seconds']:.1f} s, "
                  f"loss {p['train_loss']:.4f}); fit end to end {p['fit_seconds']:.1f} s = "
                  f"{p['end_to_end_rows_per_second']:,.0f} rows/s; predict {p['predict_rows_per_second']:,.0f} rows/s")

    if args.embedding_decay > 0:
        result["promokit_l2"] = r = max((promokit_run(setting, table, args, args.embedding_decay)[0]
                                         for _ in range(args.repeats)), key=lambda run: run["samples_per_second"])
        console.print(f"  promokit+L2  {r['samples_per_second']:>9,.0f} samples/s training ({r['seconds']:.1f} s) with "
                      f"lazy L2 on the embedding rows (embedding_decay {args.embedding_decay:g})")

    if setting.kind == "gmcm" or args.gmcm_only:  # no bare loop: timed against promokit's ESM² instead
        del runs, fitted
        return _contention(result, console)
    tensors, cardinalities = encoded_tensors(fitted, table), fitted.encoder_.cardinalities
    del runs, fitted
    result["bare_sparse"] = b = best([bare_epoch(setting, tensors, cardinalities, args, sparse=True)
                                      for _ in range(args.repeats)])
    result["same_loss"] = math.isclose(b["train_loss"], p["train_loss"], rel_tol=1e-3)
    console.print(f"  bare         {b['samples_per_second']:>9,.0f} samples/s ({b['seconds']:.1f} s, loss "
                  f"{b['train_loss']:.4f}: {'same as' if result['same_loss'] else '[red]differs from[/]'} "
                  f"promokit's); SparseAdam + Adam")
    if not args.no_dense:
        result["bare_dense"] = d = best([bare_epoch(setting, tensors, cardinalities, args, sparse=False,
                                                    rows=args.dense_rows) for _ in range(args.repeats)])
        console.print(f"  bare dense   {d['samples_per_second']:>9,.0f} samples/s ({d['seconds']:.1f} s over the first "
                      f"{d['rows']:,} rows of the epoch); dense Adam over the whole table at every step")
    del tensors
    if args.rechub and setting.kind == "esmm":
        r = rechub_epoch(setting, table, args)
        if r is None:
            console.print("  torch-rechub not importable: skipped (see benchmarks/conversion.md)")
        else:
            result["rechub"] = r
            console.print(f"  torch-rechub {r['samples_per_second']:>9,.0f} samples/s ({r['seconds']:.1f} s; its "
                          f"DataLoader alone takes {100 * r['dataloader_share']:.0f}% of that)")
    result["ratio_bare_over_promokit"] = b["samples_per_second"] / p["samples_per_second"]
    if "promokit_l2" in result:
        result["ratio_bare_over_promokit_l2"] = b["samples_per_second"] / result["promokit_l2"]["samples_per_second"]
    return _contention(result, console)


def _contention(result: dict, console: Console) -> dict:
    result["other_cpu"] = max(part["other_cpu"] for part in result.values()
                              if isinstance(part, dict) and "other_cpu" in part)
    if result["other_cpu"] > 0.05:
        console.print(f"  [red]other processes used up to {100 * result['other_cpu']:.0f}% of the CPUs while a path of "
                      "this setting was timed: its figures are not reliable, run again on a quiet machine[/]")
    return result


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)

    def sizes(text: str) -> list[int]:
        return [int(v) for v in text.split(",") if v]

    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=2048)
    parser.add_argument("--fields", type=int, default=20, help="categorical id fields of the ESM² setting")
    parser.add_argument("--numeric", type=int, default=10, help="numeric columns of the ESM² setting")
    parser.add_argument("--cardinality", type=int, default=100_000, help="ids per field")
    parser.add_argument("--emb-dim", type=int, default=16)
    parser.add_argument("--hidden", type=sizes, default=[512, 256, 128], help="hidden sizes of every ESM² tower")
    parser.add_argument("--esmm-fields", type=int, default=7, help="id fields of the ESMM settings (no numeric)")
    parser.add_argument("--esmm-hidden", type=sizes, nargs="*", default=None,
                        help="tower sizes of the ESMM settings, one setting each; default: --hidden and "
                             f"{','.join(map(str, RECHUB_TOWERS))} (torch-rechub's ESMM example); none: no ESMM")
    parser.add_argument("--epochs", type=int, default=1, help="kept at 1: every path is timed over one epoch")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--embedding-decay", type=float, default=DEFAULT_TRAIN.embedding_decay,
                        help="also time promokit with this lazy L2 on the embedding rows (0: skip)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="time every path this many times, keep the fastest")
    parser.add_argument("--quick", action="store_true", help="100k rows: a smoke run")
    parser.add_argument("--dense-rows", type=int, default=250_000,
                        help="rows timed for the dense-Adam bare loop (its cost per batch is constant)")
    parser.add_argument("--no-dense", action="store_true", help="skip the dense-Adam bare loop")
    parser.add_argument("--micro", type=int, default=10,
                        help="micro-behaviour columns of the GMCM settings (ESM²'s table plus these); 0: no GMCM")
    parser.add_argument("--gmcm-only", action="store_true",
                        help="only promokit's ESM² and the GMCM settings: no ESMM, no bare loops")
    parser.add_argument("--rechub", action="store_true", help="also time torch-rechub's ESMM, if importable")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows = 100_000
    if args.epochs != 1:
        parser.error("--epochs: every path is timed over exactly one epoch")
    if args.esmm_hidden is None:
        args.esmm_hidden = [args.hidden, RECHUB_TOWERS]
    if args.gmcm_only:
        if args.micro <= 0:
            parser.error("--gmcm-only needs --micro > 0")
        args.esmm_hidden, args.rechub = [], False
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    console = Console() if Console().is_terminal else Console(width=150)
    console.print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
                  f"{platform.machine()}; {args.rows:,} rows, batch {args.batch_size}, {args.cardinality:,} ids per "
                  f"field, emb dim {args.emb_dim}, lr {args.lr}, dropout 0; every path: {WARMUP_BATCHES} warm-up "
                  f"batches, then one epoch{f', best of {args.repeats}' if args.repeats > 1 else ''}")
    settings = [Setting(f"ESM² {args.fields} ids + {args.numeric} numeric", "esm2", args.fields, args.numeric,
                        args.hidden)]
    if args.micro > 0:  # right after ESM², so they share the machine's state
        gmcm = f"GMCM {args.fields} ids + {args.numeric} numeric + {args.micro} micro"
        settings += [Setting(f"{gmcm}, paper towers", "gmcm", args.fields, args.numeric, args.hidden, {}, args.micro),
                     Setting(f"{gmcm}, ESM²'s widths", "gmcm", args.fields, args.numeric, args.hidden,
                             {"ctr_hidden": tuple(args.hidden), "cvr_hidden": tuple(args.hidden)}, args.micro)]
    settings += [Setting(f"ESMM {args.esmm_fields} ids", "esmm", args.esmm_fields, 0, hidden)
                 for hidden in args.esmm_hidden]
    started, tables, results = time.perf_counter(), {}, []
    for setting in settings:
        key = (setting.fields, setting.numeric, setting.micro)
        if key not in tables:
            if setting.micro:
                tables[key] = add_micro_behaviors(tables[(setting.fields, setting.numeric, 0)], setting.micro,
                                                  args.seed)
            else:
                tables[key] = make_table(args.rows, setting.fields, setting.numeric, args.cardinality, args.seed)
        results.append(run_setting(setting, tables[key], args, console))
    total_seconds = time.perf_counter() - started

    table = Table(title=f"Training samples/s, {args.rows:,} rows, batch {args.batch_size}, {args.threads} threads")
    columns = ["setting", "towers", "promokit train", "promokit fit e2e", "promokit predict", "bare sparse",
               "bare dense", "bare / promokit"]
    if args.embedding_decay > 0:
        columns += ["promokit + L2", "bare / promokit + L2"]
    if args.rechub:
        columns += ["torch-rechub", "promokit / rechub"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("setting", "towers") else "right")
    for r in (r for r in results if "bare_sparse" in r):
        p, b, d, peer = r["promokit"], r["bare_sparse"], r.get("bare_dense"), r.get("rechub")
        ratio = r["ratio_bare_over_promokit"]
        row = [r["setting"], r["towers"], f"{p['samples_per_second']:,.0f}",
               f"{p['end_to_end_rows_per_second']:,.0f}", f"{p['predict_rows_per_second']:,.0f}",
               f"{b['samples_per_second']:,.0f}", f"{d['samples_per_second']:,.0f}" if d else "-",
               f"[{'green' if ratio <= 1.3 else 'red'}]{ratio:.2f}×[/]"]
        if args.embedding_decay > 0:
            ratio_l2 = r["ratio_bare_over_promokit_l2"]
            row += [f"{r['promokit_l2']['samples_per_second']:,.0f}",
                    f"[{'green' if ratio_l2 <= 1.3 else 'red'}]{ratio_l2:.2f}×[/]"]
        if args.rechub:
            gain = p["samples_per_second"] / peer["samples_per_second"] if peer else None
            row += [f"{peer['samples_per_second']:,.0f}" if peer else "-",
                    f"[{'green' if gain >= 2 else 'red'}]{gain:.2f}×[/]" if gain else "-"]
        table.add_row(*row)
    if table.row_count:
        console.print(table)
        console.print("promokit train: Trainer's own samples/s (the training loop); fit e2e: rows / wall time of "
                      "ConversionModel.fit, encoding included; predict: rows / wall time of predict, encoding "
                      "included; promokit + L2: the training loop with lazy L2 on the embedding rows, against the "
                      "same bare loop without it. Targets: bare / promokit ≤ 1.3 (with and without L2); promokit ≥ 2× "
                      "the peers.")
        console.print("Reference, measured by the issue author, not in this run (7-field ESMM, batch 2048, tower sizes "
                      "not stated): " + ", ".join(f"{k} ≈ {v / 1000:.0f}k" for k, v in PEER_REFERENCE.items())
                      + " samples/s; a bare 20-field loop with one MLP (512, 256, 128): ≈ 9.6k with dense Adam, ≈ 27k "
                      "with sparse embedding gradients.")
    if args.micro > 0:
        console.print(gmcm_table(results, args))
        console.print("ratio: GMCM's seconds per epoch over ESM²'s (target ≤ 2); both are promokit's Trainer, one "
                      "epoch, same table, batch, embedding and optimisers. paper towers: GMCM's defaults, CTR (512, "
                      "256, 128, 64) and CVR (512, 256, 128) with BatchNorm, node embeddings 64, GCN (64, 64); ESM²'s "
                      "widths: both GMCM towers set to the ESM² towers' hidden sizes. ESM² has four towers, GMCM two "
                      "plus the micro-behaviour graph.")
    console.print(f"Total time {total_seconds:.0f} s.")
    report = {"args": vars(args), "torch": torch.__version__, "results": results, "total_seconds": total_seconds,
              "peer_reference": PEER_REFERENCE}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return report


if __name__ == "__main__":
    main()

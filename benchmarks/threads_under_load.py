"""How torch's thread settings degrade under load: one epoch of the conversion DNN beside K busy processes.

Each measurement is a fresh subprocess (so thread pools and OpenMP environment variables start clean) that fits
``ConversionModel("dnn")`` for one epoch on a seeded synthetic table (``make_world``) while K busy processes (a
pure-Python spin loop each, or a one-thread numpy matmul loop) compete for the cores. Configurations:

- ``torch``: nothing set (torch's default: one intra-op thread per core, OpenMP's default wait policy);
- ``intra1`` / ``intra2``: ``torch.set_num_threads(1 | 2)``;
- ``interop1``: ``torch.set_num_interop_threads(1)``, intra-op left at torch's default;
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at a barrier at once instead of spinning first; this torch
  uses GNU OpenMP, where ``GOMP_SPINCOUNT=0`` means the same; ``KMP_BLOCKTIME`` is Intel OpenMP's and unused);
- ``auto``: promokit's default (:func:`promokit.training.threads.set_threads` with no count, before torch loads:
  the free cores, and OpenMP threads that sleep at once).

Rounds interleave the loads and shuffle the configurations (seeded), so slow drifts in the machine's own load hit
every configuration alike; each row's slowdown is against the same configuration at K=0 in the same round.
Ctrl-C stops it and prints the rows finished so far.

    .venv/bin/python benchmarks/threads_under_load.py              # 3 rounds of 15 runs, K = 0, 1, 2
    .venv/bin/python benchmarks/threads_under_load.py --rounds 1   # a look: 3 minutes at load 5, 11 at load 8-18

A run stopped at ``--timeout`` wall seconds (imports and encoding included) counts as slower than any (">60").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "torch": {},
    "intra1": {"intra": 1},
    "intra2": {"intra": 2},
    "interop1": {"interop": 1},
    "passive": {"env": {"OMP_WAIT_POLICY": "PASSIVE"}},
    "auto": {"auto": True},
}
LOADS = {
    "spin": "while True: pass",
    "matmul": "import numpy as np\na = np.random.default_rng(0).random((256, 256))\nwhile True: a @ a",
}


def child(config: str, rows: int) -> None:
    """One measurement, in this (fresh) process: prints a JSON line."""
    setting = CONFIGS[config]
    if setting.get("auto"):  # first, as a command does: before torch loads it may choose OpenMP's wait policy
        from promokit.training.threads import set_threads

        set_threads(None)
    import torch

    if "interop" in setting:
        torch.set_num_interop_threads(setting["interop"])
    if "intra" in setting:
        torch.set_num_threads(setting["intra"])
    import promokit as pk
    from promokit.experiments.conversion.world import make_world
    from promokit.training.config import TrainConfig

    table = make_world(n_impressions=rows, seed=0).table
    model = pk.ConversionModel("dnn", train=TrainConfig(epochs=1, progress=False, seed=0), test_fraction=0)
    start, cpu = time.perf_counter(), time.process_time()
    model.fit(table, validation=0)
    print(json.dumps({"epoch_s": model.history_.epochs[0]["seconds"], "fit_s": time.perf_counter() - start,
                      "cpu_s": time.process_time() - cpu, "intra": torch.get_num_threads(),
                      "interop": torch.get_num_interop_threads(),
                      "loss": model.history_.epochs[0]["train_loss"]}))


def start_load(k: int, kind: str) -> list[subprocess.Popen]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return [subprocess.Popen([sys.executable, "-c", LOADS[kind]], env=env) for _ in range(k)]


def stop_load(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def measure(config: str, rows: int, timeout: float) -> dict:
    env = {**os.environ, **CONFIGS[config].get("env", {})}
    for attempt in range(3):  # a failed start (the tree edited mid-run, say) is tried again
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, __file__, "--child", config, "--rows", str(rows)], env=env,
                                  capture_output=True, check=False, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"epoch_s": math.inf, "wall_s": timeout, "intra": None, "interop": None, "cpu_s": 0.0,
                    "fit_s": 1.0, "load_before": load_before, "load_after": os.getloadavg()[0]}
        if not done.returncode:
            row = json.loads(done.stdout.strip().splitlines()[-1])
            return {**row, "wall_s": time.perf_counter() - start, "load_before": load_before,
                    "load_after": os.getloadavg()[0]}
        print(f"{config} failed (attempt {attempt + 1}): {done.stderr.strip().splitlines()[-1]}", flush=True)
        time.sleep(10)
    raise RuntimeError(f"{config} failed:\n{done.stderr[-2000:]}")


def fair_share(threads: int, k: int, cores: int) -> float:
    """The slowdown of a ``threads``-thread job beside k busy processes if the cores were shared fairly and it
    scaled perfectly: its cores alone, min(threads, cores), over its share, cores · threads / (threads + k)."""
    return min(threads, cores) / min(threads, cores * threads / (threads + k))


def seconds(x: float, timeout: float) -> str:
    return f"{x:.1f}" if math.isfinite(x) else f">{timeout:.0f}"


def table(rows: list[dict], cores: int, timeout: float) -> str:
    """One line per configuration and K: a run that timed out counts as slower than any (shown >TIMEOUT)."""
    header = ("| configuration | threads (intra / inter) | K | epoch s (median; runs) | slowdown vs K=0 (median; runs) "
              "| fair-share slowdown | CPU s / fit s | load before → after |")
    lines = [header, "|---|---|---:|---|---|---:|---:|---|"]
    for config in CONFIGS:
        for k in sorted({r["k"] for r in rows}):
            runs = [r for r in rows if r["config"] == config and r["k"] == k]
            if not runs:
                continue
            ratios = [r["epoch_s"] / ref["epoch_s"] for r in runs
                      for ref in rows if ref["config"] == config and ref["k"] == 0 and ref["round"] == r["round"]]
            epochs = [r["epoch_s"] for r in runs]
            inter = next((r["interop"] for r in runs if r["interop"]), "?")
            counts = sorted({r["intra"] for r in runs if r["intra"]})
            threads, intra = max(counts, default=0), "/".join(map(str, counts)) or "?"
            lines.append(
                f"| {config} | {intra} / {inter} | {k} | {seconds(statistics.median(epochs), timeout)} "
                f"({', '.join(seconds(s, timeout) for s in epochs)}) | "
                f"{statistics.median(ratios):.1f}× ({', '.join(f'{x:.1f}' for x in ratios)}) | "
                f"{fair_share(threads, k, cores):.2f}× | "
                f"{statistics.median(r['cpu_s'] / r['fit_s'] for r in runs):.2f} | "
                f"{min(r['load_before'] for r in runs):.1f}–{max(r['load_after'] for r in runs):.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="Rows of the synthetic table (one epoch).")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", default="0,1,2", help="Comma-separated numbers of busy processes K.")
    parser.add_argument("--load-kind", choices=sorted(LOADS), default="spin")
    parser.add_argument("--configs", default="torch,intra1,interop1,passive,auto",
                        help=f"Comma-separated, of {', '.join(CONFIGS)} (intra2 is torch's own default on 2 cores).")
    parser.add_argument("--timeout", type=float, default=60.0, help="Wall seconds after which a run is stopped and "
                        "counts as slower than any.")
    parser.add_argument("--seed", type=int, default=0, help="Seeds the order of the configurations in each round.")
    parser.add_argument("--json", help="Write every row to this file (rewritten after each run).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.rows)
    cores = len(os.sched_getaffinity(0))
    configs, loads = args.configs.split(","), [int(k) for k in args.loads.split(",")]
    order = random.Random(args.seed)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` stops it like Ctrl-C
    rows, load = [], []
    print(f"{cores} cores, {args.rows} rows, loads {loads} ({args.load_kind}), configs {configs}; "
          f"load average {os.getloadavg()}", flush=True)
    try:
        for round_ in range(args.rounds):
            for k in loads:
                load = start_load(k, args.load_kind)
                for config in order.sample(configs, len(configs)):
                    row = {"round": round_, "k": k, "config": config, **measure(config, args.rows, args.timeout)}
                    rows.append(row)
                    print(f"round {round_} K={k} {config:9s} epoch {row['epoch_s']:7.2f} s  wall {row['wall_s']:6.1f}"
                          f" s  threads {row.get('intra')}/{row.get('interop')}  load {row['load_before']:.2f} → "
                          f"{row['load_after']:.2f}", flush=True)
                    if args.json:
                        with open(args.json, "w") as out:
                            json.dump(rows, out, indent=1)
                stop_load(load)
                load = []
    except KeyboardInterrupt:
        print("interrupted: the rows finished so far", flush=True)
    finally:
        stop_load(load)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"load average at the end {os.getloadavg()}; CPU of all children {children.ru_utime + children.ru_stime:.0f} s")
    print(table(rows, cores, args.timeout))


if __name__ == "__main__":
    main()

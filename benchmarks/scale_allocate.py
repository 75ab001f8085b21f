"""Allocation at platform scale: ``allocate budget`` or ``allocate quota`` over 10⁸ users in Parquet parts.

The instance is generated straight into ``--parts`` parts of ``--rows / --parts`` users each (part k from seed
k, float32 scores, never one frame):

- ``--problem budget``: customers × 10 levels (``make_budget_instance``: hazard responses, eq. 10), solved by
  ``promokit allocate budget --scores DIR --ratio 3``;
- ``--problem quota``: users × 8 funds with risk tolerances (``make_quota_instance``, EOCA eqs. 1–5), exact
  quotas summing the parts' feasible quotas (so the whole is feasible under the risk rule), solved by
  ``promokit allocate quota --scores DIR --quotas quotas.csv`` (the certified price method).

One run per executor, each a subprocess of the command line:

- ``--executor local`` (this process, part after part);
- ``--executor ray --workers 2`` (a Ray cluster started by the command on this machine).

Reported per run: wall seconds (Ray's start included), λ*, objective, upper bound and relative gap from the
report, and the peak resident memory (VmHWM) of every process the command started — the driver, Ray's own
processes and each worker — read from ``/proc`` every 0.2 s. The target is ≤ 10 minutes, memory bounded by a
few partitions, not by N.

Usage::

    .venv/bin/python benchmarks/scale_allocate.py                        # budget, 10⁸ rows in 200 parts (5.6 GB)
    .venv/bin/python benchmarks/scale_allocate.py --problem quota        # quota, 10⁸ users × 8 funds
    .venv/bin/python benchmarks/scale_allocate.py --rows 10000000 --parts 20 --executors local,ray
    .venv/bin/python benchmarks/scale_allocate.py --keep /data/budget    # keep the parts for another run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.experiments.allocation.instances import make_budget_instance, make_quota_instance

LEVELS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
RATIO_B = 3.0
FUNDS = 8


def write_part(args: tuple[str, Path, int, int, int]) -> np.ndarray | None:
    """Part k of the instance; a quota part returns its feasible quotas."""
    problem, folder, k, first, rows = args
    users = {"user_id": np.arange(first, first + rows, dtype=np.int64)}
    if problem == "budget":
        instance = make_budget_instance(rows, levels=LEVELS, seed=k, dtype=np.float32)
        frame = pd.DataFrame({**users, **{f"score_{v:g}": instance.scores[:, j] for j, v in enumerate(LEVELS)}})
        quotas = None
    else:
        instance = make_quota_instance(rows, FUNDS, seed=k, dtype=np.float32)
        frame = pd.DataFrame({**users, **{f"score_{f}": instance.etv[:, j] for j, f in enumerate(instance.funds)},
                              "tolerance": instance.tolerance})
        quotas = instance.quotas
    frame.to_parquet(folder / f"part-{k:05d}.parquet", index=False)
    return quotas


def write_parts(problem: str, folder: Path, rows: int, parts: int) -> None:
    (folder / "scores").mkdir(parents=True, exist_ok=True)
    sizes = np.full(parts, rows // parts)
    sizes[: rows % parts] += 1
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    tasks = [(problem, folder / "scores", k, int(f), int(s)) for k, (f, s) in enumerate(zip(firsts, sizes))]
    with ProcessPoolExecutor(2) as pool:
        quotas = list(pool.map(write_part, tasks))
    if problem == "quota":
        funds = make_quota_instance(1, FUNDS)
        pd.DataFrame({"fund": funds.funds, "quota": np.sum(quotas, axis=0), "risk": funds.risk}).to_csv(
            folder / "quotas.csv", index=False)


class PeakMemory:
    """Peak resident memory (VmHWM) of a process and all its descendants, polled from /proc."""

    def __init__(self, pid: int):
        self.pid, self.peaks, self._stop = pid, {}, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for pid in self._tree():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    continue
                hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")), 0)
                self.peaks[(pid, name)] = max(self.peaks.get((pid, name), 0), hwm)
            time.sleep(0.2)

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    ppid = int(Path(entry, "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        return tree

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return self.peaks


def run(problem: str, executor: str, folder: Path, out: Path, workers: int) -> dict:
    command = [sys.executable, "-m", "promokit.cli", "allocate", problem, "--scores", str(folder / "scores"),
               "--out", str(out), "--executor", executor]
    command += ["--ratio", str(RATIO_B)] if problem == "budget" else ["--quotas", str(folder / "quotas.csv")]
    if executor == "ray":
        command += ["--workers", str(workers)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    memory = PeakMemory(process.pid)
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - started
    peaks = memory.stop()
    if process.returncode != 0:
        raise SystemExit(f"{executor}: exit {process.returncode}\n{stderr[-2000:]}")
    report = json.loads((out / "report.json").read_text())
    driver = peaks.get((process.pid, next((n for p, n in peaks if p == process.pid), "")), 0)
    others = sorted(((kb, name) for (pid, name), kb in peaks.items() if pid != process.pid), reverse=True)
    return {"executor": executor, "seconds": seconds, "report": report, "driver_mb": driver / 1024,
            "others": [(name, kb / 1024) for kb, name in others]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=("budget", "quota"), default="budget")
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--parts", type=int, default=200)
    parser.add_argument("--executors", default="local,ray")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="Write (or reuse) the parts here instead of a temporary folder.")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix=f"promokit-{args.problem}-"))
    options = f"{len(LEVELS)} levels" if args.problem == "budget" else f"{FUNDS} funds"
    load_before = os.getloadavg()
    if not (folder / "scores").exists():
        started = time.perf_counter()
        write_parts(args.problem, folder, args.rows, args.parts)
        size = sum(p.stat().st_size for p in (folder / "scores").iterdir()) / 1e9
        print(f"{args.rows:,} users × {options} written in {args.parts} parts ({size:.1f} GB) in "
              f"{time.perf_counter() - started:.0f} s")
    results = [run(args.problem, executor, folder, folder / f"plan-{executor}", args.workers)
               for executor in args.executors.split(",")]
    print(f"\nallocate {args.problem}: {args.rows:,} users × {options} in {args.parts} parts, 2 cores, load average "
          f"before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}\n")
    print("| executor | seconds | λ* | objective | upper bound | relative gap | path | driver peak MB "
          "| largest other processes (peak MB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    for r in results:
        s = r["report"]
        others = ", ".join(f"{name} {mb:,.0f}" for name, mb in r["others"][:4]) or "—"
        gap, lam = s.get("relative_gap"), s.get("lam")
        bound = s.get("upper_bound")
        print(f"| {r['executor']} | {r['seconds']:.0f} | {'—' if lam is None else f'{lam:.9g}'} "
              f"| {s['objective']:,.3f} | {'—' if bound is None else f'{bound:,.3f}'} "
              f"| {'—' if gap is None else f'{gap:.1e}'} "
              f"| {s.get('lagrange_path', '—')} | {r['driver_mb']:,.0f} | {others} |")
    if len(results) > 1:
        a, b = (r["report"] for r in results[:2])
        print(f"\nλ* equal: {a.get('lam') == b.get('lam')}; objective relative difference "
              f"{abs(a['objective'] - b['objective']) / abs(a['objective']):.1e}")
    if args.keep is None:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()

"""Peak memory and time of `campaign build` from score parts against the same table as one file.

    .venv/bin/python benchmarks/campaign_build_parts.py                       # 10⁶ and 10⁷ customers × 5 levels
    .venv/bin/python benchmarks/campaign_build_parts.py --rows 100000 --parts 20

For each size, writes a customers' score table (ids in a random order, 5 levels) as ``--parts`` Parquet parts and
as one file, then builds a campaign from each in a fresh process (:func:`promokit.campaign.build`) and prints the
wall time, the process's peak resident memory (Linux: ``VmHWM``, reset after the imports) and that peak less the
process's resident memory after its imports (what the build added), and checks that both lookups are the same bytes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

LEVELS = [0.0, 1.0, 2.0, 5.0, 10.0]
BUILD = """
import json, sys, time
import pyarrow.parquet, promokit.campaign, promokit.campaign.directory

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

base = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current resident size: what the imports left is not the build's
start = time.perf_counter()
promokit.campaign.build(sys.argv[1], sys.argv[2], sys.argv[3], "1000")
print(json.dumps({"seconds": time.perf_counter() - start, "base": base, "peak": status("VmHWM:")}))
"""

def write_table(root: Path, rows: int, parts: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(rows)
    (root / "parts").mkdir(parents=True)
    frames = []
    for k, chunk in enumerate(np.array_split(ids, parts)):
        base = rng.uniform(0.02, 0.3, (len(chunk), 1))
        f = 1 - (1 - base) * np.exp(-rng.uniform(0.005, 0.05, (len(chunk), 1)) * np.asarray(LEVELS)[None, :])
        frame = pd.DataFrame({"user_id": [f"u{i}" for i in chunk], **{f"score_{lv:g}": f[:, j]
                                                                        for j, lv in enumerate(LEVELS)}})
        frame.to_parquet(root / "parts" / f"part-{k:05d}.parquet", index=False)
        frames.append(frame)
    pd.concat(frames, ignore_index=True).to_parquet(root / "whole.parquet", index=False)
    (root / "plan").mkdir()
    (root / "plan" / "report.json").write_text(json.dumps({"problem": "budget", "form": "ratio", "B": 3.0,
                                                           "lam": 0.5, "levels": LEVELS}))


def build(root: Path, name: str, source: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", BUILD, str(root / "built" / name), str(source), str(root / "plan")],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--parts", type=int, default=20)
    args = parser.parse_args()
    print(f"{'rows':>11} {'source':>18} {'time s':>8} {'peak MB':>9} {'added MB':>9}  table MB")
    for rows in args.rows:
        with tempfile.TemporaryDirectory(dir=".") as tmp:
            root = Path(tmp)
            write_table(root, rows, args.parts)
            table_mb = rows * (8 * len(LEVELS) + len(f"u{rows}")) / 1e6
            for name, source in ((f"{args.parts} parts", root / "parts"), ("one file", root / "whole.parquet")):
                got = build(root, name, source)
                print(f"{rows:>11,} {name:>18} {got['seconds']:>8.1f} {got['peak'] / 1024:>9.0f} "
                      f"{(got['peak'] - got['base']) / 1024:>9.0f}  {table_mb:.0f}", flush=True)
            lookups = [root / "built" / name / "lookup" / "customer" for name in (f"{args.parts} parts", "one file")]
            same = all((lookups[0] / f).read_bytes() == (lookups[1] / f).read_bytes()
                       for f in ("ids.npy", "scores.npy", "mean.npy"))
            print(f"{'':>11} lookups byte-identical: {same}")


if __name__ == "__main__":
    main()

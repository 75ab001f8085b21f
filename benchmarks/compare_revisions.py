"""Do the command line's figures stay the same across a change? Runs each domain's bench on a small synthetic world at
two revisions of the code and compares the per-model results of their report.json metric by metric.

    .venv/bin/python benchmarks/compare_revisions.py --before 5527ed0 --out promokit-runs/compare

``--before`` and ``--after`` are git revisions; ``--after`` defaults to the working tree. Each revision's code runs
from a temporary git worktree (``PYTHONPATH=<worktree>/src``) with this environment's packages, one thread, the same
seeds. A revision's report already in ``--out/<revision>/<bench>`` are kept (rerun to finish an interrupted
comparison). Prints, per bench and model, the largest absolute difference of any metric; timings are not compared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

#: name → the bench's arguments: small worlds, one seed, few epochs, so all four run in minutes.
BENCHES = {
    "conversion": ["conversion", "bench", "--models", "lr,dnn,esmm,esm2", "--seeds", "0", "--impressions", "60000",
                   "--users", "800", "--items", "300", "--epochs", "2"],
    "voucher": ["voucher", "bench", "--data-dir", "synthetic", "--models", "lr,dnn,dmbgn", "--seeds", "0",
                "--epochs", "2"],
    "incentive": ["incentive", "bench", "--models", "lr,gnn-hazard,dnn", "--seeds", "0", "--customers", "4000",
                  "--merchants", "400", "--epochs", "3"],
    "value": ["value", "bench", "--models", "esdpm,mtl-ziln,esmm", "--seeds", "0", "--users", "4000",
              "--epochs", "2"],
}
#: Columns that are not figures of the model: timings and labels.
NOT_COMPARED = ("seconds", "time", "epochs_run")


def run_bench(src: Path, name: str, out: Path) -> pd.DataFrame:
    """``promokit <bench>`` with the code under ``src``; the rows of its report.json's results (kept when the
    report is already there)."""
    report = out / "report.json"
    if report.exists():
        return pd.DataFrame(json.loads(report.read_text())["results"])
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", "from promokit.cli import main; main()", *BENCHES[name], "--out", str(out),
               "--threads", "1"]
    print(f"  {src.parent.name}: promokit {' '.join(BENCHES[name])}", flush=True)
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return pd.DataFrame(json.loads(report.read_text())["results"])


def differences(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Per (model, seed): the metrics both tables have, the largest |after − before| and the metric it is on."""
    keys = [c for c in ("model", "seed") if c in before.columns and c in after.columns]
    merged = before.merge(after, on=keys, suffixes=("_before", "_after"))
    metrics = [c for c in before.columns if c not in keys and f"{c}_after" in merged
               and pd.api.types.is_numeric_dtype(merged[f"{c}_before"])
               and not any(word in c for word in NOT_COMPARED)]
    rows = []
    for _, row in merged.iterrows():
        gaps = {m: abs(float(row[f"{m}_after"]) - float(row[f"{m}_before"])) for m in metrics}
        gaps = {m: g for m, g in gaps.items() if not np.isnan(g)}
        worst = max(gaps, key=gaps.get) if gaps else ""
        largest = gaps.get(worst, np.nan)
        rows.append({**{k: row[k] for k in keys}, "metrics": len(gaps), "max |Δ|": largest,
                     "on": worst if largest > 0 else ""})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision of the code before the change")
    parser.add_argument("--after", default=None, help="git revision after the change (default: the working tree)")
    parser.add_argument("--out", type=Path, default=Path("promokit-runs/compare"))
    parser.add_argument("--benches", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    args = parser.parse_args()
    names = args.benches.split(",")
    with tempfile.TemporaryDirectory() as scratch:
        sources = {}
        for label, revision in (("before", args.before), ("after", args.after)):
            if revision is None:
                sources[label] = (ROOT / "src", "working-tree")
                continue
            tree = Path(scratch) / label
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            sources[label] = (tree / "src", revision)
        try:
            tables = []
            for name in names:
                print(f"{name}:", flush=True)
                found = {label: run_bench(src, name, args.out / tag / name)
                         for label, (src, tag) in sources.items()}
                table = differences(found["before"], found["after"])
                tables.append(table.assign(bench=name))
                print(table.to_string(index=False), flush=True)
        finally:
            for label, revision in (("before", args.before), ("after", args.after)):
                if revision is not None:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                    str(Path(scratch) / label)], check=False)
    summary = pd.concat(tables)[["bench", *[c for c in tables[0].columns if c != "bench"]]]
    print(f"\nbefore {args.before}, after {args.after or 'the working tree'}: largest |Δ| of any metric "
          f"{summary['max |Δ|'].max():.3g}")


if __name__ == "__main__":
    main()

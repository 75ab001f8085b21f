"""promokit's uplift curves and areas against scikit-uplift's, on shared synthetic randomized experiments.

scikit-uplift is not a promokit dependency: the script makes a virtual environment in a temporary folder, installs
scikit-uplift there with pip, writes the cases as ``cases.npz``, runs ``sklift.metrics`` on them in that
environment, reads its answers back and compares them with ``promokit.metrics.uplift`` here.

Cases (binary outcome, treatment 0/1): ``continuous`` (a noisy score of the true uplift, 20,000 subjects, half
treated), ``ties`` (the same scores rounded to one decimal: runs of tied scores), ``imbalanced`` (10 % treated),
``harmful`` (the treatment lowers the response of a third of the subjects), ``small`` (60 subjects) and
``all_tied`` (one score for everyone: the curves are the random line). For each function the table gives the
largest absolute difference over the cases (a curve: over its points, after checking both have the same points).

Usage::

    .venv/bin/python benchmarks/uplift_sklift.py            # ~1 minute, most of it pip
    .venv/bin/python benchmarks/uplift_sklift.py --json agreement.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from promokit.metrics import uplift as ours

TOLERANCE = 1e-9

#: Run in the scikit-uplift environment: every case's answers as one JSON object.
SKLIFT_SIDE = '''
import json, sys
import numpy as np
import sklift
from sklift import metrics as m

cases = np.load(sys.argv[1])
names = sorted({key.rsplit("/", 1)[0] for key in cases.files})
answers = {"version": sklift.__version__}
for name in names:
    y, s, t = (cases[f"{name}/{part}"] for part in ("outcome", "score", "treatment"))
    curves = {"uplift_curve": m.uplift_curve(y, s, t), "qini_curve": m.qini_curve(y, s, t),
              "perfect_uplift_curve": m.perfect_uplift_curve(y, t),
              "perfect_qini_curve": m.perfect_qini_curve(y, t, negative_effect=True),
              "perfect_qini_curve(negative_effect=False)": m.perfect_qini_curve(y, t, negative_effect=False)}
    answers[name] = {key: [np.asarray(x, float).tolist(), np.asarray(v, float).tolist()]
                     for key, (x, v) in curves.items()}
    answers[name].update({"uplift_auc_score": float(m.uplift_auc_score(y, s, t)),
                          "qini_auc_score": float(m.qini_auc_score(y, s, t, negative_effect=True)),
                          "qini_auc_score(negative_effect=False)":
                              float(m.qini_auc_score(y, s, t, negative_effect=False))})
print(json.dumps(answers))
'''


def make_cases(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)

    def experiment(n: int, treated_share: float, harmful_share: float = 0.0):
        x = rng.normal(size=n)
        t = (rng.random(n) < treated_share).astype(np.int64)
        effect = 0.15 / (1 + np.exp(-2 * x)) - 0.2 * (rng.random(n) < harmful_share)
        p = np.clip(0.2 + 0.05 * x + effect * t, 0.01, 0.99)
        y = (rng.random(n) < p).astype(np.int64)
        return {"score": effect + rng.normal(scale=0.05, size=n), "treatment": t, "outcome": y}

    cases = {"continuous": experiment(20_000, 0.5), "imbalanced": experiment(20_000, 0.1),
             "harmful": experiment(20_000, 0.5, harmful_share=1 / 3), "small": experiment(60, 0.5)}
    cases["ties"] = {**cases["continuous"], "score": np.round(cases["continuous"]["score"], 1)}
    cases["all_tied"] = {**cases["small"], "score": np.zeros(60)}
    return cases


def promokit_answers(case: dict[str, np.ndarray]) -> dict:
    s, t, y = case["score"], case["treatment"], case["outcome"]
    return {"uplift_curve": ours.uplift_curve(s, t, y), "qini_curve": ours.qini_curve(s, t, y),
            "perfect_uplift_curve": ours.perfect_uplift_curve(t, y),
            "perfect_qini_curve": ours.perfect_qini_curve(t, y, negative_effect=True),
            "perfect_qini_curve(negative_effect=False)": ours.perfect_qini_curve(t, y, negative_effect=False),
            "uplift_auc_score": ours.uplift_auc_score(s, t, y),
            "qini_auc_score": ours.qini_auc_score(s, t, y, negative_effect=True),
            "qini_auc_score(negative_effect=False)": ours.qini_auc_score(s, t, y, negative_effect=False)}


def difference(mine, theirs) -> float:
    """The largest absolute difference between two answers (of two curves: over their points' coordinates);
    infinite when two curves have different numbers of points."""
    if isinstance(mine, float):
        return abs(mine - theirs)
    mine, theirs = np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float)
    return float(np.max(np.abs(mine - theirs))) if mine.shape == theirs.shape else float("inf")


def sklift_answers(cases: dict[str, dict[str, np.ndarray]], folder: Path) -> dict:
    """Install scikit-uplift into a new environment in ``folder`` and run :data:`SKLIFT_SIDE` there."""
    np.savez(folder / "cases.npz", **{f"{name}/{k}": v for name, case in cases.items() for k, v in case.items()})
    (folder / "sklift_side.py").write_text(SKLIFT_SIDE, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    python = folder / "venv" / "bin" / "python"
    _quiet([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "scikit-uplift"])
    return json.loads(_quiet([str(python), str(folder / "sklift_side.py"), str(folder / "cases.npz")]))


def _quiet(command: list[str]) -> str:
    """Run ``command``; its output, or exit with its error output when it fails."""
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"{' '.join(command[:4])} … failed:\n{run.stderr[-2000:]}")
    return run.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="Write the differences here as JSON.")
    args = parser.parse_args()
    console = Console(width=150)
    cases = make_cases(args.seed)
    with tempfile.TemporaryDirectory(prefix="promokit-sklift-") as folder:
        console.print(f"installing scikit-uplift into a temporary environment in {folder} …")
        theirs = sklift_answers(cases, Path(folder))
    version = theirs.pop("version")
    mine = {name: promokit_answers(case) for name, case in cases.items()}
    functions = list(next(iter(mine.values())))
    rows = {f: {name: difference(mine[name][f], theirs[name][f]) for name in cases} for f in functions}
    table = Table(title=f"largest |promokit − scikit-uplift {version}| per function and case")
    for column in ["function", *cases, "agrees"]:
        table.add_column(column, justify="left" if column == "function" else "right")
    for function, diffs in rows.items():
        table.add_row(function, *(f"{d:.1e}" for d in diffs.values()),
                      "yes" if max(diffs.values()) <= TOLERANCE else "NO")
    console.print(table)
    worst = max(d for diffs in rows.values() for d in diffs.values())
    example = mine["continuous"]
    console.print(f"largest difference over every function and case: {worst:.1e} (tolerance {TOLERANCE:g}); "
                  f"on 'continuous' AUUC {example['uplift_auc_score']:.6f}, Qini coefficient "
                  f"{example['qini_auc_score']:.6f}")
    if args.json:
        args.json.write_text(json.dumps({"sklift": version, "largest": worst, "differences": rows}, indent=2) + "\n")
    if worst > TOLERANCE:
        sys.exit(1)


if __name__ == "__main__":
    main()

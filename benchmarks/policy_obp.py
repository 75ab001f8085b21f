"""promokit's off-policy estimators against Open Bandit Pipeline's (obp) on one shared synthetic log.

obp is not a promokit dependency. The script makes a virtual environment in a temporary folder (``python3.11 -m
venv``), installs ``torch==2.13.0`` there first (the CPU wheel on this machine's disk; the script checks from pip's
output that 2.13.0+cpu is what was installed and that no CUDA package was downloaded), then obp:

- **0.4.1** (:data:`OBP_PLAIN`) with a plain ``pip install obp==0.4.1``: the newest release whose published
  metadata installs on Python 3.11 (``pip install obp`` itself fails there: 0.5.7's metadata says Python < 3.11 and
  pins torch 1.12 and Pillow 9.1.1; pip backtracks past 0.5.6, whose sdist carries 0.5.5's metadata, and stops
  building PyYAML 5.4.1; 0.5.1–0.5.5 declare Python < 3.10). It has no weight clipping (``lambda_``).
- **0.5.7** (:data:`OBP_CURRENT`), the newest release, with ``pip install --no-deps --ignore-requires-python
  --target DIR obp==0.5.7`` over the libraries 0.4.1 brought (numpy, scipy, scikit-learn, pandas, matplotlib,
  seaborn, tqdm, PyYAML, torch); its estimators import and run with them. It has ``lambda_`` clipping.

The case (``case.npz``, seeded): n logged rounds with 3 context features, K actions, a stochastic logging policy
(a softmax of the context mixed with 10 % uniform exploration, so propensities span 0.1 / K to about 0.9 and
the deterministic policy's importance weights reach 10·K = 60, above the clip λ = 20 on about a hundred rounds), the
logged action drawn from it, the true mean reward q(x, a) and a model's q̂ = q plus noise for every action; two
evaluation policies, **deterministic** (a one-hot argmax of another linear score) and **stochastic** (its softmax);
two rewards, **binary** (Bernoulli(q)) and **amount** (a zero-inflated log-normal amount whose mean is q̂'s target
scaled). For every policy × reward: obp's DirectMethod, InverseProbabilityWeighting,
SelfNormalizedInverseProbabilityWeighting, DoublyRobust and SelfNormalizedDoublyRobust (``estimate_policy_value``
with ``action_dist`` and ``estimated_rewards_by_reg_model`` of shape (n, K, 1)), and IPW and DR with ``lambda_ =
--clip``; promokit's ``Terms.of(plan, action, propensity, reward, q̂, clip)`` and ``estimate``. The table prints
obp, promokit and |difference| per estimator; it agrees when every difference is ≤ 1e-9.

Rows marked ``not compared``: obp 0.5.7's SNIPW and SNDR accept ``lambda_`` (inherited) but never clip (their
``_estimate_round_rewards`` divide the unclipped weights by their mean), while promokit's ``--clip`` clips the weights
of every estimator; the table shows both numbers.

SNDR in obp's history (``obp/ope/estimators.py``, ``SelfNormalizedDoublyRobust._estimate_round_rewards``): 0.3.0 and
0.3.1 return ``(q̂(x, π) + w·(y − q̂(x, a))) * iw.mean()`` (multiplied by the mean weight), 0.3.2 ``… / iw.mean()`` (the
DM term divided too), and from 0.3.3 on — 0.4.1 and 0.5.7 here — ``q̂(x, π) + w·(y − q̂(x, a)) / iw.mean()``, the
standard SNDR (DM plus the self-normalised correction) that promokit computes.

Intervals (second table): obp's ``estimate_interval`` (``estimate_confidence_interval_by_bootstrap``: the per-round
values of ``_estimate_round_rewards`` — for SNIPW and SNDR already divided by the FULL sample's mean weight —
resampled with replacement and averaged) beside promokit's (the subjects resampled and the whole estimator recomputed
on each replicate, ``bootstrap_sums`` + ``interval``), both percentile 95 % with ``--bootstrap`` replicates. They use
different random draws; what to compare is the widths.

Usage::

    .venv/bin/python benchmarks/policy_obp.py                    # both obp versions, 1-2 minutes (most of it pip)
    .venv/bin/python benchmarks/policy_obp.py --obp 0.5.7 --rounds 20000 --out obp.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from promokit.policy.estimators import Terms, bootstrap_sums, estimate, from_sums, interval

TOLERANCE = 1e-9
TORCH = "2.13.0"
OBP_PLAIN, OBP_CURRENT = "0.4.1", "0.5.7"
#: what obp 0.5.7 needs at import and run time (its pins are unusable on 3.11; 0.4.1 brings these unpinned)
OBP_RUNTIME = ["numpy", "scipy", "scikit-learn", "pandas", "matplotlib", "seaborn", "tqdm", "pyyaml"]
POLICIES, REWARDS = ("deterministic", "stochastic"), ("binary", "amount")
PLAIN_ESTIMATORS = ("DM", "IPS", "SNIPS", "DR", "SNDR")
CLIPPED = ("IPS", "DR")           # obp clips these with lambda_
NOT_CLIPPED = ("SNIPS", "SNDR")   # obp 0.5.7 accepts lambda_ here but ignores it
INTERVALS = ("IPS", "SNIPS", "DR", "SNDR")

#: Run in the obp environment: every estimate of every policy × reward, as one JSON object on stdout.
OBP_SIDE = '''
import json, sys
import numpy as np
import obp
from obp.ope import (DirectMethod, DoublyRobust, InverseProbabilityWeighting,
                     SelfNormalizedDoublyRobust, SelfNormalizedInverseProbabilityWeighting)

case = np.load(sys.argv[1])
clip, replicates = float(case["clip"]), int(case["replicates"])
action, pscore, q_hat = case["action"], case["pscore"], case["q_hat"][:, :, None]
clipping = "lambda_" in getattr(InverseProbabilityWeighting, "__dataclass_fields__", {})
out = {"version": obp.__version__, "clipping": clipping}
for policy in ("deterministic", "stochastic"):
    dist = case[f"policy_{policy}"][:, :, None]
    for reward_name in ("binary", "amount"):
        reward = case[f"reward_{reward_name}"]
        common = dict(reward=reward, action=action, pscore=pscore, action_dist=dist)
        scale = case[f"scale_{reward_name}"]
        model = dict(common, estimated_rewards_by_reg_model=q_hat * scale)
        values = {
            "DM": DirectMethod().estimate_policy_value(action_dist=dist,
                                                       estimated_rewards_by_reg_model=q_hat * scale),
            "IPS": InverseProbabilityWeighting().estimate_policy_value(**common),
            "SNIPS": SelfNormalizedInverseProbabilityWeighting().estimate_policy_value(**common),
            "DR": DoublyRobust().estimate_policy_value(**model),
            "SNDR": SelfNormalizedDoublyRobust().estimate_policy_value(**model)}
        boot = dict(n_bootstrap_samples=replicates, random_state=0)
        intervals = {
            "IPS": InverseProbabilityWeighting().estimate_interval(**common, **boot),
            "SNIPS": SelfNormalizedInverseProbabilityWeighting().estimate_interval(**common, **boot),
            "DR": DoublyRobust().estimate_interval(**model, **boot),
            "SNDR": SelfNormalizedDoublyRobust().estimate_interval(**model, **boot)}
        if clipping:
            values["IPS clip"] = InverseProbabilityWeighting(lambda_=clip).estimate_policy_value(**common)
            values["DR clip"] = DoublyRobust(lambda_=clip).estimate_policy_value(**model)
            values["SNIPS clip"] = SelfNormalizedInverseProbabilityWeighting(lambda_=clip).estimate_policy_value(
                **common)
            values["SNDR clip"] = SelfNormalizedDoublyRobust(lambda_=clip).estimate_policy_value(**model)
        out[f"{policy}/{reward_name}"] = {
            "values": {k: float(v) for k, v in values.items()},
            "intervals": {k: [float(v[k2]) for k2 in v if "lower" in k2] + [float(v[k2]) for k2 in v if "upper" in k2]
                          for k, v in intervals.items()}}
print(json.dumps(out))
'''


def make_case(rounds: int, actions: int, seed: int, clip: float, replicates: int) -> dict[str, np.ndarray]:
    """The shared synthetic log (module docstring)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rounds, 3))
    # a softmax of the context mixed with 10 % uniform exploration: propensities ≥ 0.1 / K, weights up to 10·K
    logging = 0.9 * _softmax(1.6 * x @ rng.normal(size=(3, actions))) + 0.1 / actions
    action = (rng.random((rounds, 1)) > logging.cumsum(axis=1)).sum(axis=1)
    action = np.minimum(action, actions - 1)
    pscore = logging[np.arange(rounds), action]
    q = 1 / (1 + np.exp(-(x @ rng.normal(scale=0.7, size=(3, actions)) + rng.normal(scale=0.5, size=actions) - 1)))
    q_hat = np.clip(q + rng.normal(scale=0.08, size=q.shape), 0.001, 0.999)
    score = x @ rng.normal(size=(3, actions))
    deterministic = np.eye(actions)[score.argmax(axis=1)]
    stochastic = _softmax(2.0 * score)
    p = q[np.arange(rounds), action]
    binary = (rng.random(rounds) < p).astype(np.float64)
    # an amount: bought with probability q, log-normal when bought with mean MEAN_AMOUNT (q̂·MEAN_AMOUNT its model)
    sigma = 0.8
    mean_amount = 50.0
    amount = binary * np.exp(np.log(mean_amount) - sigma ** 2 / 2 + sigma * rng.normal(size=rounds))
    return {"action": action, "pscore": pscore, "q_hat": q_hat, "policy_deterministic": deterministic,
            "policy_stochastic": stochastic, "reward_binary": binary, "reward_amount": amount,
            "scale_binary": np.float64(1.0), "scale_amount": np.float64(mean_amount), "clip": np.float64(clip),
            "replicates": np.int64(replicates), "logging": logging}


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def promokit_side(case: dict[str, np.ndarray], clip: float, replicates: int) -> dict:
    out = {}
    for policy in POLICIES:
        plan = case[f"policy_{policy}"]
        for reward_name in REWARDS:
            reward = case[f"reward_{reward_name}"]
            q_hat = case["q_hat"] * case[f"scale_{reward_name}"]
            terms = Terms.of(plan, case["action"], case["pscore"], reward, q_hat)
            clipped = Terms.of(plan, case["action"], case["pscore"], reward, q_hat, clip=clip)
            values = {e: estimate(terms, e) for e in PLAIN_ESTIMATORS}
            values.update({f"{e} clip": estimate(clipped, e) for e in (*CLIPPED, *NOT_CLIPPED)})
            draws = bootstrap_sums(terms.matrix(), replicates, seed=0)
            intervals = {e: list(interval(from_sums(draws, e))) for e in INTERVALS}
            out[f"{policy}/{reward_name}"] = {"values": values, "intervals": intervals,
                                              "clipped_rounds": int((terms.w > clip).sum()),
                                              "max_weight": float(terms.w.max())}
    return out


def install_obp(folder: Path, versions: list[str]) -> dict[str, dict]:
    """A venv in ``folder`` with torch 2.13.0 (checked) and every obp version asked for; how to run each."""
    subprocess.run(["python3.11", "-m", "venv", str(folder / "venv")], check=True)
    python = str(folder / "venv" / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
    log = _run([*pip, f"torch=={TORCH}"])
    check_torch(log, "torch")
    runs = {}
    if OBP_PLAIN in versions:
        log = _run([*pip, f"obp=={OBP_PLAIN}"])
        check_torch(log, f"obp {OBP_PLAIN}")
        runs[OBP_PLAIN] = {"env": {}, "how": f"pip install obp=={OBP_PLAIN}"}
    else:
        log = _run([*pip, *OBP_RUNTIME])
        check_torch(log, "obp's runtime libraries")
    for version in versions:
        if version == OBP_PLAIN:
            continue
        target = folder / f"obp-{version}"
        _run([*pip, "--no-deps", "--ignore-requires-python", "--target", str(target), f"obp=={version}"])
        runs[version] = {"env": {"PYTHONPATH": str(target)},
                         "how": f"pip install --no-deps --ignore-requires-python --target DIR obp=={version}"}
    torch_version = _run([python, "-c", "import torch; print(torch.__version__)"]).strip()
    if torch_version != f"{TORCH}+cpu":
        sys.exit(f"the obp environment ended with torch {torch_version}, not {TORCH}+cpu")
    listed = _run([python, "-m", "pip", "list", "--format=freeze"])
    cuda = [line for line in listed.splitlines() if re.match(r"(nvidia|cuda|triton)", line, re.I)]
    if cuda:
        sys.exit(f"CUDA packages were installed into the obp environment: {cuda}")
    for run in runs.values():
        run["python"] = python
    print(f"obp environment: torch {torch_version} (from the local CPU wheel), no nvidia/cuda/triton package")
    return runs


def check_torch(log: str, step: str) -> None:
    """pip's output of ``step`` must install torch 2.13.0+cpu from this disk (or keep it) and download no CUDA."""
    if re.search(r"nvidia|cuda|triton", log, re.I):
        sys.exit(f"pip downloaded CUDA packages while installing {step}:\n{log[-2000:]}")
    installed = re.findall(r"torch-(\d[\w.+]*)", log)
    kept = re.findall(r"Requirement already satisfied: torch[^\n]*\(([\w.+]+)\)", log)
    for version in installed + kept:
        if not version.startswith(f"{TORCH}+cpu"):
            sys.exit(f"pip used torch {version} while installing {step}, not {TORCH}+cpu:\n{log[-2000:]}")


def _run(command: list[str], env: dict | None = None) -> str:
    run = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if run.returncode:
        sys.exit(f"{' '.join(command[:6])} … failed:\n{run.stderr[-3000:]}")
    return run.stdout + run.stderr


def agreement_table(ours: dict, theirs: dict[str, dict], versions: list[str]) -> tuple[list[str], float]:
    header = ["policy / reward", "estimator", *[f"obp {v}" for v in versions], "promokit",
              *[f"abs diff ({v})" for v in versions]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * (len(header) - 2)]
    worst = 0.0
    for key, mine in ours.items():
        for estimator, value in mine["values"].items():
            cells, diffs = [], []
            compared = estimator.split()[0] not in NOT_CLIPPED or " clip" not in estimator
            for v in versions:
                other = theirs[v][key]["values"].get(estimator)
                cells.append("n/a" if other is None else f"{other:.12f}")
                if other is None:
                    diffs.append("n/a (no lambda_)")
                else:
                    d = abs(other - value)
                    if compared:
                        worst = max(worst, d)
                    diffs.append(f"{d:.1e}" + ("" if compared else " (not compared: obp ignores lambda_)"))
            name = estimator.replace(" clip", f" (clip λ)")
            lines.append(f"| {key} | {name} | " + " | ".join(cells) + f" | {value:.12f} | " + " | ".join(diffs) + " |")
    return lines, worst


def interval_table(ours: dict, theirs: dict, version: str) -> list[str]:
    lines = [f"| policy / reward | estimator | obp {version} interval | promokit interval | obp width | promokit width "
             "| width ratio obp / promokit |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, mine in ours.items():
        for estimator in INTERVALS:
            lo, hi = theirs[key]["intervals"][estimator]
            plo, phi = mine["intervals"][estimator]
            lines.append(f"| {key} | {estimator} | [{lo:.4f}, {hi:.4f}] | [{plo:.4f}, {phi:.4f}] | {hi - lo:.4f} | "
                         f"{phi - plo:.4f} | {(hi - lo) / (phi - plo):.3f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--obp", default=f"{OBP_PLAIN},{OBP_CURRENT}",
                        help=f"obp versions, comma-separated ({OBP_PLAIN} installs plainly; others --no-deps)")
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--actions", type=int, default=6)
    parser.add_argument("--clip", type=float, default=20.0, help="lambda_ / --clip for the clipped IPS and DR")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap replicates of the intervals")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = parser.parse_args()
    started = time.perf_counter()
    versions = [v.strip() for v in args.obp.split(",") if v.strip()]
    case = make_case(args.rounds, args.actions, args.seed, args.clip, args.bootstrap)
    ours = promokit_side(case, args.clip, args.bootstrap)
    theirs = {}
    with tempfile.TemporaryDirectory(prefix="promokit-obp-") as tmp:
        folder = Path(tmp)
        np.savez(folder / "case.npz", **case)
        (folder / "obp_side.py").write_text(OBP_SIDE, encoding="utf-8")
        print(f"installing torch {TORCH} and obp {', '.join(versions)} into a temporary environment in {folder} …")
        runs = install_obp(folder, versions)
        for version in versions:
            run = runs[version]
            theirs[version] = json.loads(_run([run["python"], str(folder / "obp_side.py"), str(folder / "case.npz")],
                                              run["env"]).strip().splitlines()[-1])
            print(f"obp {theirs[version]['version']} ({run['how']}), lambda_ clipping: "
                  f"{'yes' if theirs[version]['clipping'] else 'no'}")
            if theirs[version]["version"] != version:
                sys.exit(f"asked for obp {version}, imported {theirs[version]['version']}")
    p = case["pscore"]
    weights = {k: v["max_weight"] for k, v in ours.items()}
    clipped = ", ".join(f"{k} {v['clipped_rounds']}" for k, v in ours.items())
    print(f"\ncase: {args.rounds:,} rounds, {args.actions} actions, logging propensities {p.min():.4f}–{p.max():.4f}, "
          f"largest weight {max(weights.values()):.1f}, clip λ = {args.clip:g} "
          f"(weights above it: {clipped})\n")
    lines, worst = agreement_table(ours, theirs, versions)
    print("\n".join(lines))
    print(f"\nlargest |obp − promokit| over the compared rows: {worst:.1e} (tolerance {TOLERANCE:g}): "
          f"{'agrees' if worst <= TOLERANCE else 'DISAGREES'}")
    newest = versions[-1]
    print(f"\n95 % percentile bootstrap intervals, {args.bootstrap} replicates (obp {newest}: per-round values "
          "resampled, the self-normalising mean weight fixed at the full sample's; promokit: subjects resampled, "
          "estimator recomputed)\n")
    print("\n".join(interval_table(ours, theirs[newest], newest)))
    seconds = time.perf_counter() - started
    print(f"\nwall time {seconds:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        args.out.write_text(json.dumps({"obp": theirs, "promokit": ours, "largest": worst, "tolerance": TOLERANCE,
                                        "rounds": args.rounds, "actions": args.actions, "clip": args.clip,
                                        "seconds": seconds}, indent=2) + "\n")
    if worst > TOLERANCE:
        sys.exit(1)


if __name__ == "__main__":
    main()

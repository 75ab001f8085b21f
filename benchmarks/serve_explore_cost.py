"""What the exploration bucket costs a decision, in CPU, without HTTP: ``DecisionRule.propose`` followed by
``Ledger.apply`` on a SQLite ledger, in one process, for each exploration share, in batches of 1 and 8
decisions (one client, and what a batch holds at 8 clients).

The wrk benchmark (``serve_throughput.py --explore 0,0.05``) measures the service as a client sees it, but on a
shared machine its cells move by ±20 % between runs; process CPU time of the decision path alone moves by a few
per cent. Shares are measured in alternating rounds (same campaign scores, a fresh ledger each) and the median of
the rounds is printed. The campaign is ``serve_throughput.py``'s: 100,000 customers × 5 levels, a cap that never
binds.

Usage::

    .venv/bin/python benchmarks/serve_explore_cost.py                       # shares 0 and 0.05, 5 rounds
    PYTHONPATH=/path/to/older/src .venv/bin/python benchmarks/serve_explore_cost.py --explore 0   # older code
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from serve_throughput import make_campaign, uptime

from promokit.campaign.directory import load_campaign
from promokit.serve.decision_rule import DecisionRule
from promokit.serve.ledger import Ledger


def cpu_per_decision(campaign: Path, batch: int, decisions: int, warm_up: int = 2_000) -> float:
    """Process CPU milliseconds per decision over ``decisions`` after ``warm_up``, on a fresh ledger."""
    rule = DecisionRule(load_campaign(campaign))
    for suffix in ("", "-wal", "-shm"):
        (campaign / f"ledger.sqlite{suffix}").unlink(missing_ok=True)
    ledger = Ledger(f"sqlite:///{campaign / 'ledger.sqlite'}")
    ledger.open(rule.config.cap_minor)
    customers = len(rule.campaign.populations["customer"])
    subjects = np.random.default_rng(0).integers(0, customers, warm_up + decisions)

    def run(start: int, stop: int) -> None:
        for first in range(start, stop, batch):
            ledger.apply([rule.propose(f"r{i}", "customer", f"c{subjects[i]}")[0]
                          for i in range(first, min(first + batch, stop))])

    run(0, warm_up)
    started = time.process_time()
    run(warm_up, warm_up + decisions)
    cpu = time.process_time() - started
    ledger.close()
    return 1e3 * cpu / decisions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--explore", default="0,0.05", help="Exploration shares, comma-separated.")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--decisions", type=int, default=20_000, help="Measured decisions per round.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--customers", type=int, default=100_000)
    args = parser.parse_args()
    shares, batches = [float(s) for s in args.explore.split(",")], [int(b) for b in args.batches.split(",")]
    print(f"load average {uptime()} (1, 5, 15 min)")
    with tempfile.TemporaryDirectory() as tmp:
        campaigns = {share: make_campaign(Path(tmp) / f"explore-{share:g}", args.customers, cap=1e12, explore=share)
                     for share in shares}
        times = {(share, batch): [] for share in shares for batch in batches}
        for _ in range(args.rounds):
            for batch in batches:
                for share in shares:
                    times[share, batch].append(cpu_per_decision(campaigns[share], batch, args.decisions))
    print("\n| explore | batch | ms CPU / decision (median) | rounds (min – max) | vs explore " f"{shares[0]:g} |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for (share, batch), values in times.items():
        median, base = statistics.median(values), statistics.median(times[shares[0], batch])
        print(f"| {share:g} | {batch} | {median:.4f} | {min(values):.4f} – {max(values):.4f} | {median / base:.3f}× |")
    print(f"\nload average after {uptime()}")


if __name__ == "__main__":
    main()

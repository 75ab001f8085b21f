"""Budget safety under concurrency: 64 clients race for the last 1 % of the cap, with retries in flight.

Each round starts from a fresh ledger (SQLite in the campaign directory, or PostgreSQL at ``--pg-url`` with its
tables dropped) that is pre-filled through :meth:`Ledger.apply` with one decision reserving 99 % of the cap, so
``--room`` (default 1,000) is left: about a fifth of what the round's decisions would reserve, so the cap is
reached mid-round. ``promokit serve`` then runs with ``--workers`` processes (2 by default: two writers racing
for the budget row's lock) and ``--clients`` concurrent clients send ``--requests`` decisions, of which
``--retry-share`` are retries: the same body as an earlier request, placed within the next 64 requests so the
two are usually in flight together (and may reach different workers, in either order).

After each round the ledger is checked: money at risk (running totals and recomputed by :meth:`Ledger.audit`)
≤ cap and the two agree, exactly (integer minor units); every request_id acknowledged with 200 is in
``decisions`` exactly once, and the table holds nothing else (its rows = distinct acknowledged ids + the pre-fill); each answer's level equals
its ledger row's (level, bucket, propensity); a retry and its original got the same answer (level, λ, expires_at,
bucket, propensity) and exactly one of them ``replayed: false``. ``--explore 0.5`` runs the race with half the
subjects drawing their level at random (the propensities the cap changes are recorded under the same race). A violation is any of these failing, or an answer other than 200.

Usage::

    .venv/bin/python benchmarks/serve_race.py                 # 20 rounds × SQLite and PostgreSQL, ~3 minutes
    .venv/bin/python benchmarks/serve_race.py --rounds 3 --ledgers sqlite   # imports serve_throughput beside it
    .venv/bin/python benchmarks/serve_race.py --rounds 5 --explore 0.5      # with an exploration bucket
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from serve_throughput import PG_URL, TOKEN, fresh_ledger, make_campaign
from sqlalchemy import text

from promokit.campaign.directory import load_campaign
from promokit.campaign.money import to_major
from promokit.serve.ledger import DecisionRequest, Ledger, Option
from promokit.serve.replay import run_replay, running_service

PREFILL_SHARE = 0.99
RETRY_WINDOW = 64


def prefill(url: str, campaign_dir: Path) -> None:
    """One decision reserving ``PREFILL_SHARE`` of the cap, written before the service starts."""
    config = load_campaign(campaign_dir).config
    ledger = Ledger(url, exponent=config.currency_exponent)
    ledger.open(config.cap_minor)
    face = round(PREFILL_SHARE * config.cap_minor)  # minor units
    ledger.apply([DecisionRequest("prefill", "customer", "prefill", Option(0, face, 0.0, 0.0), (),
                                  config.lam, config.model_version, False, "response", config.coupon_ttl_seconds)])
    ledger.close()


def bodies_with_retries(n: int, retry_share: float, customers: int, rng, tag: str) -> tuple[list[dict], list]:
    """``n`` bodies: originals, and retries each inserted at most ``RETRY_WINDOW`` places after its original;
    returns the bodies and (original position, retry position) pairs."""
    n_retries = int(round(n * retry_share))
    bodies = [{"request_id": f"{tag}-{i}", "customer_id": f"c{c}"}
              for i, c in enumerate(rng.integers(0, customers, n - n_retries))]
    slots: list[list[int]] = [[i] for i in range(len(bodies))]  # slots[i]: what is sent at original i's turn
    for original in rng.choice(len(bodies), n_retries, replace=False):
        slots[min(original + int(rng.integers(1, RETRY_WINDOW + 1)), len(bodies) - 1)].append(original)
    order = [i for slot in slots for i in slot]
    sent, pairs, first = [], [], {}
    for position, i in enumerate(order):
        if i in first:
            pairs.append((first[i], position))
        else:
            first[i] = position
        sent.append(bodies[i])
    return sent, pairs


def check_round(url: str, bodies: list[dict], pairs: list, result) -> dict:
    """The round's checks, money in the ledger's minor units and compared exactly."""
    ledger = Ledger(url)
    totals, audit = ledger.totals(), ledger.audit()
    cap = totals["cap"]
    with ledger.reader.connect() as conn:
        rows = {r.request_id: (r.n, None if r.level_index < 0 else r.level_index, r.bucket, r.propensity)
                for r in conn.execute(text("SELECT request_id, COUNT(*) AS n, MIN(level_index) AS level_index, "
                                           "MIN(bucket) AS bucket, MIN(propensity) AS propensity FROM decisions "
                                           "GROUP BY request_id"))}
    ledger.close()
    ok = result.statuses == 200
    acknowledged = {b["request_id"]: a for b, a, good in zip(bodies, result.answers, ok) if good}
    answer = lambda a: (a["level"], a["lam"], a["expires_at"], a["bucket"], a["propensity"])  # noqa: E731
    same = lambda a, b: answer(a) == answer(b)  # noqa: E731
    mismatched = sum(not (ok[i] and ok[j]) or not same(result.answers[i], result.answers[j])
                     or result.answers[i]["replayed"] == result.answers[j]["replayed"] for i, j in pairs)
    checks = {
        "at_risk ≤ cap": max(totals["at_risk"], audit["at_risk"]) <= cap,
        "audit = totals": all(audit[k] == totals[k] for k in ("at_risk", "committed", "paid", "decisions", "responses",
                                                             "explored")),
        "acknowledged once in ledger": all(rows.get(rid, (0,))[0] == 1 for rid in acknowledged),
        "ledger = acknowledged + prefill": set(rows) == set(acknowledged) | {"prefill"},
        "answers = ledger": all(rows[rid][1:] == (a["level_index"], a["bucket"], a["propensity"])
                                for rid, a in acknowledged.items() if rid in rows),
        "all 200": bool(ok.all()),
        "retries agree": mismatched == 0,
    }
    return {"ratio": totals["at_risk"] / cap, "left": to_major(cap - totals["at_risk"], totals["exponent"]),
            "violations": [name for name, good in checks.items() if not good], "acknowledged": len(acknowledged),
            "rows": len(rows),
            "retries": len(pairs), "mismatched": mismatched, "capped": totals["capped"],
            "per_second": result.throughput}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--requests", type=int, default=2_000)
    parser.add_argument("--retry-share", type=float, default=0.2)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--room", type=float, default=1_000.0, help="Money left under the cap (1 %% of it).")
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=PG_URL)
    parser.add_argument("--explore", type=float, default=0.0, help="Share of subjects in the exploration bucket.")
    args = parser.parse_args()
    cap = round(args.room / (1 - PREFILL_SHARE), 2)  # whole cents
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        campaign = make_campaign(Path(tmp), args.customers, cap=cap, explore=args.explore)
        for ledger in args.ledgers.split(","):
            print(f"\n{ledger}: {args.rounds} rounds × {args.requests:,} decisions ({args.retry_share:.0%} retries), "
                  f"{args.clients} clients, {args.workers} workers, cap {cap:,.0f} with {args.room:,.0f} left, "
                  f"exploring {args.explore:.0%}\n")
            print("| round | at_risk/cap | cap − at_risk | violations | acknowledged ids | ledger rows | retries "
                  "| mismatched retries | capped | decisions/s |")
            print("| ---: |" + " ---: |" * 9)
            rounds = []
            for number in range(1, args.rounds + 1):
                url = fresh_ledger(campaign, ledger, args.pg_url) or f"sqlite:///{campaign}/ledger.sqlite"
                prefill(url, campaign)
                bodies, pairs = bodies_with_retries(args.requests, args.retry_share, args.customers, rng,
                                                    f"{ledger}-{number}")
                with running_service(campaign, TOKEN, ledger=url, workers=args.workers) as base:
                    result = run_replay(base, TOKEN, bodies, args.clients)
                row = check_round(url, bodies, pairs, result)
                rounds.append(row)
                print(f"| {number} | {row['ratio']:.8f} | {row['left']:.3g} | {', '.join(row['violations']) or 0} "
                      f"| {row['acknowledged']:,} | {row['rows']:,} | {row['retries']} | {row['mismatched']} "
                      f"| {row['capped']:,} | {row['per_second']:,.0f} |", flush=True)
            total = lambda key: sum(r[key] for r in rounds)
            print(f"| **{len(rounds)} rounds** | max {max(r['ratio'] for r in rounds):.8f} "
                  f"| min {min(r['left'] for r in rounds):.3g} "
                  f"| **{sum(len(r['violations']) for r in rounds)}** | {total('acknowledged'):,} | {total('rows'):,} "
                  f"| {total('retries'):,} | {total('mismatched')} | {total('capped'):,} | |")


if __name__ == "__main__":
    main()

"""What recalibrating a voucher model on the latest labelled period does to a budget plan's expected spend.

Each model is trained on the bench's time split (``promokit voucher bench``: 80/10/10 by collection time, the
demo's training settings), then recalibrated on the validation period with each method
(:meth:`VoucherModel.recalibrate`: ``isotonic``, ``platt``, ``prior-shift``; ``none`` is the raw score) and scored
on the test period: mean predicted against observed redemption, ECE (10 bins of equal count, the mean |predicted −
observed| weighted by their sessions), AUC and logloss. The budget plan gives a voucher to the test sessions in
order of p_redeem until the expected spend Σ p·cost reaches the budget (half the test period's realised spend
Σ y·cost over every session); it reports the sessions chosen and their expected against realised spend (Σ y·cost).
The cost of a redemption is the voucher's ``discount`` where the tables carry it, else 1 (AmExpert has no terms:
spend counts redemptions).

Data: AmExpert 2019 (a local copy; the script writes only metrics) and the synthetic voucher world of the demo, as
drawn (stationary) and with a prior shift: the validation and test periods keep every redeemed session and one in
``--shift`` of the others, so their base rate rises while p(x | y) stays; there the true expected spend is known
(the world's probabilities, their odds scaled by ``--shift``).

With ``--by COLUMN`` (AmExpert: ``campaign_id``, ``campaign_type``) each model is also recalibrated by that column
(:class:`~promokit.training.recalibration.GroupRecalibration`, ``--method``, on the validation period) and a table
gives, per test campaign (``campaign_id``) with at least :data:`MIN_SESSIONS` sessions, the observed rate and the
mean p_redeem and its ratio to it: raw, recalibrated overall, recalibrated by the column, and, for comparison,
recalibrated by campaign on a random half of the test period's sessions and scored on the other half (each test
campaign then has labels of its own, which the validation period does not give it: AmExpert's campaigns each fall
in one period).

Usage::

    .venv/bin/python benchmarks/voucher_recalibration.py --models lr,dnn
    .venv/bin/python benchmarks/voucher_recalibration.py --models lr --skip synthetic,shifted --by campaign_id
"""

from __future__ import annotations

import argparse
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from promokit.experiments.voucher.bench import time_split
from promokit.experiments.voucher.settings import DEMO_TRAIN
from promokit.experiments.voucher.world import DEMO_WORLD, make_world
from promokit.metrics import auc, logloss
from promokit.training.recalibration import DEFAULT_METHOD, METHODS
from promokit.voucher.amexpert import load_amexpert
from promokit.voucher.estimator import VoucherModel

DEFAULT_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "amexpert2019").resolve()
#: The budget: this share of the test period's realised spend.
BUDGET_SHARE = 0.5
BINS = 10
#: The sessions a test campaign needs to be listed in the ``--by`` table.
MIN_SESSIONS = 500
#: The column the ``--by`` table lists the test sessions by.
CAMPAIGN = "campaign_id"


def ece(y: np.ndarray, p: np.ndarray, bins: int = BINS) -> float:
    """Expected calibration error over ``bins`` bins of equal count (by p)."""
    order = np.argsort(p, kind="stable")
    return float(sum(len(b) * abs(p[b].mean() - y[b].mean()) for b in np.array_split(order, bins)) / len(p))


def plan(p: np.ndarray, cost: np.ndarray, budget: float) -> np.ndarray:
    """The sessions in order of p whose cumulative expected spend Σ p·cost stays within ``budget``."""
    order = np.argsort(-p, kind="stable")
    return order[np.cumsum(p[order] * cost[order]) <= budget]


def rows_of(name: str, y, p, cost, budget, truth=None) -> dict:
    chosen = plan(p, cost, budget)
    row = {"method": name, "mean_p": p.mean(), "observed": y.mean(), "ece": ece(y, p), "auc": auc(y, p),
           "logloss": logloss(y, p), "chosen": len(chosen), "expected": float((p * cost)[chosen].sum()),
           "realised": float((y * cost)[chosen].sum())}
    if truth is not None:
        row["true_expected"] = float((truth * cost)[chosen].sum())
    return row


def by_group(model, tables, split, by: str, method: str, seed: int = 0) -> None:
    """Print, per test campaign with at least :data:`MIN_SESSIONS` sessions, the observed rate and the mean
    p_redeem (with its ratio to it) raw, recalibrated overall and by ``by`` on the validation period, and by
    campaign on a random half of the test sessions (scored on the other half; module docstring)."""
    test = split.test
    campaign, y = tables.sessions[CAMPAIGN].to_numpy()[test], tables.sessions["redeemed"].to_numpy()[test]
    model.recalibrate(tables, method=method, rows=split.valid)
    predicted = model.predict(tables, rows=test)
    columns = {"raw": predicted["p_redeem_raw"].to_numpy(), "overall": predicted["p_redeem"].to_numpy()}
    model.recalibrate(tables, method=method, rows=split.valid, by=by)
    new = model.recalibration_.new_groups(tables.sessions[by].to_numpy()[test])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counted below
        columns[f"by {by}"] = model.predict(tables, rows=test)["p_redeem"].to_numpy()
    half = np.random.default_rng(seed).random(len(test)) < 0.5
    model.recalibrate(tables, method=method, rows=test[half], by=CAMPAIGN)
    own = np.full(len(test), np.nan)
    own[~half] = model.predict(tables, rows=test[~half])["p_redeem"].to_numpy()
    print(f"  {model.model}, {method} by {by} on the validation period: {len(new)} of "
          f"{len(np.unique(tables.sessions[by].to_numpy()[test]))} test {by} values ({sum(new.values()):,} sessions) "
          "unseen there get the overall map")
    print(f"  {CAMPAIGN:>11} {'sessions':>8} {'observed':>8} " + " ".join(f"{name:>17}" for name in columns)
          + f" {'own half':>17}")
    for key in sorted(np.unique(campaign), key=lambda k: -(campaign == k).sum()):
        rows = campaign == key
        if rows.sum() < MIN_SESSIONS:
            continue
        observed, other = y[rows].mean(), y[rows & ~half].mean()
        cells = [_mean_ratio(p[rows].mean(), observed) for p in columns.values()]
        print(f"  {key!s:>11} {rows.sum():8,d} {observed:8.4f} " + " ".join(cells)
              + f" {_mean_ratio(own[rows & ~half].mean(), other)}", flush=True)


def _mean_ratio(mean: float, observed: float) -> str:
    return f"{mean:8.4f} ({mean / observed if observed else float('nan'):6.2f})"


def run(label: str, tables, split, models: list[str], truth=None, by: str | None = None,
        method: str = DEFAULT_METHOD) -> None:
    sessions = tables.sessions
    test = split.test
    y = sessions["redeemed"].to_numpy(dtype=np.float64)[test]
    cost = sessions["discount"].to_numpy(dtype=np.float64)[test] if "discount" in sessions else np.ones(len(test))
    budget = BUDGET_SHARE * float((y * cost).sum())
    redeemed = sessions["redeemed"].to_numpy()
    rates = " / ".join(f"{redeemed[part].mean():.4f}" for part in (split.train, split.valid, test))
    print(f"\n{label}: {len(split.train):,} / {len(split.valid):,} / {len(test):,} sessions; redemption rate {rates}; "
          f"budget {budget:,.0f} (half the test period's realised spend)")
    print(f"  {'model':>5} {'method':>11} {'mean p':>7} {'obs':>7} {'ECE':>7} {'AUC':>7} {'logloss':>8} {'chosen':>7} "
          f"{'expected':>9} {'realised':>9} {'real/exp':>8}" + (f" {'true exp':>9}" if truth is not None else ""))
    for name in models:
        started = time.perf_counter()
        model = VoucherModel(name, None, replace(DEMO_TRAIN, progress=False), test_fraction=0)
        model.fit(tables, rows=split.train, validation=split.valid)
        for each in ("none", *METHODS):
            if each != "none":
                model.recalibrate(tables, method=each, rows=split.valid)
            p = model.predict(tables, rows=test)["p_redeem"].to_numpy()
            r = rows_of(each, y, p, cost, budget, None if truth is None else truth[test])
            line = (f"  {name:>5} {each:>11} {r['mean_p']:7.4f} {r['observed']:7.4f} {r['ece']:7.4f} {r['auc']:7.4f} "
                    f"{r['logloss']:8.4f} {r['chosen']:7d} {r['expected']:9,.0f} {r['realised']:9,.0f} "
                    f"{r['realised'] / r['expected'] if r['expected'] else float('nan'):8.2f}")
            print(line + (f" {r['true_expected']:9,.0f}" if truth is not None else ""), flush=True)
        if by is not None and {by, CAMPAIGN} <= set(sessions.columns):
            by_group(model, tables, split, by, method)
        print(f"  ({name}: {time.perf_counter() - started:.0f} s)", flush=True)


def shifted(split, redeemed: np.ndarray, keep_one_in: int, seed: int = 0):
    """The split with the validation and test periods keeping every redeemed session and one in ``keep_one_in`` of
    the others (a pure prior shift: their odds of redemption rise ``keep_one_in``-fold)."""
    rng = np.random.default_rng(seed)

    def thin(rows):
        return np.sort(rows[(redeemed[rows] == 1) | (rng.random(len(rows)) < 1 / keep_one_in)])

    return replace(split, valid=thin(split.valid), test=thin(split.test))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--models", default="lr,dnn")
    p.add_argument("--shift", type=int, default=3, help="The synthetic shift: keep one in this many non-redeemed.")
    p.add_argument("--skip", default="", help="Comma-separated data to skip: amexpert, synthetic, shifted.")
    p.add_argument("--by", help="Also recalibrate by this sessions column and list the test campaigns (AmExpert).")
    p.add_argument("--method", default=DEFAULT_METHOD, choices=METHODS, help="The --by recalibration's method.")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    models = [m.strip() for m in args.models.split(",")]
    skip = set(args.skip.split(","))
    if "amexpert" not in skip:
        tables, _ = load_amexpert(args.data_dir)
        run("AmExpert 2019 (time split)", tables, time_split(tables), models, by=args.by, method=args.method)
    world = make_world(**DEMO_WORLD, seed=0)
    split = time_split(world.tables)
    if "synthetic" not in skip:
        run("synthetic voucher world (stationary)", world.tables, split, models, world.truth)
    if "shifted" not in skip:
        odds = world.truth / (1 - world.truth) * args.shift
        run(f"synthetic voucher world, later periods keep 1 in {args.shift} non-redeemed", world.tables,
            shifted(split, world.tables.sessions["redeemed"].to_numpy(), args.shift), models, odds / (1 + odds))
    print(f"\ntotal {(time.perf_counter() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The logistic floors' L2 search against the later rows: the strength it keeps, the best one in hindsight, and two
other rules: a step kept only on a significant gain, and the log-likelihood as the score.

For every task (KuaiRand-Pure's click and follow, AmExpert's redemption, the synthetic conversion and voucher
worlds, seeds 0–2) and every strength of ``L2_GRID``: the validation AUC of ``lr`` fitted at that strength with its
defaults' validation rows held out, and the later AUC of ``lr`` refit on every training row at that strength (the
later rows as in ``floor_speed.py``; the conversion world's last 10,000 of 100,000 impressions). Then two rules walk
the same path:

- ``lr`` as it is (:func:`~promokit.training.logistic.search_l2`): from the grid's strength nearest the prior, a step
  is kept when the validation AUC rises;
- one standard error: a step is kept when the rise exceeds one standard error of the paired difference of the two
  AUCs on the same validation rows (DeLong, DeLong & Clarke-Pearson, Biometrics 1988);
- log-likelihood: ``search_l2``'s walk on the validation rows' mean log-likelihood instead of their AUC.

Printed per task: the validation positives, each strength's validation and later AUC, each rule's choice with its
later AUC and solves, and the hindsight best.

Usage::

    .venv/bin/python benchmarks/l2_search.py [--sets kuairand,amexpert,conversion-world,voucher-world]
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from promokit.data.split import holdout_split
from promokit.metrics import auc
from promokit.training.logistic import L2_GRID, prior_l2, search_l2

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
QUIET = {"progress": False}
SEEDS = (0, 1, 2)


def conversion_paths(table: pd.DataFrame, later: pd.DataFrame, spec) -> dict[str, dict]:
    """The click's and the follow's path on ``table``, scored on ``later``."""
    from promokit.conversion.estimator import ConversionModel

    _, rows = holdout_split(table, 0.1, f"time:{spec.time_key}" if spec.time_key else "random", 0)
    valid = table.iloc[rows]
    clicked, later_clicked = (frame["click"].to_numpy() == 1 for frame in (valid, later))
    paths = {"click": _path(valid["click"], later["click"], len(table) - len(valid)),
             "follow": _path(valid["purchase"][clicked], later["purchase"][later_clicked],
                             int(table["click"].sum() - valid["click"].sum()))}
    for l2 in L2_GRID:
        params = {"l2_ctr": l2, "l2_cvr": l2}
        selected = ConversionModel("lr", spec=spec, params=params, train=QUIET, test_fraction=0.0, refit=False)
        refit = ConversionModel("lr", spec=spec, params=params, train=QUIET, test_fraction=0.0)
        scored, scored_later = selected.fit(table).predict(valid), refit.fit(table).predict(later)
        for task, column, mine, theirs in (("click", "p_ctr", slice(None), slice(None)),
                                           ("follow", "p_cvr", clicked, later_clicked)):
            paths[task]["valid"].append(scored[column].to_numpy()[mine])
            paths[task]["later"].append(scored_later[column].to_numpy()[theirs])
    return paths


def voucher_path(tables, test: np.ndarray) -> dict:
    """The redemption's path on every session but ``test``, scored on those."""
    from promokit.voucher.estimator import VoucherModel

    train = np.setdiff1d(np.arange(len(tables.sessions)), test)
    valid = VoucherModel("lr", test_fraction=0.0).split_rows(tables, rows=train)[1]
    redeemed = tables.sessions["redeemed"].to_numpy()
    path = _path(redeemed[valid], redeemed[test], len(train) - len(valid))
    for l2 in L2_GRID:
        fitted = [VoucherModel("lr", params={"l2": l2}, train=QUIET, test_fraction=0.0, refit=refit)
                  .fit(tables, rows=train) for refit in (False, True)]
        path["valid"].append(fitted[0].predict(tables, rows=valid)["p_redeem"].to_numpy())
        path["later"].append(fitted[1].predict(tables, rows=test)["p_redeem"].to_numpy())
    return path


def _path(valid_labels, later_labels, rows: int) -> dict:
    return {"y_valid": np.asarray(valid_labels), "y_later": np.asarray(later_labels), "rows": rows,
            "valid": [], "later": []}


def delong(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """AUC(a) − AUC(b) on the same rows and its standard error, from each model's placement values."""
    def placements(scores):
        positive = labels == 1
        ranks = rankdata(scores)
        above = (ranks[positive] - rankdata(scores[positive])) / (~positive).sum()
        below = 1 - (ranks[~positive] - rankdata(scores[~positive])) / positive.sum()
        return above, below

    (a_pos, a_neg), (b_pos, b_neg) = placements(a), placements(b)
    variance = np.var(a_pos - b_pos, ddof=1) / len(a_pos) + np.var(a_neg - b_neg, ddof=1) / len(a_neg)
    return float(a_pos.mean() - b_pos.mean()), float(np.sqrt(variance))


def one_se_search(path: dict) -> tuple[int, int]:
    """(the grid index kept, solves) of ``search_l2``'s walk with a step kept only when its AUC rises by more than
    one standard error of the paired difference."""
    grid = sorted(L2_GRID, reverse=True)
    first = int(np.argmin(np.abs(np.log(grid) - np.log(prior_l2(path["rows"])))))
    best, solves = first, 1
    for direction in (-1, 1):
        index = best + direction
        while 0 <= index < len(grid):
            solves += 1
            gain, error = delong(path["y_valid"], path["valid"][index], path["valid"][best])
            if not gain > error:
                break
            best, index = index, index + direction
        if best != first:
            break
    return best, solves


def lr_search(path: dict, metric=auc) -> tuple[int, int]:
    """(the grid index kept, solves) of ``search_l2`` itself on the path's validation ``metric`` (higher better)."""
    grid = sorted(L2_GRID, reverse=True)
    scores = [metric(path["y_valid"], s) for s in path["valid"]]
    _, records = search_l2(lambda l2, start: (grid.index(l2), scores[grid.index(l2)]), path["rows"], grid=grid)
    return grid.index(next(r["l2"] for r in records if r["chosen"])), len(records)


def loglik(labels: np.ndarray, p: np.ndarray) -> float:
    """The mean log-likelihood of probabilities ``p``."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(np.mean(labels * np.log(p) + (1 - labels) * np.log1p(-p)))


def report(name: str, path: dict) -> dict:
    grid = sorted(L2_GRID, reverse=True)
    valid = [auc(path["y_valid"], s) for s in path["valid"]]
    later = [auc(path["y_later"], s) for s in path["later"]]
    print(f"\n{name}: {int(path['y_valid'].sum())} validation positives of {len(path['y_valid'])}, "
          f"{int(path['y_later'].sum())} later of {len(path['y_later'])}")
    print(pd.DataFrame({"l2": [f"{v:.0e}" for v in grid], "valid AUC": valid, "later AUC": later}).to_string(
        index=False, float_format=lambda v: f"{v:.4f}"))
    (kept, solves), (one_se, one_se_solves) = lr_search(path), one_se_search(path)
    by_loglik = lr_search(path, loglik)[0]
    best = int(np.argmax(later))
    return {"task": name, "lr keeps": f"{grid[kept]:.0e}", "later AUC": later[kept], "solves": solves,
            "one SE keeps": f"{grid[one_se]:.0e}", "one SE later AUC": later[one_se], "one SE solves": one_se_solves,
            "one SE − lr": f"{later[one_se] - later[kept]:+.4f}".replace("-", "−"),
            "log-lik. keeps": f"{grid[by_loglik]:.0e}", "log-lik. later AUC": later[by_loglik],
            "hindsight": f"{grid[best]:.0e}", "hindsight AUC": later[best]}


def paths(which: str) -> dict[str, dict]:
    if which == "kuairand":
        from promokit.conversion.kuairand import kuairand_spec, load_kuairand

        table, _ = load_kuairand(DATA / "kuairand_pure")
        later = (table["date"] == table["date"].max()).to_numpy()
        return {f"KuaiRand {task}": path
                for task, path in conversion_paths(table[~later], table[later], kuairand_spec(table)).items()}
    if which == "amexpert":
        from promokit.voucher.amexpert import load_amexpert
        from promokit.voucher.estimator import VoucherModel

        tables, _ = load_amexpert(DATA / "amexpert2019")
        return {"AmExpert redeemed": voucher_path(tables, VoucherModel("lr").split_rows(tables, validation=0.0)[2])}
    if which == "conversion-world":
        from promokit.data.spec import FeatureSpec
        from promokit.experiments.conversion.world import make_world

        found = {}
        for seed in SEEDS:
            world = make_world(n_impressions=100_000, seed=seed)
            spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id")
            for task, path in conversion_paths(world.table.iloc[:90_000], world.table.iloc[90_000:], spec).items():
                found[f"conversion world {seed} {task}"] = path
        return found
    from promokit.experiments.voucher.world import make_world
    from promokit.voucher.estimator import VoucherModel

    found = {}
    for seed in SEEDS:
        tables = make_world(seed=seed).tables
        found[f"voucher world {seed}"] = voucher_path(tables, VoucherModel("lr").split_rows(tables, validation=0.0)[2])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="kuairand,amexpert,conversion-world,voucher-world")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}")
    rows = [report(name, path) for which in args.sets.split(",") for name, path in paths(which).items()]
    print("\n" + pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

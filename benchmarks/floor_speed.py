"""The linear floor ``lr`` against scikit-learn's ``LogisticRegression`` on the same one-hot design, in the same run:
fit wall time and AUC on later rows.

Both learn from the same rows and are scored on the same later rows (conversion: KuaiRand-Pure's shared days, fitted
on 04-25 … 04-29 and scored on 04-30, the click over every impression and the follow over the clicked ones, one
regression each; voucher: AmExpert 2019, fitted on every session before the latest 10 % by collection time and
scored on those; incentive: the synthetic incentive world's default size, 15 % of its customers drawn at random
left unlabelled in the fit and scored, AUC_c of the redemption at the offered value). ``lr`` is timed whole —
encoding, the leak guard, the L2 search on its validation rows, the solves — with every default (the refit on every
row at the chosen strength) and as selected (``refit=False``). (``solves only``: the selected fit's L2 search alone,
its solves' seconds summed.) scikit-learn is given the design ``lr`` built
(:func:`promokit.training.logistic.design_matrix`, in float64 as a one-hot encoder gives it; for the incentive
customers, the floor's customer design beside the offered value one-hot, dense where the floor's is) and timed on its
fit alone, on one BLAS thread as ``lr`` runs (with the default threads, a busy 2-core machine made its fits ten times
slower):
``LogisticRegression()`` with its defaults (lbfgs, C = 1, 100 iterations, which stop short of the optimum on these
designs) and converged (``max_iter=1000``). The incentive ``lr`` also solves the merchants' head, which scikit-learn
has no counterpart for; it is in ``lr``'s seconds. Every fit runs once untimed, then once in each of ``--repeats``
rounds (a change of the machine's load falls on all of them alike); the medians are printed. Beside each ``lr`` fit's
later AUC, its difference from scikit-learn's default fit on the same later rows, with a paired bootstrap interval
(95 %, 1,000 resamples of the rows: :func:`~promokit.metrics.bootstrap.paired_bootstrap`).

``lr``'s defaults search the L2 strength on validation rows and refit on every row at the one chosen; scikit-learn's
tool for that is ``LogisticRegressionCV`` with ``refit=True``, timed too (``sklearn search + refit``): the same
strengths ``lr`` solved, validated by AUC on the same rows, the best refit on every row.

The value domain's floor (``hurdle``) is gradient-boosted trees (LightGBM), not a logistic regression: no
``LogisticRegression`` reference applies to it.

Usage::

    .venv/bin/python benchmarks/floor_speed.py [--domains conversion,voucher,incentive] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from threadpoolctl import threadpool_limits

from promokit.data.split import holdout_split
from promokit.metrics import auc
from promokit.metrics.bootstrap import paired_bootstrap
from promokit.training.logistic import design_matrix

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
QUIET = {"progress": False}


def conversion():
    """(name, fit(refit) → model, tasks(model) → [(label, X, y, X_later, y_later, lr's scores of the later rows)])."""
    from promokit.conversion.estimator import ConversionModel
    from promokit.conversion.kuairand import kuairand_spec, load_kuairand

    table, _ = load_kuairand(DATA / "kuairand_pure")
    spec = kuairand_spec(table)
    later = (table["date"] == table["date"].max()).to_numpy()
    train, test = table[~later], table[later]

    def fit(refit):
        return ConversionModel("lr", spec=spec, train=QUIET, test_fraction=0.0, refit=refit).fit(train)

    def tasks(model):
        rows = {}
        for name, part in (("train", train), ("test", test)):
            x = model.encoder_.transform(part)
            design = design_matrix(torch.from_numpy(x.categorical), torch.from_numpy(x.numeric),
                                   model.encoder_.cardinalities).astype(np.float64)
            click, purchase = part["click"].to_numpy(), part["purchase"].to_numpy()
            rows[name] = {"click": (design, click), "purchase": (design[click == 1], purchase[click == 1])}
        scores = model.predict(test)
        clicked = test["click"].to_numpy() == 1
        ours = {"click": scores["p_ctr"].to_numpy(), "purchase": scores["p_cvr"].to_numpy()[clicked]}
        return [(label, *rows["train"][label], *rows["test"][label], ours[label]) for label in ("click", "purchase")]

    def searches(selected):
        valid = np.zeros(len(train), dtype=bool)
        valid[holdout_split(train, 0.1, f"time:{spec.time_key}", selected.train_config.seed)[1]] = True
        clicked = train["click"].to_numpy() == 1
        return [(valid, strengths(selected, task="ctr")), (valid[clicked], strengths(selected, task="cvr"))]

    return "conversion (KuaiRand-Pure)", fit, tasks, searches


def voucher():
    """:func:`conversion`'s triple for AmExpert 2019."""
    from promokit.voucher.amexpert import load_amexpert
    from promokit.voucher.estimator import VoucherModel

    tables, _ = load_amexpert(DATA / "amexpert2019")
    _, _, test = VoucherModel("lr").split_rows(tables, validation=0.0)
    train = np.setdiff1d(np.arange(len(tables.sessions)), test)

    def fit(refit):
        return VoucherModel("lr", train=QUIET, test_fraction=0.0, refit=refit).fit(tables, rows=train)

    def tasks(model):
        tensors = model.tensors(tables)
        fields, linear = model.net_.fields, model.net_.linear
        design = design_matrix(tensors["cat"][:, fields], tensors["num"], linear.weights.cardinalities).astype(np.float64)
        y = tensors["redeemed"].numpy()
        ours = model.predict(tables, rows=test)["p_redeem"].to_numpy()
        return [("redeemed", design[train], y[train], design[test], y[test], ours)]

    def searches(selected):
        valid = selected.split_rows(tables, rows=train)[1]
        return [(np.isin(train, valid), strengths(selected))]

    return "voucher (AmExpert 2019)", fit, tasks, searches


def incentive():
    """:func:`conversion`'s triple for the synthetic incentive world's customers (the scores: f_c at the offered
    value)."""
    import scipy.sparse as sp

    from promokit.experiments.incentive.world import make_world
    from promokit.incentive.contract import check_tables
    from promokit.incentive.estimator import IncentiveModel, labelled_rows, node_split
    from promokit.incentive.models.linear import _rows

    world = make_world()
    later = node_split(len(world.customers), len(world.merchants), 0.15, seed=0).test_customers
    known = np.setdiff1d(np.arange(len(world.customers)), later)
    blank = world.customers.copy()
    blank.loc[later, ["level", "redeemed"]] = np.nan
    tables, whole = (check_tables(c, world.merchants, world.edges) for c in (blank, world.customers))

    def fit(refit):
        return IncentiveModel("lr", train=QUIET, test_fraction=0.0, refit=refit).fit(tables)

    def tasks(model):
        def design(customers):
            x, level, y = _rows(model.net_, labelled_rows(whole, customers, np.empty(0, dtype=np.int64)), "customers")
            offered = np.eye(len(world.levels))[level]
            if sp.issparse(x):
                return sp.hstack([x, sp.csr_matrix(offered)], format="csr").astype(np.float64), y
            return np.hstack([x, offered]), y  # dense, as lr solves it

        curves = model.responses(whole).customers[later]
        ours = curves[np.arange(len(later)), whole.customer_level[later]]
        return [("redeemed", *design(known), *design(later), ours)]

    def searches(selected):
        return [(np.isin(known, selected.split_rows(tables).valid_customers), strengths(selected, part="customers"))]

    return "incentive (synthetic world)", fit, tasks, searches


DOMAINS = {"conversion": conversion, "voucher": voucher, "incentive": incentive}


#: scikit-learn's fits: its defaults, and converged
KINDS = {"sklearn default": 100, "sklearn converged": 1000}
#: the fit ``lr``'s later AUC is compared with (a paired bootstrap interval of the difference)
REFERENCE = "sklearn default"
#: scikit-learn doing what ``lr``'s defaults do: the same strengths searched on the same validation rows, the best
#: refit on every row
SEARCH = "sklearn search + refit"


def strengths(selected, **which) -> list[float]:
    """The L2 strengths ``selected``'s search solved (of the records matching ``which``, e.g. ``task="ctr"``)."""
    return [r["l2"] for r in selected.history_.epochs if all(r.get(k) == v for k, v in which.items())]


def sklearn_fit(x, y, max_iter):
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        return LogisticRegression(max_iter=max_iter).fit(x, y)


def sklearn_search(x, y, valid, l2s):
    """``LogisticRegressionCV`` over the strengths ``l2s`` (C = 1 / (n · l2) for its summed loss over the n training
    rows), validated by AUC on the rows ``valid`` alone, refit on every row at the best."""
    n = int((~valid).sum())
    fold = [(np.flatnonzero(~valid), np.flatnonzero(valid))]
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        return LogisticRegressionCV(Cs=[1.0 / (n * l2) for l2 in l2s], cv=fold, scoring="roc_auc",
                                    refit=True).fit(x, y)


def measure(fit, tasks, searches, repeats: int) -> tuple[dict[str, float], dict[tuple[str, str], float], float]:
    """The median wall seconds of each fit over ``repeats`` rounds, every fit once a round so that a change of the
    machine's load falls on all of them alike (after one untimed round); the AUC on the later rows of each fit and
    label; and the selected fit's solves, in seconds."""
    designs, searched = tasks(fit(True)), searches(fit(False))
    runs = {"lr": lambda: fit(True), "lr selected": lambda: fit(False),
            **{kind: (lambda max_iter=max_iter: [sklearn_fit(x, y, max_iter) for _, x, y, *_ in designs])
               for kind, max_iter in KINDS.items()},
            SEARCH: lambda: [sklearn_search(x, y, valid, l2s)
                             for (_, x, y, *_), (valid, l2s) in zip(designs, searched)]}
    seconds, last = {who: [] for who in runs}, {}
    for round_ in range(repeats + 1):
        for who, run in runs.items():
            began = time.perf_counter()
            last[who] = run()
            if round_:
                seconds[who].append(time.perf_counter() - began)
    later = {}  # (fit, label) → (the later rows' labels, the fit's scores of them)
    for who in ("lr", "lr selected"):
        later.update({(who, label): (y_later, ours) for label, *_, y_later, ours in tasks(last[who])})
    for kind in (*KINDS, SEARCH):
        later.update({(kind, label): (y_later, model.decision_function(x_later))
                      for (label, _, _, x_later, y_later, _), model in zip(designs, last[kind])})
    aucs = {key: auc(*scored) for key, scored in later.items()}
    for (who, label), (y_later, ours) in later.items():
        if who.startswith("lr"):  # against scikit-learn's default fit, on the same later rows
            aucs[(who, f"{label} − sklearn")] = paired_bootstrap(auc, y_later, ours, later[(REFERENCE, label)][1])
    solves = sum(r.get("seconds", 0.0) for r in last["lr selected"].history_.epochs)
    return {who: float(np.median(times)) for who, times in seconds.items()}, aucs, solves


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds; the median is reported")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}; torch threads {torch.get_num_threads()}")
    rows = []
    for domain in args.domains.split(","):
        name, fit, tasks, searches = DOMAINS[domain]()
        seconds, aucs, solves = measure(fit, tasks, searches, args.repeats)
        labels = sorted({label for _, label in aucs}, key=lambda v: (v.split(" ")[0] != "click", "−" in v))
        seconds = {"lr": seconds["lr"], "lr selected": seconds["lr selected"], "lr selected, solves only": solves,
                   **{kind: seconds[kind] for kind in (*KINDS, SEARCH)}}
        aucs.update({("lr selected, solves only", label): aucs[("lr selected", label)] for label in labels})
        for who, took in seconds.items():
            rows.append({"domain": name, "fit": who, "seconds": took,
                         **{f"× {kind}": took / seconds[kind] for kind in (*KINDS, SEARCH)},
                         **{f"{label} AUC": aucs.get((who, label), "") for label in labels}})
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4f}"), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

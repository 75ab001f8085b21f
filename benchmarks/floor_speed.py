"""The linear floor ``lr`` against scikit-learn's ``LogisticRegression`` on the same one-hot design, in the same run:
fit wall time and AUC on later rows.

Both learn from the same rows and are scored on the same later rows (conversion: KuaiRand-Pure's shared days, fitted
on 04-25 … 04-29 and scored on 04-30, the click over every impression and the follow over the clicked ones, one
regression each; voucher: AmExpert 2019, fitted on every session before the latest 10 % by collection time and
scored on those). ``lr`` is timed whole — encoding, the L2 search on its validation rows (the latest 10 %), the
solves — with every default (the refit on every row at the chosen strength) and as selected (``refit=False``).
(``solves only``: the selected fit's L2 search alone, its solves' seconds summed.) scikit-learn is given the design
``lr`` built (:func:`promokit.training.logistic.design_matrix`, in float64 as a
one-hot encoder gives it) and timed on its fit alone: ``LogisticRegression()`` with its defaults (lbfgs, C = 1, 100
iterations, which stop short of the optimum on these designs) and converged (``max_iter=1000``).

Usage::

    .venv/bin/python benchmarks/floor_speed.py [--domains conversion,voucher] [--repeats 3]
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
from sklearn.linear_model import LogisticRegression

from promokit.metrics import auc
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
            x = model.encoder.transform(part)
            design = design_matrix(torch.from_numpy(x.categorical), torch.from_numpy(x.numeric),
                                   model.encoder.cardinalities).astype(np.float64)
            click, purchase = part["click"].to_numpy(), part["purchase"].to_numpy()
            rows[name] = {"click": (design, click), "purchase": (design[click == 1], purchase[click == 1])}
        scores = model.predict(test)
        clicked = test["click"].to_numpy() == 1
        ours = {"click": scores["p_ctr"].to_numpy(), "purchase": scores["p_cvr"].to_numpy()[clicked]}
        return [(label, *rows["train"][label], *rows["test"][label], ours[label]) for label in ("click", "purchase")]

    return "conversion (KuaiRand-Pure)", fit, tasks


def voucher():
    from promokit.voucher.amexpert import load_amexpert
    from promokit.voucher.estimator import VoucherModel

    tables, _ = load_amexpert(DATA / "amexpert2019")
    _, _, test = VoucherModel("lr").split_rows(tables, validation=0.0)
    train = np.setdiff1d(np.arange(len(tables.sessions)), test)

    def fit(refit):
        return VoucherModel("lr", train=QUIET, test_fraction=0.0, refit=refit).fit(tables, rows=train)

    def tasks(model):
        tensors = model.tensors(tables)
        fields, linear = model.net.fields, model.net.linear
        design = design_matrix(tensors["cat"][:, fields], tensors["num"], linear.weights.cardinalities).astype(np.float64)
        y = tensors["redeemed"].numpy()
        ours = model.predict(tables, rows=test)["p_redeem"].to_numpy()
        return [("redeemed", design[train], y[train], design[test], y[test], ours)]

    return "voucher (AmExpert 2019)", fit, tasks


DOMAINS = {"conversion": conversion, "voucher": voucher}


def timed(fit, repeats: int):
    """The last fit and the median of ``repeats`` wall times."""
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        fitted = fit()
        seconds.append(time.perf_counter() - began)
    return fitted, float(np.median(seconds))


def sklearn_fit(x, y, max_iter):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=ConvergenceWarning)
        return LogisticRegression(max_iter=max_iter).fit(x, y)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--repeats", type=int, default=3, help="timings per fit; the median is reported")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}; torch threads {torch.get_num_threads()}")
    rows = []
    for domain in args.domains.split(","):
        name, fit, tasks = DOMAINS[domain]()
        models, seconds = {}, {}
        for refit in (True, False):
            models[refit], seconds[refit] = timed(lambda: fit(refit), args.repeats)
        kinds = {"sklearn default": 100, "sklearn converged": 1000}
        fitted = {kind: 0.0 for kind in kinds}
        aucs = {}
        for refit in (True, False):
            for label, x, y, x_later, y_later, ours in tasks(models[refit]):
                aucs[("lr" if refit else "lr selected", label)] = auc(y_later, ours)
                if not refit:
                    continue
                for kind, max_iter in kinds.items():
                    model, took = timed(lambda: sklearn_fit(x, y, max_iter), args.repeats)
                    fitted[kind] += took
                    aucs[(kind, label)] = auc(y_later, model.decision_function(x_later))
        labels = sorted({label for _, label in aucs}, key=lambda v: v != "click")
        solves = sum(r.get("seconds", 0.0) for r in models[False].report.history.epochs)
        aucs.update({("lr selected, solves only", label): aucs[("lr selected", label)] for label in labels})
        for who, s in (("lr", seconds[True]), ("lr selected", seconds[False]), ("lr selected, solves only", solves),
                       *fitted.items()):
            rows.append({"domain": name, "fit": who, "seconds": s,
                         **{f"× {kind}": s / fitted[kind] for kind in kinds},
                         **{f"{label} AUC": aucs[(who, label)] for label in labels}})
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4f}"), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

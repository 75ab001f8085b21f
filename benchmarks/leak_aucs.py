"""What the label-leak guard sees in features known before the outcome: every feature's univariate AUC against each
label, as ``train`` judges it before training (:func:`promokit.data.leakage.find_leaks`, on the rows and labels the
domain's estimator gives it), on the shared real sets and on the synthetic worlds, the highest first. A feature above
``LEAK_AUC`` (0.95) is warned of as a leak, one above ``SUSPECT_AUC`` (0.85) listed to be checked.

Usage::

    .venv/bin/python benchmarks/leak_aucs.py                          # every set below: a few minutes
    .venv/bin/python benchmarks/leak_aucs.py --sets voucher-world,value-world --top 5

Each estimator's ``fit`` runs until it has judged its features, and stops there: nothing is trained.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
QUIET = {"progress": False}


class Judged(Exception):
    """Raised by the recorder once the estimator has given its features to the guard."""


def kuairand():
    from promokit.conversion.estimator import ConversionModel
    from promokit.conversion.kuairand import kuairand_spec, load_kuairand

    table, _ = load_kuairand(DATA / "kuairand_pure")
    return "promokit.conversion.estimator", ConversionModel("lr", spec=kuairand_spec(table), train=QUIET), table


def conversion_world():
    from promokit.conversion.estimator import ConversionModel
    from promokit.experiments.conversion.world import make_world

    return "promokit.conversion.estimator", ConversionModel("lr", train=QUIET), make_world(seed=0).table


def amexpert():
    from promokit.voucher.amexpert import load_amexpert
    from promokit.voucher.estimator import VoucherModel

    tables, _ = load_amexpert(DATA / "amexpert2019")
    return "promokit.voucher.estimator", VoucherModel("lr", train=QUIET), tables


def voucher_world():
    from promokit.experiments.voucher.world import make_world
    from promokit.voucher.estimator import VoucherModel

    return "promokit.voucher.estimator", VoucherModel("lr", train=QUIET), make_world(seed=0).tables


def cdnow():
    from promokit.value.cdnow import cdnow_tables, read_cdnow
    from promokit.value.estimator import ValueModel

    return "promokit.value.leaks", ValueModel("hurdle", split="random"), cdnow_tables(read_cdnow(DATA / "cdnow"))


def value_world():
    from promokit.experiments.value.world import make_world
    from promokit.value.estimator import ValueModel

    world = make_world(seed=0)
    tables = {name: getattr(world, name) for name in ("deliveries", "users", "funds", "behaviors", "consumption")}
    return "promokit.value.leaks", ValueModel("hurdle"), tables


SETS = {"kuairand": kuairand, "conversion-world": conversion_world, "amexpert": amexpert,
        "voucher-world": voucher_world, "cdnow": cdnow, "value-world": value_world}


def judged_features(module_name: str, model, data) -> list:
    """Every feature's AUC against every label, as the estimator's guard judged them (``fit`` stopped there)."""
    import importlib

    from promokit.data import leakage

    module = importlib.import_module(module_name)
    found = []

    def record(frame, categorical, numeric, labels, allow=(), threshold=None, suspect=None):
        found.extend(leakage.find_leaks(frame, categorical, numeric, labels, allow, threshold=1.0, suspect=-1.0))
        raise Judged

    original = module.find_leaks
    module.find_leaks = record
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(data)
    except Judged:
        pass
    finally:
        module.find_leaks = original
    if not found:
        raise SystemExit(f"{module_name}: the estimator judged no feature")
    return sorted(found, key=lambda leak: -leak.auc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--top", type=int, default=3, help="features shown per label")
    parser.add_argument("--json", type=Path, help="write every feature's AUC here")
    args = parser.parse_args()
    everything = {}
    for name in args.sets.split(","):
        started = time.perf_counter()
        module, model, data = SETS[name]()
        leaks = judged_features(module, model, data)
        everything[name] = [{"feature": x.feature, "label": x.label, "auc": x.auc} for x in leaks]
        print(f"{name} ({time.perf_counter() - started:.0f} s)")
        for label in dict.fromkeys(x.label for x in leaks):
            best = [x for x in leaks if x.label == label][: args.top]
            print(f"  {label}: " + ", ".join(f"{x.feature} {x.auc:.3f}" for x in best))
    if args.json:
        args.json.write_text(json.dumps(everything, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

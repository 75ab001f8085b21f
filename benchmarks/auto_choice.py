"""What ``model="auto"`` chooses on the shared real sets: every candidate's validation score, the model kept, its
held-out metric scored before the refit on every row (``held_out_evaluation``), and the wall time of the whole fit
(every candidate, then the refit).

Usage::

    .venv/bin/python benchmarks/auto_choice.py [--sets kuairand,amexpert,cdnow] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
QUIET = {"progress": False}


def kuairand():
    from promokit.conversion.estimator import ConversionModel
    from promokit.conversion.kuairand import kuairand_spec, load_kuairand

    table, _ = load_kuairand(DATA / "kuairand_pure")
    return ConversionModel("auto", spec=kuairand_spec(table), train=QUIET), table


def amexpert():
    from promokit.voucher.amexpert import load_amexpert
    from promokit.voucher.estimator import VoucherModel

    tables, _ = load_amexpert(DATA / "amexpert2019")
    return VoucherModel("auto", train=QUIET), tables


def cdnow():
    from promokit.value.cdnow import cdnow_tables, read_cdnow
    from promokit.value.estimator import ValueModel

    return ValueModel("auto", train=QUIET, split="random"), cdnow_tables(read_cdnow(DATA / "cdnow"))


SETS = {"kuairand": kuairand, "amexpert": amexpert, "cdnow": cdnow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name in args.sets.split(","):
        model, data = SETS[name]()
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(data)
        seconds = time.perf_counter() - started
        record = model.holdout_["auto"]
        held = model.held_out_evaluation(data)
        row = {"set": name, "chosen": record["chosen"], "metric": record["metric"], "scores": record["scores"],
               "passed_over": record["passed_over"], "held_out": None if held is None else held[record["metric"]],
               "seconds": round(seconds, 1)}
        rows.append(row)
        scores = ", ".join(f"{k} {v:.4f}" for k, v in record["scores"].items())
        shown = "—" if row["held_out"] is None else f"{row['held_out']:.4f}"
        print(f"| {name} | {record['metric']} | {scores} | **{record['chosen']}** | {shown} | {seconds:.0f} |",
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

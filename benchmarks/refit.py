"""What refitting on every row after selection does on later data: each model fitted with every default (``refit``
on), with ``refit=False`` (the selected model, which never learnt from its validation rows nor its test hold-out)
and with the hold-outs off (``test_fraction=0``, no refit), then scored on later rows none of them saw.

- conversion: KuaiRand-Pure's shared days, the purchase ``--purchase`` (``is_follow``: 25 on the test day, so its
  AUCs move by ±0.05 with the sample; ``is_like``: 280); the models fit on 04-25 … 04-29 and are scored on 04-30
  (CTR AUC over every impression, CVR AUC over the clicked ones, CTCVR AUC);
- voucher: AmExpert 2019; the models fit on every session before the latest 10 % by collection time and are scored
  on those (AUC).

Usage::

    .venv/bin/python benchmarks/refit.py [--domains conversion,voucher] [--models lr,gbdt,esmm] [--seeds 0,1]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.metrics import auc

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
CONFIGS = {"defaults (refit)": {}, "refit=False": {"refit": False},
           "hold-outs off": {"refit": False, "test_fraction": 0.0}}
SHALLOW = ("lr", "gbdt")


def conversion(models, seeds, purchase):
    from promokit.conversion.estimator import ConversionModel
    from promokit.conversion.kuairand import kuairand_spec, load_kuairand

    from promokit.conversion.kuairand import DACTION_BEHAVIOURS

    daction = tuple(b for b in DACTION_BEHAVIOURS if b != purchase)  # the purchase is not also a DAction
    table, _ = load_kuairand(DATA / "kuairand_pure", purchase=purchase, daction=daction)
    spec = kuairand_spec(table)
    later = table["date"] == table["date"].max()
    train, test = table[~later].reset_index(drop=True), table[later]
    click = test["click"].to_numpy() == 1
    for model in models:
        for seed in seeds if model not in SHALLOW else seeds[:1]:
            for config, settings in CONFIGS.items():
                began = time.perf_counter()
                fitted = ConversionModel(model, spec=spec, train={"progress": False, "seed": seed},
                                         **settings).fit(train)
                seconds = time.perf_counter() - began
                p = fitted.predict(test)
                yield {"domain": "conversion", "model": model, "seed": seed, "config": config, "fit s": seconds,
                       "ctr_auc": auc(test["click"], p["p_ctr"]),
                       "cvr_auc": auc(test["purchase"][click], p["p_cvr"][click]),
                       "ctcvr_auc": auc(test["purchase"], p["p_ctcvr"])}


def voucher(models, seeds, purchase):
    from promokit.voucher.amexpert import load_amexpert
    from promokit.voucher.estimator import VoucherModel

    tables, _ = load_amexpert(DATA / "amexpert2019")
    _, _, test = VoucherModel("lr").split_rows(tables, validation=0.0)
    rows = np.setdiff1d(np.arange(len(tables.sessions)), test)
    y = tables.sessions["redeemed"].to_numpy()[test]
    for model in models:
        for seed in seeds if model not in SHALLOW else seeds[:1]:
            for config, settings in CONFIGS.items():
                began = time.perf_counter()
                fitted = VoucherModel(model, train={"progress": False, "seed": seed}, **settings).fit(tables, rows=rows)
                seconds = time.perf_counter() - began
                yield {"domain": "voucher", "model": model, "seed": seed, "config": config, "fit s": seconds,
                       "auc": auc(y, fitted.predict(tables, rows=test)["p_redeem"])}


DOMAINS = {"conversion": (conversion, "lr,gbdt,esmm,esm2"), "voucher": (voucher, "lr,gbdt,dnn")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--models", default=None, help="comma-separated; default each domain's lr, gbdt and networks")
    parser.add_argument("--seeds", default="0,1", help="seeds of the networks (lr and gbdt: the first)")
    parser.add_argument("--purchase", default="is_follow", help="KuaiRand's purchase behaviour (is_follow, is_like)")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as a Parquet file")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f}")
    rows = []
    try:
        for name in args.domains.split(","):
            run, default = DOMAINS[name]
            for row in run((args.models or default).split(","), seeds, args.purchase):
                rows.append(row)
                print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()),
                      flush=True)
    except KeyboardInterrupt:
        print("interrupted: the rows finished so far")
    frame = pd.DataFrame(rows)
    if frame.empty:
        return 1
    metrics = [c for c in ("ctr_auc", "cvr_auc", "ctcvr_auc", "auc", "fit s") if c in frame]
    summary = frame.groupby(["domain", "model", "config"], sort=False)[metrics].agg(["mean", "std"])
    print(summary.to_string(float_format=lambda v: f"{v:.4f}"))
    if args.out:
        frame.to_parquet(args.out)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

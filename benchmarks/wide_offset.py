"""The wide term of the conversion networks, ``offset`` (the default: the solved floor as a fixed offset of each
logit) against ``none``, on the synthetic world whose truth has user × category tastes the floor cannot hold, and on
KuaiRand-Pure's shared days.

- ``synthetic``: the conversion world (2,000 users, 800 items, ``--impressions``), 80/10/10 random split; each model
  early-stopped on the validation rows and scored as selected (``refit=False``) on the validation and the test rows;
- ``kuairand``: purchase = ``--purchase``; fitted with every default (the latest 10 % validates, then the refit)
  on 04-25 … 04-29 and scored on 04-30.

Usage::

    .venv/bin/python benchmarks/wide_offset.py --data synthetic --seeds 0,1
    .venv/bin/python benchmarks/wide_offset.py --data kuairand --purchase is_like
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

from promokit.conversion.estimator import ConversionModel
from promokit.metrics import auc

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()


def synthetic(impressions: int):
    """(train, validation or None, test, spec, the estimators' own settings)."""
    from promokit.experiments.conversion.bench import world_split
    from promokit.experiments.conversion.world import make_world

    split, _, spec = world_split(make_world(n_impressions=impressions, seed=0), 0)
    return split.train, split.valid, split.test, spec, {"test_fraction": 0.0, "refit": False}


def kuairand(purchase: str):
    from promokit.conversion.kuairand import DACTION_BEHAVIOURS, kuairand_spec, load_kuairand

    daction = tuple(b for b in DACTION_BEHAVIOURS if b != purchase)
    table, _ = load_kuairand(DATA / "kuairand_pure", purchase=purchase, daction=daction)
    later = table["date"] == table["date"].max()
    return table[~later].reset_index(drop=True), None, table[later], kuairand_spec(table), {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", choices=("synthetic", "kuairand"), default="synthetic")
    parser.add_argument("--impressions", type=int, default=100_000)
    parser.add_argument("--purchase", default="is_like")
    parser.add_argument("--models", default="lr,esmm,esm2")
    parser.add_argument("--seeds", default="0")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"load average {os.getloadavg()[0]:.1f}")
    train, valid, test, spec, settings = (synthetic(args.impressions) if args.data == "synthetic" else
                                          kuairand(args.purchase))
    clicked = test["click"].to_numpy() == 1
    for name in args.models.split(","):
        for wide in ("offset", "none") if name != "lr" else (None,):
            for seed in [int(s) for s in args.seeds.split(",")][: 1 if name == "lr" else None]:
                began = time.perf_counter()
                model = ConversionModel(name, None if wide is None else {"wide": wide},
                                        {"progress": False, "seed": seed}, spec, **settings)
                model.fit(train, **({} if valid is None else {"validation": valid}))
                p = model.predict(test)
                scored = "" if valid is None else (f"validation CTCVR AUC "
                                                   f"{model.evaluate(valid)['ctcvr_auc']:.4f}, ")
                print(f"{name} wide {wide or '-'} seed {seed}: {scored}"
                      f"CTCVR AUC {auc(test['purchase'], p['p_ctcvr']):.4f}, "
                      f"CVR AUC {auc(test['purchase'][clicked], p['p_cvr'][clicked]):.4f}, "
                      f"CTR AUC {auc(test['click'], p['p_ctr']):.4f} ({time.perf_counter() - began:.0f} s)",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``pk.compare`` on the real sets and on the synthetic worlds: each domain's floor, LightGBM and paper models on one
split with the same training budget (each domain's default epochs), one leaderboard per set with paired bootstrap
intervals against the floor.

Sets (``--sets``, all by default):

- ``kuairand``: KuaiRand-Pure's log, purchase = like (``load_kuairand``), its spec (time key ``date``: the
  latest day is held out, the day before validates); lr, gbdt, esmm, esm2;
- ``amexpert``: AmExpert 2019 (``load_amexpert``), the latest sessions held out; lr, gbdt, din, dmbgn;
- ``cdnow``: CDNOW as value tables (``cdnow_tables``), customers held out at random (20 %, 25 % of the rest
  validates, as ``value_cdnow.py``); hurdle, esdpm-ncg, mtl-ziln and esdpm (skipped: CDNOW has no consumption
  graph);
- ``conversion-world``, ``voucher-world``, ``incentive-world``, ``value-world``: the synthetic worlds
  (``experiments/<domain>/world.py``) at the sizes of :data:`WORLDS`.

Usage::

    .venv/bin/python benchmarks/compare_real.py                          # every set, seed 0
    .venv/bin/python benchmarks/compare_real.py --sets cdnow --seeds 0,1,2 --out runs/compare
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import promokit as pk
from promokit.report import markdown_table

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
#: The synthetic worlds' sizes: large enough to separate the models, small enough for a loaded 2-core machine.
WORLDS = {"conversion": {"n_users": 2000, "n_items": 800, "n_impressions": 100_000},
          "voucher": {"n_users": 3000, "n_vouchers": 120, "n_items": 1000, "n_sessions": 20_000},
          "incentive": {"n_customers": 5000, "n_merchants": 500},
          "value": {"n_users": 5000, "n_funds": 8}}


def kuairand(data: Path):
    from promokit.conversion.kuairand import DACTION_BEHAVIOURS, kuairand_spec, load_kuairand

    table, _ = load_kuairand(data / "kuairand_pure", purchase="is_like",
                             daction=tuple(b for b in DACTION_BEHAVIOURS if b != "is_like"))
    return table, {"spec": kuairand_spec(table)}, None


def amexpert(data: Path):
    from promokit.voucher.amexpert import load_amexpert

    return load_amexpert(data / "amexpert2019")[0], {}, None


def cdnow(data: Path):
    from promokit.value.cdnow import cdnow_tables, read_cdnow

    return cdnow_tables(read_cdnow(data / "cdnow")), {"split": "random", "test_fraction": 0.2}, 0.25


def world(domain: str):
    def make(data: Path):
        from importlib import import_module

        built = import_module(f"promokit.experiments.{domain}.world").make_world(**WORLDS[domain], seed=0)
        if domain == "conversion":
            from promokit.data import FeatureSpec

            spec = FeatureSpec(categorical=built.categorical, numeric=built.numeric, group_key="user_id")
            return built.table, {"spec": spec}, None
        if domain == "voucher":
            return built.tables, {}, None
        if domain == "incentive":
            return {"customers": built.customers, "merchants": built.merchants, "edges": built.edges}, {}, None
        return ({"deliveries": built.deliveries, "users": built.users, "funds": built.funds,
                 "behaviors": built.behaviors, "consumption": built.consumption}, {}, None)

    return make


#: set → (domain, models, how its data are made)
SETS = {
    "kuairand": ("conversion", ["lr", "gbdt", "esmm", "esm2"], kuairand),
    "amexpert": ("voucher", ["lr", "gbdt", "din", "dmbgn"], amexpert),
    "cdnow": ("value", ["hurdle", "esdpm-ncg", "mtl-ziln", "esdpm"], cdnow),
    "conversion-world": ("conversion", ["lr", "gbdt", "esmm", "esm2"], world("conversion")),
    "voucher-world": ("voucher", ["lr", "gbdt", "din", "dmbgn"], world("voucher")),
    "incentive-world": ("incentive", ["lr", "dnn", "gnn-hazard"], world("incentive")),
    "value-world": ("value", ["hurdle", "esdpm-ncg", "mtl-ziln", "esdpm"], world("value")),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DATA.resolve(), help="The folder of the real sets.")
    p.add_argument("--sets", default=",".join(SETS), help=f"Comma-separated, of {', '.join(SETS)}.")
    p.add_argument("--models", help="Comma-separated models in place of each set's own (the floor is added).")
    p.add_argument("--seeds", default="0")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--out", type=Path, default=Path("promokit-runs/compare-real"))
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    for name in (s.strip() for s in args.sets.split(",") if s.strip()):
        domain, models, make = SETS[name]
        data, options, validation = make(args.data)
        print(f"\n{name} ({domain})", flush=True)
        comparison = pk.compare(data, args.models.split(",") if args.models else models, domain=domain, seeds=seeds,
                                train={"progress": False}, options=options, validation=validation,
                                resamples=args.resamples, out=args.out / name)
        print(markdown_table(comparison.table().reset_index()))
        choice = comparison.best()
        print(f"which model? {choice.model}: {choice.reason}", flush=True)
    print(f"\ntotal {(time.perf_counter() - started) / 60:.1f} min; leaderboards in {args.out}/<set>/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

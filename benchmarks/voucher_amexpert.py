"""The voucher networks against the linear floor on AmExpert 2019, with a paired bootstrap of the test campaigns.

The bench's time split and settings (``promokit voucher bench --data-dir …``): each model with its defaults over
``--seeds`` (LR is solved: one fit), scored on the test sessions; then, for each model, the test AUC of its
seed-averaged score minus LR's on ``--bootstrap`` resamples of the test sessions (both scored on the same
resample: ``promokit.metrics.paired_bootstrap``), and the GAUC by campaign.

AmExpert 2019 is competition data: the script reads a local copy and writes only metrics.

Usage::

    .venv/bin/python benchmarks/voucher_amexpert.py --models lr,dnn,din,dmbgn --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from promokit.experiments.voucher.demo import DEMO_TRAIN, time_split
from promokit.metrics import auc, gauc, paired_bootstrap
from promokit.voucher.amexpert import load_amexpert
from promokit.voucher.estimator import VoucherModel

DEFAULT_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "amexpert2019").resolve()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    p.add_argument("--models", default="lr,dnn,din,dmbgn")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--bootstrap", type=int, default=500)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    started = time.perf_counter()
    tables, _ = load_amexpert(args.data_dir)
    split = time_split(tables)
    test = tables.sessions.iloc[split.test]
    y = test["redeemed"].to_numpy().astype(int)
    campaigns = test["campaign_id"].to_numpy()
    seeds = [int(s) for s in args.seeds.split(",")]
    scores: dict[str, list[np.ndarray]] = {}
    for name in (m.strip() for m in args.models.split(",")):
        for seed in seeds if name != "lr" else seeds[:1]:
            model = VoucherModel(name, None, replace(DEMO_TRAIN, seed=seed, progress=False), test_fraction=0)
            model.fit(tables, rows=split.train, validation=split.valid)
            p_redeem = model.predict(tables, rows=split.test)["p_redeem"].to_numpy()
            scores.setdefault(name, []).append(p_redeem)
            grouped = gauc(y, p_redeem, campaigns).value
            print(f"  {name:>6} seed {seed}: AUC {auc(y, p_redeem):.4f}  GAUC {grouped:.4f}", flush=True)
    print(f"\ntest: {len(y):,} sessions, {int(y.sum())} redeemed, {len(np.unique(campaigns))} campaigns")
    print(f"paired bootstrap ({args.bootstrap} resamples of the test sessions, seed-averaged AUC), model − lr:")
    for name in (m for m in scores if m != "lr"):
        b = paired_bootstrap(auc, y, scores[name], scores["lr"], resamples=args.bootstrap)
        mean = np.mean(scores[name], axis=0)
        print(f"  {name:>6} − lr: {b.observed:+.4f}  95 % interval [{b.low:+.4f}, {b.high:+.4f}]  ahead in "
              f"{100 * b.share_ahead:.0f} % of resamples; seed-averaged AUC {auc(y, mean):.4f}, GAUC "
              f"{gauc(y, mean, campaigns).value:.4f} (lr {gauc(y, scores['lr'][0], campaigns).value:.4f})")
    print(f"total {(time.perf_counter() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Recalibrating the value floor's pCTCVR on a later period whose conversion rate moved: the mean pCTCVR, the
calibration ratio, the ECE and ``etv_bias`` before and after each method, on the period the map is fitted on.

The setting of ``tests/value/test_value_recalibration.py``: a synthetic world of 1,500 users (seed 5), the floor
``hurdle`` with 40 trees fitted on it, and as the later period its latest 30 % of deliveries with three in four of
their non-conversions left out (a conversion rate about four times the training one).

Usage::

    .venv/bin/python benchmarks/value_recalibration.py          # a few seconds
"""

from __future__ import annotations

import warnings

import numpy as np

from promokit.experiments.value.world import make_world
from promokit.value.contract import check_tables
from promokit.value.estimator import ValueModel

METHODS = ("isotonic", "platt", "prior-shift")


def main() -> None:
    world = make_world(1500, seed=5)
    tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
    latest = tables.time >= np.quantile(tables.time, 0.7)
    keep = latest & ((tables.convert == 1) | (np.arange(len(tables.time)) % 4 == 0))
    later = check_tables(world.deliveries.iloc[np.flatnonzero(keep)].reset_index(drop=True), world.users,
                         world.funds, world.behaviors, world.consumption)
    model = ValueModel("hurdle", {"n_trees": 40}).fit(tables)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the raw scores' calibration warning: the point of the run
        rows.append(("none", dict(model.evaluate(later))))
        for method in METHODS:
            model.recalibrate(later, method=method)
            rows.append((method, dict(model.evaluate(later))))
            model.recalibration_ = None
    print(f"later period: {len(later.time):,} deliveries, observed conversion rate {later.convert.mean():.3f}")
    print(f"{'method':12s} {'mean pCTCVR':>12s} {'ratio':>7s} {'ECE':>7s} {'etv_bias':>9s} {'AUC':>7s}")
    for method, m in rows:
        print(f"{method:12s} {m['mean_predicted']:12.3f} {m['calibration_ratio']:7.2f} {m['ece']:7.3f} "
              f"{m['etv_bias']:9.2f} {m['auc']:7.4f}")


if __name__ == "__main__":
    main()

"""``promokit incentive simulate``: several models' plans for a synthetic world's held-out customers under one ratio
budget, scored by the world's true curves (:func:`~promokit.experiments.allocation.simulate.simulate_budget`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.experiments.allocation.simulate import simulate_budget
from promokit.experiments.incentive.world import read_truth
from promokit.incentive.estimator import IncentiveModel
from promokit.report import Report


@dataclass(frozen=True)
class Simulation:
    """The plans' ``table`` (one row per model and budget reading), the ratio ``budget`` and the held-out
    ``customers`` and ``merchants`` allocated (None: the merchants were not)."""

    table: pd.DataFrame
    budget: float
    customers: int
    merchants: int | None

    def report(self, title: str) -> Report:
        report = Report(title, data={"ratio": self.budget, "rows": self.table.to_dict(orient="records")})
        allocated = f"{self.customers:,} held-out customers" + (f" and {self.merchants:,} merchants"
                                                                if self.merchants is not None else "")
        report.add("Setup", f"{allocated}; ratio budget B = {self.budget:g}")
        report.add("Allocation scored by the true curves", self.table.set_index(["model", "budget"]).reset_index())
        return report


def simulate(world: str | os.PathLike, models: Sequence[str | os.PathLike], ratio: float | None = None, seed: int = 0,
             with_merchants: bool = False) -> Simulation:
    """Allocate the held-out customers of the world in the folder ``world`` (what ``incentive synth`` writes) by the
    scores of each model directory of ``models`` (trained on it, holding out the same nodes) under the ratio budget
    ``ratio`` (B of eq. 16; default the median value), ``with_merchants`` the held-out merchants too (eq. 11's joint
    problem), and score the plans by the true curves; ``seed`` draws the random plan."""
    world, models = Path(world), [Path(path) for path in models]
    _, levels, truth_c = read_truth(world / "truth_customers.parquet")
    _, _, truth_m = read_truth(world / "truth_merchants.parquet")
    scores, rows = {}, None
    for path in models:
        estimator = IncentiveModel.load(path)
        tables = estimator.read({name: world / f"{name}.parquet" for name in ("customers", "merchants", "edges")})
        split = estimator.split_rows(tables)
        these = (tuple(split.test_customers), tuple(split.test_merchants))
        if rows is not None and these != rows:
            raise DataError(f"{path} holds out other nodes than {models[0]} (another seed or test fraction); "
                            "simulate compares models on the same held-out nodes")
        rows = these
        r = estimator.responses(tables)
        scores[f"{estimator.model} ({path.name})"] = (r.customers[split.test_customers],
                                                      r.merchants[split.test_merchants])
    c_rows, m_rows = (np.asarray(part, dtype=np.int64) for part in rows)
    budget = float(ratio if ratio is not None else np.median(levels))
    table = simulate_budget(levels, truth_c[c_rows], truth_m[m_rows] if with_merchants else None, scores, budget, seed)
    return Simulation(table, budget, len(c_rows), len(m_rows) if with_merchants else None)

"""``promokit value simulate``: the delivery plans trained value models lead to on a synthetic world, scored by the
world's true model (Table 3 of the EOCA paper, offline)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from promokit.data import DataError, read_table
from promokit.experiments.allocation.simulate import simulate_quota
from promokit.experiments.value.bench import ALLOCATORS, ORACLE, true_etv_matrix_from
from promokit.experiments.value.world import read_truth_etv
from promokit.report import Report
from promokit.value.contract import read_folder
from promokit.value.estimator import ValueModel


def simulate(world: str | os.PathLike, models: Sequence[str | os.PathLike], allocators: Sequence[str] = ALLOCATORS,
             seed: int = 0) -> tuple[Report, pd.DataFrame]:
    """Allocate every user of the world folder ``world`` (written by ``synth``: its tables, truth_etv.parquet and
    quotas.csv) one fund by the ETV of each model directory of ``models``, and by the true ETV, with each of
    ``allocators`` under the quotas and the risk rule, then draw outcomes from the true model (seeded): the report
    and its table of CPMD and TAPMD per model and allocator."""
    if not models:
        raise DataError("`models`: give at least one model directory trained on the world")
    world = Path(world)
    truth_etv = read_truth_etv(world)
    quotas = read_table(world / "quotas.csv")
    rows = []
    for path in map(Path, models):
        model = ValueModel.load(path)
        tables = read_folder(world, specs=model.feature_specs_)
        truth = true_etv_matrix_from(truth_etv, tables)
        rows += simulate_quota(f"{model.model} ({path.name})", model.score_matrix(tables, seed=seed), truth, quotas,
                               tables.tolerance(), tables.risk(), tables.users["user_id"], tables.fund_names,
                               truth_etv, seed, allocators)
    rows += simulate_quota(ORACLE, truth, truth, quotas, tables.tolerance(), tables.risk(), tables.users["user_id"],
                           tables.fund_names, truth_etv, seed, allocators)
    table = pd.DataFrame(rows).drop(columns="seed")
    report = Report(f"promokit value simulate: {world}", data={"rows": table.to_dict(orient="records")})
    report.add("Setup", f"{len(tables.users):,} users, quotas {quotas['quota'].tolist()}, risk rule "
                        f"{'on' if tables.risk() is not None else 'off'}; outcomes drawn from the true model")
    report.add("Delivery plans (per mille deliveries)", table)
    return report, table

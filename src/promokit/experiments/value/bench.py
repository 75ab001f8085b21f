"""The value bench: the floor and every model on synthetic fund worlds, against the oracle, with the delivery plans
they lead to.

For each seed: a world (``make_world(seed=seed)``), the deliveries split by time (the latest 10 % for the test,
the 10 % before for validation, as §5.1 trains on earlier days), each model trained on the rest — the floor
``hurdle`` first, always; then on the test deliveries the metrics of Tables 1–2 against the observed outcomes,
RelaImpr of the AUC against the floor's, and the ETV's error and mean bias against the TRUE ETV (overall and the
worst fund's); THA against the truth (every user given its highest-ETV fund, the expected amount of that fund);
how much each model personalises the choice of fund on the user × fund table as of the test's start
(:func:`~promokit.metrics.value.fund_personalisation`, the truth's too); and, for the allocation models, the
delivery plan of each allocator under exact quotas and the risk rule, scored by outcomes drawn from the true model
(CPMD and TAPMD, eqs. 17–18: the offline analogue of Table 3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from promokit.data import DataError
from promokit.experiments.allocation.simulate import simulate_quota
from promokit.experiments.bench_summary import add_floor_section, floor_verdict, model_summary
from promokit.experiments.finished_rows import FinishedRows
from promokit.experiments.value.world import ValueWorld, feasible_quotas, make_world
from promokit.metrics.compare import paired_change
from promokit.metrics.value import decile_figure, fund_personalisation
from promokit.report import Report
from promokit.training import TrainConfig
from promokit.value.contract import ValueTables, check_tables
from promokit.value.defaults import DEFAULT_TRAIN
from promokit.value.estimator import ValueModel, delivery_split
from promokit.value.evaluate import FLOOR, amount_scale, calibration, delivery_metrics, fund_calibration, hits

#: The demo's training: the defaults with fewer epochs, so the demo runs in a few minutes.
DEMO_TRAIN = replace(DEFAULT_TRAIN, epochs=4, progress=False)
MODELS = [FLOOR, "esdpm", "esdpm-ncg", "mtl-ziln", "mtl-mse", "esmm", "mmoe", "shared-bottom", "dnn"]
ORACLE = "oracle"
#: the models whose ETV goes to the allocators (Table 3: ESMM's pCTCVR as the P1 baseline, ESDPM-NCG, ESDPM; and
#: the floor)
ALLOCATED = (FLOOR, "esmm", "esdpm-ncg", "esdpm", ORACLE)
ALLOCATORS = ("manual", "ha", "prices")
HEADLINE = ["auc", "logloss", "mse", "mae", "gini", "etv_mae_true", "etv_bias_true", "fund_bias_true", "tha_true",
            "thc", "tha", "best_differs", "uplift_spread"]


@dataclass
class BenchResult:
    metrics: pd.DataFrame                  # one row per model × seed (+ oracle rows)
    simulation: pd.DataFrame               # one row per allocated model × allocator × seed
    deciles: dict[str, pd.DataFrame] = field(default_factory=dict)   # first seed, per model
    worlds: list[dict] = field(default_factory=list)


def run(models: Sequence[str] = MODELS, seeds: Sequence[int] = (0,), world: dict | None = None,
        train: TrainConfig | None = None, params: dict[str, dict] | None = None,
        allocators: Sequence[str] = ALLOCATORS, on_result: Callable[[dict], None] | None = None) -> BenchResult:
    """Train and score the floor and every model on the world of every seed; ``world`` holds :func:`make_world`'s
    sizes."""
    models = checked_models(models, train, params)
    result = BenchResult(pd.DataFrame(), pd.DataFrame())
    metrics, simulations = [], []
    for seed in seeds:
        w = make_world(**(world or {}), seed=seed)
        tables = check_tables(w.deliveries, w.users, w.funds, w.behaviors, w.consumption)
        train_rows, valid_rows, test_rows = delivery_split(tables)  # what every model's fit makes by default
        at = tables.time[test_rows].min()
        truth = true_etv_matrix(w, tables)
        quotas = feasible_quotas(tables.tolerance(), tables.risk(), tables.fund_names, seed)
        result.worlds.append({"seed": seed, "users": len(tables.users), "funds": len(tables.funds),
                              "deliveries": len(tables.deliveries), "train": len(train_rows),
                              "valid": len(valid_rows), "test": len(test_rows),
                              "quotas": quotas["quota"].tolist()})
        for name in [*models, ORACLE]:
            started = time.perf_counter()
            if name == ORACLE:
                p_ctcvr, etv = (w.truth[c].to_numpy()[test_rows] for c in ("true_p_ctcvr", "true_etv"))
                scores, epochs, amount = truth, 0, True
            else:
                config = TrainConfig(**{**(train or DEFAULT_TRAIN).to_dict(), "seed": seed, "progress": False})
                model = ValueModel(name, (params or {}).get(name), config, refit=False).fit(tables)  # the selected
                predictions = model.predict(tables, rows=test_rows)
                p_ctcvr, etv = predictions["p_ctcvr"].to_numpy(), predictions["etv"].to_numpy()
                amount = model.predicts_amount
                scores, epochs = model.score_matrix(tables, at=at, seed=seed), len(model.history_.epochs)
            row = {"model": name, "seed": seed,
                   **_score(tables, w, test_rows, p_ctcvr, etv, scores, truth, amount),
                   "fit_seconds": time.perf_counter() - started, "epochs": epochs}
            metrics.append(row)
            if name not in result.deciles:
                result.deciles[name] = calibration(tables.amount[test_rows], etv).assign(model=name)
            if on_result is not None:
                on_result(row)
            if name in ALLOCATED:
                simulations += simulate_quota(name, scores, truth, quotas, tables.tolerance(), tables.risk(),
                                              tables.users["user_id"], tables.fund_names, w.truth_etv, seed,
                                              allocators)
    result.metrics, result.simulation = pd.DataFrame(metrics), pd.DataFrame(simulations)
    return result


def checked_models(models: Sequence[str], train: TrainConfig | None = None, params: dict[str, dict] | None = None
                   ) -> list[str]:
    """``models`` with the floor first, each name and its settings checked (:class:`ValueModel`) before any world
    is made."""
    models = list(models) if FLOOR in models else [FLOOR, *models]
    for name in models:
        ValueModel(name, (params or {}).get(name), train)
    return models


def true_etv_matrix(world: ValueWorld, tables: ValueTables) -> np.ndarray:
    """The true ETV of every user × fund (rows and columns in the order of ``tables``)."""
    return true_etv_matrix_from(world.truth_etv, tables)


def true_etv_matrix_from(truth_etv: pd.DataFrame, tables: ValueTables) -> np.ndarray:
    """:func:`true_etv_matrix` from a world's ``truth_etv`` table (long: user_id, fund, true_etv)."""
    wide = truth_etv.pivot(index="user_id", columns="fund", values="true_etv")
    users, funds = tables.users["user_id"].astype(str), pd.Index(tables.fund_names)
    missing_users, missing_funds = users[~users.isin(wide.index.astype(str))], funds.difference(wide.columns.astype(str))
    if len(missing_users) or len(missing_funds):
        example = missing_users.iloc[0] if len(missing_users) else missing_funds[0]
        raise DataError(f"truth_etv has no true ETV for {len(missing_users)} users and {len(missing_funds)} funds of "
                        f"the tables, e.g. {example!r}; simulate on the world the tables come from")
    wide.index, wide.columns = wide.index.astype(str), wide.columns.astype(str)
    return wide.loc[users, list(funds)].to_numpy(dtype=np.float64)


def _score(tables: ValueTables, world: ValueWorld, rows: np.ndarray, p_ctcvr: np.ndarray, etv: np.ndarray,
           scores: np.ndarray, truth: np.ndarray, amount_head: bool) -> dict:
    """A model without an amount (ESMM) ranks by pCTCVR: its Gini, THC, THA and personalisation count, its amount
    errors and biases do not. ``fund_bias_true`` is the mean ETV over the mean true ETV, minus 1, of the fund where
    that is farthest from 0 (signed)."""
    convert, amount = tables.convert[rows].astype(np.float64), tables.amount[rows]
    true_etv = world.truth["true_etv"].to_numpy()[rows]
    users = np.unique(tables.user[rows])
    outcomes = pd.DataFrame({"user_id": tables.user[rows], "fund": tables.fund[rows], "convert": convert,
                             "amount": amount})
    hit = hits(scores[users], users, range(len(tables.funds)), outcomes)
    best = scores.argmax(axis=1)
    metrics = delivery_metrics(convert, amount, p_ctcvr, etv)
    errors = {"etv_mae_true": float(np.mean(np.abs(etv - true_etv)) / amount_scale(convert, amount)),
              "etv_bias_true": float(etv.mean() / true_etv.mean() - 1)}
    fund_bias = fund_calibration(tables.fund_names, tables.fund[rows], etv, true_etv)["ratio"].to_numpy() - 1
    errors["fund_bias_true"] = float(fund_bias[np.nanargmax(np.abs(fund_bias))])
    if not amount_head:
        metrics["mse"] = metrics["mae"] = float("nan")
        errors = dict.fromkeys(errors, float("nan"))
    return {**metrics, **errors, "tha_true": float(truth[np.arange(len(truth)), best].mean()), "thc": hit["thc"],
            "tha": hit["tha"], **fund_personalisation(scores)}


def summary(result: BenchResult) -> pd.DataFrame:
    """Mean ± std over seeds of the headline metrics per model, in the order run, and RelaImpr (DMBGN eq. 11) of the
    mean AUC against the floor's."""
    return model_summary(result.metrics, HEADLINE, FLOOR, "auc", f"RelaImpr vs {FLOOR}", after="auc")


def paired(result: BenchResult, model: str = "esdpm", against: Sequence[str] = (FLOOR, "esdpm-ncg", "mtl-ziln",
                                                                                    "mtl-mse", "esmm")) -> pd.DataFrame:
    """Per seed, ``model`` minus each baseline on the headline metrics (positive = higher for ``model``)."""
    frame = result.metrics.set_index(["model", "seed"])
    rows = []
    for other in against:
        if other not in frame.index.get_level_values(0) or model not in frame.index.get_level_values(0):
            continue
        diff = frame.loc[model, HEADLINE] - frame.loc[other, HEADLINE]
        for seed, values in diff.iterrows():
            rows.append({"versus": other, "seed": seed, **values.astype(float).to_dict()})
    return pd.DataFrame(rows)


def simulation_summary(result: BenchResult, base: tuple[str, str] = ("esmm", "ha")) -> pd.DataFrame:
    """Per model × allocator: mean CPMD, TAPMD (drawn outcomes) and expected TAPMD (true ETV of the plan), and the
    change of expected TAPMD against ``base`` (model, allocator) with a 95 % t-interval, paired by seed."""
    sim = result.simulation
    reference = sim[(sim.model == base[0]) & (sim.allocator == base[1])].set_index("seed")["expected_tapmd"]
    rows = []
    for (name, allocator), group in sim.groupby(["model", "allocator"], sort=False):
        row = {"model": name, "allocator": allocator,
               **{c: float(group[c].mean()) for c in ("cpmd", "tapmd", "expected_tapmd")}}
        if len(reference) and (name, allocator) != base:
            row[f"vs_{base[0]}+{base[1]}"] = paired_change(group["expected_tapmd"].to_numpy(),
                                                           reference.reindex(group["seed"]).to_numpy())
        rows.append(row)
    return pd.DataFrame(rows)


def bench_report(result: BenchResult, title: str = "promokit value bench") -> Report:
    w = result.worlds[0]
    report = Report(title)
    report.add("Setup", f"{len(result.worlds)} seed(s); world {w['users']:,} users, {w['funds']} funds, "
                        f"{w['deliveries']:,} deliveries split by time {w['train']:,} / {w['valid']:,} / {w['test']:,} "
                        f"(train / validation / test); quotas {w['quotas']} (first seed).")
    report.add("Test deliveries (Tables 1–2; oracle = the true pCTCVR and ETV)", summary(result))
    add_floor_section(report, [floor_verdict(result.metrics, FLOOR, "auc", what="test AUC")])
    pairs = paired(result)
    if len(pairs):
        report.add("ESDPM minus each baseline, per seed", pairs)
    if len(result.simulation):
        report.add("Delivery plans under exact quotas and the risk rule, scored by the true model (Table 3 offline)",
                   simulation_summary(result))
    report.data = {"results": result.metrics.to_dict(orient="records"),
                   "simulation": result.simulation.to_dict(orient="records"), "worlds": result.worlds}
    report.figures["deciles"] = decile_figure(pd.concat(result.deciles.values(), ignore_index=True),
                                              "mean ETV and mean amount per decile of the prediction (first seed)")
    return report


def run_and_report(models: Sequence[str], seeds: Sequence[int], world: dict, training: tuple[TrainConfig, dict],
                   out) -> BenchResult:
    """:func:`run` with a line per trained model on screen and the rows finished so far in ``out`` (results.csv and a
    report, rewritten after each model: an interrupted run keeps them), then the summary tables and the report."""
    from promokit.console import get_console, print_table

    console = get_console()
    config, model_params = training
    params = {name: model_params for name in models if name != FLOOR}  # --params are the networks'; not the floor's
    models = checked_models(models, config, params)

    def done(row: dict) -> None:
        console.print(f"  seed {row['seed']} {row['model']:>13}: AUC {row['auc']:.4f}  Gini {row['gini']:.4f}  "
                      f"ETV error {row['etv_mae_true']:.4f}  bias {row['etv_bias_true']:+.1%}  "
                      f"true THA/user {row['tha_true']:.1f}  best fund ≠ everyone's {row['best_differs']:.1%}  "
                      f"({row['fit_seconds']:.0f} s)", highlight=False)

    with FinishedRows(out, "promokit value bench", on_result=done) as finished:
        result = run(models, seeds, world, config, params, on_result=finished.add)
    print_table("test deliveries (mean ± std over seeds)",
                summary(result)[["auc", f"RelaImpr vs {FLOOR}", "logloss", "mae", "gini", "etv_mae_true",
                                 "etv_bias_true", "tha_true", "best_differs", "uplift_spread"]])
    if len(result.simulation):
        print_table("delivery plans scored by the true model (per mille deliveries)",
                    simulation_summary(result).set_index(["model", "allocator"]).round(1))
    bench_report(result).write(out)
    console.print(f"report written to {out}/report.md (+ report.json, results.csv, deciles.png)")
    return result


def demo(models: Sequence[str], users: int, seed: int, out) -> BenchResult:
    """``promokit value demo``: :func:`run_and_report` of ``models`` on one world of ``users`` users (seed
    ``seed``) with :data:`DEMO_TRAIN`."""
    return run_and_report(models, [seed], {"n_users": users}, (DEMO_TRAIN, {}), out)

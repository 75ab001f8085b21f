"""``promokit incentive …``: synth, train, predict, evaluate, bench, simulate, demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli_support import (
    RUNS,
    TABLE_HELP,
    AddressOpt,
    AllRowsOpt,
    BatchSizeOpt,
    CategoricalOpt,
    EngineOpt,
    EpochsOpt,
    ExecutorOpt,
    LrOpt,
    NumericOpt,
    ParamsOpt,
    PatienceOpt,
    ResumeOpt,
    ThreadsOpt,
    WorkersOpt,
    bench_models,
    bench_training,
    checkpoint_dir,
    convention_errors,
    executor_from_options,
    executor_option,
    finish_training,
    held_out_rows,
    label_option,
    label_options,
    print_feature_types,
    print_held_out,
    runs_out_option,
    seeds_option,
    set_threads,
    test_fraction_option,
    training_options,
    types_option,
    user_errors,
    write_metrics_report,
)
from promokit.console import get_console, print_table
from promokit.data.split import TEST_FRACTION

app = typer.Typer(help="Incentive response on a customer–merchant graph: GNN + hazard regression and its baselines, "
                       "score tables for allocate budget.", no_args_is_help=True)

CustomersOpt = Annotated[Path, typer.Option("--customers", help=f"customers table ({TABLE_HELP}): customer_id, level, redeemed, features.")]
MerchantsOpt = Annotated[Path, typer.Option("--merchants", help=f"merchants table ({TABLE_HELP}): merchant_id, level, shares, prior_shares, features.")]
EdgesOpt = Annotated[Path, typer.Option("--edges", help=f"edges table ({TABLE_HELP}): customer_id, merchant_id[, weight, edge features].")]
LevelsOpt = Annotated[Optional[str], typer.Option("--levels", help="The value list R, comma-separated (default: the levels in the tables).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for the split, initialisation, sampling and shuffling.")]
ModelOpt = Annotated[str, typer.Option("--model", help="gnn-hazard | lr | dnn | dnn-h | sbbm | cox | dssm-c")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
RatioOpt = Annotated[Optional[float], typer.Option("--ratio", help="Budget B of eq. 16: expected incentive per expected response (default: the median value).")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation nodes: customer_loglik (default) | auc_c | loss (eq. 7, merchants included).")]
LrDecayOpt = Annotated[Optional[float], typer.Option("--lr-decay", help="Learning rate multiplied by this each epoch (section 5: 0.95).")]


def _levels(text: Optional[str]):
    from promokit.data import DataError

    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"--levels must be comma-separated numbers, got {text!r}") from None


def _fractions(**flags: float) -> None:
    """The split's fractions, refused under their flags' names."""
    from promokit.data import DataError

    for flag, value in flags.items():
        if not 0 <= value < 1:
            raise DataError(f"--{flag.replace('_', '-')} must be in [0, 1), got {value:g}")


#: The label roles of the node tables (promokit.incentive.contract.LABELS).
LABEL_ROLES = ("redeemed", "level", "shares", "prior_shares")
LabelOpt = label_option(LABEL_ROLES)
TestFractionOpt = test_fraction_option("of the labelled customers and of the merchants, drawn at random with --seed; "
                                       "section 5 of the paper: 0.15")


def _tables(customers: Path, merchants: Path, edges: Path, levels=None, require_labels: bool = True, model=None,
            types: dict[str, str] | None = None, labels: dict[str, str] | None = None):
    from promokit.incentive.contract import read_tables

    specs = {} if model is None else {"customer_features": model.customer_spec, "merchant_features": model.merchant_spec}
    return read_tables({"customers": customers, "merchants": merchants, "edges": edges}, levels=levels,
                       require_labels=require_labels, types=types, labels=labels, **specs)


@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Folder for the world's tables and true curves.")],
          customers: int = 20_000, merchants: int = 2_000,
          degree: Annotated[float, typer.Option(help="Mean number of merchants per connected customer.")] = 4.0,
          seed: SeedOpt = 0):
    """Write a synthetic experiment (customers, merchants, edges) with its true response curves."""
    with user_errors():
        from promokit.experiments.incentive.world import make_world, write_world

        world = make_world(customers, merchants, degree, seed=seed)
        paths = write_world(world, out)
        get_console().print(f"{customers:,} customers, {merchants:,} merchants, {len(world.edges):,} edges written to "
                            f"{out} ({', '.join(p.name for p in paths.values())})")


@app.command()
def train(customers: CustomersOpt, merchants: MerchantsOpt, edges: EdgesOpt,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = "gnn-hazard", levels: LevelsOpt = None,
          test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          valid_fraction: Annotated[float, typer.Option(help="Share of the rest that picks the epoch.")] = 0.1,
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, lr_decay: LrDecayOpt = None,
          patience: PatienceOpt = None, monitor: MonitorOpt = None, seed: SeedOpt = 0, params: ParamsOpt = None,
          categorical: CategoricalOpt = None, numeric: NumericOpt = None,
          resume: ResumeOpt = False, threads: ThreadsOpt = None):
    """Fit a response model on an incentive experiment and write it as a model directory.

    The other columns of customers and merchants are features, their types inferred (printed at the end and kept
    in config.json): --categorical / --numeric set the type of some."""
    with user_errors(), convention_errors():
        set_threads(threads)
        from promokit.incentive.estimator import DEFAULT_TRAIN, IncentiveModel

        config, model_params = training_options(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                                lr_decay=lr_decay, patience=patience, monitor=monitor, seed=seed)
        _fractions(test_fraction=test_fraction, valid_fraction=valid_fraction)
        tables = _tables(customers, merchants, edges, _levels(levels), types=types_option(categorical, numeric),
                         labels=label_options(label, LABEL_ROLES))
        estimator = IncentiveModel(model, model_params, config, test_fraction)
        estimator.fit(tables, validation=valid_fraction, checkpoint_dir=checkpoint_dir(out), resume=resume)
        estimator.save(out)
        finish_training(out, estimator.history)
        print_feature_types({"customers": estimator.customer_spec, "merchants": estimator.merchant_spec}, inferred=True)
        split, counts = estimator.split(tables), tables.counts
        get_console().print(f"graph: {counts['edges']:,} edges; {counts['isolated_customers']:,} customers and "
                            f"{counts['isolated_merchants']:,} merchants without edges; "
                            f"{counts['unlabelled_customers']:,} customers without a label (in the graph, not in "
                            "the loss)")
        held = estimator.holdout
        print_held_out(held["held_out"] + held["held_out_merchants"] and
                       f"{held['held_out']:,} of {held['rows']:,} labelled customers and {held['held_out_merchants']:,}"
                       f" of {held['merchants']:,} merchants (drawn at random, seed {held['seed']})", "labelled node")
        get_console().print(f"model written to {out} (trained on {len(split.train_customers):,} customers and "
                            f"{len(split.train_merchants):,} merchants)")


@app.command()
def predict(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt, edges: EdgesOpt,
            out: Annotated[Path, typer.Option("--out", help="Folder for customers.parquet, merchants.parquet and summary.json; with --customers in parts, customers/ and merchants/ (a part per input part).")],
            executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
            threads: ThreadsOpt = None, engine: EngineOpt = None):
    """Score every customer and merchant at every value: score tables in the allocate budget wide layout. With
    --customers in parts (a directory or glob; --edges co-partitioned with them, --merchants one table or parts)
    the graph is scored shard by shard on --executor, layer by layer (docs/scale.md)."""
    with user_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.data import write_json, write_parquet
        from promokit.data.parts import is_partitioned

        if is_partitioned(customers):
            from promokit.incentive.parts import predict_parts

            summary = predict_parts(model, customers, merchants, edges, out,
                                    executor_from_options(executor, address, workers))
            written = {"customers": out / "customers", "merchants": out / "merchants"}
        else:
            from promokit.incentive.estimator import IncentiveModel

            if executor != "local" or address or workers:
                get_console().print(f"note: {customers} is one table, not parts: predicting in this process "
                                    "(--executor, --address and --workers serve a graph in parts)")
            estimator = IncentiveModel.load(model)
            tables = _tables(customers, merchants, edges, estimator.levels, require_labels=False, model=estimator)
            customer_scores, merchant_scores = estimator.score_tables(tables)
            written = {"customers": out / "customers.parquet", "merchants": out / "merchants.parquet"}
            write_parquet(customer_scores, written["customers"])
            write_parquet(merchant_scores, written["merchants"])
            summary = {"model": estimator.model, "levels": estimator.levels.tolist(), "customers": len(customer_scores),
                       "merchants": len(merchant_scores),
                       **{k: v for k, v in tables.counts.items() if k.startswith("isolated")},
                       "mean_customer_response": customer_scores.drop(columns="user_id").mean().round(6).tolist(),
                       "mean_merchant_response": merchant_scores.drop(columns="user_id").mean().round(6).tolist()}
        write_json(summary, out / "summary.json")
        get_console().print(f"scores of {summary['customers']:,} customers and {summary['merchants']:,} merchants at "
                            f"{len(summary['levels'])} values written to {out}; allocate them with: promokit allocate "
                            f"budget --scores {written['customers']} --merchants {written['merchants']} "
                            "--ratio B --out plan/")


@app.command()
def evaluate(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt, edges: EdgesOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json / response_curves.png / uplift_curves.png.")],
             all_rows: AllRowsOpt = False,
             truth: Annotated[Optional[Path], typer.Option("--truth", help="A synthetic world's truth_customers.parquet, for the curve error and the true uplift's AUUC.")] = None,
             label: LabelOpt = None):
    """AUC_c, MAE_c, MSE_c, MAE_m, MSE_m, uplift by sensitivity quintile and the response curves (Figures 4–5), and
    each value's uplift and Qini curves against the lowest with their AUUC and Qini coefficient (scikit-uplift's),
    on the nodes train held out (--all: every labelled node of a new experiment)."""
    with user_errors(), convention_errors():
        from promokit.data import DataError
        from promokit.experiments.incentive.world import read_truth
        from promokit.incentive.estimator import IncentiveModel
        from promokit.incentive.evaluate import change_point
        from promokit.metrics.uplift import DEFINITIONS
        from promokit.report import Report

        estimator = IncentiveModel.load(model)
        tables = _tables(customers, merchants, edges, estimator.levels, model=estimator,
                         labels=label_options(label, LABEL_ROLES))
        if not all_rows:
            held_out_rows(estimator, tables)  # what evaluate scores: its errors say --all
        true_curves = None
        if truth is not None:
            ids, _, true_curves = read_truth(truth)
            if len(ids) != len(tables.customers) or (ids != tables.customers["customer_id"].to_numpy()).any():
                raise DataError(f"--truth {truth}: its customer_id column does not match the customers table row by row")
        evaluation = estimator.evaluate(tables, held_out=not all_rows, truth=true_curves)
        curve, uplift, level_uplift = (evaluation.tables[name] for name in
                                       ("response_curve", "uplift_by_quintile", "uplift_by_level"))
        metrics = dict(evaluation.metrics)
        found = change_point(curve)
        if found is not None:
            metrics["change_point"] = f"{found[0]:g}–{found[1]:g}"
        write_metrics_report(out, f"Evaluation of {model}", estimator.model, evaluation.metrics,
                             f"{estimator.model}: {evaluation['customers']:,} customers, "
                             f"{evaluation.metrics.get('merchants', 0):,} merchants")
        report = Report(f"Evaluation of {model}", data={"metrics": metrics,
                                                         "curve": curve.to_dict(orient="records"),
                                                         "uplift": uplift.to_dict(orient="records"),
                                                         "uplift_by_level": level_uplift.to_dict(orient="records")},
                        figures=dict(evaluation.figures))
        report.add("Metrics", "; ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in metrics.items()))
        report.add("Response per value (Figure 5)", curve.set_index("level"))
        report.add("Uplift by sensitivity quintile (Figure 4)", uplift.set_index("group"))
        report.add(f"Each value against the lowest ({estimator.levels[0]:g}): uplift and Qini curves",
                   f"{DEFINITIONS} Customers offered the value or the lowest one, ranked by the predicted uplift "
                   "f_c(r_j) − f_c(r_1).")
        report.add("AUUC and Qini coefficient per value", level_uplift.set_index("level"))
        report.write(out)
        print_table("response per value", curve.set_index("level"))
        print_table(f"each value against the lowest ({estimator.levels[0]:g})", level_uplift.set_index("level"))


@app.command()
def bench(models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "gnn-hazard,dnn,dnn-h,sbbm,cox,dssm-c",
          seeds: Annotated[str, typer.Option(help="Comma-separated seeds (world, split and training).")] = "0,1,2",
          customers: int = 20_000, merchants: int = 2_000, degree: float = 4.0, ratio: RatioOpt = None,
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, lr_decay: LrDecayOpt = None,
          patience: PatienceOpt = None, params: ParamsOpt = None,
          out: runs_out_option("results.csv (rewritten as each model finishes), report.md / report.json / response_curves.png") = RUNS / "incentive-bench",
          threads: ThreadsOpt = None):
    """Every model on synthetic worlds (one per seed) against the oracle, and the allocation each leads to."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.incentive.bench import run_and_report
        from promokit.incentive.estimator import DEFAULT_TRAIN

        run_and_report(bench_models(models), seeds_option(seeds), {"n_customers": customers, "n_merchants": merchants,
                                                               "mean_degree": degree},
                       bench_training(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                      lr_decay=lr_decay, patience=patience), ratio, out)


@app.command()
def simulate(world: Annotated[Path, typer.Option("--world", help="Folder written by synth (tables and true curves).")],
             model: Annotated[list[Path], typer.Option("--model", help="Model directory trained on this world; repeat for several.")],
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             ratio: RatioOpt = None, seed: SeedOpt = 0,
             with_merchants: Annotated[bool, typer.Option("--merchants", help="Allocate the held-out merchants too, under the same budget (eq. 11's joint problem).")] = False):
    """Allocate the world's held-out customers by each model's scores under one ratio budget, then score the plans
    by the true curves: expected redemptions, spend, spend per redemption (oracle and random as bounds)."""
    with user_errors():
        import numpy as np

        from promokit.data import DataError
        from promokit.experiments.allocation.simulate import simulate_budget
        from promokit.experiments.incentive.world import read_truth
        from promokit.incentive.estimator import IncentiveModel
        from promokit.report import Report

        _, levels, truth_c = read_truth(world / "truth_customers.parquet")
        _, _, truth_m = read_truth(world / "truth_merchants.parquet")
        scores, rows = {}, None
        for path in model:
            estimator = IncentiveModel.load(path)
            tables = _tables(world / "customers.parquet", world / "merchants.parquet", world / "edges.parquet",
                             estimator.levels, model=estimator)
            split = estimator.split(tables)
            these = (tuple(split.test_customers), tuple(split.test_merchants))
            if rows is not None and these != rows:
                raise DataError(f"{path} holds out other nodes than {model[0]} (another seed or test fraction); "
                                "simulate compares models on the same held-out nodes")
            rows = these
            r = estimator.responses(tables)
            scores[f"{estimator.model} ({path.name})"] = (r.customers[split.test_customers], r.merchants[split.test_merchants])
        c_rows, m_rows = (np.asarray(part, dtype=np.int64) for part in rows)
        budget = float(ratio if ratio is not None else np.median(levels))
        table = simulate_budget(levels, truth_c[c_rows], truth_m[m_rows] if with_merchants else None, scores, budget,
                               seed)
        report = Report(f"promokit incentive simulate: {world}", data={"ratio": budget, "rows": table.to_dict(orient="records")})
        allocated = f"{len(c_rows):,} held-out customers" + (f" and {len(m_rows):,} merchants" if with_merchants else "")
        report.add("Setup", f"{allocated}; ratio budget B = {budget:g}")
        report.add("Allocation scored by the true curves", table.set_index(["model", "budget"]).reset_index())
        report.write(out)
        print_table(f"allocation at B = {budget:g}, scored by the true curves",
                    table[["model", "budget", "redemptions", "spend_per_redemption", "true_ratio", "payments"]]
                    .set_index("model"))
        get_console().print(f"report written to {out}/report.md")


@app.command()
def demo(out: runs_out_option("results.csv (rewritten as each model finishes) and the report") = RUNS / "incentive-demo",
         customers: int = 10_000, merchants: int = 1_000, seed: SeedOpt = 0,
         models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "gnn-hazard,dnn-h,sbbm,cox"):
    """Train the paper's model and its baselines on a synthetic world, score the held-out nodes against the
    oracle and allocate a budget by each model's scores."""
    with user_errors():
        from promokit.experiments.incentive.bench import run_and_report
        from promokit.experiments.incentive.demo import DEMO_TRAIN

        run_and_report(bench_models(models), [seed], {"n_customers": customers, "n_merchants": merchants},
                       (DEMO_TRAIN, {}), None, out)

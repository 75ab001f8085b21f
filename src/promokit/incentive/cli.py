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
    CategoricalOpt,
    EngineOpt,
    ExecutorOpt,
    NumericOpt,
    ParamsOpt,
    ResumeOpt,
    ThreadsOpt,
    TrainingFlags,
    WorkersOpt,
    bench_models,
    bench_training,
    checkpoint_dir,
    convention_errors,
    deferred_executor,
    executor_option,
    finish_training,
    flags_in_errors,
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
from promokit.incentive.defaults import DEFAULT_MODEL, DEFAULT_TRAIN, DEFAULT_VALIDATION

#: The training flags, showing the defaults the estimator trains with.
TRAIN = TrainingFlags(DEFAULT_TRAIN)

app = typer.Typer(help="Incentive response on a customer–merchant graph: GNN + hazard regression and its baselines, "
                       "score tables for allocate budget.", no_args_is_help=True)

CustomersOpt = Annotated[Path, typer.Option("--customers", help=f"customers table ({TABLE_HELP}): customer_id, level, redeemed, features.")]
MerchantsOpt = Annotated[Optional[Path], typer.Option("--merchants", help=f"merchants table ({TABLE_HELP}): merchant_id, level, shares, prior_shares, features. Leave out with --edges for an experiment with customers only (lr, dnn, dnn-h).")]
EdgesOpt = Annotated[Optional[Path], typer.Option("--edges", help=f"edges table ({TABLE_HELP}): customer_id, merchant_id[, weight, edge features]. Leave out with --merchants for customers only.")]
LevelsOpt = Annotated[Optional[str], typer.Option("--levels", help="The value list R, comma-separated (default: the levels in the tables).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for the split, initialisation, sampling and shuffling.")]
ModelOpt = Annotated[str, typer.Option("--model", help="gnn-hazard | lr | dnn | dnn-h | sbbm | cox | dssm-c")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
RatioOpt = Annotated[Optional[float], typer.Option("--ratio", help="Budget B of eq. 16: expected incentive per expected response (default: the median value).")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation nodes: customer_loglik | auc_c | loss (eq. 7, merchants included).", show_default=DEFAULT_TRAIN.monitor)]
LrDecayOpt = Annotated[Optional[float], typer.Option("--lr-decay", help="Learning rate multiplied by this each epoch (section 5: 0.95).", show_default=f"{DEFAULT_TRAIN.lr_decay:g}")]
#: The library's arguments that options give, named as those options in its errors.
FLAGS = {"validation": "--valid-fraction", "truth": "--truth"}


def _levels(text: Optional[str]):
    from promokit.data import DataError

    if text is None:
        return None
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"--levels must be comma-separated numbers, got {text!r}") from None


def _graph(customers: Path, merchants: Optional[Path], edges: Optional[Path]) -> dict[str, Optional[Path]]:
    return {"customers": customers, "merchants": merchants, "edges": edges}


#: The label roles of the node tables (promokit.incentive.contract.LABELS).
LABEL_ROLES = ("redeemed", "level", "shares", "prior_shares")
LabelOpt = label_option(LABEL_ROLES)
TestFractionOpt = test_fraction_option("of the labelled customers and of the merchants, drawn at random with --seed; "
                                       "section 5 of the paper: 0.15")


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
def train(customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = DEFAULT_MODEL, levels: LevelsOpt = None,
          test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          valid_fraction: Annotated[float, typer.Option(help="Share of the rest that picks the epoch.")] = DEFAULT_VALIDATION,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, lr_decay: LrDecayOpt = None,
          patience: TRAIN.patience = None, monitor: MonitorOpt = None, seed: SeedOpt = DEFAULT_TRAIN.seed,
          params: ParamsOpt = None, categorical: CategoricalOpt = None, numeric: NumericOpt = None,
          resume: ResumeOpt = False, threads: ThreadsOpt = None):
    """Fit a response model on an incentive experiment and write it as a model directory.

    The other columns of customers and merchants are features, their types inferred (printed at the end and kept
    in config.json): --categorical / --numeric set the type of some."""
    with user_errors(), convention_errors(), flags_in_errors(FLAGS):
        set_threads(threads)
        from promokit.incentive.estimator import IncentiveModel
        from promokit.incentive.workflows import train as train_model

        config, model_params = training_options(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                                lr_decay=lr_decay, patience=patience, monitor=monitor, seed=seed)
        trained = train_model(IncentiveModel(model, model_params, config, test_fraction),
                              _graph(customers, merchants, edges), levels=_levels(levels),
                              types=types_option(categorical, numeric), labels=label_options(label, LABEL_ROLES),
                              validation=valid_fraction, checkpoint_dir=checkpoint_dir(out), resume=resume)
        estimator, counts, held = trained.model, trained.counts, trained.model.holdout
        estimator.save(out)
        finish_training(out, estimator.history)
        specs = {"customers": estimator.customer_spec}
        if not estimator.customers_only:
            specs["merchants"] = estimator.merchant_spec
        print_feature_types(specs, inferred=True)
        if estimator.customers_only:
            get_console().print(f"customers only (no merchants, no edges): {counts['unlabelled_customers']:,} "
                                "customers without a label (not in the loss)")
        else:
            get_console().print(f"graph: {counts['edges']:,} edges; {counts['isolated_customers']:,} customers and "
                                f"{counts['isolated_merchants']:,} merchants without edges; "
                                f"{counts['unlabelled_customers']:,} customers without a label (in the graph, not in "
                                "the loss)")
        held_merchants, trained_merchants = ("", "") if estimator.customers_only else (
            f" and {held['held_out_merchants']:,} of {held['merchants']:,} merchants",
            f" and {trained.merchants:,} merchants")
        print_held_out(held["held_out"] + held["held_out_merchants"] and
                       f"{held['held_out']:,} of {held['rows']:,} labelled customers{held_merchants} (drawn at "
                       f"random, seed {held['seed']})", "labelled node")
        get_console().print(f"model written to {out} (trained on {trained.customers:,} customers{trained_merchants})")


@app.command()
def predict(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
            out: Annotated[Path, typer.Option("--out", help="Folder for customers.parquet, merchants.parquet and summary.json; with --customers in parts, customers/ and merchants/ (a part per input part).")],
            executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
            threads: ThreadsOpt = None, engine: EngineOpt = None):
    """Score every customer and merchant at every value: score tables in the allocate budget wide layout (a model
    trained on customers only: --customers alone, customers.parquet only). With
    --customers in parts (a directory or glob; --edges co-partitioned with them, --merchants one table or parts)
    the graph is scored shard by shard on --executor, layer by layer (docs/scale.md)."""
    with user_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)

        from promokit.incentive.workflows import predict as predict_graph

        written = predict_graph(model, customers, merchants, edges, out,
                                deferred_executor(executor, address, workers))
        if not written.in_parts and (executor != "local" or address or workers):
            get_console().print(f"note: {customers} is one table, not parts: predicting in this process "
                                "(--executor, --address and --workers serve a graph in parts)")
        summary = written.summary
        scored = (f"{summary['customers']:,} customers" if written.merchants is None else
                  f"{summary['customers']:,} customers and {summary['merchants']:,} merchants")
        merchant_scores = "" if written.merchants is None else f" --merchants {written.merchants}"
        get_console().print(f"scores of {scored} at {len(summary['levels'])} values written to {out}; allocate them "
                            f"with: promokit allocate budget --scores {written.customers}{merchant_scores} "
                            "--ratio B --out plan/")


@app.command()
def evaluate(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json / response_curves.png / uplift_curves.png.")],
             all_rows: AllRowsOpt = False,
             truth: Annotated[Optional[Path], typer.Option("--truth", help="A synthetic world's truth_customers.parquet, for the curve error and the true uplift's AUUC.")] = None,
             label: LabelOpt = None):
    """AUC_c, MAE_c, MSE_c, MAE_m, MSE_m, uplift by sensitivity quintile and the response curves (Figures 4–5), and
    each value's uplift and Qini curves against the lowest with their AUUC and Qini coefficient (scikit-uplift's),
    on the nodes train held out (--all: every labelled node of a new experiment). The label columns are those
    train was given (--label: others)."""
    with user_errors(), convention_errors(), flags_in_errors(FLAGS):
        from promokit.experiments.incentive.world import customer_truth
        from promokit.incentive.estimator import IncentiveModel
        from promokit.incentive.evaluate import evaluation_report

        estimator = IncentiveModel.load(model)
        tables = estimator.read(_graph(customers, merchants, edges), labels=label_options(label, LABEL_ROLES))
        if not all_rows:
            held_out_rows(estimator, tables)  # what evaluate scores: its errors say --all
        evaluation = estimator.evaluate(tables, held_out=not all_rows,
                                        truth=None if truth is None else customer_truth(truth, tables.customers))
        write_metrics_report(out, f"Evaluation of {model}", estimator.model, evaluation.metrics,
                             f"{estimator.model}: {evaluation['customers']:,} customers, "
                             f"{evaluation.metrics.get('merchants', 0):,} merchants")
        evaluation_report(evaluation, f"Evaluation of {model}").write(out)
        print_table("response per value", evaluation.tables["response_curve"].set_index("level"))
        print_table(f"each value against the lowest ({estimator.levels[0]:g})",
                    evaluation.tables["uplift_by_level"].set_index("level"))


@app.command()
def bench(models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "gnn-hazard,dnn,dnn-h,sbbm,cox,dssm-c",
          seeds: Annotated[str, typer.Option(help="Comma-separated seeds (world, split and training).")] = "0,1,2",
          customers: int = 20_000, merchants: int = 2_000, degree: float = 4.0, ratio: RatioOpt = None,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, lr_decay: LrDecayOpt = None,
          patience: TRAIN.patience = None, params: ParamsOpt = None,
          out: runs_out_option("results.csv (rewritten as each model finishes), report.md / report.json / response_curves.png") = RUNS / "incentive-bench",
          threads: ThreadsOpt = None):
    """Every model on synthetic worlds (one per seed) against the oracle, and the allocation each leads to."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.incentive.bench import run_and_report

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
        from promokit.experiments.incentive.simulate import simulate as simulate_models

        result = simulate_models(world, model, ratio, seed, with_merchants)
        result.report(f"promokit incentive simulate: {world}").write(out)
        print_table(f"allocation at B = {result.budget:g}, scored by the true curves",
                    result.table[["model", "budget", "redemptions", "spend_per_redemption", "true_ratio", "payments"]]
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

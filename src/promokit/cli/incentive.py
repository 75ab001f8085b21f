"""``promokit incentive …``: synth, train, predict, evaluate, recalibrate, bench, simulate, demo, compare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli import conventions as cv
from promokit.cli import printing as pr
from promokit.cli import support as cs
from promokit.cli.options import common as co
from promokit.cli.options.incentive import (
    AllowLeakyOpt, CustomerEdgesOpt, CustomersOpt, EdgesOpt, FLAGS, ItemEdgesOpt, ItemsOpt, LABEL_ROLES, LabelOpt,
    LevelsOpt, LrDecayOpt, MerchantsOpt, MethodOpt, ModelDirOpt, ModelOpt, MonitorOpt, RatioOpt, RecalibrateByOpt,
    SeedOpt, TestFractionOpt, graph_files, levels_option,
)
from promokit.console import get_console, print_table
from promokit.data.split import TEST_FRACTION
from promokit.incentive.defaults import DEFAULT_MODEL, DEFAULT_TRAIN
from promokit.training.recalibration import DEFAULT_METHOD
from promokit.training.refit import REFIT

#: The training flags, showing the defaults the estimator trains with.
TRAIN = co.TrainingFlags(DEFAULT_TRAIN)

app = typer.Typer(help="Incentive response on a customer–merchant graph: GNN + hazard regression and its baselines, "
                       "score tables for allocate budget.", no_args_is_help=True)

@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Folder for the world's tables and true curves.")],
          customers: int = 20_000, merchants: int = 2_000,
          degree: Annotated[float, typer.Option(help="Mean number of merchants per connected customer.")] = 4.0,
          seed: SeedOpt = 0):
    """Write a synthetic experiment (customers, merchants, edges) with its true response curves."""
    with cs.user_errors():
        from promokit.data.uris import as_path
        from promokit.experiments.incentive.world import make_world, write_world

        world = make_world(customers, merchants, degree, seed=seed)
        paths = write_world(world, out)
        get_console().print(f"{customers:,} customers, {merchants:,} merchants, {len(world.edges):,} edges written to "
                            f"{as_path(out)} ({', '.join(p.name for p in paths.values())})")


@app.command()
def train(customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
          items: ItemsOpt = None, item_edges: ItemEdgesOpt = None, customer_edges: CustomerEdgesOpt = None,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = DEFAULT_MODEL, levels: LevelsOpt = None,
          test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          validation: co.ValidationOpt = None,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, lr_decay: LrDecayOpt = None,
          patience: TRAIN.patience = None, monitor: MonitorOpt = None, seed: SeedOpt = DEFAULT_TRAIN.seed,
          params: co.ParamsOpt = None, categorical: co.CategoricalOpt = None, numeric: co.NumericOpt = None,
          resume: co.ResumeOpt = False, threads: co.ThreadsOpt = None,
          allow_leaky: AllowLeakyOpt = None, device: co.DeviceOpt = None,
          executor: co.ExecutorOpt = "local", address: co.AddressOpt = None, workers: co.WorkersOpt = None,
          draws: Annotated[int, typer.Option(help="With the graph in parts: neighbourhood draws written per training customer, cycled by epoch.")] = 1,
          refit: co.RefitOpt = REFIT):
    """Fit a response model on an incentive experiment, less the --test-fraction of the nodes held out for evaluate,
    choose its epoch (lr: its L2 strengths) on the validation nodes, then fit it again on every labelled node with
    that choice (--no-refit: keep the selected model), and write it as a model directory.

    With --customers, --edges (co-partitioned) and --merchants in parts, a GNN trains over them (docs/scale.md):
    records of the labelled customers' sampled neighbourhoods, then training from them part by part in this process
    (--executor local) or data-parallel on --workers Ray Train workers (--executor ray); the refit then trains
    again from the records of every labelled node, without scoring the held-out ones first (evaluate scores them
    with the refit model, and warns; --no-refit keeps the selected model).

    The other columns of customers and merchants are features, their types inferred (printed at the end and kept
    in config.json): --categorical / --numeric set the type of some. A customer feature that alone predicts the
    redemption almost perfectly (a label leak: a column measured after the response) is warned of before training;
    drop it, or keep it with --allow-leaky."""
    with cs.user_errors(), cv.convention_errors(), cs.flags_in_errors(FLAGS):
        cs.set_threads(threads)
        from promokit.incentive.estimator import IncentiveModel
        from promokit.incentive.workflows import graph_summary, train as train_model

        config, model_params = cs.training_options(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                                lr_decay=lr_decay, patience=patience, monitor=monitor, seed=seed,
                                                device=device)
        trained = train_model(IncentiveModel(model, model_params, config, test_fraction, allow_leaky, refit),
                              graph_files(customers, merchants, edges, items, item_edges, customer_edges),
                              levels=levels_option(levels),
                              types=cs.types_option(categorical, numeric), labels=cv.label_options(label, LABEL_ROLES),
                              validation=cs.validation_option(validation), checkpoint_dir=cs.checkpoint_dir(out), resume=resume,
                              executor=cs.deferred_executor(executor, address, workers), draws=draws)
        estimator, counts, held = trained.model, trained.counts, trained.model.holdout_
        estimator.save(out)
        pr.finish_training(out, estimator.history_)
        if trained.parts:
            seeds, merchants = counts["seeds"], counts["merchant_seeds"]
            get_console().print(f"trained over {trained.parts} parts: records of {seeds['train']:,} training and "
                                f"{seeds['valid']:,} validation customers, {merchants['train']:,} and "
                                f"{merchants['valid']:,} merchants ({counts['bytes'] / 2**20:,.1f} MiB); "
                                f"{seeds['test']:,} of {held['rows']:,} labelled customers and {merchants['test']:,} "
                                f"merchants held out (by id, seed {held['seed']}); model written to {out}")
            pr.print_refit(held, "labelled customer")
            return
        if executor != "local" or address or workers or draws != 1:
            get_console().print(f"note: {customers} is one table, not parts: trained in this process (--executor, "
                                "--address, --workers and --draws serve a graph in parts)")
        specs = {"customers": estimator.customer_spec_}
        if estimator.graph_ == "merchants":
            specs["merchants"] = estimator.merchant_spec_
        if estimator.graph_ == "items":
            specs["items"] = estimator.item_spec_
        pr.print_feature_types(specs, inferred=True)
        get_console().print(graph_summary(estimator.graph_, counts))
        held_merchants, trained_merchants = ("", "") if estimator.graph_ != "merchants" else (
            f" and {held['held_out_merchants']:,} of {held['merchants']:,} merchants",
            f" and {trained.merchants:,} merchants")
        pr.print_held_out(held["held_out"] + held["held_out_merchants"] and
                       f"{held['held_out']:,} of {held['rows']:,} labelled customers{held_merchants} (drawn at "
                       f"random, seed {held['seed']})", "labelled node")
        pr.print_refit(held, "labelled customer")
        how = "selected on {}, then refit on every labelled node" if held.get("refit") else "trained on {}"
        trained_on = f"{trained.customers:,} customers{trained_merchants}"
        get_console().print(f"model written to {out} ({how.format(trained_on)})")


@app.command()
def predict(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
            items: ItemsOpt = None, item_edges: ItemEdgesOpt = None, customer_edges: CustomerEdgesOpt = None,
            out: Annotated[Path, typer.Option("--out", help="Folder for customers.parquet, merchants.parquet and summary.json; with --customers in parts, customers/ and merchants/ (a part per input part).")],
            executor: co.ExecutorOpt = "local", address: co.AddressOpt = None, workers: co.WorkersOpt = None,
            threads: co.ThreadsOpt = None, engine: co.EngineOpt = None, device: co.DeviceOpt = None):
    """Score every customer and merchant at every value: score tables in the allocate budget wide layout (a model
    trained on customers only: --customers alone, customers.parquet only; on a customer–item or customer–customer
    graph: --item-edges [--items] or --customer-edges with --customers, customers.parquet only). With
    --customers in parts (a directory or glob; --edges co-partitioned with them, --merchants one table or parts)
    the graph is scored shard by shard on --executor, layer by layer (docs/scale.md)."""
    with cs.user_errors():
        executor = cs.executor_option(executor, engine)
        cs.set_threads(threads)
        cs.set_device(device)
        from promokit.data.uris import as_path
        from promokit.incentive.workflows import predict as predict_graph

        written = predict_graph(model, customers, merchants, edges, out,
                                cs.deferred_executor(executor, address, workers),
                                graph={"items": items, "item_edges": item_edges, "customer_edges": customer_edges})
        if not written.in_parts and (executor != "local" or address or workers):
            get_console().print(f"note: {customers} is one table, not parts: predicting in this process "
                                "(--executor, --address and --workers serve a graph in parts)")
        summary = written.summary
        scored = (f"{summary['customers']:,} customers" if written.merchants is None else
                  f"{summary['customers']:,} customers and {summary['merchants']:,} merchants")
        merchant_scores = "" if written.merchants is None else f" --merchants {written.merchants}"
        get_console().print(f"scores of {scored} at {len(summary['levels'])} values written to {as_path(out)}; allocate them "
                            f"with: promokit allocate budget --scores {written.customers}{merchant_scores} "
                            "--ratio B --out plan/")


@app.command()
def evaluate(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
             items: ItemsOpt = None, item_edges: ItemEdgesOpt = None, customer_edges: CustomerEdgesOpt = None,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json / response_curves.png / uplift_curves.png.")],
             all_rows: co.AllRowsOpt = False,
             truth: Annotated[Optional[Path], typer.Option("--truth", help="A synthetic world's truth_customers.parquet, for the curve error and the true uplift's AUUC.")] = None,
             label: LabelOpt = None):
    """AUC_c, MAE_c, MSE_c, MAE_m, MSE_m, uplift by sensitivity quintile and the response curves (Figures 4–5), and
    each value's uplift and Qini curves against the lowest with their AUUC and Qini coefficient (scikit-uplift's),
    on the nodes train held out (--all: every labelled node of a new experiment). The label columns are those
    train was given (--label: others). A model refit on every node (train's default) has learnt the held-out nodes
    too: evaluate reports the metrics they gave the selected model, scored by train before the refit (--truth or
    --label score them again, by the refit model, with a warning)."""
    with cs.user_errors(out=out), cv.convention_errors(), cs.flags_in_errors(FLAGS):
        from promokit.experiments.incentive.world import customer_truth
        from promokit.incentive.estimator import IncentiveModel
        from promokit.incentive.offline_metrics import evaluation_report

        estimator = IncentiveModel.load(model)
        tables = estimator.read(graph_files(customers, merchants, edges, items, item_edges, customer_edges),
                                labels=cv.label_options(label, LABEL_ROLES))
        stored = cv.held_out_evaluation(estimator, tables, all_rows, {
            "--truth": truth is not None, "--label": cv.relabelled(label, LABEL_ROLES, estimator.labels_)})
        if stored is not None:  # a refit model: what the held-out nodes said of the selected model
            pr.write_metrics_report(out, f"Evaluation of {model}", estimator.model, dict(stored), stored.title)
            return
        if not all_rows:
            cv.held_out_rows(estimator, tables)  # what evaluate scores: its errors say --all
        evaluation = estimator.evaluate(tables, held_out=not all_rows,
                                        truth=None if truth is None else customer_truth(truth, tables.customers))
        pr.write_metrics_report(out, f"Evaluation of {model}", estimator.model, evaluation.metrics,
                             f"{estimator.model}: {evaluation['customers']:,} customers, "
                             f"{evaluation.metrics.get('merchants', 0):,} merchants")
        evaluation_report(evaluation, f"Evaluation of {model}").write(out)
        print_table("response per value", evaluation.tables["response_curve"].set_index("level"))
        print_table(f"each value against the lowest ({estimator.levels_[0]:g})",
                    evaluation.tables["uplift_by_level"].set_index("level"))


@app.command()
def recalibrate(model: ModelDirOpt, customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
                items: ItemsOpt = None, item_edges: ItemEdgesOpt = None, customer_edges: CustomerEdgesOpt = None,
                method: MethodOpt = DEFAULT_METHOD, by: RecalibrateByOpt = None, label: LabelOpt = None):
    """Fit a recalibration of a trained model's response f_c on a later experiment (each labelled customer with the
    value offered and the response) and write it into the model directory (recalibration.json): one monotone map of
    f_c at the offered value, applied at every value, so the curves still rise with the value (--by level: one map per
    value, each applied at its own). predict and evaluate
    then apply it; predict writes the model's own curves as customers_raw.parquet. The label columns are those train
    was given (--label: others)."""
    with cs.user_errors(model=model), cv.convention_errors(), cs.flags_in_errors(FLAGS):
        from promokit.incentive.workflows import recalibrate as recalibrate_model

        fitted = recalibrate_model(model, customers, merchants, edges, method=method,
                                   labels=cv.label_options(label, LABEL_ROLES),
                                   graph={"items": items, "item_edges": item_edges, "customer_edges": customer_edges},
                                   by=by)
        groups = "" if by is None else (f" by {by} ({fitted['groups']:,} values, {fitted['own_maps']:,} with a map "
                                         "of their own)")
        get_console().print(f"{method} recalibration{groups} written to {model / 'recalibration.json'}: on "
                            f"{fitted['rows']:,} customers ({fitted['positives']:,} redeemed, observed rate "
                            f"{fitted['rate']:.4f}) the mean predicted response at the offered value was "
                            f"{fitted['mean_p']:.4f}, recalibrated "
                            f"{fitted['mean_p_after']:.4f}", highlight=False, soft_wrap=True)


@app.command()
def bench(models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "gnn-hazard,dnn,dnn-h,sbbm,cox,dssm-c",
          seeds: Annotated[str, typer.Option(help="Comma-separated seeds (world, split and training).")] = "0,1,2",
          customers: int = 20_000, merchants: int = 2_000, degree: float = 4.0, ratio: RatioOpt = None,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, lr_decay: LrDecayOpt = None,
          patience: TRAIN.patience = None, params: co.ParamsOpt = None,
          out: co.runs_out_option("results.csv (rewritten as each model finishes), report.md / report.json / response_curves.png") = co.RUNS / "incentive-bench",
          threads: co.ThreadsOpt = None):
    """Every model on synthetic worlds (one per seed) against the oracle, and the allocation each leads to."""
    with cs.user_errors(out=out):
        cs.set_threads(threads)
        from promokit.experiments.incentive.bench import run_and_report

        run_and_report(cs.bench_models(models), cs.seeds_option(seeds), {"n_customers": customers, "n_merchants": merchants,
                                                               "mean_degree": degree},
                       cs.bench_training(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                      lr_decay=lr_decay, patience=patience), ratio, out)


@app.command()
def simulate(world: Annotated[Path, typer.Option("--world", help="Folder written by synth (tables and true curves).")],
             model: Annotated[list[Path], typer.Option("--model", help="Model directory trained on this world; repeat for several.")],
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             ratio: RatioOpt = None, seed: SeedOpt = 0,
             with_merchants: Annotated[bool, typer.Option("--merchants", help="Allocate the held-out merchants too, under the same budget (eq. 11's joint problem).")] = False):
    """Allocate the world's held-out customers by each model's scores under one ratio budget, then score the plans
    by the true curves: expected redemptions, spend, spend per redemption (oracle and random as bounds)."""
    with cs.user_errors(out=out):
        from promokit.experiments.incentive.simulate import simulate as simulate_models

        result = simulate_models(world, model, ratio, seed, with_merchants)
        result.report(f"promokit incentive simulate: {world}").write(out)
        print_table(f"allocation at B = {result.budget:g}, scored by the true curves",
                    result.table[["model", "budget", "redemptions", "spend_per_redemption", "true_ratio", "payments"]]
                    .set_index("model"))
        get_console().print(f"report written to {out}/report.md")


@app.command()
def demo(out: co.runs_out_option("results.csv (rewritten as each model finishes) and the report") = co.RUNS / "incentive-demo",
         customers: int = 10_000, merchants: int = 1_000, seed: SeedOpt = 0,
         models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "gnn-hazard,dnn-h,sbbm,cox"):
    """Train the paper's model and its baselines on a synthetic world, score the held-out nodes against the
    oracle and allocate a budget by each model's scores."""
    with cs.user_errors(out=out):
        from promokit.experiments.incentive.bench import run_and_report
        from promokit.experiments.incentive.demo import DEMO_TRAIN

        run_and_report(cs.bench_models(models), [seed], {"n_customers": customers, "n_merchants": merchants},
                       (DEMO_TRAIN, {}), None, out)


@app.command()
def compare(customers: CustomersOpt, merchants: MerchantsOpt = None, edges: EdgesOpt = None, *,
            items: ItemsOpt = None, item_edges: ItemEdgesOpt = None, customer_edges: CustomerEdgesOpt = None,
            out: co.CompareOutOpt, models: co.CompareModelsOpt = "lr,dnn,gnn-hazard", seeds: co.CompareSeedsOpt = "0",
            levels: LevelsOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
            validation: co.ValidationOpt = None,
            epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None,
            patience: TRAIN.patience = None, categorical: co.CategoricalOpt = None, numeric: co.NumericOpt = None,
            resamples: co.ResamplesOpt = co.RESAMPLES, threads: co.ThreadsOpt = None):
    """Fit the floor lr and --models on the same nodes with the same training budget, and write one leaderboard:
    AUC_c of the held-out customers against lr with a paired bootstrap interval, the calibration ratio, fit and
    predict seconds and a verdict per model. A GNN model on customers-only data is skipped, with the reason."""
    flags = {**FLAGS, "models": "--models", "seeds": "--seeds"}
    with cs.user_errors(out=out), cv.convention_errors(), cs.flags_in_errors(flags):
        cs.set_threads(threads)
        from promokit.incentive.contract import read_tables

        tables = read_tables(graph_files(customers, merchants, edges, items, item_edges, customer_edges),
                             levels=levels_option(levels), types=cs.types_option(categorical, numeric),
                             labels=cv.label_options(label, LABEL_ROLES))
        pr.run_compare("incentive", tables, models, seeds, out, resamples, options={"test_fraction": test_fraction},
                       validation=cs.validation_option(validation), epochs=epochs, batch_size=batch_size, lr=lr, patience=patience)

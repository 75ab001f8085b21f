"""``promokit conversion …``: train, tune, predict, evaluate, recalibrate, demo, bench, synth, kuairand (from
:mod:`promokit.cli.datasets`), compare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli import conventions as cv
from promokit.cli import printing as pr
from promokit.cli import support as cs
from promokit.cli.datasets import kuairand
from promokit.cli.options import common as co
from promokit.cli.options import conversion as opt
from promokit.console import get_console, print_table
from promokit.conversion.contract import LABEL_ROLES
from promokit.conversion.defaults import DEFAULT_MODEL, DEFAULT_TRAIN, REPAIR_LABELS
from promokit.data.split import TEST_FRACTION
from promokit.data.uris import as_path
from promokit.training.recalibration import DEFAULT_METHOD
from promokit.training.refit import REFIT

#: The training flags, showing the defaults the estimator trains with.
TRAIN = co.TrainingFlags(DEFAULT_TRAIN)

app = typer.Typer(help="Conversion over the entire space: ESM², ESMM, DNN, DNN-OS, GBDT, the linear floor LR, and "
                  "GMCM (micro-behaviour graph) with its baselines and ablations.", no_args_is_help=True)


@app.command()
def train(data: opt.TrainDataOpt, out: opt.TrainOutOpt, model: opt.ModelOpt = DEFAULT_MODEL, spec: opt.SpecOpt = None,
          validation: co.ValidationOpt = None, valid_split: opt.ValidSplitOpt = None, test_fraction: opt.TestFractionOpt = TEST_FRACTION, label: opt.LabelOpt = None,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None,
          patience: TRAIN.patience = None, monitor: opt.MonitorOpt = None,
          embedding_decay: TRAIN.embedding_decay = None, weight_decay: TRAIN.weight_decay = None,
          min_count: co.MinCountOpt = None, seed: opt.SeedOpt = DEFAULT_TRAIN.seed, params: co.ParamsOpt = None,
          repair_labels: opt.RepairLabelsOpt = REPAIR_LABELS, resume: co.ResumeOpt = False,
          micro_behaviors: opt.MicroOpt = None, wide: co.WideOpt = None, categorical: co.CategoricalOpt = None,
          numeric: co.NumericOpt = None, allow_leaky: opt.AllowLeakyOpt = None, executor: co.ExecutorOpt = "local",
          address: co.AddressOpt = None, workers: co.WorkersOpt = None, threads: co.ThreadsOpt = None,
          engine: co.EngineOpt = None, device: co.DeviceOpt = None, refit: co.RefitOpt = REFIT):
    """Fit a model on an impression table, less the --test-fraction held out for evaluate, choose its epoch (or L2
    strength, or trees) on the validation rows, then fit it again on every row with that choice (--no-refit: keep
    the selected model), and write it as a model directory.

    With --data a directory or glob of Parquet parts, or with --executor ray, the network trains over the parts
    without reading the table whole: the vocabulary is counted part by part, then the model trains part by part in
    this process (--executor local) or data-parallel on --workers Ray Train workers (--executor ray; DDP, batch size
    the global batch). Validation rows are then a seeded random share of each part (about the --validation
    fraction), the latest rows by time, or the --validation table.

    Without feature lists in the spec, every column but the labels is a feature, its type inferred (printed at the
    end and kept in config.json): --categorical / --numeric set the type of some. A feature that alone predicts a
    label almost perfectly (a label leak: a column measured after the outcome) is warned of before training; drop it,
    or keep it with --allow-leaky."""
    with cs.user_errors(), cs.flags_in_errors(opt.TRAIN_FLAGS), cv.convention_errors():
        executor = cs.executor_option(executor, engine)
        cs.set_threads(threads)
        from promokit.conversion.contract import conversion_spec
        from promokit.conversion.estimator import ConversionModel, describe_holdout

        config, model_params = cs.training_options(DEFAULT_TRAIN, params, min_count, epochs=epochs,
                                                   batch_size=batch_size, lr=lr, patience=patience, monitor=monitor,
                                                   weight_decay=weight_decay, embedding_decay=embedding_decay,
                                                   seed=seed, wide=wide, device=device)
        given = conversion_spec(spec, micro_behaviors=micro_behaviors, types=cs.types_option(categorical, numeric),
                                labels=cv.label_options(label, LABEL_ROLES), allow_leaky=allow_leaky)
        estimator = ConversionModel(model, model_params, config, given, repair_labels, test_fraction, refit)
        estimator.fit(data, validation=cs.validation_option(validation), validation_split=valid_split,
                      executor=cs.deferred_executor(executor, address, workers),
                      checkpoint_dir=cs.checkpoint_dir(out), resume=resume)
        estimator.save(out)
        report = estimator.report_
        console = get_console()
        for role, count in report.labels.repaired.items():
            console.print(f"repaired {count} rows where {role}=1 without a click")
        pr.finish_training(out, estimator.history_)
        pr.print_feature_types({"impression": estimator.feature_spec_}, inferred=not given.features)
        pr.print_held_out(describe_holdout(estimator.holdout_), "row")
        pr.print_refit(estimator.holdout_, "row")
        console.print(f"model written to {out} ({report.n_train} training rows, {report.n_valid} validation rows)")


@app.command()
def tune(data: opt.DataOpt, out: opt.TuneOutOpt, model: opt.ModelOpt = DEFAULT_MODEL, spec: opt.SpecOpt = None,
         validation: co.ValidationOpt = None, valid_split: opt.ValidSplitOpt = None, metric: opt.TuneMetricOpt = "ctcvr_auc", trials: co.TrialsOpt = 30,
         timeout: co.TimeoutOpt = None, storage: co.StorageOpt = None, epochs: TRAIN.epochs = None,
         batch_size: TRAIN.batch_size = None, patience: TRAIN.patience = None, seed: opt.SeedOpt = DEFAULT_TRAIN.seed,
         repair_labels: opt.RepairLabelsOpt = REPAIR_LABELS, micro_behaviors: opt.MicroOpt = None):
    """Search the model's hyper-parameters (Optuna TPE, median pruning per epoch) on the validation rows; write
    the best as params.json for train --params."""
    flags = {**opt.MICRO_FLAG, **co.VALIDATION_FLAG, "trials": "--trials", "metric": "--metric"}
    with cs.user_errors(out=out, storage=storage), cs.flags_in_errors(flags):
        from promokit.conversion.contract import conversion_spec
        from promokit.data import read_table
        from promokit.experiments.conversion.tune import tune_conversion

        config, _ = cs.training_options(DEFAULT_TRAIN, None, None, epochs=epochs, batch_size=batch_size,
                                        patience=patience, seed=seed)
        valid_fraction, valid = opt.tune_validation(cs.validation_option(validation))
        table = read_table(data)
        valid = read_table(valid) if valid is not None else None
        feature_spec = conversion_spec(spec, micro_behaviors=micro_behaviors)

        def search(path, on_trial):
            return tune_conversion(model, table, valid, feature_spec, config, metric, trials, timeout, str(path),
                                   valid_fraction=valid_fraction, valid_split=valid_split,
                                   repair_labels=repair_labels, on_trial=on_trial)

        pr.run_tune(out, storage, f"promokit conversion tune: {model}",
                    f"data: {data}; model {model}; maximise validation {metric}; {trials} trials; seed {seed}", search)


@app.command()
def predict(model: opt.ModelDirOpt, data: opt.DataOpt, out: opt.PredictOutOpt, keep: opt.KeepOpt = None,
            executor: co.ExecutorOpt = "local", address: co.AddressOpt = None, workers: co.WorkersOpt = None,
            threads: co.ThreadsOpt = None, engine: co.EngineOpt = None, device: co.DeviceOpt = None):
    """Write p_ctr, p_cvr, p_ctavr (ESM²), p_ctcvr and p_node_<name> (GMCM, MCM: one per micro-behaviour) per row,
    with the input's key columns (a recalibrated model: also the model's own p_ctr_raw, p_cvr_raw, p_ctcvr_raw)."""
    with cs.user_errors():
        executor = cs.executor_option(executor, engine)
        cs.set_threads(threads)
        cs.set_device(device)
        from promokit.conversion.workflows import predict as predict_table

        summary, written = predict_table(model, data, out, cs.deferred_executor(executor, address, workers), keep=keep,
                                         file=cv.predictions_folder(out))
        get_console().print(f"{summary['rows']} predictions written to {written}")


@app.command()
def evaluate(model: opt.ModelDirOpt, data: opt.DataOpt, out: opt.ReportOutOpt,
             gauc_weight: opt.GaucWeightOpt = "impressions", micro_behaviors: opt.EvaluateMicroOpt = None,
             all_rows: co.AllRowsOpt = False, label: opt.LabelOpt = None):
    """Score a trained model on the rows train held out of the labelled table (with --all: every row of new data):
    AUCs, GAUC, logloss, MSE, P/R/F1 at top k (+ the node AUCs of a micro-behaviour model)."""
    flags = {**opt.MICRO_FLAG, "repair_labels": "--repair-labels"}
    with cs.user_errors(out=out), cs.flags_in_errors(flags), cv.convention_errors():
        from promokit.conversion import ConversionModel

        estimator = ConversionModel.load(model)
        stored = cv.held_out_evaluation(estimator, data, all_rows, {
            "--micro-behaviors": micro_behaviors, "--gauc-weight": gauc_weight != "impressions",
            "--label": cv.relabelled(label, LABEL_ROLES, estimator.feature_spec_.labels)})
        if stored is not None:
            pr.write_metrics_report(out, f"Evaluation of {model}", estimator.model, dict(stored), stored.title,
                                    stored.tables)
            return
        rows = None if all_rows else cv.held_out_rows(estimator, data)
        evaluation = estimator.evaluate(data, rows=rows, gauc_weight=gauc_weight, micro_behaviors=micro_behaviors,
                                        labels=cv.label_options(label, LABEL_ROLES))
        pr.write_metrics_report(out, f"Evaluation of {model}", estimator.model, dict(evaluation),
                             f"{estimator.model} on {data.name}" + ("" if rows is None else
                                                                   f" ({len(rows):,} rows held out by train)"),
                             evaluation.tables)


@app.command()
def recalibrate(model: opt.ModelDirOpt, data: opt.DataOpt, method: opt.MethodOpt = DEFAULT_METHOD, label: opt.LabelOpt = None):
    """Fit a recalibration of a trained model's p_ctcvr (against click & purchase) and p_ctr (against the click) on
    every row of a labelled table of a later period, and write it into the model directory (recalibration.json):
    predict and evaluate then apply it, p_cvr following as p_ctcvr / p_ctr, and predict keeps the model's own
    probabilities as p_ctr_raw, p_cvr_raw, p_ctcvr_raw."""
    flags = {"method": "--method", "repair_labels": "--repair-labels"}
    with cs.user_errors(model=model), cs.flags_in_errors(flags), cv.convention_errors():
        from promokit.conversion.workflows import recalibrate as recalibrate_model

        fitted = recalibrate_model(model, data, method=method, labels=cv.label_options(label, LABEL_ROLES))
        for name, on in fitted.items():
            get_console().print(f"{name}: on {on['rows']:,} impressions ({on['positives']:,} positive, observed rate "
                                f"{on['rate']:.4f}) the mean predicted was {on['mean_p']:.4f}, recalibrated "
                                f"{on['mean_p_after']:.4f}", highlight=False, soft_wrap=True)
        get_console().print(f"{method} recalibration written to {model / 'recalibration.json'}")


@app.command()
def demo(out: opt.DemoOutOpt = co.RUNS / "conversion-demo",
         users: int = 2000, items: int = 800, impressions: int = 300_000, seed: opt.SeedOpt = 0,
         models: opt.ModelsOpt = opt.MODELS, micro_behaviors: opt.DemoMicroOpt = 0):
    """Train LR, GBDT, DNN, DNN-OS, ESMM and ESM² (or --models) on the synthetic world and compare them with the
    oracle."""
    with cs.user_errors(out=out):
        from promokit.experiments.conversion.demo import run_demo
        from promokit.experiments.finished_rows import FinishedRows

        console = get_console()
        console.print(f"synthetic world: {impressions:,} impressions, {users:,} users, {items:,} items (seed {seed})")

        def done(row):
            console.print(f"  {row['model']:>7}: CVR AUC {row['cvr_auc']:.4f}  CTCVR AUC {row['ctcvr_auc']:.4f}  "
                          f"({row['fit_seconds']:.0f} s)")

        with FinishedRows(out, "promokit conversion demo", on_result=done) as finished:
            _, report = run_demo(users, items, impressions, seed, cs.bench_models(models), on_result=finished.add,
                                     n_micro=micro_behaviors)
        report.write(out)
        print_table("test metrics", report.sections[2][1])
        console.print(f"report written to {out}/report.md (+ report.json, results.csv, auc_vs_oracle.png)")


@app.command()
def bench(data: Annotated[Optional[Path], typer.Option("--data", help=f"Impression table ({co.TABLE_HELP}); the synthetic world when omitted.")] = None,
          spec: opt.SpecOpt = None, models: opt.ModelsOpt = opt.MODELS, seeds: opt.SeedsOpt = "0,1,2",
          base: opt.BaseOpt = "lr", split: opt.SplitOpt = None, valid_split: opt.BenchValidSplitOpt = None,
          impressions: int = 300_000, users: int = 2000, items: int = 800,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None,
          patience: TRAIN.patience = None, monitor: opt.MonitorOpt = None,
          embedding_decay: TRAIN.embedding_decay = None, min_count: co.MinCountOpt = None,
          params: opt.BenchParamsOpt = None, tuned: co.TunedOpt = None,
          repair_labels: opt.RepairLabelsOpt = REPAIR_LABELS, wide: co.WideOpt = None,
          micro_behaviors: opt.BenchMicroOpt = None, out: opt.BenchOutOpt = None, threads: co.ThreadsOpt = None):
    """Several models × seeds on one split: mean ± std per metric and RelaImpr against --base (the linear floor)."""
    with cs.user_errors(out=out), cs.flags_in_errors(opt.MICRO_FLAG):
        cs.set_threads(threads)
        from promokit.experiments.conversion.bench import run_bench
        from promokit.experiments.finished_rows import FinishedRows

        names = cs.bench_models(models)
        config, net = cs.training_options(DEFAULT_TRAIN, params, None, epochs=epochs, batch_size=batch_size, lr=lr,
                                       patience=patience, monitor=monitor, embedding_decay=embedding_decay, wide=wide)
        found = cs.tuned_option(tuned, names)
        console = get_console()

        def done(row):
            console.print(f"  seed {row['seed']} {row['model']:>7}: CVR AUC {row['cvr_auc']:.4f}  "
                          f"CTCVR AUC {row['ctcvr_auc']:.4f}  ({row['fit_seconds']:.0f} s)")

        with FinishedRows(out, "promokit conversion bench", on_result=done) as finished:
            run = run_bench(names, cs.seeds_option(seeds), data, spec, split, valid_split, micro_behaviors, users,
                            items, impressions, config, net, found, base, min_count, repair_labels,
                            on_result=finished.add)
        print_table("mean ± std over seeds", run.summary)
        for title, table in run.tables.items():
            print_table(title, table)
        if out is not None:
            parts = run.split
            pr.write_bench_report(out, "promokit conversion bench", run.results, run.oracle,
                               f"data: {data or 'synthetic world'}; split: {split or 'default'}; seeds: {seeds}; "
                               f"{len(parts.train)}/{len(parts.valid)}/{len(parts.test)} rows", run.summary, run.tables,
                               floor=(base, ("cvr_auc", "ctcvr_auc")))


@app.command()
def synth(out: opt.SynthOutOpt, users: int = 2000, items: int = 800, impressions: int = 300_000,
          seed: opt.SeedOpt = 0, truth: opt.TruthOpt = False, micro_behaviors: opt.SynthMicroOpt = 0):
    """Write the synthetic impression world as a table to try the other commands on.

    Columns: the categorical and numeric features, the labels click, daction, purchase, and with
    --micro-behaviors N the N micro-behaviour labels (plus OUT.spec.yaml, their feature spec)."""
    with cs.user_errors():
        from promokit.experiments.conversion.world import write_world

        world, spec_path = write_world(out, users, items, impressions, seed, truth, micro_behaviors)
        out, spec_path = as_path(out), None if spec_path is None else as_path(spec_path)  # a URI printed whole
        get_console().print(f"{len(world.table):,} impressions written to {out}; categorical: {world.categorical}; "
                            f"numeric: {world.numeric}")
        if spec_path is not None:
            get_console().print(f"micro-behaviour labels: {world.micro_behaviors}; spec written to {spec_path} "
                                f"(try: promokit conversion train --data {out} --spec {spec_path} --model gmcm --out "
                                "model)")


app.command("kuairand")(kuairand)


@app.command()
def compare(data: opt.DataOpt, out: co.CompareOutOpt, models: co.CompareModelsOpt = "lr,gbdt,esmm,esm2",
            spec: opt.SpecOpt = None, seeds: co.CompareSeedsOpt = "0", test_fraction: opt.TestFractionOpt = TEST_FRACTION,
            validation: co.ValidationOpt = None, micro_behaviors: opt.MicroOpt = None,
            label: opt.LabelOpt = None, epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None,
            lr: TRAIN.lr = None, patience: TRAIN.patience = None, resamples: co.ResamplesOpt = co.RESAMPLES,
            threads: co.ThreadsOpt = None):
    """Fit the floor lr and --models on the same split with the same training budget, and write one leaderboard:
    the held-out CTCVR and CVR AUCs, each against lr with a paired bootstrap interval, the calibration ratio, fit
    and predict seconds and a verdict per model."""
    flags = {**opt.MICRO_FLAG, **co.VALIDATION_FLAG, "models": "--models", "seeds": "--seeds",
             "test_fraction": "--test-fraction"}
    with cs.user_errors(out=out), cs.flags_in_errors(flags), cv.convention_errors():
        cs.set_threads(threads)
        from promokit.conversion.contract import conversion_spec

        given = conversion_spec(spec, micro_behaviors=micro_behaviors, labels=cv.label_options(label, LABEL_ROLES))
        pr.run_compare("conversion", data, models, seeds, out, resamples,
                       options={"spec": given, "test_fraction": test_fraction}, validation=cs.validation_option(validation),
                       epochs=epochs, batch_size=batch_size, lr=lr, patience=patience)

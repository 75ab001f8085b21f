"""``promokit conversion …``: train, predict, evaluate, demo, bench, synth, kuairand."""

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
    MinCountOpt,
    NumericOpt,
    ParamsOpt,
    ResumeOpt,
    StorageOpt,
    ThreadsOpt,
    TimeoutOpt,
    TrainingFlags,
    TrialsOpt,
    TunedOpt,
    WideOpt,
    WorkersOpt,
    bench_models,
    checkpoint_dir,
    convention_errors,
    deferred_executor,
    executor_option,
    finish_training,
    flags_in_errors,
    held_out_rows,
    label_option,
    label_options,
    predictions_folder,
    print_feature_types,
    print_held_out,
    run_tune,
    runs_out_option,
    seeds_option,
    set_threads,
    test_fraction_option,
    training_options,
    tuned_params,
    types_option,
    user_errors,
    write_bench_report,
    write_metrics_report,
)
from promokit.console import get_console, print_table
from promokit.conversion.contract import LABEL_ROLES
from promokit.conversion.defaults import DEFAULT_MODEL, DEFAULT_TRAIN, REPAIR_LABELS, VALIDATION_FRACTION
from promokit.data.split import TEST_FRACTION

#: The training flags, showing the defaults the estimator trains with.
TRAIN = TrainingFlags(DEFAULT_TRAIN)
#: Library arguments → the flags that give them, for the messages of the library.
MICRO_FLAG = {"micro_behaviors": "--micro-behaviors"}

app = typer.Typer(help="Conversion over the entire space: ESM², ESMM, DNN, DNN-OS, GBDT, the linear floor LR, and "
                  "GMCM (micro-behaviour graph) with its baselines and ablations.",
                  no_args_is_help=True)

DataOpt = Annotated[Path, typer.Option("--data", help=f"Impression table: {TABLE_HELP} (predict scores part by part; tune and evaluate read the parts into one frame).")]
SpecOpt = Annotated[Optional[Path], typer.Option("--spec", help="YAML/JSON feature spec; inferred when omitted.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for splits, initialisation and shuffling.")]
MicroOpt = Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated 0/1 micro-behaviour label columns (post-click actions: cart, favorite, …; labels, never features), the nodes of GMCM's graph; replaces the spec's micro_behaviors.")]
ModelOpt = Annotated[str, typer.Option("--model", help="lr | gbdt | dnn | dnn-os | esmm | esm2; with micro-behaviours: gmcm | mcm-2 | mcm-10 | mcm-gru; GMCM's baselines: base | division | resnet | dcn")]
ValidSplitOpt = Annotated[Optional[str], typer.Option("--valid-split", help="How the validation rows are cut from --data: random, or time:<column> (the latest rows). Default: time:<the spec's time_key> when the spec names one, else random.")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation rows: loss | ctr_auc | cvr_auc | ctcvr_auc.")]
LabelOpt = label_option(LABEL_ROLES)
TestFractionOpt = test_fraction_option("the latest rows by the spec's time_key when it names one, else each row drawn at random with --seed")
TrainDataOpt = Annotated[Path, typer.Option("--data", help=f"Impression table: {TABLE_HELP} (the networks train part by part, never reading it whole; gbdt and lr read the parts into one frame).")]


@app.command()
def train(data: TrainDataOpt,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = DEFAULT_MODEL, spec: SpecOpt = None,
          valid: Annotated[Optional[Path], typer.Option("--valid", help=f"Validation table for early stopping: {TABLE_HELP}.")] = None,
          valid_fraction: Annotated[float, typer.Option(help="Share of --data that validates when --valid is not given.")] = VALIDATION_FRACTION,
          valid_split: ValidSplitOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          monitor: MonitorOpt = None, embedding_decay: TRAIN.embedding_decay = None, weight_decay: TRAIN.weight_decay = None,
          min_count: MinCountOpt = None, seed: SeedOpt = DEFAULT_TRAIN.seed, params: ParamsOpt = None,
          repair_labels: Annotated[bool, typer.Option(help="Set daction/purchase/micro-behaviours to 0 on unclicked rows instead of failing.")] = REPAIR_LABELS,
          resume: ResumeOpt = False, micro_behaviors: MicroOpt = None, wide: WideOpt = None,
          categorical: CategoricalOpt = None, numeric: NumericOpt = None,
          allow_leaky: Annotated[Optional[str], typer.Option("--allow-leaky", help="Comma-separated feature columns the label-leak guard leaves alone (added to the spec's allow_leaky): those that alone predict a label almost perfectly, and are meant to.")] = None,
          executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
          threads: ThreadsOpt = None, engine: EngineOpt = None):
    """Fit a model on an impression table, less the --test-fraction held out for evaluate, and write it as a model
    directory.

    With --data a directory or glob of Parquet parts, or with --executor ray, the network trains over the parts
    without reading the table whole: the vocabulary is counted part by part, then the model trains part by part in
    this process (--executor local) or data-parallel on --workers Ray Train workers (--executor ray; DDP, batch size
    the global batch). Validation rows are then a seeded random share of each part (about --valid-fraction), the
    latest rows by time, or --valid.

    Without feature lists in the spec, every column but the labels is a feature, its type inferred (printed at the
    end and kept in config.json): --categorical / --numeric set the type of some. A feature that alone predicts a
    label almost perfectly (a label leak: a column measured after the outcome) is warned of before training; drop it,
    or keep it with --allow-leaky."""
    flags = {**MICRO_FLAG, "wide": "--wide", "allow_leaky": "--allow-leaky", "validation_split": "--valid-split",
             "data": "--data", "validation": "--valid" if valid else "--valid-fraction", "executor": "--executor"}
    with user_errors(), flags_in_errors(flags), convention_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.conversion.contract import conversion_spec
        from promokit.conversion.estimator import ConversionModel, describe_holdout

        config, model_params = training_options(DEFAULT_TRAIN, params, min_count, epochs=epochs, batch_size=batch_size,
                                                lr=lr, patience=patience, monitor=monitor, weight_decay=weight_decay,
                                                embedding_decay=embedding_decay, seed=seed, wide=wide)
        given = conversion_spec(spec, micro_behaviors=micro_behaviors, types=types_option(categorical, numeric),
                                labels=label_options(label, LABEL_ROLES), allow_leaky=allow_leaky)
        estimator = ConversionModel(model, model_params, config, given, repair_labels, test_fraction)
        estimator.fit(data, validation=valid or valid_fraction, validation_split=valid_split,
                      executor=deferred_executor(executor, address, workers), checkpoint_dir=checkpoint_dir(out),
                      resume=resume)
        estimator.save(out)
        report = estimator.report
        console = get_console()
        for role, count in report.labels.repaired.items():
            console.print(f"repaired {count} rows where {role}=1 without a click")
        finish_training(out, report.history)
        print_feature_types({"impression": estimator.feature_spec}, inferred=not given.features)
        print_held_out(describe_holdout(estimator.holdout), "row")
        console.print(f"model written to {out} ({report.n_train} training rows, {report.n_valid} validation rows)")


@app.command()
def tune(data: DataOpt,
         out: Annotated[Path, typer.Option("--out", help="Folder for params.json (the best parameters), the report and study.db.")],
         model: ModelOpt = DEFAULT_MODEL, spec: SpecOpt = None,
         valid: Annotated[Optional[Path], typer.Option("--valid", help=f"Validation table the trials are scored on: {TABLE_HELP}.")] = None,
         valid_fraction: Annotated[float, typer.Option(help="Share of --data that validates when --valid is not given.")] = VALIDATION_FRACTION,
         valid_split: ValidSplitOpt = None,
         metric: Annotated[str, typer.Option("--metric", help="Validation AUC to maximise: ctr_auc | cvr_auc | ctcvr_auc.")] = "ctcvr_auc",
         trials: TrialsOpt = 30, timeout: TimeoutOpt = None, storage: StorageOpt = None,
         epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, patience: TRAIN.patience = None,
         seed: SeedOpt = DEFAULT_TRAIN.seed, repair_labels: bool = REPAIR_LABELS, micro_behaviors: MicroOpt = None):
    """Search the model's hyper-parameters (Optuna TPE, median pruning per epoch) on the validation rows; write
    the best as params.json for train --params."""
    with user_errors(), flags_in_errors({**MICRO_FLAG, "trials": "--trials", "metric": "--metric"}):
        from promokit.conversion.contract import conversion_spec
        from promokit.data import DataError, read_table
        from promokit.experiments.conversion.tune import METRICS, tune_conversion

        if metric not in METRICS:
            raise DataError(f"--metric must be one of {list(METRICS)}, got {metric!r}")
        config, _ = training_options(DEFAULT_TRAIN, None, None, epochs=epochs, batch_size=batch_size, patience=patience,
                                     seed=seed)
        table = read_table(data)
        validation = read_table(valid) if valid else None
        feature_spec = conversion_spec(spec, micro_behaviors=micro_behaviors)

        def search(path, on_trial):
            return tune_conversion(model, table, validation, feature_spec, config, metric, trials, timeout, str(path),
                                   valid_fraction=valid_fraction, valid_split=valid_split,
                                   repair_labels=repair_labels, on_trial=on_trial)

        run_tune(out, storage, f"promokit conversion tune: {model}",
                 f"data: {data}; model {model}; maximise validation {metric}; {trials} trials; seed {seed}", search)


@app.command()
def predict(model: Annotated[Path, typer.Option("--model", help="Model directory written by train.")],
            data: DataOpt,
            out: Annotated[Path, typer.Option("--out", help="Folder for predictions.parquet (predictions/, part k from input part k, when --data is in parts) and summary.json.")],
            keep: Annotated[Optional[list[str]], typer.Option("--keep", help="Input columns copied to the output (default: user_id, item_id when present).")] = None,
            executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
            threads: ThreadsOpt = None, engine: EngineOpt = None):
    """Write p_ctr, p_cvr, p_ctavr (ESM²), p_ctcvr and p_node_<name> (GMCM, MCM: one per micro-behaviour) per row,
    with the input's key columns."""
    with user_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.conversion.workflows import predict as predict_table

        summary, written = predict_table(model, data, out, deferred_executor(executor, address, workers), keep=keep,
                                         file=predictions_folder(out))
        get_console().print(f"{summary['rows']} predictions written to {written}")


@app.command()
def evaluate(model: Annotated[Path, typer.Option("--model", help="Model directory written by train.")],
             data: DataOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             gauc_weight: Annotated[str, typer.Option(help="impressions | uniform (the ESM² paper uses uniform).")] = "impressions",
             micro_behaviors: Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated micro-behaviour label columns whose node AUCs to report (node_auc_<name>); default: those the model was trained with, when the table has them. A model that predicts nodes is scored only on nodes it was trained on.")] = None,
             all_rows: AllRowsOpt = False, label: LabelOpt = None):
    """Score a trained model on the rows train held out of the labelled table (with --all: every row of new data):
    AUCs, GAUC, logloss, MSE, P/R/F1 at top k (+ the node AUCs of a micro-behaviour model)."""
    with user_errors(), flags_in_errors({**MICRO_FLAG, "repair_labels": "--repair-labels"}), convention_errors():
        from promokit.conversion import ConversionModel

        estimator = ConversionModel.load(model)
        rows = None if all_rows else held_out_rows(estimator, data)
        evaluation = estimator.evaluate(data, rows=rows, gauc_weight=gauc_weight, micro_behaviors=micro_behaviors,
                                        labels=label_options(label, LABEL_ROLES))
        write_metrics_report(out, f"Evaluation of {model}", estimator.model, dict(evaluation),
                             f"{estimator.model} on {data.name}" + ("" if rows is None else
                                                                   f" ({len(rows):,} rows held out by train)"),
                             evaluation.tables)


@app.command()
def demo(out: runs_out_option("results.csv (rewritten as each model finishes) and the report") = RUNS / "conversion-demo",
         users: int = 2000, items: int = 800, impressions: int = 300_000, seed: SeedOpt = 0,
         models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "lr,gbdt,dnn,dnn-os,esmm,esm2",
         micro_behaviors: Annotated[int, typer.Option("--micro-behaviors", min=0, help="Give the world this many micro-behaviour labels (for gmcm and the mcm-* ablations, e.g. --models esmm,gmcm,mcm-10 --micro-behaviors 10); the report adds GMCM's Tables 2–3 and the node AUCs.")] = 0):
    """Train LR, GBDT, DNN, DNN-OS, ESMM and ESM² (or --models) on the synthetic world and compare them with the
    oracle."""
    with user_errors():
        from promokit.experiments.conversion.demo import run_demo
        from promokit.experiments.finished_rows import FinishedRows

        console = get_console()
        console.print(f"synthetic world: {impressions:,} impressions, {users:,} users, {items:,} items (seed {seed})")

        def done(row):
            console.print(f"  {row['model']:>7}: CVR AUC {row['cvr_auc']:.4f}  CTCVR AUC {row['ctcvr_auc']:.4f}  "
                          f"({row['fit_seconds']:.0f} s)")

        with FinishedRows(out, "promokit conversion demo", on_result=done) as finished:
            table, report = run_demo(users, items, impressions, seed, bench_models(models), on_result=finished.add,
                                     n_micro=micro_behaviors)
        report.write(out)
        print_table("test metrics", report.sections[2][1])
        console.print(f"report written to {out}/report.md (+ report.json, results.csv, auc_vs_oracle.png)")


@app.command()
def bench(data: Annotated[Optional[Path], typer.Option("--data", help=f"Impression table ({TABLE_HELP}); the synthetic world when omitted.")] = None,
          spec: SpecOpt = None,
          models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "lr,gbdt,dnn,dnn-os,esmm,esm2",
          seeds: Annotated[str, typer.Option(help="Comma-separated training seeds.")] = "0,1,2",
          base: Annotated[str, typer.Option(help="Model RelaImpr is measured against.")] = "lr",
          split: Annotated[Optional[str], typer.Option(help="How the test rows (the last 10 %) are cut: random, or time:<column> to train on the past and test on the future. Default: time:<the spec's time_key> when it names one, else random.")] = None,
          valid_split: Annotated[Optional[str], typer.Option(help="How the validation rows (10 %) are cut from the rest; default: as --split.")] = None,
          impressions: int = 300_000, users: int = 2000, items: int = 800,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          monitor: MonitorOpt = None, embedding_decay: TRAIN.embedding_decay = None, min_count: MinCountOpt = None,
          params: Annotated[Optional[str], typer.Option(help='Parameters for every neural model (JSON or a JSON file); they override the defaults, e.g. \'{"dropout": 0.2}\'.')] = None,
          tuned: TunedOpt = None, repair_labels: bool = REPAIR_LABELS, wide: WideOpt = None,
          micro_behaviors: Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated 0/1 micro-behaviour label columns of --data (labels, never features; replaces the spec's micro_behaviors). On the synthetic world: a count N (its first N of cart, favorite, review, qa, zoom, sku, share, detail, coupon, buy_button) or their names; the oracle row then has their true node AUCs.")] = None,
          out: Annotated[Optional[Path], typer.Option("--out", help="Folder for results.csv (rewritten as each model finishes) and report.md / report.json.")] = None,
          threads: ThreadsOpt = None):
    """Several models × seeds on one split: mean ± std per metric and RelaImpr against --base (the linear floor)."""
    with user_errors(), flags_in_errors(MICRO_FLAG):
        set_threads(threads)
        from promokit.experiments.conversion.bench import run_bench
        from promokit.experiments.finished_rows import FinishedRows

        names = bench_models(models)
        config, net = training_options(DEFAULT_TRAIN, params, None, epochs=epochs, batch_size=batch_size, lr=lr,
                                       patience=patience, monitor=monitor, embedding_decay=embedding_decay, wide=wide)
        found = tuned_params(tuned, names)
        console = get_console()

        def done(row):
            console.print(f"  seed {row['seed']} {row['model']:>7}: CVR AUC {row['cvr_auc']:.4f}  "
                          f"CTCVR AUC {row['ctcvr_auc']:.4f}  ({row['fit_seconds']:.0f} s)")

        with FinishedRows(out, "promokit conversion bench", on_result=done) as finished:
            run = run_bench(names, seeds_option(seeds), data, spec, split, valid_split, micro_behaviors, users, items,
                            impressions, config, net, found, base, min_count, repair_labels, on_result=finished.add)
        print_table("mean ± std over seeds", run.summary)
        for title, table in run.tables.items():
            print_table(title, table)
        if out is not None:
            parts = run.split
            write_bench_report(out, "promokit conversion bench", run.results, run.oracle,
                               f"data: {data or 'synthetic world'}; split: {split or 'default'}; seeds: {seeds}; "
                               f"{len(parts.train)}/{len(parts.valid)}/{len(parts.test)} rows", run.summary, run.tables,
                               floor=(base, ("cvr_auc", "ctcvr_auc")))


@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Parquet file for the impression table.")],
          users: int = 2000, items: int = 800, impressions: int = 300_000, seed: SeedOpt = 0,
          truth: Annotated[bool, typer.Option(help="Also write the true probabilities as columns true_p_* (with micro-behaviours: true_p_node_<name>, P(behaviour | click, features)).")] = False,
          micro_behaviors: Annotated[int, typer.Option("--micro-behaviors", min=0, help="Add this many 0/1 micro-behaviour label columns (GMCM): cart, favorite, review, qa, zoom, sku, share, detail, coupon, buy_button, then micro_11 …; 0 on unclicked rows. They are post-click labels, never features, so a spec declaring them (micro_behaviors: […]) is written beside the table as OUT.spec.yaml: pass it with --spec.")] = 0):
    """Write the synthetic impression world as a table to try the other commands on.

    Columns: the categorical and numeric features, the labels click, daction, purchase, and with
    --micro-behaviors N the N micro-behaviour labels (plus OUT.spec.yaml, their feature spec)."""
    with user_errors():
        from promokit.experiments.conversion.world import write_world

        world, spec_path = write_world(out, users, items, impressions, seed, truth, micro_behaviors)
        console = get_console()
        console.print(f"{len(world.table):,} impressions written to {out}; categorical: {world.categorical}; "
                      f"numeric: {world.numeric}")
        if spec_path is not None:
            console.print(f"micro-behaviour labels: {world.micro_behaviors}; spec written to {spec_path} (try: "
                          f"promokit conversion train --data {out} --spec {spec_path} --model gmcm --out model)")


@app.command()
def kuairand(src: Annotated[Path, typer.Option("--src", help="KuaiRand-Pure folder (log Parquet + user/video feature CSVs).")],
             out: Annotated[Path, typer.Option("--out", help="Parquet file for the conversion table.")],
             log: Annotated[Optional[str], typer.Option(help="Log file in the folder (default: the 04-25…04-30 val log).")] = None,
             ids: Annotated[bool, typer.Option(help="List user/item/author ids as features in the written spec.")] = True,
             purchase: Annotated[str, typer.Option(help="Log column that is the conversion, e.g. is_follow or is_like.")] = "is_follow",
             daction: Annotated[Optional[str], typer.Option(help="Comma-separated log columns whose OR is the DAction (default: is_like,is_comment,is_forward,is_profile_enter without the --purchase column).")] = None,
             micro_behaviors: Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated 0/1 log columns written as micro-behaviour labels (GMCM's graph nodes, named without is_; 'none' for none). Default: is_like, is_comment, is_forward, is_profile_enter, long_view, is_hate without the --purchase column.")] = None):
    """Map KuaiRand-Pure to the conversion contract: click = is_click, DAction = like | comment | forward |
    profile enter, purchase = is_follow (both on clicked rows; --purchase / --daction choose others), and the
    post-click behaviours as micro-behaviour labels (GMCM). Writes the table, a feature spec beside it
    (OUT.spec.yaml, for --spec; time_key: date; micro_behaviors: the labels) and the load report (OUT.json)."""
    with user_errors(), flags_in_errors(MICRO_FLAG):
        from promokit.conversion.kuairand import write_kuairand

        report, spec_path = write_kuairand(src, out, log, ids, purchase, daction, micro_behaviors)
        get_console().print(report.summary(), highlight=False)
        get_console().print(f"table written to {out}, spec to {spec_path}; try: promokit conversion bench --data {out} "
                            f"--spec {spec_path}  (train on the earlier days, test on the latest)")

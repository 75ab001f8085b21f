"""``promokit conversion …``: train, predict, evaluate, demo, bench, synth, kuairand."""

from __future__ import annotations

from dataclasses import replace
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
    EmbeddingDecayOpt,
    EngineOpt,
    EpochsOpt,
    ExecutorOpt,
    LrOpt,
    MinCountOpt,
    NumericOpt,
    ParamsOpt,
    PatienceOpt,
    ResumeOpt,
    StorageOpt,
    ThreadsOpt,
    TimeoutOpt,
    TrialsOpt,
    TunedOpt,
    WeightDecayOpt,
    WideOpt,
    WorkersOpt,
    bench_models,
    checkpoint_dir,
    convention_errors,
    executor_from_options,
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
from promokit.data.split import TEST_FRACTION

app = typer.Typer(help="Conversion over the entire space: ESM², ESMM, DNN, DNN-OS, GBDT, the linear floor LR, and "
                  "GMCM (micro-behaviour graph) with its baselines and ablations.",
                  no_args_is_help=True)

DataOpt = Annotated[Path, typer.Option("--data", help=f"Impression table: {TABLE_HELP} (predict scores part by part; tune and evaluate read the parts into one frame).")]
SpecOpt = Annotated[Optional[Path], typer.Option("--spec", help="YAML/JSON feature spec; inferred when omitted.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for splits, initialisation and shuffling.")]
MicroOpt = Annotated[Optional[str], typer.Option(
    "--micro-behaviors", help="Comma-separated 0/1 micro-behaviour label columns (post-click actions: cart, "
    "favorite, …; labels, never features), the nodes of GMCM's graph; replaces the spec's micro_behaviors.")]


def _spec(path: Optional[Path], micro_behaviors: Optional[str] = None, categorical: Optional[str] = None,
          numeric: Optional[str] = None, labels: Optional[dict] = None):
    """The spec file's FeatureSpec (or an empty one), with ``--micro-behaviors`` as its micro_behaviors, the
    types of ``--categorical`` / ``--numeric`` over its own and the label columns of ``--label`` over its own."""
    from promokit.data import FeatureSpec

    spec = FeatureSpec.from_file(path) if path else FeatureSpec()
    if micro_behaviors is not None:
        spec = replace(spec, micro_behaviors=_micro_names(micro_behaviors))
    if labels:
        spec = replace(spec, labels={**spec.labels, **labels})
    return replace(spec, types={**spec.types, **types_option(categorical, numeric)})


def _micro_names(value: str) -> list[str]:
    """The column names of a ``--micro-behaviors`` list: comma-separated, blanks ignored, at least one."""
    from promokit.data import DataError

    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise DataError(f"--micro-behaviors names no column ({value!r}); give comma-separated column names, "
                        "e.g. cart,favorite")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataError(f"--micro-behaviors lists {repeated} more than once")
    return names


def _synthetic_micro(value: str) -> tuple[list[str], int]:
    """The synthetic world's micro-behaviours that ``--micro-behaviors`` asks for — a count N (the first N of
    cart, favorite, review, qa, zoom, sku, share, detail, coupon, buy_button, micro_11 …) or their names — and
    how many the world must generate to have them."""
    from promokit.data import DataError
    from promokit.experiments.conversion.world import micro_behavior_names

    if value.strip().isdigit():
        return micro_behavior_names(int(value)), int(value)
    names = _micro_names(value)
    numbered = [int(n.removeprefix("micro_")) for n in names if n.startswith("micro_") and n[6:].isdigit()]
    known = micro_behavior_names(max([10, *numbered]))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise DataError(f"--micro-behaviors: the synthetic world has no micro-behaviours {unknown}; it has "
                        f"{', '.join(known[:10])}, micro_11, micro_12 … (or give a count, e.g. 10)")
    return names, max(known.index(name) for name in names) + 1


ModelOpt = Annotated[str, typer.Option("--model", help="lr | gbdt | dnn | dnn-os | esmm | esm2; with micro-behaviours: "
                                        "gmcm | mcm-2 | mcm-10 | mcm-gru; GMCM's baselines: base | division | resnet "
                                        "| dcn")]
ValidSplitOpt = Annotated[Optional[str], typer.Option(
    "--valid-split", help="How the validation rows are cut from --data: random, or time:<column> (the latest "
    "rows). Default: time:<the spec's time_key> when the spec names one, else random.")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation rows: "
                                                   "loss | ctr_auc | cvr_auc | ctcvr_auc.")]


#: The label roles of an impression table (promokit.conversion.contract's REQUIRED_LABELS and OPTIONAL_LABELS).
LABEL_ROLES = ("click", "purchase", "daction")
LabelOpt = label_option(LABEL_ROLES)
TestFractionOpt = test_fraction_option("the latest rows by the spec's time_key when it names one, else each row "
                                       "drawn at random with --seed")


def _training(params, min_count, **flags):
    from promokit.conversion.estimator import DEFAULT_TRAIN

    return training_options(DEFAULT_TRAIN, params, min_count, **flags)


TrainDataOpt = Annotated[Path, typer.Option("--data", help=f"Impression table: {TABLE_HELP} (the networks train "
                                            "part by part, never reading it whole; gbdt and lr read the parts into "
                                            "one frame).")]


@app.command()
def train(data: TrainDataOpt,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = "esm2",
          spec: SpecOpt = None,
          valid: Annotated[Optional[Path], typer.Option("--valid", help=f"Validation table for early stopping: {TABLE_HELP}.")] = None,
          valid_fraction: Annotated[float, typer.Option(help="Share of --data that validates when --valid is not given.")] = 0.1,
          valid_split: ValidSplitOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, patience: PatienceOpt = None,
          monitor: MonitorOpt = None, embedding_decay: EmbeddingDecayOpt = None, weight_decay: WeightDecayOpt = None,
          min_count: MinCountOpt = None, seed: SeedOpt = 0, params: ParamsOpt = None,
          repair_labels: Annotated[bool, typer.Option(help="Set daction/purchase/micro-behaviours to 0 on unclicked rows instead of failing.")] = False,
          resume: ResumeOpt = False, micro_behaviors: MicroOpt = None, wide: WideOpt = None,
          categorical: CategoricalOpt = None, numeric: NumericOpt = None,
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
    end and kept in config.json): --categorical / --numeric set the type of some."""
    with user_errors(), flags_in_errors({"wide": "--wide"}), convention_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.conversion import ConversionModel
        from promokit.data import DataError
        from promokit.data.parts import is_partitioned

        config, model_params = _training(params, min_count, epochs=epochs, batch_size=batch_size, lr=lr,
                                         patience=patience, monitor=monitor, embedding_decay=embedding_decay,
                                         weight_decay=weight_decay, seed=seed, wide=wide)
        given = _spec(spec, micro_behaviors, categorical, numeric, label_options(label, LABEL_ROLES))
        if not 0 <= test_fraction < 1:
            raise DataError(f"--test-fraction must be in [0, 1), got {test_fraction:g}")
        estimator = ConversionModel(model, model_params, config, given, repair_labels, test_fraction)
        if estimator.uses_micro and not given.micro_behaviors:
            raise DataError(f"model {model!r} learns from micro-behaviour labels, and none are declared: name the "
                            "table's 0/1 post-click columns with --micro-behaviors cart,favorite,… or in the spec "
                            "(micro_behaviors: [cart, favorite, …])")
        if valid is not None and valid_split is not None:
            raise DataError("--valid-split cuts the validation rows from --data; it cannot be used with --valid")
        if not 0 <= valid_fraction < 1:
            raise DataError(f"--valid-fraction must be in [0, 1), got {valid_fraction}")
        console = get_console()
        partitioned = is_partitioned(data) or (valid is not None and is_partitioned(valid))
        if executor == "local" and (not partitioned or not estimator.trains_by_epochs):
            if partitioned:
                console.print(f"note: model {model!r} is fitted on the whole table, not by epochs over its parts: "
                              "the parts are read into one frame")
            estimator.fit(data, validation=valid if valid else valid_fraction, validation_split=valid_split,
                          checkpoint_dir=checkpoint_dir(out), resume=resume)
        else:
            from promokit.conversion.parts import fit_parts

            if not estimator.trains_by_epochs:
                raise DataError(f"model {model!r} is not trained by epochs of mini-batches, so it cannot train over "
                                f"a table's parts with --executor {executor}: train it with --executor local (the "
                                "table read whole), or choose a network (esmm, esm2, dnn, gmcm …)")
            fit_parts(estimator, data, executor_from_options(executor, address, workers), valid, valid_fraction,
                      valid_split, checkpoint_dir(out), resume)
        estimator.save(out)
        report = estimator.report
        for role, count in report.labels.repaired.items():
            console.print(f"repaired {count} rows where {role}=1 without a click")
        finish_training(out, report.history)
        print_feature_types({"impression": estimator.feature_spec}, inferred=not given.features)
        print_held_out(report.n_test and f"{report.n_test:,} of {estimator.holdout['rows']:,} rows "
                       f"({_rule(estimator.holdout)})", "row")
        console.print(f"model written to {out} ({report.n_train} training rows, {report.n_valid} validation rows)")


def _rule(holdout: dict) -> str:
    """How a conversion model held rows out, in words."""
    if holdout["how"] == "random":
        return f"each row drawn with probability {holdout['test_fraction']:g}, seed {holdout['seed']}"
    return f"the latest {holdout['test_fraction']:.0%} by {holdout['how'].split(':', 1)[1]!r}"


@app.command()
def tune(data: DataOpt,
         out: Annotated[Path, typer.Option("--out", help="Folder for params.json (the best parameters), the "
                                           "report and study.db.")],
         model: ModelOpt = "esm2",
         spec: SpecOpt = None,
         valid: Annotated[Optional[Path], typer.Option("--valid", help=f"Validation table the trials are scored on: {TABLE_HELP}.")] = None,
         valid_fraction: Annotated[float, typer.Option(help="Share of --data that validates when --valid is not given.")] = 0.1,
         valid_split: ValidSplitOpt = None,
         metric: Annotated[str, typer.Option("--metric", help="Validation AUC to maximise: ctr_auc | cvr_auc | ctcvr_auc.")] = "ctcvr_auc",
         trials: TrialsOpt = 30, timeout: TimeoutOpt = None, storage: StorageOpt = None,
         epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, patience: PatienceOpt = None,
         seed: SeedOpt = 0, repair_labels: bool = False, micro_behaviors: MicroOpt = None):
    """Search the model's hyper-parameters (Optuna TPE, median pruning per epoch) on the validation rows; write
    the best as params.json for train --params."""
    with user_errors():
        from promokit.data import DataError, read_table
        from promokit.experiments.conversion.tune import METRICS, tune_conversion

        if metric not in METRICS:
            raise DataError(f"--metric must be one of {list(METRICS)}, got {metric!r}")
        config, _ = _training(None, None, epochs=epochs, batch_size=batch_size, patience=patience, seed=seed)
        table = read_table(data)
        validation = read_table(valid) if valid else None
        feature_spec = _spec(spec, micro_behaviors)

        def search(path, on_trial):
            return tune_conversion(model, table, validation, feature_spec, config, metric, trials, timeout, str(path),
                                   seed=seed, valid_fraction=valid_fraction, valid_split=valid_split,
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
        from functools import partial

        from promokit.conversion import ConversionModel
        from promokit.data import write_json
        from promokit.data.part_scoring import means, score_parts
        from promokit.data.parts import is_partitioned
        from promokit.training import read_model_config

        name = read_model_config(model, "conversion")["model"]  # a bad directory fails before any work starts
        old_file = predictions_folder(out)
        written = old_file or out / ("predictions" if is_partitioned(data) else "predictions.parquet")
        parts = score_parts(executor_from_options(executor, address, workers), partial(ConversionModel.load, model),
                            partial(ConversionModel.predict, keep=keep), data, written)
        averages = means(parts)
        outputs = [c for c in averages if c.startswith("p_")]
        summary = {"rows": sum(p.rows for p in parts), "parts": len(parts), "executor": executor,
                   "model": name, "outputs": outputs, "means": {c: averages[c] for c in outputs}}
        write_json(summary, out.with_suffix(".json") if old_file else out / "summary.json")
        get_console().print(f"{summary['rows']} predictions written to {written}")


@app.command()
def evaluate(model: Annotated[Path, typer.Option("--model", help="Model directory written by train.")],
             data: DataOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             gauc_weight: Annotated[str, typer.Option(help="impressions | uniform (the ESM² paper uses uniform).")] = "impressions",
             micro_behaviors: Annotated[Optional[str], typer.Option(
                 "--micro-behaviors", help="Comma-separated micro-behaviour label columns whose node AUCs to report "
                 "(node_auc_<name>); default: those the model was trained with, when the table has them. A model "
                 "that predicts nodes is scored only on nodes it was trained on.")] = None,
             all_rows: AllRowsOpt = False, label: LabelOpt = None):
    """Score a trained model on the rows train held out of the labelled table (with --all: every row of new data):
    AUCs, GAUC, logloss, MSE, P/R/F1 at top k (+ the node AUCs of a micro-behaviour model)."""
    with user_errors(), convention_errors():
        from promokit.conversion import ConversionModel
        from promokit.data import DataError, read_table
        from promokit.data.spec import missing_column_message

        estimator = ConversionModel.load(model)
        labels = label_options(label, LABEL_ROLES)
        if labels:  # the table's label columns, in place of those the model was trained with
            estimator.feature_spec = replace(estimator.feature_spec, labels={**estimator.feature_spec.labels,
                                                                             **labels})
        table = read_table(data)
        rows = None if all_rows else held_out_rows(estimator, data)
        if micro_behaviors is not None:
            names = _micro_names(micro_behaviors)
            trained = list(estimator.feature_spec.micro_behaviors)
            if estimator.uses_micro and set(names) - set(trained):
                raise DataError(f"--micro-behaviors: model {estimator.model!r} was trained on the nodes {trained}, "
                                f"not {sorted(set(names) - set(trained))}")
            for name in names:
                if name not in table.columns:
                    raise DataError(missing_column_message(name, list(table.columns), "micro-behaviour label",
                                                           len(table)))
            if not estimator.uses_micro:
                get_console().print(f"note: model {estimator.model!r} predicts no micro-behaviour nodes; "
                                    "--micro-behaviors adds node AUCs only for gmcm / mcm-* models")
            estimator.feature_spec = replace(estimator.feature_spec, micro_behaviors=names)
        evaluation = estimator.evaluate(table, rows=rows, gauc_weight=gauc_weight)
        write_metrics_report(out, f"Evaluation of {model}", estimator.model, dict(evaluation),
                             f"{estimator.model} on {data.name}" + ("" if rows is None else
                                                                   f" ({len(rows):,} rows held out by train)"))


@app.command()
def demo(out: runs_out_option("results.csv (rewritten as each model finishes) and the report") = RUNS / "conversion-demo",
         users: int = 2000, items: int = 800, impressions: int = 300_000, seed: SeedOpt = 0,
         models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "lr,gbdt,dnn,dnn-os,esmm,esm2",
         micro_behaviors: Annotated[int, typer.Option(
             "--micro-behaviors", min=0, help="Give the world this many micro-behaviour labels (for gmcm and the "
             "mcm-* ablations, e.g. --models esmm,gmcm,mcm-10 --micro-behaviors 10); the report adds GMCM's "
             "Tables 2–3 and the node AUCs.")] = 0):
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
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, patience: PatienceOpt = None,
          monitor: MonitorOpt = None, embedding_decay: EmbeddingDecayOpt = None, min_count: MinCountOpt = None,
          params: Annotated[Optional[str], typer.Option(help='Parameters for every neural model (JSON or a JSON file); they override the defaults, e.g. \'{"dropout": 0.2}\'.')] = None,
          tuned: TunedOpt = None, repair_labels: bool = False, wide: WideOpt = None,
          micro_behaviors: Annotated[Optional[str], typer.Option(
              "--micro-behaviors", help="Comma-separated 0/1 micro-behaviour label columns of --data (labels, never "
              "features; replaces the spec's micro_behaviors). On the synthetic world: a count N (its first N of "
              "cart, favorite, review, qa, zoom, sku, share, detail, coupon, buy_button) or their names; the "
              "oracle row then has their true node AUCs.")] = None,
          out: Annotated[Optional[Path], typer.Option("--out", help="Folder for results.csv (rewritten as each model finishes) and report.md / report.json.")] = None,
          threads: ThreadsOpt = None):
    """Several models × seeds on one split: mean ± std per metric and RelaImpr against --base (the linear floor)."""
    with user_errors():
        set_threads(threads)
        from promokit.conversion.models import MODELS
        from promokit.data import read_table
        from promokit.experiments.conversion import bench as runner
        from promokit.experiments.conversion.demo import world_split
        from promokit.experiments.conversion.world import make_world
        from promokit.experiments.finished_rows import FinishedRows
        from promokit.training.params import without_foreign_wide

        names = bench_models(models)
        config, net = _training(params, None, epochs=epochs, batch_size=batch_size, lr=lr, patience=patience,
                                monitor=monitor, embedding_decay=embedding_decay, wide=wide)
        oracle = truth = None
        if data is None:
            nodes, n_micro = _synthetic_micro(micro_behaviors) if micro_behaviors is not None else ([], 0)
            world = make_world(n_users=users, n_items=items, n_impressions=impressions, seed=0, n_micro=n_micro)
            parts, truth, feature_spec = world_split(world)
            feature_spec = replace(feature_spec, micro_behaviors=nodes)
            truth = truth.drop(columns=[f"p_node_{n}" for n in world.micro_behaviors if n not in nodes])
        else:
            table = read_table(data)
            feature_spec = _spec(spec, micro_behaviors)
            parts = runner.split_table(table, feature_spec, split, valid_split)
        if min_count is not None:
            feature_spec = replace(feature_spec, min_count=min_count)
        console = get_console()

        def done(row):
            console.print(f"  seed {row['seed']} {row['model']:>7}: CVR AUC {row['cvr_auc']:.4f}  "
                          f"CTCVR AUC {row['ctcvr_auc']:.4f}  ({row['fit_seconds']:.0f} s)")

        found = tuned_params(tuned, names)
        per_model = {n: {**({} if n in runner.SHALLOW else without_foreign_wide(MODELS[n][0], net)),
                         **found.get(n, {})} for n in names}
        with FinishedRows(out, "promokit conversion bench", on_result=done) as finished:
            results = runner.run(parts, names, seeds_option(seeds), feature_spec, per_model, config,
                                 repair_labels=repair_labels, on_result=finished.add, truth=truth)
        summary = runner.summarise(results, base if base in names else None, (*runner.HEADLINE, *runner.TRUTH_AUCS))
        tables = {}
        if feature_spec.micro_behaviors:
            tables["GMCM's Tables 2–3: mean ± std over seeds, RI of gmcm in ‰, node AUCs"] = runner.gmcm_summary(
                results, feature_spec.micro_behaviors)
        if data is None:
            oracle = runner.oracle_row(parts.test, truth, feature_spec)
            summary = runner.with_oracle(summary, oracle)
            tables = {title: runner.with_oracle(table, oracle) for title, table in tables.items()}
        print_table("mean ± std over seeds", summary)
        for title, table in tables.items():
            print_table(title, table)
        if out is not None:
            write_bench_report(out, "promokit conversion bench", results, oracle,
                               f"data: {data or 'synthetic world'}; split: {split or 'default'}; seeds: {seeds}; "
                               f"{len(parts.train)}/{len(parts.valid)}/{len(parts.test)} rows", summary, tables)


@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Parquet file for the impression table.")],
          users: int = 2000, items: int = 800, impressions: int = 300_000, seed: SeedOpt = 0,
          truth: Annotated[bool, typer.Option(help="Also write the true probabilities as columns true_p_* (with "
                                              "micro-behaviours: true_p_node_<name>, P(behaviour | click, "
                                              "features)).")] = False,
          micro_behaviors: Annotated[int, typer.Option(
              "--micro-behaviors", min=0, help="Add this many 0/1 micro-behaviour label columns (GMCM): cart, "
              "favorite, review, qa, zoom, sku, share, detail, coupon, buy_button, then micro_11 …; 0 on unclicked "
              "rows. They are post-click labels, never features, so a spec declaring them (micro_behaviors: "
              "[…]) is written beside the table as OUT.spec.yaml: pass it with --spec.")] = 0):
    """Write the synthetic impression world as a table to try the other commands on.

    Columns: the categorical and numeric features, the labels click, daction, purchase, and with
    --micro-behaviors N the N micro-behaviour labels (plus OUT.spec.yaml, their feature spec)."""
    with user_errors():
        import pandas as pd
        import yaml

        from promokit.data import FeatureSpec, write_parquet, write_text
        from promokit.experiments.conversion.world import make_world

        world = make_world(n_users=users, n_items=items, n_impressions=impressions, seed=seed,
                           n_micro=micro_behaviors)
        table = world.table
        if truth:
            table = pd.concat([table, world.truth.add_prefix("true_")], axis=1)
        write_parquet(table, out)
        console = get_console()
        console.print(f"{len(table):,} impressions written to {out}; categorical: {world.categorical}; "
                      f"numeric: {world.numeric}")
        if world.micro_behaviors:
            spec_path = out.with_suffix(".spec.yaml")
            spec = FeatureSpec(categorical=world.categorical, numeric=world.numeric, group_key="user_id",
                               micro_behaviors=world.micro_behaviors)
            write_text(yaml.safe_dump(spec.to_dict(), sort_keys=False), spec_path)
            console.print(f"micro-behaviour labels: {world.micro_behaviors}; spec written to {spec_path} (try: "
                          f"promokit conversion train --data {out} --spec {spec_path} --model gmcm --out model)")


@app.command()
def kuairand(src: Annotated[Path, typer.Option("--src", help="KuaiRand-Pure folder (log Parquet + user/video feature CSVs).")],
             out: Annotated[Path, typer.Option("--out", help="Parquet file for the conversion table.")],
             log: Annotated[Optional[str], typer.Option(help="Log file in the folder (default: the 04-25…04-30 val log).")] = None,
             ids: Annotated[bool, typer.Option(help="List user/item/author ids as features in the written spec.")] = True,
             purchase: Annotated[str, typer.Option(help="Log column that is the conversion, e.g. is_follow or is_like.")] = "is_follow",
             daction: Annotated[Optional[str], typer.Option(help="Comma-separated log columns whose OR is the DAction (default: is_like,is_comment,is_forward,is_profile_enter without the --purchase column).")] = None,
             micro_behaviors: Annotated[Optional[str], typer.Option(
                 "--micro-behaviors", help="Comma-separated 0/1 log columns written as micro-behaviour labels (GMCM's "
                 "graph nodes, named without is_; 'none' for none). Default: is_like, is_comment, is_forward, "
                 "is_profile_enter, long_view, is_hate without the --purchase column.")] = None):
    """Map KuaiRand-Pure to the conversion contract: click = is_click, DAction = like | comment | forward |
    profile enter, purchase = is_follow (both on clicked rows; --purchase / --daction choose others), and the
    post-click behaviours as micro-behaviour labels (GMCM). Writes the table, a feature spec beside it
    (OUT.spec.yaml, for --spec; time_key: date; micro_behaviors: the labels) and the load report (OUT.json)."""
    with user_errors():
        import yaml

        from promokit.conversion.kuairand import (
            DACTION_BEHAVIOURS,
            LOG_FILE,
            MICRO_BEHAVIOURS,
            kuairand_spec,
            load_kuairand,
        )
        from promokit.data import write_json, write_parquet, write_text

        behaviours = tuple(daction.split(",")) if daction else tuple(b for b in DACTION_BEHAVIOURS if b != purchase)
        micro = (MICRO_BEHAVIOURS if micro_behaviors is None else
                 () if micro_behaviors.strip().lower() == "none" else tuple(_micro_names(micro_behaviors)))
        table, report = load_kuairand(src, log=log or LOG_FILE, daction=behaviours, purchase=purchase, micro=micro)
        write_parquet(table, out)
        spec_path = out.with_suffix(".spec.yaml")
        write_text(yaml.safe_dump(kuairand_spec(table, ids=ids).to_dict(), sort_keys=False), spec_path)
        write_json({"summary": report.summary(), **report.__dict__}, out.with_suffix(".json"))
        get_console().print(report.summary(), highlight=False)
        get_console().print(f"table written to {out}, spec to {spec_path}; try: promokit conversion bench --data {out} "
                            f"--spec {spec_path}  (train on the earlier days, test on the latest)")

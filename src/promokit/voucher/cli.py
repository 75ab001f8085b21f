"""``promokit voucher …``: train, predict, evaluate, recalibrate, demo, bench (DMBGN and its baselines)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli_support import (
    RUNS,
    TABLE_HELP,
    AddressOpt,
    AllRowsOpt,
    EngineOpt,
    ExecutorOpt,
    MinCountOpt,
    ParamsOpt,
    ResumeOpt,
    StorageOpt,
    TimeoutOpt,
    TrainingFlags,
    TrialsOpt,
    TunedOpt,
    WideOpt,
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
    predictions_folder,
    print_held_out,
    run_tune,
    runs_out_option,
    seeds_option,
    set_threads,
    test_fraction_option,
    training_options,
    tuned_params,
    user_errors,
    write_bench_report,
    write_metrics_report,
)
from promokit.console import get_console, print_table
from promokit.data.durations import DURATION_FORMS
from promokit.data.split import TEST_FRACTION
from promokit.experiments.voucher.settings import DEMO_TRAIN
from promokit.training.recalibration import DEFAULT_METHOD
from promokit.voucher.defaults import DEFAULT_MODEL, DEFAULT_TRAIN

#: The training flags, showing the defaults the estimator trains with.
TRAIN = TrainingFlags(DEFAULT_TRAIN)
#: bench trains with the demo's settings (fewer epochs, patience 1).
BENCH_TRAIN = TrainingFlags(DEMO_TRAIN)
#: The library's arguments named in its errors → the options that set them.
FLAGS = {"test_from": "--test-from", "validation": "--valid-from", "start": "--from", "categorical": "--categorical",
         "numeric": "--numeric", "item_features": "--item-features", "terms": "--terms", "no_terms": "--no-terms",
         "item_embeddings": "--item-embeddings", "executor": "--executor", "sessions": "--sessions",
         "events": "--events"}

app = typer.Typer(help="Voucher redemption: DMBGN and its baselines LR, GBDT, DNN, WDL, DIN.", no_args_is_help=True)

SessionsOpt = Annotated[Path, typer.Option("--sessions", help="Sessions table (CSV/Parquet): session_id, user_id, "
                                           "voucher_id, min_spend, discount, collect_time, outcome_time, redeemed.")]
EventsOpt = Annotated[Optional[Path], typer.Option("--events", help="Behaviour events: session_id, item_id, action, action_time.")]
ItemsOpt = Annotated[Path, typer.Option("--items", help="Items: item_id, category, brand, price_level.")]
VoucherItemsOpt = Annotated[Optional[Path], typer.Option("--voucher-items", help="voucher_id, item_id pairs (data without a behaviour log).")]
CategoricalOpt = Annotated[Optional[str], typer.Option("--categorical", help="Comma-separated categorical profile columns.")]
NumericOpt = Annotated[Optional[str], typer.Option("--numeric", help="Comma-separated numeric profile columns.")]
ValidityOpt = Annotated[Optional[str], typer.Option("--validity", help=f"Voucher validity when outcome_time is absent: {DURATION_FORMS}.")]
LABEL_ROLES = ("redeemed",)
LabelOpt = label_option(LABEL_ROLES)
TestFractionOpt = test_fraction_option("the sessions collected latest; --test-from overrides it")
TermsOpt = Annotated[bool, typer.Option("--terms/--no-terms", help="Sessions carry the voucher terms min_spend and discount (--no-terms: data without them, e.g. AmExpert).")]
ItemFeaturesOpt = Annotated[Optional[str], typer.Option("--item-features", help="Comma-separated item feature columns (default: category,brand,price_level).")]
# predict / evaluate: the model directory keeps train's table options; repeated, they must agree with it
_SAVED = "Optional: the model directory remembers the training's; given, it must agree."
SavedCategoricalOpt = Annotated[Optional[str], typer.Option("--categorical", help=_SAVED)]
SavedNumericOpt = Annotated[Optional[str], typer.Option("--numeric", help=_SAVED)]
SavedItemFeaturesOpt = Annotated[Optional[str], typer.Option("--item-features", help=_SAVED)]
SavedTermsOpt = Annotated[Optional[bool], typer.Option("--terms/--no-terms", help=_SAVED)]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation sessions: auc | loss.")]
GaucByOpt = Annotated[Optional[str], typer.Option("--gauc-by", help="Sessions column to also report GAUC within, e.g. campaign_id.")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
ThreadsOpt = Annotated[int, typer.Option("--threads", help="Torch threads; 1 (the default) is fastest for these small "
                                        "batches, especially on a shared machine.")]
MODEL_NAMES = "lr | gbdt | dnn | wdl | din | dmbgn | dmbgn-avgpooling | dmbgn-pretrained"
ItemEmbeddingsOpt = Annotated[Optional[str], typer.Option(
    "--item-embeddings", help="DMBGN models: initial item embeddings (paper §3.4.2). 'metapath2vec' pre-trains them "
    "on the training sessions' behaviour (or voucher_items) co-occurrence; otherwise a CSV/Parquet table of "
    "item_id + k numeric columns, one row per item (items without a row get zeros). Options of the pre-training: "
    '--params \'{"item_pretrain": {"dim": 16, "epochs": 5}}\'.')]
FreezeItemsOpt = Annotated[bool, typer.Option("--freeze-items", help="DMBGN models: keep the item embeddings fixed "
                                              "during training.")]


def _names(text: Optional[str]) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()] if text else []


def _files(sessions: Path, events: Optional[Path], items: Path, voucher_items: Optional[Path]) -> dict:
    return {"sessions": sessions, "events": events, "items": items, "voucher_items": voucher_items}


def _validity(text: Optional[str]):
    from promokit.data.durations import parse_duration

    return None if text is None else parse_duration(text, "--validity")


def _training_tables(files: dict, categorical, numeric, validity, terms, item_features, labels=None):
    """train's and tune's tables, read with their options (:func:`promokit.voucher.contract.read_tables`)."""
    from promokit.voucher.contract import read_tables

    return read_tables(files, require_labels=True, labels=labels, categorical=_names(categorical),
                       numeric=_names(numeric), validity=_validity(validity), terms=terms,
                       item_features=_names(item_features) or None)


def _saved_options(categorical, numeric, terms, item_features) -> dict:
    """predict's and evaluate's table options: those given, which must agree with the model's."""
    return {"categorical": None if categorical is None else _names(categorical),
            "numeric": None if numeric is None else _names(numeric), "terms": terms,
            "item_features": None if item_features is None else _names(item_features)}


ValidFromOpt = Annotated[Optional[str], typer.Option(help="Sessions collected from this time on are the validation split (default: the last 10 %).")]
TestFromOpt = Annotated[Optional[str], typer.Option(help="Sessions collected from this time on are held out (neither trained nor validated on), in place of --test-fraction.")]


@app.command()
def train(sessions: SessionsOpt, items: ItemsOpt,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          events: EventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: CategoricalOpt = None,
          numeric: NumericOpt = None, validity: ValidityOpt = None, terms: TermsOpt = True,
          item_features: ItemFeaturesOpt = None,
          model: Annotated[str, typer.Option("--model", help=MODEL_NAMES)] = DEFAULT_MODEL,
          valid_from: ValidFromOpt = None, test_from: TestFromOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION,
          label: LabelOpt = None,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          monitor: MonitorOpt = None, embedding_decay: TRAIN.embedding_decay = None, weight_decay: TRAIN.weight_decay = None,
          min_count: MinCountOpt = None, seed: int = DEFAULT_TRAIN.seed, params: ParamsOpt = None,
          item_embeddings: ItemEmbeddingsOpt = None, freeze_items: FreezeItemsOpt = False, wide: WideOpt = None,
          threads: ThreadsOpt = 1, resume: ResumeOpt = False):
    """Fit a model on the sessions less those held out for evaluate (the latest --test-fraction, or those collected
    from --test-from on); pick the epoch on the latest 10 % of the rest (or those from --valid-from on)."""
    with user_errors(), flags_in_errors(FLAGS), convention_errors():
        set_threads(threads)
        from promokit.voucher.estimator import VoucherModel
        from promokit.voucher.history import describe_holdout

        config, model_params = training_options(DEFAULT_TRAIN, params, min_count, epochs=epochs, batch_size=batch_size,
                                                lr=lr, patience=patience, monitor=monitor,
                                                embedding_decay=embedding_decay, weight_decay=weight_decay, seed=seed,
                                                wide=wide)
        item_options = {**({"item_embeddings": item_embeddings} if item_embeddings is not None else {}),
                        **({"freeze_items": True} if freeze_items else {})}
        estimator = VoucherModel(model, {**model_params, **item_options}, config, test_fraction=test_fraction,
                                 test_from=test_from)  # its parameter errors before the tables are read
        tables = _training_tables(_files(sessions, events, items, voucher_items), categorical, numeric, validity,
                                  terms, item_features, label_options(label, LABEL_ROLES))
        estimator.fit(tables, validation=valid_from, checkpoint_dir=checkpoint_dir(out), resume=resume)
        estimator.save(out)
        finish_training(out, estimator.report.history)
        print_held_out(describe_holdout(estimator.holdout), "session")
        get_console().print(f"model written to {out} ({estimator.report.n_train} training sessions, "
                            f"{estimator.report.n_valid} validation sessions)", soft_wrap=True)


@app.command()
def tune(sessions: SessionsOpt, items: ItemsOpt,
         out: Annotated[Path, typer.Option("--out", help="Folder for params.json (the best parameters), the "
                                           "report and study.db.")],
         events: EventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: CategoricalOpt = None,
         numeric: NumericOpt = None, validity: ValidityOpt = None, terms: TermsOpt = True,
         item_features: ItemFeaturesOpt = None,
         model: Annotated[str, typer.Option("--model", help=MODEL_NAMES)] = DEFAULT_MODEL,
         valid_from: ValidFromOpt = None, test_from: TestFromOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION,
         trials: TrialsOpt = 30, timeout: TimeoutOpt = None, storage: StorageOpt = None,
         epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, patience: TRAIN.patience = None,
         seed: int = DEFAULT_TRAIN.seed,
         params: Annotated[Optional[str], typer.Option("--params", help="Fixed model parameters (JSON or a JSON file) the search does not change, e.g. DMBGN's graph settings.")] = None,
         threads: ThreadsOpt = 1):
    """Search the model's hyper-parameters (Optuna TPE, median pruning per epoch) for the best validation AUC;
    write the best as params.json for train --params. The sessions train would hold out (--test-fraction,
    --test-from) are never scored."""
    with user_errors(), flags_in_errors({**FLAGS, "trials": "--trials"}), convention_errors():
        set_threads(threads)
        from promokit.experiments.voucher.tune import tune_voucher
        from promokit.voucher.estimator import VoucherModel

        config, fixed = training_options(DEFAULT_TRAIN, params, None, epochs=epochs, batch_size=batch_size,
                                         patience=patience, seed=seed)
        estimator = VoucherModel(model, fixed, config, test_fraction=test_fraction, test_from=test_from)
        tables = _training_tables(_files(sessions, events, items, voucher_items), categorical, numeric, validity,
                                  terms, item_features)
        train, valid, test = estimator.split_rows(tables, validation=valid_from)

        def search(path, on_trial):
            return tune_voucher(model, tables, train, valid, config, fixed, trials, timeout, str(path),
                                on_trial=on_trial)

        run_tune(out, storage, f"promokit voucher tune: {model}",
                 f"sessions: {sessions}; model {model}; {len(train)} training sessions, {len(valid)} validation "
                 f"sessions, {len(test)} held out; maximise validation AUC; {trials} trials; seed {seed}", search)


PartsSessionsOpt = Annotated[Path, typer.Option("--sessions", help=f"Sessions table: {TABLE_HELP}. In parts, the "
                                                "sessions are partitioned by user (every session of a user in one "
                                                "part) and each part is scored alone.")]
PartsEventsOpt = Annotated[Optional[Path], typer.Option("--events", help="Behaviour events: session_id (or user_id), "
                                                        "item_id, action, action_time. With --sessions in parts, in "
                                                        "as many parts: part k holds the events of sessions part k.")]


@app.command()
def predict(model: ModelDirOpt, sessions: PartsSessionsOpt, items: ItemsOpt,
            out: Annotated[Path, typer.Option("--out", help="Folder for predictions.parquet (session_id, user_id, "
                                              "voucher_id, campaign_id when the sessions have it, p_redeem; "
                                              "predictions/, part k from sessions part k, when --sessions is in "
                                              "parts) and summary.json.")],
            events: PartsEventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: SavedCategoricalOpt = None,
            numeric: SavedNumericOpt = None, validity: ValidityOpt = None, terms: SavedTermsOpt = None,
            item_features: SavedItemFeaturesOpt = None,
            start: Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on.")] = None,
            executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
            threads: ThreadsOpt = 1, engine: EngineOpt = None):
    """Write p_redeem per session. Labels may be missing (outcome unknown); earlier labelled sessions feed
    the users' histories. With --sessions in parts, each part is scored alone (--executor local | ray), the model
    loaded once per worker."""
    with user_errors(), flags_in_errors(FLAGS):
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.voucher.workflows import predict as predict_sessions

        rows, written = predict_sessions(model, sessions, items, out, events=events, voucher_items=voucher_items,
                                      validity=_validity(validity), start=start,
                                      executor=deferred_executor(executor, address, workers),
                                      file=predictions_folder(out),
                                      **_saved_options(categorical, numeric, terms, item_features))
        get_console().print(f"{rows} predictions written to {written}")


@app.command()
def evaluate(model: ModelDirOpt, sessions: SessionsOpt, items: ItemsOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             events: EventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: SavedCategoricalOpt = None,
             numeric: SavedNumericOpt = None, validity: ValidityOpt = None, terms: SavedTermsOpt = None,
             item_features: SavedItemFeaturesOpt = None,
             start: Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on, in place of those train held out.")] = None,
             all_rows: AllRowsOpt = False, gauc_by: GaucByOpt = None, label: LabelOpt = None):
    """AUC and logloss (and GAUC within --gauc-by groups) of a trained model on the labelled sessions train held
    out (those collected from its cut on; --from: from another time; --all: every session of new data). The label
    is read from the column train mapped with --label, unless --label maps another."""
    with user_errors(), flags_in_errors(FLAGS), convention_errors():
        from promokit.voucher.estimator import VoucherModel
        from promokit.voucher.history import sessions_from

        estimator = VoucherModel.load(model)
        tables = estimator.read(_files(sessions, events, items, voucher_items), require_labels=True,
                                validity=_validity(validity), labels=label_options(label, LABEL_ROLES),
                                **_saved_options(categorical, numeric, terms, item_features))
        rows = (sessions_from(tables.sessions, start) if start is not None or all_rows else
                held_out_rows(estimator, tables))
        evaluation = estimator.evaluate(tables, rows=rows, group_by=gauc_by)
        write_metrics_report(out, f"Evaluation of {model}", estimator.model, evaluation.metrics,
                             f"{estimator.model} on {len(rows):,} sessions of {sessions.name}", evaluation.tables)


@app.command()
def recalibrate(model: ModelDirOpt, sessions: SessionsOpt, items: ItemsOpt, events: EventsOpt = None,
                voucher_items: VoucherItemsOpt = None, categorical: SavedCategoricalOpt = None,
                numeric: SavedNumericOpt = None, validity: ValidityOpt = None, terms: SavedTermsOpt = None,
                item_features: SavedItemFeaturesOpt = None,
                start: Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on: the latest labelled period (default: every session).")] = None,
                method: Annotated[str, typer.Option("--method", help="isotonic | platt | prior-shift: the map fitted.")] = DEFAULT_METHOD,
                label: LabelOpt = None):
    """Fit a recalibration of a trained model's p_redeem on labelled sessions (the latest period, after the training
    one) and write it into the model directory (recalibration.json): predict and evaluate then apply it, predict
    keeping the model's own score as p_redeem_raw."""
    with user_errors(), flags_in_errors({**FLAGS, "method": "--method"}), convention_errors():
        from promokit.voucher.workflows import recalibrate as recalibrate_model

        fitted = recalibrate_model(model, sessions, items, events=events, voucher_items=voucher_items,
                                   validity=_validity(validity), start=start, method=method,
                                   labels=label_options(label, LABEL_ROLES),
                                   **_saved_options(categorical, numeric, terms, item_features))
        get_console().print(f"{method} recalibration written to {model / 'recalibration.json'}: on {fitted['rows']:,} "
                            f"sessions ({fitted['positives']:,} redeemed, observed rate {fitted['rate']:.4f}) the mean "
                            f"predicted p_redeem was {fitted['mean_p']:.4f}, recalibrated {fitted['mean_p_after']:.4f}",
                            highlight=False, soft_wrap=True)


@app.command()
def demo(out: runs_out_option("results.csv (rewritten as each model finishes) and the report") = RUNS / "voucher-demo",
         users: int = 3000, vouchers: int = 120, items: int = 1000, sessions: int = 20_000, seed: int = 0,
         models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = ",".join(
             ["lr", "gbdt", "dnn", "wdl", "din", "dmbgn-avgpooling", "dmbgn-pretrained", "dmbgn"]),
         threads: ThreadsOpt = 1):
    """Train every model of the DMBGN paper on the synthetic voucher world; Table 3 with the oracle."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.finished_rows import FinishedRows
        from promokit.experiments.voucher.demo import run_demo

        console = get_console()
        console.print(f"synthetic voucher world: {sessions:,} sessions, {users:,} users, {vouchers:,} vouchers "
                      f"(seed {seed})")

        def done(row):
            console.print(f"  {row['model']:>16}: AUC {row['auc']:.4f}  logloss {row['logloss']:.4f}  "
                          f"({row['fit_seconds']:.0f} s)")

        world = {"n_users": users, "n_vouchers": vouchers, "n_items": items, "n_sessions": sessions}
        with FinishedRows(out, "promokit voucher demo", on_result=done) as finished:
            summary, report = run_demo(world, seed, bench_models(models), on_result=finished.add)
        report.write(out)
        print_table("test metrics", summary)
        console.print(f"report written to {out}/report.md (+ report.json, results.csv, auc_vs_oracle.png)")


def _train_options(files: dict[str, Path], options: dict) -> str:
    """The options of train that read back tables written by synth or amexpert (``files``, read with ``options``)."""
    from promokit.voucher.contract import ITEM_FEATURES

    args = [f"--{name.replace('_', '-')} {path}" for name, path in files.items()]
    args += [f"--categorical {','.join(options['categorical'])}"] if options["categorical"] else []
    args += [f"--numeric {','.join(options['numeric'])}"] if options["numeric"] else []
    args += [] if options["terms"] else ["--no-terms"]
    args += [] if options["item_features"] == list(ITEM_FEATURES) else [f"--item-features {','.join(options['item_features'])}"]
    return " ".join(args)


@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Folder for sessions / events / items Parquet files.")],
          users: int = 3000, sessions: int = 20_000, vouchers: int = 120, items: int = 1000, seed: int = 0,
          truth: Annotated[bool, typer.Option(help="Also write truth.parquet: session_id, true_p_redeem.")] = False):
    """Write the synthetic voucher world as tables to try train / predict / evaluate on."""
    with user_errors():
        from promokit.experiments.voucher.world import make_world, write_world

        world = make_world(n_users=users, n_vouchers=vouchers, n_items=items, n_sessions=sessions, seed=seed)
        files = write_world(world, out, truth)
        get_console().print(f"{len(world.tables.sessions):,} sessions written to {out}; try:\npromokit voucher train "
                            f"{_train_options(files, world.tables.options)} --model dmbgn --out model", highlight=False,
                            soft_wrap=True)


@app.command()
def amexpert(src: Annotated[Path, typer.Option("--src", help="AmExpert 2019 folder (train.csv, campaign_data.csv, coupon_item_mapping.csv, item_data.csv, customer_demographics.csv).")],
             out: Annotated[Path, typer.Option("--out", help="Folder for sessions / items / voucher_items Parquet files.")]):
    """Map AmExpert 2019 to the voucher contract (see docs/voucher.md) and write it as tables, with the load report
    (amexpert.json)."""
    with user_errors():
        from promokit.voucher.amexpert import convert_amexpert

        tables, report, files = convert_amexpert(src, out)
        console = get_console()
        console.print(report.summary(), highlight=False)
        console.print(f"tables written to {out}; try:\npromokit voucher train {_train_options(files, tables.options)} "
                      "--model dmbgn --out model [--valid-from …]\nthen: promokit voucher evaluate … --gauc-by "
                      "campaign_id", highlight=False, soft_wrap=True)


@app.command()
def bench(data_dir: Annotated[str, typer.Option("--data-dir", help="AmExpert 2019 folder, or 'synthetic'.")] = "synthetic",
          models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "lr,gbdt,dnn,wdl,din,dmbgn",
          seeds: Annotated[str, typer.Option(help="Comma-separated training seeds.")] = "0,1,2",
          epochs: BENCH_TRAIN.epochs = None, batch_size: BENCH_TRAIN.batch_size = None, lr: BENCH_TRAIN.lr = None, patience: BENCH_TRAIN.patience = None,
          monitor: MonitorOpt = None, embedding_decay: BENCH_TRAIN.embedding_decay = None, min_count: MinCountOpt = None,
          params: Annotated[Optional[str], typer.Option(help="Parameters for every neural model (JSON or a JSON file); they override the bench network's, e.g. {\"oov_dropout\": 0.2}.")] = None,
          tuned: TunedOpt = None, wide: WideOpt = None,
          out: Annotated[Optional[Path], typer.Option("--out", help="Folder for results.csv (rewritten as each model finishes) and report.md / report.json.")] = None,
          gauc_by: Annotated[Optional[str], typer.Option("--gauc-by", help="Sessions column to also report GAUC within (default: campaign_id on AmExpert, none on synthetic data).")] = None,
          threads: ThreadsOpt = 1):
    """Models × seeds on a time split: AUC mean ± std, RelaImpr vs LR, DNN and DIN, logloss (Table 3)."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.finished_rows import FinishedRows
        from promokit.experiments.voucher import bench as runner

        config, net = bench_training(DEMO_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                     patience=patience, monitor=monitor, embedding_decay=embedding_decay, wide=wide)
        console = get_console()
        data = runner.bench_data(data_dir)
        if data.report is not None:
            console.print(data.report.summary(), highlight=False)
        names = bench_models(models)
        per_model = runner.bench_params(names, net, min_count, tuned_params(tuned, names))

        def done(row):
            grouped = f"  GAUC {row['gauc']:.4f}" if "gauc" in row else ""
            console.print(f"  seed {row['seed']} {row['model']:>16}: AUC {row['auc']:.4f}{grouped}  logloss "
                          f"{row['logloss']:.4f}  ({row['fit_seconds']:.0f} s)")

        with FinishedRows(out, "promokit voucher bench", on_result=done) as finished:
            run = runner.run_bench(data, names, seeds_option(seeds), per_model, config, gauc_by, on_result=finished.add)
        print_table("mean ± std over seeds (test split)", run.summary)
        if out is not None:
            split = data.split
            write_bench_report(out, "promokit voucher bench", run.results, run.oracle,
                               f"data: {data_dir}; time split; seeds: {seeds}; "
                               f"{len(split.train)}/{len(split.valid)}/{len(split.test)} sessions", run.summary,
                               floor=("lr", ("auc",)))

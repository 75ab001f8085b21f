"""``promokit voucher …``: train, tune, predict, evaluate, recalibrate, demo, synth, amexpert (from
:mod:`promokit.cli.datasets`), bench, compare (DMBGN and its baselines)."""

from __future__ import annotations

import typer

from promokit.cli import conventions as cv
from promokit.cli import printing as pr
from promokit.cli import support as cs
from promokit.cli.datasets import amexpert
from promokit.cli.options import common as co
from promokit.cli.options import voucher as options
from promokit.console import get_console, print_table
from promokit.data.split import TEST_FRACTION
from promokit.experiments.voucher.settings import DEMO_TRAIN
from promokit.training.recalibration import DEFAULT_METHOD
from promokit.training.refit import REFIT
from promokit.voucher.defaults import DEFAULT_MODEL, DEFAULT_TRAIN

#: The training flags, showing the defaults the estimator trains with.
TRAIN = co.TrainingFlags(DEFAULT_TRAIN)
#: bench trains with the demo's settings (fewer epochs, patience 1).
BENCH_TRAIN = co.TrainingFlags(DEMO_TRAIN)

app = typer.Typer(help="Voucher redemption: DMBGN and its baselines LR, GBDT, DNN, WDL, DIN.", no_args_is_help=True)


@app.command()
def train(sessions: options.TrainSessions, items: options.Items, out: options.TrainOut,
          events: options.PartsEvents = None, voucher_items: options.VoucherItems = None,
          categorical: options.Categorical = None, numeric: options.Numeric = None, validity: options.Validity = None,
          terms: options.Terms = True, item_features: options.ItemFeatures = None, model: options.Model = DEFAULT_MODEL,
          validation: co.ValidationOpt = None, test_from: options.TestFrom = None,
          test_fraction: options.TestFractionOpt = TEST_FRACTION, label: options.LabelOpt = None, epochs: TRAIN.epochs = None,
          batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          monitor: options.Monitor = None, embedding_decay: TRAIN.embedding_decay = None,
          weight_decay: TRAIN.weight_decay = None, min_count: co.MinCountOpt = None, seed: int = DEFAULT_TRAIN.seed,
          params: co.ParamsOpt = None, item_embeddings: options.ItemEmbeddings = None,
          freeze_items: options.FreezeItems = False, wide: co.WideOpt = None, allow_leaky: options.AllowLeakyOpt = None,
          threads: options.Threads = 1, resume: co.ResumeOpt = False, device: co.DeviceOpt = None,
          executor: co.ExecutorOpt = "local", address: co.AddressOpt = None, workers: co.WorkersOpt = None,
          refit: co.RefitOpt = REFIT):
    """Fit a model on the sessions less those held out for evaluate (the latest --test-fraction, or those collected
    from --test-from on); pick the epoch on the latest 10 % of the rest (or --validation: another fraction, or those from a time on), then fit
    it again on every session with that choice (--no-refit: keep the selected model). A feature
    that alone predicts redeemed almost perfectly (a label leak) is warned of: drop it, or keep it (--allow-leaky).
    With --sessions and --events in parts, a network trains over them part by part (--executor local) or
    data-parallel on --workers Ray Train workers (--executor ray), holding out the sessions one file would."""
    with cs.user_errors(), cs.flags_in_errors(options.FLAGS), cv.convention_errors():
        cs.set_threads(threads)
        from promokit.voucher.estimator import VoucherModel
        from promokit.voucher.history import describe_holdout
        from promokit.voucher.workflows import train as train_model

        config, model_params = cs.training_options(DEFAULT_TRAIN, params, min_count, epochs=epochs, batch_size=batch_size,
                                                lr=lr, patience=patience, monitor=monitor, seed=seed, wide=wide,
                                                embedding_decay=embedding_decay, weight_decay=weight_decay,
                                                device=device)
        estimator = VoucherModel(model, {**model_params, **options.item_params(item_embeddings, freeze_items)}, config,
                                 test_fraction=test_fraction, test_from=test_from, allow_leaky=allow_leaky, refit=refit)
        train_model(estimator, options.table_files(sessions, events, items, voucher_items), out, validation=cs.validation_option(validation),
                    labels=cv.label_options(label, options.LABEL_ROLES), checkpoint_dir=cs.checkpoint_dir(out), resume=resume,
                    executor=cs.deferred_executor(executor, address, workers),
                    **options.table_options(categorical, numeric, validity, terms, item_features))
        pr.finish_training(out, estimator.history_)
        pr.print_held_out(describe_holdout(estimator.holdout_), "session")
        pr.print_refit(estimator.holdout_, "session")
        get_console().print(f"model written to {out} ({estimator.report_.n_train} training sessions, "
                            f"{estimator.report_.n_valid} validation sessions)", soft_wrap=True)


@app.command()
def tune(sessions: options.Sessions, items: options.Items, out: options.TuneOut, events: options.Events = None,
         voucher_items: options.VoucherItems = None, categorical: options.Categorical = None,
         numeric: options.Numeric = None, validity: options.Validity = None, terms: options.Terms = True,
         item_features: options.ItemFeatures = None, model: options.Model = DEFAULT_MODEL,
         validation: co.ValidationOpt = None, test_from: options.TestFrom = None,
         test_fraction: options.TestFractionOpt = TEST_FRACTION, trials: co.TrialsOpt = 30, timeout: co.TimeoutOpt = None,
         storage: co.StorageOpt = None, epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None,
         patience: TRAIN.patience = None, seed: int = DEFAULT_TRAIN.seed, params: options.FixedParams = None,
         threads: options.Threads = 1):
    """Search the model's hyper-parameters (Optuna TPE, median pruning per epoch) for the best validation AUC;
    write the best as params.json for train --params. The sessions train would hold out (--test-fraction,
    --test-from) are never scored."""
    with cs.user_errors(out=out, storage=storage), cs.flags_in_errors({**options.FLAGS, "trials": "--trials"}), \
            cv.convention_errors():
        cs.set_threads(threads)
        from promokit.experiments.voucher.tune import tune_voucher
        from promokit.voucher.contract import read_tables
        from promokit.voucher.estimator import VoucherModel

        config, fixed = cs.training_options(DEFAULT_TRAIN, params, None, epochs=epochs, batch_size=batch_size,
                                         patience=patience, seed=seed)
        estimator = VoucherModel(model, fixed, config, test_fraction=test_fraction, test_from=test_from)
        tables = read_tables(options.table_files(sessions, events, items, voucher_items), require_labels=True,
                             **options.table_options(categorical, numeric, validity, terms, item_features))
        train, valid, test = estimator.split_rows(tables, validation=cs.validation_option(validation))

        def search(path, on_trial):
            return tune_voucher(model, tables, train, valid, config, fixed, trials, timeout, str(path),
                                on_trial=on_trial)

        pr.run_tune(out, storage, f"promokit voucher tune: {model}",
                 f"sessions: {sessions}; model {model}; {len(train)} training sessions, {len(valid)} validation "
                 f"sessions, {len(test)} held out; maximise validation AUC; {trials} trials; seed {seed}", search)


@app.command()
def predict(model: options.ModelDir, sessions: options.PartsSessions, items: options.Items, out: options.PredictOut,
            events: options.PartsEvents = None, voucher_items: options.VoucherItems = None,
            categorical: options.SavedCategorical = None, numeric: options.SavedNumeric = None,
            validity: options.Validity = None, terms: options.SavedTerms = None,
            item_features: options.SavedItemFeatures = None, start: options.PredictFrom = None,
            executor: co.ExecutorOpt = "local", address: co.AddressOpt = None, workers: co.WorkersOpt = None,
            threads: options.Threads = 1, engine: co.EngineOpt = None, device: co.DeviceOpt = None):
    """Write p_redeem per session. Labels may be missing (outcome unknown); earlier labelled sessions feed
    the users' histories. With --sessions in parts, each part is scored alone (--executor local | ray), the model
    loaded once per worker."""
    with cs.user_errors(), cs.flags_in_errors(options.FLAGS):
        executor = cs.executor_option(executor, engine)
        cs.set_threads(threads)
        cs.set_device(device)
        from promokit.voucher.workflows import predict as predict_sessions

        rows, written = predict_sessions(model, sessions, items, out, events=events, voucher_items=voucher_items,
                                         start=start, executor=cs.deferred_executor(executor, address, workers),
                                         file=cv.predictions_folder(out),
                                         **options.saved_options(categorical, numeric, validity, terms, item_features))
        get_console().print(f"{rows} predictions written to {written}")


@app.command()
def evaluate(model: options.ModelDir, sessions: options.Sessions, items: options.Items, out: options.ReportOut,
             events: options.Events = None, voucher_items: options.VoucherItems = None,
             categorical: options.SavedCategorical = None, numeric: options.SavedNumeric = None,
             validity: options.Validity = None, terms: options.SavedTerms = None,
             item_features: options.SavedItemFeatures = None, start: options.EvaluateFrom = None,
             all_rows: co.AllRowsOpt = False, gauc_by: options.GaucBy = None, label: options.LabelOpt = None):
    """AUC and logloss (and GAUC within --gauc-by groups) of a trained model on the labelled sessions train held
    out (those collected from its cut on; --from: from another time; --all: every session of new data). The label
    is read from the column train mapped with --label, unless --label maps another."""
    with cs.user_errors(out=out), cs.flags_in_errors(options.FLAGS), cv.convention_errors():
        from promokit.voucher.estimator import VoucherModel
        from promokit.voucher.history import sessions_from

        estimator = VoucherModel.load(model)
        tables = estimator.read(options.table_files(sessions, events, items, voucher_items), require_labels=True,
                                labels=cv.label_options(label, options.LABEL_ROLES),
                                **options.saved_options(categorical, numeric, validity, terms, item_features))
        asked = {"--gauc-by": gauc_by, "--label": cv.relabelled(label, options.LABEL_ROLES, estimator.labels_)}
        stored = None if start is not None else cv.held_out_evaluation(estimator, tables, all_rows, asked)
        if stored is not None:
            pr.write_metrics_report(out, f"Evaluation of {model}", estimator.model, dict(stored), stored.title,
                                    stored.tables)
            return
        rows = (sessions_from(tables.sessions, start) if start is not None or all_rows else
                cv.held_out_rows(estimator, tables))
        evaluation = estimator.evaluate(tables, rows=rows, group_by=gauc_by)
        pr.write_metrics_report(out, f"Evaluation of {model}", estimator.model, evaluation.metrics,
                             f"{estimator.model} on {len(rows):,} sessions of {sessions.name}", evaluation.tables)


@app.command()
def recalibrate(model: options.ModelDir, sessions: options.Sessions, items: options.Items,
                events: options.Events = None, voucher_items: options.VoucherItems = None,
                categorical: options.SavedCategorical = None, numeric: options.SavedNumeric = None,
                validity: options.Validity = None, terms: options.SavedTerms = None,
                item_features: options.SavedItemFeatures = None, start: options.RecalibrateFrom = None,
                method: options.MethodOpt = DEFAULT_METHOD, by: options.RecalibrateBy = None, label: options.LabelOpt = None):
    """Fit a recalibration of a trained model's p_redeem on labelled sessions (the latest period, after the training
    one) and write it into the model directory (recalibration.json): predict and evaluate then apply it, predict
    keeping the model's own score as p_redeem_raw."""
    with cs.user_errors(model=model), cs.flags_in_errors({**options.FLAGS, "method": "--method", "by": "--by"}), \
            cv.convention_errors():
        from promokit.voucher.workflows import recalibrate as recalibrate_model

        fitted = recalibrate_model(model, sessions, items, events=events, voucher_items=voucher_items, start=start,
                                   method=method, by=by, labels=cv.label_options(label, options.LABEL_ROLES),
                                   **options.saved_options(categorical, numeric, validity, terms, item_features))
        groups = "" if by is None else (f" by {by} ({fitted['groups']:,} values, {fitted['own_maps']:,} with a map "
                                         "of their own)")
        get_console().print(f"{method} recalibration{groups} written to {model / 'recalibration.json'}: on "
                            f"{fitted['rows']:,} sessions ({fitted['positives']:,} redeemed, observed rate "
                            f"{fitted['rate']:.4f}) the mean predicted p_redeem was {fitted['mean_p']:.4f}, "
                            f"recalibrated {fitted['mean_p_after']:.4f}", highlight=False, soft_wrap=True)


@app.command()
def demo(out: co.runs_out_option("results.csv (rewritten as each model finishes) and the report") = co.RUNS / "voucher-demo",
         users: int = 3000, vouchers: int = 120, items: int = 1000, sessions: int = 20_000, seed: int = 0,
         models: options.BenchModels = options.DEMO_MODELS, threads: options.Threads = 1):
    """Train every model of the DMBGN paper on the synthetic voucher world; Table 3 with the oracle."""
    with cs.user_errors(out=out):
        cs.set_threads(threads)
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
            summary, report = run_demo(world, seed, cs.bench_models(models), on_result=finished.add)
        report.write(out)
        print_table("test metrics", summary)
        console.print(f"report written to {out}/report.md (+ report.json, results.csv, auc_vs_oracle.png)")


@app.command()
def synth(out: options.SynthOut, users: int = 3000, sessions: int = 20_000, vouchers: int = 120, items: int = 1000,
          seed: int = 0, truth: options.Truth = False):
    """Write the synthetic voucher world as tables to try train / predict / evaluate on."""
    with cs.user_errors():
        from promokit.data.uris import as_path
        from promokit.experiments.voucher.world import make_world, write_world

        world = make_world(n_users=users, n_vouchers=vouchers, n_items=items, n_sessions=sessions, seed=seed)
        files = write_world(world, out, truth)
        get_console().print(f"{len(world.tables.sessions):,} sessions written to {as_path(out)}; try:\npromokit voucher train "
                            f"{options.train_command(files, world.tables.options)} --model dmbgn --out model",
                            highlight=False, soft_wrap=True)


app.command("amexpert")(amexpert)


@app.command()
def bench(data_dir: options.BenchDataDir = "synthetic", models: options.BenchModels = "lr,gbdt,dnn,wdl,din,dmbgn",
          seeds: options.Seeds = "0,1,2", epochs: BENCH_TRAIN.epochs = None, batch_size: BENCH_TRAIN.batch_size = None,
          lr: BENCH_TRAIN.lr = None, patience: BENCH_TRAIN.patience = None, monitor: options.Monitor = None,
          embedding_decay: BENCH_TRAIN.embedding_decay = None, min_count: co.MinCountOpt = None,
          params: options.BenchParams = None, tuned: co.TunedOpt = None, wide: co.WideOpt = None,
          out: options.BenchOut = None, gauc_by: options.BenchGaucBy = None, threads: options.Threads = 1):
    """Models × seeds on a time split: AUC mean ± std, RelaImpr vs LR, DNN and DIN, logloss (Table 3)."""
    with cs.user_errors(out=out):
        cs.set_threads(threads)
        from promokit.experiments.finished_rows import FinishedRows
        from promokit.experiments.voucher import bench as runner

        config, net = cs.bench_training(DEMO_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                     patience=patience, monitor=monitor, embedding_decay=embedding_decay, wide=wide)
        console = get_console()
        data = runner.bench_data(data_dir)
        if data.report is not None:
            console.print(data.report.summary(), highlight=False)
        names = cs.bench_models(models)
        per_model = runner.bench_params(names, net, min_count, cs.tuned_option(tuned, names))

        def done(row):
            grouped = f"  GAUC {row['gauc']:.4f}" if "gauc" in row else ""
            console.print(f"  seed {row['seed']} {row['model']:>16}: AUC {row['auc']:.4f}{grouped}  logloss "
                          f"{row['logloss']:.4f}  ({row['fit_seconds']:.0f} s)")

        with FinishedRows(out, "promokit voucher bench", on_result=done) as finished:
            run = runner.run_bench(data, names, cs.seeds_option(seeds), per_model, config, gauc_by, on_result=finished.add)
        print_table("mean ± std over seeds (test split)", run.summary)
        if out is not None:
            split = data.split
            pr.write_bench_report(out, "promokit voucher bench", run.results, run.oracle, f"data: {data_dir}; time "
                               f"split; seeds: {seeds}; {len(split.train)}/{len(split.valid)}/{len(split.test)} "
                               "sessions", run.summary, floor=("lr", ("auc",)))


@app.command()
def compare(sessions: options.Sessions, items: options.Items, out: co.CompareOutOpt, events: options.Events = None,
            voucher_items: options.VoucherItems = None, categorical: options.Categorical = None,
            numeric: options.Numeric = None, validity: options.Validity = None, terms: options.Terms = True,
            item_features: options.ItemFeatures = None, models: co.CompareModelsOpt = "lr,gbdt,din,dmbgn",
            seeds: co.CompareSeedsOpt = "0", validation: co.ValidationOpt = None, test_from: options.TestFrom = None,
            test_fraction: options.TestFractionOpt = TEST_FRACTION, epochs: TRAIN.epochs = None,
            batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
            resamples: co.ResamplesOpt = co.RESAMPLES, threads: options.Threads = 1):
    """Fit the floor lr and --models on the same sessions with the same training budget, and write one leaderboard:
    the AUC of the held-out sessions against lr with a paired bootstrap interval, the calibration ratio, fit and
    predict seconds and a verdict per model."""
    flags = {**options.FLAGS, "models": "--models", "seeds": "--seeds"}
    with cs.user_errors(out=out), cs.flags_in_errors(flags), cv.convention_errors():
        cs.set_threads(threads)
        from promokit.voucher.contract import read_tables

        tables = read_tables(options.table_files(sessions, events, items, voucher_items), require_labels=True,
                             **options.table_options(categorical, numeric, validity, terms, item_features))
        pr.run_compare("voucher", tables, models, seeds, out, resamples,
                       options={"test_fraction": test_fraction, "test_from": test_from}, validation=cs.validation_option(validation),
                       epochs=epochs, batch_size=batch_size, lr=lr, patience=patience)

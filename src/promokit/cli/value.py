"""``promokit value …``: synth, from-transactions (from :mod:`promokit.cli.datasets`), train, predict, evaluate,
recalibrate, bench, simulate, demo, compare."""

from __future__ import annotations

from pathlib import Path

import typer

from promokit.cli import conventions as cv
from promokit.cli import printing as pr
from promokit.cli import support as cs
from promokit.cli.datasets import from_transactions
from promokit.cli.options import common as co
from promokit.cli.options import value as opt
from promokit.console import get_console, print_table
from promokit.data.split import TEST_FRACTION
from promokit.training.recalibration import DEFAULT_METHOD
from promokit.training.refit import REFIT
from promokit.value.defaults import DEFAULT_MODEL, DEFAULT_SPLIT, DEFAULT_TRAIN, SCORE_CONTEXTS

#: The training flags, showing the defaults the estimator trains with.
TRAIN = co.TrainingFlags(DEFAULT_TRAIN)

app = typer.Typer(help="Expected transaction value: ESDPM with the ESJ loss and its baselines, ETV tables for "
                       "allocate quota.", no_args_is_help=True)


def _whole_tables(data: Path, doing: str, executor: str, address: str | None, workers: int | None) -> None:
    """Say that the executor options serve a dataset in parts, when given for one folder of whole tables."""
    if executor != "local" or address or workers:
        get_console().print(f"note: {data} holds whole tables, not parts: {doing} in this process (--executor, "
                            "--address and --workers serve a dataset in parts)")


@app.command()
def synth(out: opt.SynthOutOpt, users: int = 20_000, funds: int = 8, deliveries: opt.MeanDeliveriesOpt = 5.0,
          seed: opt.SeedOpt = 0):
    """Write a synthetic fund-promotion world (deliveries, users, funds, behaviors, consumption) with its truth."""
    with cs.user_errors():
        from promokit.data.uris import as_path
        from promokit.experiments.value.world import write_synthetic

        world, paths = write_synthetic(out, users, funds, deliveries, seed)
        get_console().print(f"{users:,} users, {funds} funds, {len(world.deliveries):,} deliveries, "
                            f"{len(world.behaviors):,} behaviours and {len(world.consumption):,} payments written to "
                            f"{as_path(out)} ({', '.join(p.name for p in paths.values())})")


app.command("from-transactions")(from_transactions)


@app.command()
def train(data: opt.PartsDataOpt, out: opt.ModelOutOpt, model: opt.ModelOpt = DEFAULT_MODEL,
          test_fraction: opt.TestFractionOpt = TEST_FRACTION, label: opt.LabelOpt = None,
          validation: co.ValidationOpt = None, split: opt.SplitOpt = DEFAULT_SPLIT,
          allow_leaky: opt.AllowLeakyOpt = None, repair_labels: opt.RepairOpt = False,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          monitor: opt.MonitorOpt = None, seed: opt.SeedOpt = DEFAULT_TRAIN.seed, params: co.ParamsOpt = None,
          categorical: co.CategoricalOpt = None, numeric: co.NumericOpt = None, wide: co.WideOpt = None,
          resume: co.ResumeOpt = False, executor: co.ExecutorOpt = "local", address: co.AddressOpt = None,
          workers: co.WorkersOpt = None, threads: co.ThreadsOpt = None, engine: co.EngineOpt = None,
          device: co.DeviceOpt = None, refit: co.RefitOpt = REFIT):
    """Fit a value model on the earlier deliveries, less the --test-fraction held out for evaluate, choose its epoch
    (hurdle: its trees and smearing factor) on the validation deliveries, then fit it again on every delivery with
    that choice (--no-refit: keep the selected model), and write it as a model directory.

    A dataset in parts trains without being read whole: its encoders are counted part by part, then the network
    trains part by part in this process (--executor local) or data-parallel on --workers Ray Train workers
    (--executor ray; DDP, --batch-size the global batch), holding out the same deliveries as one folder would; the
    refit then trains over the parts again on every delivery, without scoring the held-out ones first (evaluate
    scores them with the refit model, and warns; --no-refit keeps the selected model).

    The other columns of deliveries, users and funds are features, their types inferred (printed at the end and
    kept in config.json): --categorical / --numeric set the type of some. The --label mapping is kept with the
    model: evaluate on the same tables needs it no more. A feature that alone predicts the conversion almost
    perfectly (a label leak) is warned of before training; drop it, or keep it with --allow-leaky."""
    with cs.user_errors(), opt.flag_errors(), cv.convention_errors():
        executor = cs.executor_option(executor, engine)
        cs.set_threads(threads)
        from promokit.value.estimator import ValueModel
        from promokit.value.workflows import train as train_model

        config, model_params = cs.training_options(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                                patience=patience, monitor=monitor, seed=seed, wide=wide,
                                                device=device)
        estimator = ValueModel(_renamed("--model", model), model_params, config, split=split,
                               test_fraction=test_fraction, labels=cv.label_options(label, opt.LABEL_ROLES),
                               allow_leaky=allow_leaky, refit=refit)
        trained = train_model(estimator, data, cs.deferred_executor(executor, address, workers),
                              validation=cs.validation_option(validation), checkpoint_dir=cs.checkpoint_dir(out), resume=resume,
                              repair_labels=repair_labels, types=cs.types_option(categorical, numeric))
        if not trained.in_parts:
            _whole_tables(data, "trained", executor, address, workers)
        estimator.save(out)
        pr.finish_training(out, estimator.history_)
        specs = estimator.feature_specs_
        pr.print_feature_types({"deliveries": specs["context"], "users": specs["users"], "funds": specs["funds"]}, True)
        for what, count in trained.counts.items():
            get_console().print(f"{what}: {count:,}")
        pr.print_held_out(trained.held_out, "delivery")
        pr.print_refit(estimator.holdout_, "delivery")
        refit_note = ", then refit on every delivery" if (estimator.holdout_ or {}).get("refit") else ""
        get_console().print(f"model written to {out} (trained on {trained.rows['train']:,} deliveries, validated on "
                            f"{trained.rows['valid']:,}{refit_note})")


@app.command()
def predict(model: opt.ModelDirOpt, data: opt.PartsDataOpt, out: opt.PredictOutOpt, at: opt.AtOpt = None,
            contexts: opt.ContextsOpt = SCORE_CONTEXTS, users_list: opt.UsersListOpt = None,
            executor: co.ExecutorOpt = "local", address: co.AddressOpt = None, workers: co.WorkersOpt = None,
            threads: co.ThreadsOpt = None, engine: co.EngineOpt = None, device: co.DeviceOpt = None):
    """ETV of every user × fund in the allocate quota wide layout, and the named outputs of every delivery; a
    dataset in parts is scored part by part on --executor (the model loaded once per worker). Without a deliveries
    table, users × funds are scored alone, in contexts the model kept from its training deliveries."""
    with cs.user_errors(), opt.flag_errors():
        executor = cs.executor_option(executor, engine)
        cs.set_threads(threads)
        cs.set_device(device)
        from promokit.data.uris import as_path
        from promokit.value.workflows import predict as predict_dataset

        prediction = predict_dataset(model, data, out, cs.deferred_executor(executor, address, workers),
                                     at=at, contexts=contexts, users_list=users_list)
        if not prediction.in_parts:
            _whole_tables(data, "predicted", executor, address, workers)
        for note in prediction.notes:
            get_console().print(note)
        summary = prediction.summary
        get_console().print(f"ETV of {summary['users']:,} users × {len(summary['funds'])} funds written to {as_path(out)}; "
                            f"allocate them with: promokit allocate quota --scores {prediction.scores} --quotas QUOTAS "
                            "--out plan/")


@app.command()
def evaluate(model: opt.ModelDirOpt, data: opt.DataOpt, out: opt.EvaluateOutOpt, all_rows: co.AllRowsOpt = False,
             repair_labels: opt.RepairOpt = False, label: opt.LabelOpt = None, floor: opt.FloorOpt = None):
    """AUC, logloss, MSE, MAE, normalised Gini, THC, THA, how much the ETV personalises the fund, the decile and the
    per-fund calibration of a trained model, beside the floor's (hurdle). The labels are read from the columns
    train was told (--label), unless --label says otherwise. A model refit on every delivery (train's default) has
    learnt the held-out deliveries too: evaluate reports the metrics they gave the selected model, scored by train
    before the refit (the metrics alone; --label scores them again, by the refit model, with a warning)."""
    with cs.user_errors(out=out), opt.flag_errors(), cv.convention_errors():
        from promokit.value.evaluate import FLOOR
        from promokit.value.workflows import evaluate as evaluate_model

        labels = cv.label_options(label, opt.LABEL_ROLES)

        def stored(estimator, tables):  # a refit model: what the held-out deliveries said before the refit
            asked = {"--label": cv.relabelled(label, opt.LABEL_ROLES, estimator.labels)}
            return cv.held_out_evaluation(estimator, tables, all_rows, asked)

        result = evaluate_model(model, data, all_rows=all_rows, repair_labels=repair_labels, labels=labels,
                                floor=floor, held_out_evaluation=stored)
        if result.floor_missing:
            get_console().print(f"note: with --all there are no training deliveries to fit the floor on; give "
                                f"--floor DIR (promokit value train --model {FLOOR}) to show it beside")
        result.report.write(out)
        print_table(result.title, result.table.set_index("metric"))
        if "thc" not in set(result.table["metric"]):
            get_console().print("note: one fund: THC, THA, best_differs and uplift_spread compare funds and are left "
                                "out")
        print_table("calibration per fund (mean ETV / mean amount)", result.funds.set_index("fund").round(3))


@app.command()
def recalibrate(model: opt.ModelDirOpt, data: opt.DataOpt, start: opt.RecalibrateFromOpt = None,
                method: opt.MethodOpt = DEFAULT_METHOD, by: opt.RecalibrateByOpt = None,
                repair_labels: opt.RepairOpt = False, label: opt.LabelOpt = None):
    """Fit a recalibration of a trained model's pCTCVR on labelled deliveries (the latest period, after the training
    one) and write it into the model directory (recalibration.json): predict, evaluate and the ETV tables then apply
    it, predict keeping the model's own p_ctcvr and etv as p_ctcvr_raw and etv_raw."""
    with cs.user_errors(model=model), opt.flag_errors(), cv.convention_errors():
        from promokit.value.workflows import recalibrate as recalibrate_model

        fitted = recalibrate_model(model, data, start=start, method=method, repair_labels=repair_labels,
                                   labels=cv.label_options(label, opt.LABEL_ROLES), by=by)
        groups = "" if by is None else (f" by {by} ({fitted['groups']:,} values, {fitted['own_maps']:,} with a map "
                                         "of their own)")
        get_console().print(f"{method} recalibration{groups} written to {model / 'recalibration.json'}: on "
                            f"{fitted['rows']:,} deliveries ({fitted['positives']:,} converted, observed rate "
                            f"{fitted['rate']:.4f}) the mean predicted pCTCVR was {fitted['mean_p']:.4f}, recalibrated "
                            f"{fitted['mean_p_after']:.4f}", highlight=False, soft_wrap=True)


@app.command()
def bench(models: opt.ModelsOpt = "hurdle,esdpm,esdpm-ncg,mtl-ziln,mtl-mse,esmm,mmoe,shared-bottom,dnn",
          seeds: opt.SeedsOpt = "0,1,2",
          users: int = 20_000, funds: int = 8,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          params: co.ParamsOpt = None, wide: co.WideOpt = None,
          out: co.runs_out_option("results.csv (rewritten as each model finishes), report.md / report.json / deciles.png") = co.RUNS / "value-bench",
          threads: co.ThreadsOpt = None):
    """The floor and every model on synthetic worlds (one per seed) against the oracle, RelaImpr against the floor,
    how much each personalises the fund, and the delivery plans each leads to (--params go to the networks)."""
    with cs.user_errors(out=out):
        cs.set_threads(threads)
        from promokit.experiments.value.bench import run_and_report

        run_and_report(_models(models), cs.seeds_option(seeds), {"n_users": users, "n_funds": funds},
                       cs.bench_training(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                      patience=patience, wide=wide), out)


@app.command()
def simulate(world: opt.WorldOpt, model: opt.TrainedModelsOpt, out: opt.ReportOutOpt,
             allocators: opt.AllocatorsOpt = "manual,ha,prices", seed: opt.SeedOpt = 0):
    """Allocate every user of the world one fund by each model's ETV (and the true ETV) under the quotas and the risk
    rule, then draw outcomes from the true model: CPMD and TAPMD per model and allocator (Table 3 offline)."""
    with cs.user_errors(out=out), opt.flag_errors():
        from promokit.experiments.value.simulate import simulate as simulate_plans

        report, table = simulate_plans(world, model, [p for p in allocators.split(",") if p.strip()], seed)
        report.write(out)
        print_table("delivery plans scored by the true model (per mille deliveries)",
                    table.set_index(["model", "allocator"]).round(1))
        get_console().print(f"report written to {out}/report.md")


@app.command()
def demo(out: co.runs_out_option("results.csv (rewritten as each model finishes) and the report") = co.RUNS / "value-demo",
         users: int = 6_000, seed: opt.SeedOpt = 0,
         models: opt.ModelsOpt = "hurdle,esdpm,esdpm-ncg,mtl-ziln,mtl-mse,esmm"):
    """Train the floor, ESDPM and its baselines on a synthetic fund world, score the latest deliveries against the
    oracle and allocate users to funds by each model's ETV."""
    with cs.user_errors(out=out):
        from promokit.experiments.value.bench import demo as run_demo

        run_demo(_models(models), users, seed, out)


def _models(text: str) -> list[str]:
    """``--models``: the names, a former one (``two-part``) as the model it is now; the library checks them."""
    from promokit.data import DataError

    names = [_renamed("--models", name.strip()) for name in text.split(",") if name.strip()]
    if not names:
        raise DataError(f"--models names no model ({text!r}); give comma-separated models")
    return names


def _renamed(flag: str, name: str) -> str:
    """A model's name; a former one (``two-part``, now ``hurdle``) still works in this release, with a warning."""
    import warnings

    from promokit.value.models import RENAMED

    if name not in RENAMED:
        return name
    warnings.warn(f"{flag} {name} is deprecated: the same model is now {RENAMED[name]}", FutureWarning, stacklevel=2)
    return RENAMED[name]


@app.command()
def compare(data: opt.DataOpt, out: co.CompareOutOpt, models: co.CompareModelsOpt = "hurdle,esdpm-ncg,esdpm",
            seeds: co.CompareSeedsOpt = "0", test_fraction: opt.TestFractionOpt = TEST_FRACTION, label: opt.LabelOpt = None,
            validation: co.ValidationOpt = None, split: opt.SplitOpt = DEFAULT_SPLIT,
            repair_labels: opt.RepairOpt = False, epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None,
            lr: TRAIN.lr = None, patience: TRAIN.patience = None, categorical: co.CategoricalOpt = None,
            numeric: co.NumericOpt = None, resamples: co.ResamplesOpt = co.RESAMPLES, threads: co.ThreadsOpt = None):
    """Fit the floor hurdle and --models on the same deliveries with the same training budget, and write one
    leaderboard: the held-out AUC of pCTCVR and normalised Gini of the ETV, each against hurdle with a paired
    bootstrap interval, the calibration ratio, fit and predict seconds and a verdict per model. A model that reads
    the consumption graph is skipped, with the reason, when the dataset has none."""
    flags = {"models": "--models", "seeds": "--seeds"}
    with cs.user_errors(out=out), opt.flag_errors(), cs.flags_in_errors(flags), cv.convention_errors():
        cs.set_threads(threads)
        from promokit.value.contract import read_folder

        labels = cv.label_options(label, opt.LABEL_ROLES)
        tables = read_folder(data, True, repair_labels, types=cs.types_option(categorical, numeric), labels=labels)
        pr.run_compare("value", tables, models, seeds, out, resamples,
                       options={"split": split, "test_fraction": test_fraction, "labels": labels},
                       validation=cs.validation_option(validation), epochs=epochs, batch_size=batch_size, lr=lr, patience=patience)

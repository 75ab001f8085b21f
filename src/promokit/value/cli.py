"""``promokit value …``: synth, from-transactions, train, predict, evaluate, bench, simulate, demo."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli_support import (
    RUNS,
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
    WideOpt,
    WorkersOpt,
    bench_training,
    checkpoint_dir,
    convention_errors,
    deferred_executor,
    executor_option,
    finish_training,
    flags_in_errors,
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
)
from promokit.console import get_console, print_table
from promokit.data.split import TEST_FRACTION
from promokit.value.defaults import DEFAULT_MODEL, DEFAULT_SPLIT, DEFAULT_TRAIN, SCORE_CONTEXTS, VALIDATION_FRACTION
from promokit.value.transactions import AMOUNT as AMOUNT_COLUMN, CUSTOMER, ONE_FUND, TIME as TIME_COLUMN

#: The training flags, showing the defaults the estimator trains with.
TRAIN = TrainingFlags(DEFAULT_TRAIN)

app = typer.Typer(help="Expected transaction value: ESDPM with the ESJ loss and its baselines, ETV tables for "
                       "allocate quota.", no_args_is_help=True)

DataOpt = Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv.")]
PartsDataOpt = Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv; or in parts: users/, deliveries/ [, behaviors/, consumption/] directories of Parquet parts co-partitioned by user, and one funds table.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for initialisation, sampling and shuffling.")]
ModelOpt = Annotated[str, typer.Option("--model", help="hurdle (the floor; two-part: its deprecated name) | esdpm | esdpm-ncg | mtl-ziln | mtl-mse | esmm | mmoe | shared-bottom | dnn")]
ModelsOpt = Annotated[str, typer.Option(help="Comma-separated models; the floor hurdle is always added, first.")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
RepairOpt = Annotated[bool, typer.Option("--repair-labels", help="Set conversions without a click or an amount, and amounts without a conversion, to 0 (counted) instead of failing.")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation deliveries: loss (default, §5.1) | auc.")]

#: How a library error names a Python argument or says fit, and what the value commands say instead.
_FLAGS = (("split='random'", "--split random"), ("repair_labels=True", "--repair-labels"), ("at must be", "--at must be"),
          ("held_out: ", ""), ("the data fit was given", "the data train was given"))
#: The value commands' flags that library errors name as `argument`.
_ARGUMENTS = {"wide": "--wide", "contexts": "--contexts", "users_list": "--users-list", "all_rows": "--all",
              "floor": "--floor", "models": "--model"}


@contextmanager
def _flag_errors():
    """Library errors name Python arguments; the value commands' errors name their flags."""
    from promokit.data import DataError

    try:
        with flags_in_errors(_ARGUMENTS):
            yield
    except DataError as exc:
        message = str(exc)
        for argument, flag in _FLAGS:
            message = re.sub(rf"(?<![\w-]){re.escape(argument)}", flag, message)
        raise DataError(message) from None


#: The deliveries' label roles (promokit.value.contract.LABELS).
LABEL_ROLES = ("click", "convert", "amount")
LabelOpt = label_option(LABEL_ROLES)
TestFractionOpt = test_fraction_option("the latest deliveries with --split time, drawn at random with --split random")


def _whole_tables(data: Path, doing: str, executor: str, address: str | None, workers: int | None) -> None:
    """Say that the executor options serve a dataset in parts, when given for one folder of whole tables."""
    if executor != "local" or address or workers:
        get_console().print(f"note: {data} holds whole tables, not parts: {doing} in this process (--executor, "
                            "--address and --workers serve a dataset in parts)")


@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Folder for the world's tables, true ETVs and quotas.")],
          users: int = 20_000, funds: int = 8,
          deliveries: Annotated[float, typer.Option(help="Mean deliveries per user.")] = 5.0,
          seed: SeedOpt = 0):
    """Write a synthetic fund-promotion world (deliveries, users, funds, behaviors, consumption) with its truth."""
    with user_errors():
        from promokit.experiments.value.world import write_synthetic

        world, paths = write_synthetic(out, users, funds, deliveries, seed)
        get_console().print(f"{users:,} users, {funds} funds, {len(world.deliveries):,} deliveries, "
                            f"{len(world.behaviors):,} behaviours and {len(world.consumption):,} payments written to "
                            f"{out} ({', '.join(p.name for p in paths.values())})")


@app.command("from-transactions")
def from_transactions(
        transactions: Annotated[Path, typer.Option("--transactions", help="Purchase log, one row per purchase (.csv or .parquet): customer, time, amount [, product].")],
        out: Annotated[Path, typer.Option("--out", help="Folder for deliveries, users, funds and behaviors (.parquet): a value dataset.")],
        feature_window: Annotated[str, typer.Option("--feature-window", help="START,END (END excluded; START may be empty: from the first purchase), or a duration ending where the target window starts (273D).")],
        target_window: Annotated[str, typer.Option("--target-window", help="START,END (END excluded), or a duration starting where the feature window ends (273D).")],
        customer: Annotated[str, typer.Option("--customer", help="The customer column.")] = CUSTOMER,
        time: Annotated[str, typer.Option("--time", help="The time column: datetimes, or text that parses as one.")] = TIME_COLUMN,
        time_format: Annotated[Optional[str], typer.Option("--time-format", help="How the times are written, e.g. %Y%m%d for 19970101 (default: any date or datetime).")] = None,
        amount: Annotated[str, typer.Option("--amount", help="The amount column (numbers ≥ 0).")] = AMOUNT_COLUMN,
        product: Annotated[Optional[str], typer.Option("--product", help="A column whose values become the funds (default: one fund).")] = None,
        quantity: Annotated[Optional[str], typer.Option("--quantity", help="A numeric column (units bought) summed as a feature.")] = None,
        fund: Annotated[str, typer.Option("--fund", help="The one fund's name, without --product.")] = ONE_FUND):
    """Value tables from a purchase log: RFM and spend features from the feature window, each customer's spend (per
    fund) in the target window as the label; train on them with --split random (one delivery time)."""
    with user_errors(), flags_in_errors({"transactions": "--transactions", "out": "--out",
                                         "feature_window": "--feature-window", "target_window": "--target-window",
                                         "customer": "--customer", "time": "--time", "time_format": "--time-format",
                                         "amount": "--amount", "product": "--product", "quantity": "--quantity"}):
        from promokit.data.io import read_table
        from promokit.value.transactions import from_transactions as value_frames, write_value_tables

        tables = value_frames(read_table(transactions), feature_window=feature_window, target_window=target_window,
                              customer=customer, time=time, time_format=time_format, amount=amount, product=product,
                              quantity=quantity, fund=fund)
        write_value_tables(tables, out)
        deliveries, funds = tables["deliveries"], len(tables["funds"])
        get_console().print(f"{len(tables['users']):,} customers, {funds} fund{'s' * (funds > 1)}, {len(deliveries):,} "
                            f"deliveries ({deliveries['convert'].mean():.1%} spend in the target window) and "
                            f"{len(tables['behaviors']):,} purchases as behaviours written to {out}; train with: "
                            f"promokit value train --data {out} --split random --out MODEL")


@app.command()
def train(data: PartsDataOpt,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = DEFAULT_MODEL,
          test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          valid_fraction: Annotated[Optional[float], typer.Option(help="Share of the rest that picks the epoch (§5.1: 0.1).", show_default=f"{VALIDATION_FRACTION:g}")] = None,
          split: Annotated[str, typer.Option("--split", help="time (the latest deliveries are held out, §5.1) | random (for deliveries that share one time).")] = DEFAULT_SPLIT,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          monitor: MonitorOpt = None, seed: SeedOpt = DEFAULT_TRAIN.seed, params: ParamsOpt = None, repair_labels: RepairOpt = False,
          categorical: CategoricalOpt = None, numeric: NumericOpt = None, wide: WideOpt = None,
          resume: ResumeOpt = False, executor: ExecutorOpt = "local", address: AddressOpt = None,
          workers: WorkersOpt = None, threads: ThreadsOpt = None, engine: EngineOpt = None):
    """Fit a value model on the earlier deliveries and write it as a model directory.

    A dataset in parts trains without being read whole: its encoders are counted part by part, then the network
    trains part by part in this process (--executor local) or data-parallel on --workers Ray Train workers
    (--executor ray; DDP, --batch-size the global batch), holding out the same deliveries as one folder would.

    The other columns of deliveries, users and funds are features, their types inferred (printed at the end and
    kept in config.json): --categorical / --numeric set the type of some. The --label mapping is kept with the
    model: evaluate on the same tables needs it no more."""
    with user_errors(), _flag_errors(), convention_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.value.estimator import ValueModel
        from promokit.value.workflows import train as train_model

        config, model_params = training_options(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                                patience=patience, monitor=monitor, seed=seed, wide=wide)
        estimator = ValueModel(_renamed("--model", model), model_params, config, split=split,
                               test_fraction=test_fraction, labels=label_options(label, LABEL_ROLES))
        trained = train_model(estimator, data, deferred_executor(executor, address, workers),
                              validation=valid_fraction, checkpoint_dir=checkpoint_dir(out), resume=resume,
                              repair_labels=repair_labels, types=types_option(categorical, numeric))
        if not trained.in_parts:
            _whole_tables(data, "trained", executor, address, workers)
        estimator.save(out)
        finish_training(out, estimator.history)
        specs = estimator.specs
        print_feature_types({"deliveries": specs["context"], "users": specs["users"], "funds": specs["funds"]}, True)
        for what, count in trained.counts.items():
            get_console().print(f"{what}: {count:,}")
        print_held_out(trained.held_out, "delivery")
        get_console().print(f"model written to {out} (trained on {trained.rows['train']:,} deliveries, validated on "
                            f"{trained.rows['valid']:,})")


@app.command()
def predict(model: ModelDirOpt, data: PartsDataOpt,
            out: Annotated[Path, typer.Option("--out", help="Folder for scores.parquet, deliveries.parquet and summary.json; with --data in parts, scores/ and deliveries/ (part k from input part k) and summary.json.")],
            at: Annotated[Optional[str], typer.Option("--at", help="Score as of this time (a date or a number like the deliveries' times); default just after the latest delivery.")] = None,
            contexts: Annotated[int, typer.Option(help="Delivery contexts averaged over per user × fund.")] = SCORE_CONTEXTS,
            users_list: Annotated[Optional[Path], typer.Option("--users-list", help="Table with a user_id column (other columns ignored): score these users only, in its order — a campaign's users for allocate quota.")] = None,
            executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
            threads: ThreadsOpt = None, engine: EngineOpt = None):
    """ETV of every user × fund in the allocate quota wide layout, and the named outputs of every delivery; a
    dataset in parts is scored part by part on --executor (the model loaded once per worker). Without a deliveries
    table, users × funds are scored alone, in contexts the model kept from its training deliveries."""
    with user_errors(), _flag_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.value.workflows import predict as predict_dataset

        prediction = predict_dataset(model, data, out, deferred_executor(executor, address, workers),
                                     at=at, contexts=contexts, users_list=users_list)
        if not prediction.in_parts:
            _whole_tables(data, "predicted", executor, address, workers)
        for note in prediction.notes:
            get_console().print(note)
        summary = prediction.summary
        get_console().print(f"ETV of {summary['users']:,} users × {len(summary['funds'])} funds written to {out}; "
                            f"allocate them with: promokit allocate quota --scores {prediction.scores} --quotas QUOTAS "
                            "--out plan/")


@app.command()
def evaluate(model: ModelDirOpt, data: DataOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json / deciles.png.")],
             all_rows: AllRowsOpt = False, repair_labels: RepairOpt = False, label: LabelOpt = None,
             floor: Annotated[Optional[Path], typer.Option("--floor", help="A hurdle model directory to show beside the model; default: the floor fitted on the deliveries the model trained on (with --all: none).")] = None):
    """AUC, logloss, MSE, MAE, normalised Gini, THC, THA, how much the ETV personalises the fund, the decile and the
    per-fund calibration of a trained model, beside the floor's (hurdle). The labels are read from the columns
    train was told (--label), unless --label says otherwise."""
    with user_errors(), _flag_errors(), convention_errors():
        from promokit.value.evaluate import FLOOR
        from promokit.value.workflows import evaluate as evaluate_model

        result = evaluate_model(model, data, all_rows=all_rows, repair_labels=repair_labels,
                                labels=label_options(label, LABEL_ROLES), floor=floor)
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
def bench(models: ModelsOpt = "hurdle,esdpm,esdpm-ncg,mtl-ziln,mtl-mse,esmm,mmoe,shared-bottom,dnn",
          seeds: Annotated[str, typer.Option(help="Comma-separated seeds (world, split and training).")] = "0,1,2",
          users: int = 20_000, funds: int = 8,
          epochs: TRAIN.epochs = None, batch_size: TRAIN.batch_size = None, lr: TRAIN.lr = None, patience: TRAIN.patience = None,
          params: ParamsOpt = None, wide: WideOpt = None,
          out: runs_out_option("results.csv (rewritten as each model finishes), report.md / report.json / deciles.png") = RUNS / "value-bench",
          threads: ThreadsOpt = None):
    """The floor and every model on synthetic worlds (one per seed) against the oracle, RelaImpr against the floor,
    how much each personalises the fund, and the delivery plans each leads to (--params go to the networks)."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.value.bench import run_and_report

        run_and_report(_models(models), seeds_option(seeds), {"n_users": users, "n_funds": funds},
                       bench_training(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                      patience=patience, wide=wide), out)


@app.command()
def simulate(world: Annotated[Path, typer.Option("--world", help="Folder written by synth (tables, truth_etv.parquet, quotas.csv).")],
             model: Annotated[list[Path], typer.Option("--model", help="Model directory trained on this world; repeat for several.")],
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             allocators: Annotated[str, typer.Option(help="Comma-separated: manual, ha, prices, exact.")] = "manual,ha,prices",
             seed: SeedOpt = 0):
    """Allocate every user of the world one fund by each model's ETV (and the true ETV) under the quotas and the risk
    rule, then draw outcomes from the true model: CPMD and TAPMD per model and allocator (Table 3 offline)."""
    with user_errors(), _flag_errors():
        from promokit.experiments.value.simulate import simulate as simulate_plans

        report, table = simulate_plans(world, model, [p for p in allocators.split(",") if p.strip()], seed)
        report.write(out)
        print_table("delivery plans scored by the true model (per mille deliveries)",
                    table.set_index(["model", "allocator"]).round(1))
        get_console().print(f"report written to {out}/report.md")


@app.command()
def demo(out: runs_out_option("results.csv (rewritten as each model finishes) and the report") = RUNS / "value-demo",
         users: int = 6_000, seed: SeedOpt = 0,
         models: ModelsOpt = "hurdle,esdpm,esdpm-ncg,mtl-ziln,mtl-mse,esmm"):
    """Train the floor, ESDPM and its baselines on a synthetic fund world, score the latest deliveries against the
    oracle and allocate users to funds by each model's ETV."""
    with user_errors():
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

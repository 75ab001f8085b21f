"""``promokit value …``: synth, train, predict, evaluate, bench, simulate, demo."""

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
    WideOpt,
    WorkersOpt,
    bench_training,
    checkpoint_dir,
    convention_errors,
    executor_from_options,
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
)
from promokit.console import get_console, print_table
from promokit.data.split import TEST_FRACTION

app = typer.Typer(help="Expected transaction value: ESDPM with the ESJ loss and its baselines, ETV tables for "
                       "allocate quota.", no_args_is_help=True)

DataOpt = Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for initialisation, sampling and shuffling.")]
ModelOpt = Annotated[str, typer.Option("--model", help="hurdle (the floor; two-part: its deprecated name) | esdpm | esdpm-ncg | mtl-ziln | mtl-mse | esmm | mmoe | shared-bottom | dnn")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
RepairOpt = Annotated[bool, typer.Option("--repair-labels", help="Set conversions without a click or an amount, and amounts without a conversion, to 0 (counted) instead of failing.")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation deliveries: loss (default, §5.1) | auc.")]


#: How a library error names a Python argument, and the flag the CLI says instead.
_FLAGS = (("split='random'", "--split random"), ("repair_labels=True", "--repair-labels"),
          ("at must be", "--at must be"))


@contextmanager
def _flag_errors():
    """Library errors name Python arguments; the value commands' errors name their flags."""
    from promokit.data import DataError

    try:
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


def _read(data: Path, require_labels: bool = True, repair: bool = False, model=None, types=None, labels=None):
    from promokit.value.contract import read_folder

    return read_folder(data, require_labels, repair, None if model is None else model.specs, types, labels)


@app.command()
def synth(out: Annotated[Path, typer.Option("--out", help="Folder for the world's tables, true ETVs and quotas.")],
          users: int = 20_000, funds: int = 8,
          deliveries: Annotated[float, typer.Option(help="Mean deliveries per user.")] = 5.0,
          seed: SeedOpt = 0):
    """Write a synthetic fund-promotion world (deliveries, users, funds, behaviors, consumption) with its truth."""
    with user_errors():
        from promokit.data import write_table
        from promokit.experiments.value.world import feasible_quotas, make_world, write_world

        world = make_world(users, funds, deliveries_per_user=deliveries, seed=seed)
        paths = write_world(world, out)
        quotas = feasible_quotas(world.users["tolerance"].to_numpy(), world.funds["risk"].to_numpy(),
                                 world.funds["fund"], seed)
        paths["quotas"] = write_table(quotas, out / "quotas.csv")
        get_console().print(f"{users:,} users, {funds} funds, {len(world.deliveries):,} deliveries, "
                            f"{len(world.behaviors):,} behaviours and {len(world.consumption):,} payments written to "
                            f"{out} ({', '.join(p.name for p in paths.values())})")


@app.command()
def train(data: Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv; or in parts: users/, deliveries/ [, behaviors/, consumption/] directories of Parquet parts co-partitioned by user, and one funds table.")],
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          model: ModelOpt = "esdpm",
          test_fraction: TestFractionOpt = TEST_FRACTION, label: LabelOpt = None,
          valid_fraction: Annotated[float, typer.Option(help="Share of the rest that picks the epoch (§5.1: 0.1).")] = 0.1,
          split: Annotated[str, typer.Option("--split", help="time (the latest deliveries are held out, §5.1) | random (for deliveries that share one time).")] = "time",
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, patience: PatienceOpt = None,
          monitor: MonitorOpt = None, seed: SeedOpt = 0, params: ParamsOpt = None, repair_labels: RepairOpt = False,
          categorical: CategoricalOpt = None, numeric: NumericOpt = None, wide: WideOpt = None,
          resume: ResumeOpt = False, executor: ExecutorOpt = "local", address: AddressOpt = None,
          workers: WorkersOpt = None, threads: ThreadsOpt = None, engine: EngineOpt = None):
    """Fit a value model on the earlier deliveries and write it as a model directory.

    A dataset in parts trains without being read whole: its encoders are counted part by part, then the network
    trains part by part in this process (--executor local) or data-parallel on --workers Ray Train workers
    (--executor ray; DDP, --batch-size the global batch), holding out the same deliveries as one folder would.

    The other columns of deliveries, users and funds are features, their types inferred (printed at the end and
    kept in config.json): --categorical / --numeric set the type of some."""
    with user_errors(), _flag_errors(), flags_in_errors({"wide": "--wide"}), convention_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.data import DataError
        from promokit.value.contract import table_paths
        from promokit.value.estimator import DEFAULT_TRAIN, ValueModel
        from promokit.value.parts import in_parts

        config, model_params = training_options(DEFAULT_TRAIN, params, epochs=epochs, batch_size=batch_size, lr=lr,
                                                patience=patience, monitor=monitor, seed=seed, wide=wide)
        estimator = ValueModel(_renamed("--model", model), model_params, config, split=split,
                               test_fraction=test_fraction)
        types = types_option(categorical, numeric)
        console = get_console()
        paths = table_paths(data)
        labels = label_options(label, LABEL_ROLES)
        if in_parts(paths):
            from promokit.value.parts import train_parts

            if labels:
                raise DataError(f"--label: {data} holds parts, whose columns are read under their contract names "
                                "(click, convert, amount): rename the columns in the parts, or give one folder")
            counts = train_parts(estimator, paths, executor_from_options(executor, address, workers),
                                 checkpoint_dir(out) / "user-keys", valid_fraction, checkpoint_dir(out), resume,
                                 repair_labels, types)
        else:
            if executor != "local" or address or workers:
                console.print(f"note: {data} holds whole tables, not parts: training in this process (--executor, "
                              "--address and --workers serve a dataset in parts)")
            tables = _read(data, repair=repair_labels, types=types, labels=labels)
            rows = dict(zip(("train", "valid", "test"), estimator.split_rows(tables, valid_fraction)))
            estimator.fit(tables, validation=valid_fraction, checkpoint_dir=checkpoint_dir(out), resume=resume)
            counts = {**{k: len(v) for k, v in rows.items()},
                      **{k: v for k, v in tables.counts.items() if k.endswith("(dropped)") and v or
                         k.startswith("repaired")}}
        estimator.save(out)
        finish_training(out, estimator.history)
        specs = estimator.specs
        print_feature_types({"deliveries": specs["context"], "users": specs["users"], "funds": specs["funds"]}, True)
        for what, count in counts.items():
            if what not in ("train", "valid", "test"):
                console.print(f"{what}: {count:,}")
        rule = f"the latest {test_fraction:.0%} by time" if split == "time" else f"drawn at random, seed {seed}"
        print_held_out(counts["test"] and f"{counts['test']:,} of {estimator.holdout['rows']:,} deliveries ({rule})",
                       "delivery")
        console.print(f"model written to {out} (trained on {counts['train']:,} deliveries, validated on "
                      f"{counts['valid']:,})")


@app.command()
def predict(model: ModelDirOpt,
            data: Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv; or in parts: users/, deliveries/ [, behaviors/, consumption/] directories of Parquet parts co-partitioned by user, and one funds table.")],
            out: Annotated[Path, typer.Option("--out", help="Folder for scores.parquet, deliveries.parquet and summary.json; with --data in parts, scores/ and deliveries/ (part k from input part k) and summary.json.")],
            at: Annotated[Optional[str], typer.Option("--at", help="Score as of this time (a date or a number like the deliveries' times); default just after the latest delivery.")] = None,
            contexts: Annotated[int, typer.Option(help="Delivery contexts averaged over per user × fund.")] = 4,
            users_list: Annotated[Optional[Path], typer.Option("--users-list", help="Table with a user_id column (other columns ignored): score these users only, in its order — a campaign's users for allocate quota.")] = None,
            executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None,
            threads: ThreadsOpt = None, engine: EngineOpt = None):
    """ETV of every user × fund in the allocate quota wide layout, and the named outputs of every delivery; a
    dataset in parts is scored part by part on --executor (the model loaded once per worker). Without a deliveries
    table, users × funds are scored alone, in contexts the model kept from its training deliveries."""
    with user_errors(), _flag_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.data import DataError, write_json
        from promokit.value.contract import table_paths
        from promokit.value.parts import in_parts, predict_parts

        if contexts < 1:
            raise DataError(f"--contexts must be at least 1, got {contexts}")
        paths = table_paths(data, deliveries_optional=True)
        if in_parts(paths):
            if users_list is not None or "deliveries" not in paths:
                raise DataError(f"{data} holds parts: --users-list and scoring without deliveries/ serve a dataset in "
                                "one folder")
            name, values = predict_parts(model, paths, out, executor_from_options(executor, address, workers), at,
                                         contexts)
            written = out / "scores"
        else:
            from promokit.value.estimator import ValueModel

            if executor != "local" or address or workers:
                get_console().print(f"note: {data} holds whole tables, not parts: predicting in this process "
                                    "(--executor, --address and --workers serve a dataset in parts)")
            estimator = ValueModel.load(model)
            tables = _read(data, require_labels=False, model=estimator)
            name, values, written = estimator.model, [_predict_folder(estimator, tables, out, at, contexts,
                                                                     users_list)], out / "scores.parquet"
        summary = _summary(name, values)
        write_json(summary, out / "summary.json")
        get_console().print(f"ETV of {summary['users']:,} users × {len(summary['funds'])} funds written to {out}; "
                            f"allocate them with: promokit allocate quota --scores {written} --quotas QUOTAS "
                            "--out plan/")


def _predict_folder(estimator, tables, out: Path, at, contexts: int, users_list: Path | None):
    """``value predict`` on one folder: the scores of every user (or of the listed ones) as of ``at``, the outputs
    of every delivery when there are deliveries, and notes on the behaviours the scoring time reads."""
    from promokit.data import write_parquet
    from promokit.value.estimator import scoring_time
    from promokit.value.parts import score_stats
    from promokit.value.scoring import event_times, read_users_list, scoring_notes, time_text

    console = get_console()
    users = None if users_list is None else read_users_list(users_list, tables)
    times = event_times(tables)
    when = scoring_time(times, at)
    scores = estimator.score_table(tables, when, contexts, users=users)
    write_parquet(scores, out / "scores.parquet")
    if len(tables.deliveries):
        write_parquet(estimator.predict(tables), out / "deliveries.parquet")
    else:
        console.print("no deliveries table: users × funds scored in the delivery contexts the model kept")
    console.print(f"scored as of {time_text(when)}" if at or not len(times) else
                  f"scored just after the latest event, {time_text(times.max())}")
    if estimator.encoders.max_len:  # a model trained without behaviours reads none
        for note in scoring_notes(tables, when, at is not None, estimator.trained_until):
            console.print(note)
    return score_stats(scores, len(tables.deliveries))


def _summary(model: str, values: list) -> dict:
    """summary.json of predict from the :class:`~promokit.value.parts.PartValues` of one table or of every part:
    the mean ETV per fund over every user and each fund's share of the users whose highest ETV it is."""
    import pandas as pd

    from promokit.data.part_scoring import means

    etv = pd.Series(means([v.etv for v in values]), dtype="float64")
    best = pd.DataFrame([v.best for v in values]).sum()
    users = sum(v.etv.rows for v in values)
    share = (best[best > 0] / users).sort_values(ascending=False, kind="stable")
    return {"model": model, "users": users, "funds": [c.removeprefix("score_") for c in etv.index],
            "mean_etv": etv.round(6).to_dict(), "deliveries": sum(v.deliveries for v in values),
            "best_fund_share": share.round(4).to_dict()}


@app.command()
def evaluate(model: ModelDirOpt, data: DataOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json / deciles.png.")],
             all_rows: AllRowsOpt = False, repair_labels: RepairOpt = False, label: LabelOpt = None,
             floor: Annotated[Optional[Path], typer.Option("--floor", help="A hurdle model directory to show beside the model; default: the floor fitted on the deliveries the model trained on (with --all: none).")] = None):
    """AUC, logloss, MSE, MAE, normalised Gini, THC, THA, how much the ETV personalises the fund, the decile and the
    per-fund calibration of a trained model, beside the floor's (hurdle)."""
    with user_errors(), _flag_errors(), convention_errors():
        from promokit.metrics.value import decile_figure
        from promokit.report import Report
        from promokit.value.estimator import ValueModel
        from promokit.value.evaluate import beside_floor

        estimator = ValueModel.load(model)
        tables = _read(data, repair=repair_labels, model=estimator, labels=label_options(label, LABEL_ROLES))
        rows = None if all_rows else held_out_rows(estimator, tables)
        evaluation = estimator.evaluate(tables, rows=rows)
        metrics = dict(evaluation)
        deciles, funds = evaluation.tables["decile_calibration"], evaluation.tables["calibration_per_fund"]
        floor_model = _floor(estimator, tables, floor, all_rows)
        floor_metrics = None if floor_model is None else dict(floor_model.evaluate(tables, rows=rows))
        table = beside_floor(metrics, floor_metrics)
        report = Report(evaluation.title, data={
            "model": estimator.model, "metrics": metrics, "floor": floor_metrics,
            "deciles": deciles.to_dict(orient="records"), "funds": funds.to_dict(orient="records")})
        report.add("Metrics" + ("" if floor_metrics is None else " (floor: hurdle on the same deliveries)"), table)
        report.add("Decile calibration", deciles).add("Calibration per fund", funds)
        report.figures["deciles"] = decile_figure(deciles, f"{estimator.model}: mean ETV and amount per decile")
        report.write(out)
        print_table(f"{estimator.model} on {metrics['deliveries']:,} deliveries", table.set_index("metric"))
        print_table("calibration per fund (mean ETV / mean amount)", funds.set_index("fund").round(3))


def _floor(estimator, tables, path: Optional[Path], all_rows: bool):
    """The floor evaluate shows beside ``estimator``: the hurdle model at ``path``, else one fitted on the
    deliveries ``estimator`` trained and validated on (none with --all, or for the floor itself)."""
    from dataclasses import replace

    from promokit.data import DataError
    from promokit.experiments.value.bench import FLOOR
    from promokit.value.estimator import DEFAULT_TRAIN, ValueModel

    if path is not None:
        floor = ValueModel.load(path)
        if floor.model != FLOOR:
            raise DataError(f"--floor {path}: holds the model {floor.model!r}, not the floor {FLOOR!r}")
        return floor
    if estimator.model == FLOOR:
        return None
    if all_rows:
        get_console().print(f"note: with --all there are no training deliveries to fit the floor on; give --floor "
                            f"DIR (promokit value train --model {FLOOR}) to show it beside")
        return None
    floor = ValueModel(FLOOR, train=replace(DEFAULT_TRAIN, seed=estimator.train_config.seed), split=estimator.split,
                       test_fraction=estimator.test_fraction)
    return floor.fit(tables, validation=estimator.holdout["valid_fraction"])


@app.command()
def bench(models: Annotated[str, typer.Option(help="Comma-separated models; the floor hurdle is always added, first.")] = "hurdle,esdpm,esdpm-ncg,mtl-ziln,mtl-mse,esmm,mmoe,shared-bottom,dnn",
          seeds: Annotated[str, typer.Option(help="Comma-separated seeds (world, split and training).")] = "0,1,2",
          users: int = 20_000, funds: int = 8,
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, patience: PatienceOpt = None,
          params: ParamsOpt = None, wide: WideOpt = None,
          out: runs_out_option("results.csv (rewritten as each model finishes), report.md / report.json / deciles.png") = RUNS / "value-bench",
          threads: ThreadsOpt = None):
    """The floor and every model on synthetic worlds (one per seed) against the oracle, RelaImpr against the floor,
    how much each personalises the fund, and the delivery plans each leads to (--params go to the networks)."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.value.bench import run_and_report
        from promokit.value.estimator import DEFAULT_TRAIN

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
        import pandas as pd

        from promokit.data import read_table
        from promokit.experiments.allocation.simulate import simulate_quota
        from promokit.experiments.value.bench import ORACLE, true_etv_matrix_from
        from promokit.experiments.value.world import read_truth_etv
        from promokit.report import Report
        from promokit.value.estimator import ValueModel

        truth_etv = read_truth_etv(world)
        quotas = read_table(world / "quotas.csv")
        rows, tables = [], None
        names = [p for p in allocators.split(",") if p.strip()]
        for path in [*model, None]:
            if path is None:
                name, scores = ORACLE, truth
            else:
                estimator = ValueModel.load(path)
                tables = _read(world, model=estimator)
                truth = true_etv_matrix_from(truth_etv, tables)
                name, scores = f"{estimator.model} ({path.name})", estimator.score_matrix(tables, seed=seed)
            rows += simulate_quota(name, scores, truth, quotas, tables.tolerance(), tables.risk(),
                                   tables.users["user_id"], tables.fund_names, truth_etv, seed, names)
        table = pd.DataFrame(rows).drop(columns="seed")
        report = Report(f"promokit value simulate: {world}", data={"rows": table.to_dict(orient="records")})
        report.add("Setup", f"{len(tables.users):,} users, quotas {quotas['quota'].tolist()}, risk rule "
                            f"{'on' if tables.risk() is not None else 'off'}; outcomes drawn from the true model")
        report.add("Delivery plans (per mille deliveries)", table)
        report.write(out)
        print_table("delivery plans scored by the true model (per mille deliveries)",
                    table.set_index(["model", "allocator"]).round(1))
        get_console().print(f"report written to {out}/report.md")


@app.command()
def demo(out: runs_out_option("results.csv (rewritten as each model finishes) and the report") = RUNS / "value-demo",
         users: int = 6_000, seed: SeedOpt = 0,
         models: Annotated[str, typer.Option(help="Comma-separated models; the floor hurdle is always added, first.")] = "hurdle,esdpm,esdpm-ncg,mtl-ziln,mtl-mse,esmm"):
    """Train the floor, ESDPM and its baselines on a synthetic fund world, score the latest deliveries against the
    oracle and allocate users to funds by each model's ETV."""
    with user_errors():
        from promokit.experiments.value.bench import run_and_report
        from promokit.value.estimator import DEMO_TRAIN

        run_and_report(_models(models), [seed], {"n_users": users}, (DEMO_TRAIN, {}), out)


def _models(text: str) -> list[str]:
    from promokit.data import DataError
    from promokit.value.models import MODELS

    names = [_renamed("--models", name.strip()) for name in text.split(",") if name.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise DataError(f"unknown model {unknown[0] if unknown else text!r}; choose from {sorted(MODELS)}")
    return names


def _renamed(flag: str, name: str) -> str:
    """A model's name; a former one (``two-part``, now ``hurdle``) still works in this release, with a warning."""
    import warnings

    from promokit.value.models import RENAMED

    if name not in RENAMED:
        return name
    warnings.warn(f"{flag} {name} is deprecated: the same model is now {RENAMED[name]}", FutureWarning, stacklevel=2)
    return RENAMED[name]

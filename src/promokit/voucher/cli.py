"""``promokit voucher …``: train, predict, evaluate, demo, bench (DMBGN and its baselines)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli_support import (
    RUNS,
    TABLE_HELP,
    AddressOpt,
    AllRowsOpt,
    BatchSizeOpt,
    EmbeddingDecayOpt,
    EngineOpt,
    EpochsOpt,
    ExecutorOpt,
    LrOpt,
    MinCountOpt,
    ParamsOpt,
    PatienceOpt,
    ResumeOpt,
    StorageOpt,
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


def _tables(sessions, events, items, voucher_items, categorical: list[str], numeric: list[str], validity,
            require_labels, terms=True, item_features: list[str] | None = None, labels: dict | None = None):
    from promokit.data.durations import parse_duration
    from promokit.voucher.contract import ITEM_FEATURES, read_tables

    return read_tables({"sessions": sessions, "events": events, "items": items, "voucher_items": voucher_items},
                       categorical=categorical, numeric=numeric, require_labels=require_labels, terms=terms,
                       validity=None if validity is None else parse_duration(validity, "--validity"),
                       item_features=item_features or ITEM_FEATURES, labels=labels)


def _split(estimator, tables, valid_from: Optional[str]):
    """Training / validation / held-out sessions: held out as the model holds them out (--test-fraction, or
    --test-from), validation the latest 10 % of the rest, or those of the rest collected from --valid-from on."""
    import numpy as np

    from promokit.data import DataError

    validation = None
    if valid_from is not None:
        collect = tables.sessions["collect_time"].to_numpy()
        _, _, test = estimator.split_rows(tables, validation=0)
        later = np.flatnonzero(collect >= np.datetime64(_time_option("--valid-from", valid_from), "ns"))
        validation = np.setdiff1d(later, test)
    train, valid, test = estimator.split_rows(tables, validation=validation)
    if len(train) == 0 or valid is None or len(valid) == 0:
        raise DataError(f"--valid-from {valid_from} leaves {len(train)} training and {0 if valid is None else len(valid)}"
                        f" validation sessions of {len(tables.sessions)} ({len(test)} held out); both must be "
                        "non-empty")
    return train, valid, test


def _held_out_text(estimator) -> str | None:
    """What a fitted voucher model held out, for train's line."""
    holdout = estimator.holdout
    if not holdout["held_out"]:
        return None
    rule = (f"collected from {holdout['test_from'] or holdout['cut']}" if holdout["how"] == "time" else
            f"drawn at random, seed {holdout['seed']}, as all share one collection time")
    share = "" if holdout["test_from"] else f", the latest {holdout['test_fraction']:.0%}"
    return f"{holdout['held_out']:,} of {holdout['rows']:,} sessions ({rule}{share})"


def _training(params, min_count, **flags):
    from promokit.voucher.estimator import DEFAULT_TRAIN

    return training_options(DEFAULT_TRAIN, params, min_count, **flags)


ValidFromOpt = Annotated[Optional[str], typer.Option(help="Sessions collected from this time on are the validation split (default: the last 10 %).")]
TestFromOpt = Annotated[Optional[str], typer.Option(help="Sessions collected from this time on are held out (neither trained nor validated on), in place of --test-fraction.")]


@app.command()
def train(sessions: SessionsOpt, items: ItemsOpt,
          out: Annotated[Path, typer.Option("--out", help="Model directory to write.")],
          events: EventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: CategoricalOpt = None,
          numeric: NumericOpt = None, validity: ValidityOpt = None, terms: TermsOpt = True,
          item_features: ItemFeaturesOpt = None,
          model: Annotated[str, typer.Option("--model", help=MODEL_NAMES)] = "din",
          valid_from: ValidFromOpt = None, test_from: TestFromOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION,
          label: LabelOpt = None,
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, patience: PatienceOpt = None,
          monitor: MonitorOpt = None, embedding_decay: EmbeddingDecayOpt = None, weight_decay: WeightDecayOpt = None,
          min_count: MinCountOpt = None, seed: int = 0, params: ParamsOpt = None,
          item_embeddings: ItemEmbeddingsOpt = None, freeze_items: FreezeItemsOpt = False, wide: WideOpt = None,
          threads: ThreadsOpt = 1, resume: ResumeOpt = False):
    """Fit a model on the sessions less those held out for evaluate (the latest --test-fraction, or those collected
    from --test-from on); pick the epoch on the latest 10 % of the rest (or those from --valid-from on)."""
    with user_errors(), convention_errors():
        set_threads(threads)
        config, model_params = _training(params, min_count, epochs=epochs, batch_size=batch_size, lr=lr,
                                         patience=patience, monitor=monitor, embedding_decay=embedding_decay,
                                         weight_decay=weight_decay, seed=seed, wide=wide)
        model_params = _with_item_options(model_params, item_embeddings, freeze_items)
        estimator = _estimator(model, model_params, config, test_fraction, test_from)
        tables = _tables(sessions, events, items, voucher_items, _names(categorical), _names(numeric), validity, True,
                         terms, _names(item_features), label_options(label, LABEL_ROLES))
        _, valid, _ = _split(estimator, tables, valid_from)
        estimator.fit(tables, validation=valid, checkpoint_dir=checkpoint_dir(out), resume=resume)
        estimator.save(out)
        finish_training(out, estimator.report.history)
        print_held_out(_held_out_text(estimator), "session")
        get_console().print(f"model written to {out} ({estimator.report.n_train} training sessions, "
                            f"{estimator.report.n_valid} validation sessions)", soft_wrap=True)


def _estimator(model: str, params, config, test_fraction: float, test_from: Optional[str]):
    """The VoucherModel of train and tune, its parameter errors before the tables are read."""
    from promokit.data import DataError
    from promokit.voucher.estimator import VoucherModel

    if not 0 <= test_fraction < 1:
        raise DataError(f"--test-fraction must be in [0, 1), got {test_fraction:g}")
    return VoucherModel(model, params, config, test_fraction=test_fraction,
                        test_from=None if test_from is None else _time_option("--test-from", test_from))


@app.command()
def tune(sessions: SessionsOpt, items: ItemsOpt,
         out: Annotated[Path, typer.Option("--out", help="Folder for params.json (the best parameters), the "
                                           "report and study.db.")],
         events: EventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: CategoricalOpt = None,
         numeric: NumericOpt = None, validity: ValidityOpt = None, terms: TermsOpt = True,
         item_features: ItemFeaturesOpt = None,
         model: Annotated[str, typer.Option("--model", help=MODEL_NAMES)] = "din",
         valid_from: ValidFromOpt = None, test_from: TestFromOpt = None, test_fraction: TestFractionOpt = TEST_FRACTION,
         trials: TrialsOpt = 30, timeout: TimeoutOpt = None, storage: StorageOpt = None,
         epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, patience: PatienceOpt = None, seed: int = 0,
         params: Annotated[Optional[str], typer.Option("--params", help="Fixed model parameters (JSON or a JSON file) the search does not change, e.g. DMBGN's graph settings.")] = None,
         threads: ThreadsOpt = 1):
    """Search the model's hyper-parameters (Optuna TPE, median pruning per epoch) for the best validation AUC;
    write the best as params.json for train --params. The sessions train would hold out (--test-fraction,
    --test-from) are never scored."""
    with user_errors():
        set_threads(threads)
        from promokit.experiments.voucher.tune import tune_voucher

        config, fixed = _training(params, None, epochs=epochs, batch_size=batch_size, patience=patience, seed=seed)
        tables = _tables(sessions, events, items, voucher_items, _names(categorical), _names(numeric), validity, True,
                         terms, _names(item_features))
        train, valid, test = _split(_estimator(model, fixed, config, test_fraction, test_from), tables, valid_from)

        def search(path, on_trial):
            return tune_voucher(model, tables, train, valid, config, fixed, trials, timeout, str(path),
                                on_trial=on_trial)

        run_tune(out, storage, f"promokit voucher tune: {model}",
                 f"sessions: {sessions}; model {model}; {len(train)} training sessions, {len(valid)} validation "
                 f"sessions, {len(test)} held out; maximise validation AUC; {trials} trials; seed {seed}", search)


def _with_item_options(params: Optional[dict], item_embeddings: Optional[str], freeze_items: bool) -> Optional[dict]:
    """``--params`` plus ``--item-embeddings`` / ``--freeze-items``; a table path must exist."""
    from promokit.data import DataError
    from promokit.voucher.item_embedding import METAPATH2VEC

    if item_embeddings is None and not freeze_items:
        return params
    params = dict(params or {})
    if item_embeddings is not None:
        if item_embeddings != METAPATH2VEC and not Path(item_embeddings).exists():
            raise DataError(f"--item-embeddings {item_embeddings}: no such file (or pass {METAPATH2VEC!r})")
        params["item_embeddings"] = item_embeddings
    if freeze_items:
        params["freeze_items"] = True
    return params


def _load(model: Path):
    from promokit.voucher.estimator import VoucherModel

    return VoucherModel.load(model)


def _time_option(flag: str, text: str):
    """A time given on the command line (``2024-06-01``, ``2024-06-01 12:00``), or a one-line error."""
    import pandas as pd

    from promokit.data import DataError

    try:
        time = pd.Timestamp(text)
    except ValueError:
        time = pd.NaT
    if pd.isna(time):
        raise DataError(f"{flag} {text!r} is not a time; use e.g. 2024-06-01 or '2024-06-01 12:00'")
    return time.tz_convert("UTC").tz_localize(None) if time.tzinfo else time  # the tables' times are UTC


def _rows_from(tables, start: Optional[str]):
    import numpy as np

    from promokit.data import DataError

    collect = tables.sessions["collect_time"]
    if start is None:
        return np.arange(len(collect))
    rows = np.flatnonzero(collect >= _time_option("--from", start))
    if len(rows) == 0:
        raise DataError(f"--from {start} selects none of the {len(collect)} sessions, collected from {collect.min()} "
                        f"to {collect.max()}")
    return rows


def _model_options(estimator, categorical, numeric, terms, item_features) -> dict:
    """The :func:`check_tables` options the model was trained with (``VoucherModel.table_options``): categorical,
    numeric, terms, item_features. Training options repeated here must name the same columns (in any order): one
    that contradicts the model is an error. Model directories written before the options were kept do not know a
    non-DMBGN model's item features: those follow --item-features (default category,brand,price_level), as before."""
    from promokit.data import DataError
    from promokit.voucher.contract import ITEM_FEATURES

    saved = estimator.table_options
    given = {"categorical": categorical, "numeric": numeric, "item_features": item_features}
    for name, text in given.items():
        if text is not None and saved[name] is not None and set(_names(text)) != set(saved[name]):
            flag = f"--{name.replace('_', '-')}"
            raise DataError(f"{flag} {text!r} contradicts the model, trained with {flag} "
                            f"{','.join(saved[name])!r}; the model directory remembers its columns: leave {flag} out")
    if terms is not None and terms != saved["terms"]:
        raise DataError(f"--{'' if terms else 'no-'}terms contradicts the model, trained with "
                        f"--{'' if saved['terms'] else 'no-'}terms; the model directory remembers it: leave it out")
    features = saved["item_features"] if saved["item_features"] is not None else _names(item_features) or ITEM_FEATURES
    return {"categorical": saved["categorical"], "numeric": saved["numeric"], "terms": saved["terms"],
            "item_features": list(features or ITEM_FEATURES)}


def _model_tables(estimator, sessions, events, items, voucher_items, validity, require_labels, categorical, numeric,
                  terms, item_features, labels: dict | None = None):
    """The tables read with the options the model was trained with (:func:`_model_options`)."""
    options = _model_options(estimator, categorical, numeric, terms, item_features)
    return _tables(sessions, events, items, voucher_items, options["categorical"], options["numeric"], validity,
                   require_labels, options["terms"], options["item_features"], labels)


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
    with user_errors():
        executor = executor_option(executor, engine)
        set_threads(threads)
        from promokit.data import DataError, write_json, write_parquet
        from promokit.data.durations import parse_duration
        from promokit.data.parts import is_partitioned


        estimator = _load(model)
        old_file = predictions_folder(out)
        if is_partitioned(sessions):
            from promokit.voucher.parts import Reading

            options = {**_model_options(estimator, categorical, numeric, terms, item_features),
                       "validity": None if validity is None else parse_duration(validity, "--validity")}
            reading = Reading(model, items, voucher_items, options, _time_option("--from", start) if start else None)
            return _predict_parts(estimator.model, reading, sessions, events, old_file or out / "predictions",
                                  out.with_suffix(".json") if old_file else out / "summary.json", executor, address,
                                  workers)
        if executor != "local":
            raise DataError(f"--executor {executor} scores a table in parts: give --sessions as a directory or glob of "
                            "Parquet parts (and --events in as many parts)")
        tables = _model_tables(estimator, sessions, events, items, voucher_items, validity, False, categorical, numeric,
                               terms, item_features)
        predictions = estimator.predict(tables, rows=_rows_from(tables, start))
        written = write_parquet(predictions, old_file or out / "predictions.parquet")
        if old_file is None:
            write_json({"rows": len(predictions), "parts": 1, "model": estimator.model, "outputs": ["p_redeem"],
                        "means": {"p_redeem": float(predictions["p_redeem"].mean())}}, out / "summary.json")
        get_console().print(f"{len(predictions)} predictions written to {written}")


def _predict_parts(name: str, reading, sessions: Path, events: Optional[Path], out: Path, summary_path: Path,
                   executor: str, address: Optional[str], workers: Optional[int]) -> None:
    """``predict`` over sessions (and events) in parts: ``out/part-NNNNN.parquet`` and the summary."""
    from promokit.data import write_json
    from promokit.data.part_scoring import means
    from promokit.voucher.parts import predict_parts

    parts = predict_parts(executor_from_options(executor, address, workers), reading, sessions, events, out)
    rows = sum(p.rows for p in parts)
    summary = {"rows": rows, "parts": len(parts), "executor": executor, "model": name, "outputs": ["p_redeem"],
               "means": {"p_redeem": means(parts)["p_redeem"]}}
    write_json(summary, summary_path)
    get_console().print(f"{rows} predictions written to {out}")


@app.command()
def evaluate(model: ModelDirOpt, sessions: SessionsOpt, items: ItemsOpt,
             out: Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")],
             events: EventsOpt = None, voucher_items: VoucherItemsOpt = None, categorical: SavedCategoricalOpt = None,
             numeric: SavedNumericOpt = None, validity: ValidityOpt = None, terms: SavedTermsOpt = None,
             item_features: SavedItemFeaturesOpt = None,
             start: Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on, in place of those train held out.")] = None,
             all_rows: AllRowsOpt = False, gauc_by: GaucByOpt = None, label: LabelOpt = None):
    """AUC and logloss (and GAUC within --gauc-by groups) of a trained model on the labelled sessions train held
    out (those collected from its cut on; --from: from another time; --all: every session of new data)."""
    with user_errors(), convention_errors():
        estimator = _load(model)
        tables = _model_tables(estimator, sessions, events, items, voucher_items, validity, True, categorical, numeric,
                               terms, item_features, label_options(label, LABEL_ROLES))
        rows = _rows_from(tables, start) if start is not None or all_rows else held_out_rows(estimator, tables)
        evaluation = estimator.evaluate(tables, rows=rows, group_by=gauc_by)
        write_metrics_report(out, f"Evaluation of {model}", estimator.model, evaluation.metrics,
                             f"{estimator.model} on {len(rows):,} sessions of {sessions.name}")


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


def _write_tables(tables, out: Path) -> str:
    """Write validated tables as Parquet files into the folder ``out``; return the options that read them back."""
    from promokit.data import write_parquet
    from promokit.voucher.contract import ITEM_FEATURES

    files = {"sessions": tables.sessions, "items": tables.items}
    if len(tables.events):
        files["events"] = tables.events[["session_id", "item_id", "action", "action_time"]]
    if tables.voucher_items is not None:
        files["voucher-items"] = tables.voucher_items
    args = []
    for name, frame in files.items():
        write_parquet(frame, out / f"{name.replace('-', '_')}.parquet")
        args.append(f"--{name} {out / name.replace('-', '_')}.parquet")
    options = tables.options
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
        import pandas as pd

        from promokit.data import write_parquet
        from promokit.experiments.voucher.world import make_world

        world = make_world(n_users=users, n_vouchers=vouchers, n_items=items, n_sessions=sessions, seed=seed)
        args = _write_tables(world.tables, out)
        if truth:
            write_parquet(pd.DataFrame({"session_id": world.tables.sessions["session_id"],
                                        "true_p_redeem": world.truth}), out / "truth.parquet")
        get_console().print(f"{len(world.tables.sessions):,} sessions written to {out}; try:\n"
                            f"promokit voucher train {args} --model dmbgn --out model", highlight=False, soft_wrap=True)


@app.command()
def amexpert(src: Annotated[Path, typer.Option("--src", help="AmExpert 2019 folder (train.csv, campaign_data.csv, coupon_item_mapping.csv, item_data.csv, customer_demographics.csv).")],
             out: Annotated[Path, typer.Option("--out", help="Folder for sessions / items / voucher_items Parquet files.")]):
    """Map AmExpert 2019 to the voucher contract (see docs/voucher.md) and write it as tables, with the load report
    (amexpert.json)."""
    with user_errors():
        from promokit.data import write_json
        from promokit.voucher.amexpert import load_amexpert

        tables, report = load_amexpert(src)
        args = _write_tables(tables, out)
        facts = {k: v if isinstance(v, int) else str(v) for k, v in report.__dict__.items()}  # dates as text
        write_json({"summary": report.summary(), **facts}, out / "amexpert.json")
        console = get_console()
        console.print(report.summary(), highlight=False)
        console.print(f"tables written to {out}; try:\npromokit voucher train {args} --model dmbgn --out model "
                      f"[--valid-from …]\nthen: promokit voucher evaluate … --gauc-by campaign_id", highlight=False,
                      soft_wrap=True)


def _net_for(name: str, net: dict) -> dict:
    """The bench network of model ``name``: the graph and item-embedding parameters only for DMBGN models (the
    others have no graph), so that one --params serves every model."""
    from promokit.training.params import without_foreign_wide
    from promokit.voucher.estimator import GRAPH_PARAMS, VoucherModel
    from promokit.voucher.item_embedding import ITEM_PARAMS

    model = VoucherModel(name)
    net = without_foreign_wide(model.model_class, net)
    if model.uses_graphs:
        return net
    return {k: v for k, v in net.items() if k not in (*ITEM_PARAMS, *GRAPH_PARAMS)}


@app.command()
def bench(data_dir: Annotated[str, typer.Option("--data-dir", help="AmExpert 2019 folder, or 'synthetic'.")] = "synthetic",
          models: Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")] = "lr,gbdt,dnn,wdl,din,dmbgn",
          seeds: Annotated[str, typer.Option(help="Comma-separated training seeds.")] = "0,1,2",
          epochs: EpochsOpt = None, batch_size: BatchSizeOpt = None, lr: LrOpt = None, patience: PatienceOpt = None,
          monitor: MonitorOpt = None, embedding_decay: EmbeddingDecayOpt = None, min_count: MinCountOpt = None,
          params: Annotated[Optional[str], typer.Option(help="Parameters for every neural model (JSON or a JSON file); they override the bench network's, e.g. {\"oov_dropout\": 0.2}.")] = None,
          tuned: TunedOpt = None, wide: WideOpt = None,
          out: Annotated[Optional[Path], typer.Option("--out", help="Folder for results.csv (rewritten as each model finishes) and report.md / report.json.")] = None,
          gauc_by: Annotated[Optional[str], typer.Option("--gauc-by", help="Sessions column to also report GAUC within (default: campaign_id on AmExpert, none on synthetic data).")] = None,
          threads: ThreadsOpt = 1):
    """Models × seeds on a time split: AUC mean ± std, RelaImpr vs LR, DNN and DIN, logloss (Table 3)."""
    with user_errors():
        set_threads(threads)
        from dataclasses import replace

        from promokit.experiments.finished_rows import FinishedRows
        from promokit.experiments.voucher import bench as runner
        from promokit.experiments.voucher.demo import DEMO_TRAIN, DEMO_WORLD, time_split

        config, net = training_options(DEMO_TRAIN, params, None, epochs=epochs, batch_size=batch_size, lr=lr,
                                       patience=patience, monitor=monitor, embedding_decay=embedding_decay, wide=wide)
        config = replace(config, progress=False)
        oracle = None
        if data_dir == "synthetic":
            from promokit.experiments.voucher.world import make_world

            world = make_world(**DEMO_WORLD, seed=0)
            tables = world.tables
        else:
            from promokit.voucher.amexpert import load_amexpert

            tables, load_report = load_amexpert(data_dir)
            get_console().print(load_report.summary(), highlight=False)
            gauc_by = gauc_by or "campaign_id"
        split = time_split(tables)
        names = bench_models(models)
        vocabulary = {} if min_count is None else {"min_count": min_count}
        console = get_console()

        def done(row):
            grouped = f"  GAUC {row['gauc']:.4f}" if "gauc" in row else ""
            console.print(f"  seed {row['seed']} {row['model']:>16}: AUC {row['auc']:.4f}{grouped}  logloss "
                          f"{row['logloss']:.4f}  ({row['fit_seconds']:.0f} s)")

        found = tuned_params(tuned, names)
        per_model = {n: {**(_net_for(n, net) if n not in runner.SHALLOW else {}), **vocabulary, **found.get(n, {})}
                     for n in names}
        with FinishedRows(out, "promokit voucher bench", on_result=done) as finished:
            results = runner.run(tables, split, names, seeds_option(seeds), per_model, config,
                                 on_result=finished.add, group_by=gauc_by)
        if data_dir == "synthetic":
            oracle = runner.oracle_row(tables, split.test, world.truth, gauc_by)
        summary = runner.summarise(results, oracle)
        print_table("mean ± std over seeds (test split)", summary)
        if out is not None:
            write_bench_report(out, "promokit voucher bench", results, oracle,
                               f"data: {data_dir}; time split; seeds: {seeds}; "
                               f"{len(split.train)}/{len(split.valid)}/{len(split.test)} sessions", summary)

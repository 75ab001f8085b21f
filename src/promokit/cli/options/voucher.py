"""The options of ``promokit voucher …`` (typer's annotated types) and what turns their text into the library's
arguments: a module without torch, so ``--help`` loads no model. The commands are
:mod:`promokit.cli.voucher`; the options every domain shares are in :mod:`promokit.cli.options.common`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli.options import common as co
from promokit.data.durations import DURATION_FORMS
from promokit.voucher.defaults import DEFAULT_TRAIN

#: The library's arguments named in its errors → the options that set them.
FLAGS = {**co.VALIDATION_FLAG, "test_from": "--test-from", "start": "--from", "categorical": "--categorical",
         "numeric": "--numeric", "item_features": "--item-features", "terms": "--terms", "no_terms": "--no-terms",
         "item_embeddings": "--item-embeddings", "executor": "--executor", "sessions": "--sessions",
         "events": "--events", "allow_leaky": "--allow-leaky"}
LABEL_ROLES = ("redeemed",)
MODEL_NAMES = ("lr | gbdt | dnn | wdl | din | dmbgn | dmbgn-avgpooling | dmbgn-pretrained | auto (the best of lr, gbdt, "
               "dmbgn on validation)")
#: The models demo trains: every model of the DMBGN paper.
DEMO_MODELS = "lr,gbdt,dnn,wdl,din,dmbgn-avgpooling,dmbgn-pretrained,dmbgn"

# ---- the tables
Sessions = Annotated[Path, typer.Option("--sessions", help="Sessions table (CSV/Parquet): session_id, user_id, "
                                           "voucher_id, min_spend, discount, collect_time, outcome_time, redeemed.")]
Events = Annotated[Optional[Path], typer.Option("--events", help="Behaviour events: session_id, item_id, action, action_time.")]
Items = Annotated[Path, typer.Option("--items", help="Items: item_id, category, brand, price_level.")]
VoucherItems = Annotated[Optional[Path], typer.Option("--voucher-items", help="voucher_id, item_id pairs: the items each voucher applies to (its scope; the graph itself for data without a behaviour log).")]
Categorical = Annotated[Optional[str], typer.Option("--categorical", help="Comma-separated categorical profile columns.")]
Numeric = Annotated[Optional[str], typer.Option("--numeric", help="Comma-separated numeric profile columns.")]
Validity = Annotated[Optional[str], typer.Option("--validity", help=f"Voucher validity when outcome_time is absent: {DURATION_FORMS}.")]
Terms = Annotated[bool, typer.Option("--terms/--no-terms", help="Sessions carry the voucher terms min_spend and discount (--no-terms: data without them, e.g. AmExpert).")]
ItemFeatures = Annotated[Optional[str], typer.Option("--item-features", help="Comma-separated item feature columns (default: category,brand,price_level).")]
# predict / evaluate: the model directory keeps train's table options; repeated, they must agree with it
_SAVED = "Optional: the model directory remembers the training's; given, it must agree."
SavedCategorical = Annotated[Optional[str], typer.Option("--categorical", help=_SAVED)]
SavedNumeric = Annotated[Optional[str], typer.Option("--numeric", help=_SAVED)]
SavedItemFeatures = Annotated[Optional[str], typer.Option("--item-features", help=_SAVED)]
SavedTerms = Annotated[Optional[bool], typer.Option("--terms/--no-terms", help=_SAVED)]

# ---- train and tune
Model = Annotated[str, typer.Option("--model", help=MODEL_NAMES)]
TrainOut = Annotated[Path, typer.Option("--out", help="Model directory to write.")]
TuneOut = Annotated[Path, typer.Option("--out", help="Folder for params.json (the best parameters), the report and "
                                          "study.db.")]
FixedParams = Annotated[Optional[str], typer.Option("--params", help="Fixed model parameters (JSON or a JSON file) the search does not change, e.g. DMBGN's graph settings.")]
TestFrom = Annotated[Optional[str], typer.Option(help="Sessions collected from this time on are held out (neither trained nor validated on), in place of --test-fraction.")]
Monitor = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation sessions: auc | loss.", show_default=DEFAULT_TRAIN.monitor)]
Threads = Annotated[int, typer.Option("--threads", help="Torch threads; 1 (the default) is fastest for these small "
                                        "batches, especially on a shared machine.")]
ItemEmbeddings = Annotated[Optional[str], typer.Option(
    "--item-embeddings", help="DMBGN models: initial item embeddings (paper §3.4.2). 'metapath2vec' pre-trains them "
    "on the training sessions' behaviour (or voucher_items) co-occurrence; otherwise a CSV/Parquet table of "
    "item_id + k numeric columns, one row per item (items without a row get zeros). Options of the pre-training: "
    '--params \'{"item_pretrain": {"dim": 16, "epochs": 5}}\'.')]
FreezeItems = Annotated[bool, typer.Option("--freeze-items", help="DMBGN models: keep the item embeddings fixed "
                                              "during training.")]

# ---- predict, evaluate, recalibrate
ModelDir = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
PredictOut = Annotated[Path, typer.Option("--out", help="Folder for predictions.parquet (session_id, user_id, "
                                             "voucher_id, campaign_id when the sessions have it, p_redeem, and "
                                             "p_redeem_raw for a recalibrated model; predictions/, part k from "
                                             "sessions part k, when --sessions is in parts) and summary.json.")]
PartsSessions = Annotated[Path, typer.Option("--sessions", help="Sessions table: a CSV/Parquet file, or a directory/glob "
                                             "of Parquet parts partitioned by user (every session of a user in one "
                                             "part), each part scored alone.")]
TrainSessions = Annotated[Path, typer.Option("--sessions", help="Sessions table: a CSV/Parquet file, or a directory/glob "
                                             "of Parquet parts partitioned by user (every session of a user in one "
                                             "part), trained over part by part (--executor).")]
PartsEvents = Annotated[Optional[Path], typer.Option("--events", help="Behaviour events: session_id (or user_id), "
                                                     "item_id, action, action_time. With --sessions in parts, in as "
                                                     "many parts: part k holds the events of sessions part k.")]
PredictFrom = Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on.")]
ReportOut = Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")]
EvaluateFrom = Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on, in place of those train held out.")]
GaucBy = Annotated[Optional[str], typer.Option("--gauc-by", help="Sessions column to also report GAUC within, e.g. campaign_id.")]
RecalibrateFrom = Annotated[Optional[str], typer.Option("--from", help="Only sessions collected from this time on: the latest labelled period (default: every session).")]
RecalibrateBy = Annotated[Optional[str], typer.Option("--by", help="A sessions column (e.g. campaign_id): one map per value, shrunk toward the overall map where a value has few sessions; values it did not see get the overall map (default: one map for every session).")]

# ---- demo, synth, amexpert, bench
BenchModels = Annotated[str, typer.Option(help="Comma-separated models; the linear floor lr is always added.")]
SynthOut = Annotated[Path, typer.Option("--out", help="Folder for sessions / events / items Parquet files.")]
Truth = Annotated[bool, typer.Option(help="Also write truth.parquet: session_id, true_p_redeem.")]
AmexpertSrc = Annotated[Path, typer.Option("--src", help="AmExpert 2019 folder (train.csv, campaign_data.csv, coupon_item_mapping.csv, item_data.csv, customer_demographics.csv).")]
AmexpertOut = Annotated[Path, typer.Option("--out", help="Folder for sessions / items / voucher_items Parquet files.")]
BenchDataDir = Annotated[str, typer.Option("--data-dir", help="AmExpert 2019 folder, or 'synthetic'.")]
Seeds = Annotated[str, typer.Option(help="Comma-separated training seeds.")]
BenchParams = Annotated[Optional[str], typer.Option(help="Parameters for every neural model (JSON or a JSON file); they override the bench network's, e.g. {\"oov_dropout\": 0.2}.")]
BenchOut = Annotated[Optional[Path], typer.Option("--out", help="Folder for results.csv (rewritten as each model finishes) and report.md / report.json.")]
BenchGaucBy = Annotated[Optional[str], typer.Option("--gauc-by", help="Sessions column to also report GAUC within (default: campaign_id on AmExpert, none on synthetic data).")]


def names(text: Optional[str]) -> list[str]:
    """Comma-separated column names as a list (none for None or an empty text)."""
    return [c.strip() for c in text.split(",") if c.strip()] if text else []


def table_files(sessions: Path, events: Optional[Path], items: Path, voucher_items: Optional[Path]) -> dict:
    """The tables' files by name, as :func:`~promokit.voucher.contract.read_tables` takes them."""
    return {"sessions": sessions, "events": events, "items": items, "voucher_items": voucher_items}


def validity_option(text: Optional[str]):
    """``--validity`` as a duration (None when not given), or a one-line error naming the option."""
    from promokit.data.durations import parse_duration

    return None if text is None else parse_duration(text, "--validity")


def table_options(categorical, numeric, validity, terms, item_features) -> dict:
    """train's and tune's table options (:func:`~promokit.voucher.contract.read_tables`)."""
    return {"categorical": names(categorical), "numeric": names(numeric), "validity": validity_option(validity),
            "terms": terms, "item_features": names(item_features) or None}


def saved_options(categorical, numeric, validity, terms, item_features) -> dict:
    """predict's, evaluate's and recalibrate's table options: those given, which must agree with the model's
    (:meth:`~promokit.voucher.estimator.VoucherModel.read`), and the validity, which describes the data."""
    return {"categorical": None if categorical is None else names(categorical),
            "numeric": None if numeric is None else names(numeric), "validity": validity_option(validity),
            "terms": terms, "item_features": None if item_features is None else names(item_features)}


def item_params(item_embeddings: Optional[str], freeze_items: bool) -> dict:
    """``--item-embeddings`` and ``--freeze-items`` as the model parameters they set (none when not given)."""
    return {**({"item_embeddings": item_embeddings} if item_embeddings is not None else {}),
            **({"freeze_items": True} if freeze_items else {})}


def train_command(files: dict[str, Path], options: dict) -> str:
    """The options of train that read back tables written by synth or amexpert (``files``, read with ``options``)."""
    from promokit.voucher.contract import ITEM_FEATURES

    args = [f"--{name.replace('_', '-')} {path}" for name, path in files.items()]
    args += [f"--categorical {','.join(options['categorical'])}"] if options["categorical"] else []
    args += [f"--numeric {','.join(options['numeric'])}"] if options["numeric"] else []
    args += [] if options["terms"] else ["--no-terms"]
    args += [] if options["item_features"] == list(ITEM_FEATURES) else [f"--item-features {','.join(options['item_features'])}"]
    return " ".join(args)

LabelOpt = co.label_option(LABEL_ROLES)
AllowLeakyOpt = co.allow_leaky_option(label="redeemed")
MethodOpt = co.recalibration_method_option("p_redeem")
TestFractionOpt = co.test_fraction_option("the sessions collected latest; --test-from overrides it")

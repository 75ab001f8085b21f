"""The options of ``promokit conversion …`` (typer's annotated types) and the flags named in the library's errors: a
module without torch, so ``--help`` loads no model. The commands are :mod:`promokit.cli.conversion`; the options
every domain shares are in :mod:`promokit.cli.options.common`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli.options import common as co
from promokit.conversion.contract import LABEL_ROLES
from promokit.conversion.defaults import DEFAULT_TRAIN

#: The library's arguments named in its errors → the options that set them.
MICRO_FLAG = {"micro_behaviors": "--micro-behaviors"}
TRAIN_FLAGS = {**MICRO_FLAG, **co.VALIDATION_FLAG, "wide": "--wide", "allow_leaky": "--allow-leaky", "validation_split": "--valid-split",
               "data": "--data", "executor": "--executor"}
#: The models demo and bench train by default (the linear floor lr is always added).
MODELS = "lr,gbdt,dnn,dnn-os,esmm,esm2"
_MODELS_HELP = "Comma-separated models; the linear floor lr is always added."

# ---- train and tune
ModelOpt = Annotated[str, typer.Option("--model", help="lr | gbdt | dnn | dnn-os | esmm | esm2 | auto (the best of lr, gbdt, esmm, esm2 on validation); with micro-behaviours: gmcm | mcm-2 | mcm-10 | mcm-gru; GMCM's baselines: base | division | resnet | dcn")]
SpecOpt = Annotated[Optional[Path], typer.Option("--spec", help="YAML/JSON feature spec; inferred when omitted.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for splits, initialisation and shuffling.")]
MicroOpt = Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated 0/1 micro-behaviour label columns (post-click actions: cart, favorite, …; labels, never features), the nodes of GMCM's graph; replaces the spec's micro_behaviors.")]
ValidSplitOpt = Annotated[Optional[str], typer.Option("--valid-split", help="How the validation rows are cut from --data: random, or time:<column> (the latest rows). Default: time:<the spec's time_key> when the spec names one, else random.")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation rows: loss | ctr_auc | cvr_auc | ctcvr_auc.", show_default=DEFAULT_TRAIN.monitor)]
RepairLabelsOpt = Annotated[bool, typer.Option("--repair-labels/--no-repair-labels", help="Set daction/purchase/micro-behaviours to 0 on unclicked rows instead of failing.")]
TrainOutOpt = Annotated[Path, typer.Option("--out", help="Model directory to write.")]
TuneOutOpt = Annotated[Path, typer.Option("--out", help="Folder for params.json (the best parameters), the report and study.db.")]
TuneMetricOpt = Annotated[str, typer.Option("--metric", help="Validation AUC to maximise: ctr_auc | cvr_auc | ctcvr_auc.")]

# ---- predict, evaluate, recalibrate
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
PredictOutOpt = Annotated[Path, typer.Option("--out", help="Folder for predictions.parquet (predictions/, part k from input part k, when --data is in parts) and summary.json.")]
KeepOpt = Annotated[Optional[list[str]], typer.Option("--keep", help="Input columns copied to the output (default: user_id, item_id when present).")]
ReportOutOpt = Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")]
GaucWeightOpt = Annotated[str, typer.Option("--gauc-weight", help="impressions | uniform (the ESM² paper uses uniform).")]
EvaluateMicroOpt = Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated micro-behaviour label columns whose node AUCs to report (node_auc_<name>); default: those the model was trained with, when the table has them. A model that predicts nodes is scored only on nodes it was trained on.")]

# ---- demo, bench, synth
ModelsOpt = Annotated[str, typer.Option("--models", help=_MODELS_HELP)]
DemoMicroOpt = Annotated[int, typer.Option("--micro-behaviors", min=0, help="Give the world this many micro-behaviour labels (for gmcm and the mcm-* ablations, e.g. --models esmm,gmcm,mcm-10 --micro-behaviors 10); the report adds GMCM's Tables 2–3 and the node AUCs.")]
SeedsOpt = Annotated[str, typer.Option("--seeds", help="Comma-separated training seeds.")]
BaseOpt = Annotated[str, typer.Option("--base", help="Model RelaImpr is measured against.")]
SplitOpt = Annotated[Optional[str], typer.Option("--split", help="How the test rows (the last 10 %) are cut: random, or time:<column> to train on the past and test on the future. Default: time:<the spec's time_key> when it names one, else random.")]
BenchValidSplitOpt = Annotated[Optional[str], typer.Option("--valid-split", help="How the validation rows (10 %) are cut from the rest; default: as --split.")]
BenchParamsOpt = Annotated[Optional[str], typer.Option("--params", help='Parameters for every neural model (JSON or a JSON file); they override the defaults, e.g. \'{"dropout": 0.2}\'.')]
BenchMicroOpt = Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated 0/1 micro-behaviour label columns of --data (labels, never features; replaces the spec's micro_behaviors). On the synthetic world: a count N (its first N of cart, favorite, review, qa, zoom, sku, share, detail, coupon, buy_button) or their names; the oracle row then has their true node AUCs.")]
BenchOutOpt = Annotated[Optional[Path], typer.Option("--out", help="Folder for results.csv (rewritten as each model finishes) and report.md / report.json.")]
SynthOutOpt = Annotated[Path, typer.Option("--out", help="Parquet file for the impression table.")]
TruthOpt = Annotated[bool, typer.Option("--truth/--no-truth", help="Also write the true probabilities as columns true_p_* (with micro-behaviours: true_p_node_<name>, P(behaviour | click, features)).")]
SynthMicroOpt = Annotated[int, typer.Option("--micro-behaviors", min=0, help="Add this many 0/1 micro-behaviour label columns (GMCM): cart, favorite, review, qa, zoom, sku, share, detail, coupon, buy_button, then micro_11 …; 0 on unclicked rows. They are post-click labels, never features, so a spec declaring them (micro_behaviors: […]) is written beside the table as OUT.spec.yaml: pass it with --spec.")]

# ---- kuairand
KuaiSrcOpt = Annotated[Path, typer.Option("--src", help="KuaiRand-Pure folder (log Parquet + user/video feature CSVs).")]
KuaiOutOpt = Annotated[Path, typer.Option("--out", help="Parquet file for the conversion table.")]
KuaiLogOpt = Annotated[Optional[str], typer.Option("--log", help="Log file in the folder (default: the 04-25…04-30 val log).")]
KuaiIdsOpt = Annotated[bool, typer.Option("--ids/--no-ids", help="List user/item/author ids as features in the written spec.")]
KuaiPurchaseOpt = Annotated[str, typer.Option("--purchase", help="Log column that is the conversion, e.g. is_follow or is_like.")]
KuaiDactionOpt = Annotated[Optional[str], typer.Option("--daction", help="Comma-separated log columns whose OR is the DAction (default: is_like,is_comment,is_forward,is_profile_enter without the --purchase column).")]
KuaiMicroOpt = Annotated[Optional[str], typer.Option("--micro-behaviors", help="Comma-separated 0/1 log columns written as micro-behaviour labels (GMCM's graph nodes, named without is_; 'none' for none). Default: is_like, is_comment, is_forward, is_profile_enter, long_view, is_hate without the --purchase column.")]

# ---- the commands' data, hold-out, label and recalibration options
DataOpt = Annotated[Path, typer.Option("--data", help=f"Impression table: {co.TABLE_HELP} (predict scores part by part; tune, evaluate and recalibrate read the parts into one frame).")]
TrainDataOpt = Annotated[Path, typer.Option("--data", help=f"Impression table: {co.TABLE_HELP} (the networks train part by part, never reading it whole; gbdt and lr read the parts into one frame).")]
LabelOpt = co.label_option(LABEL_ROLES)
TestFractionOpt = co.test_fraction_option("the latest rows by the spec's time_key when it names one, else each row drawn at random with --seed")
DemoOutOpt = co.runs_out_option("results.csv (rewritten as each model finishes) and the report")
AllowLeakyOpt = co.allow_leaky_option("feature columns (added to the spec's allow_leaky)")
MethodOpt = co.recalibration_method_option("p_ctcvr and to p_ctr")


def tune_validation(validation) -> tuple[float, object]:
    """``tune --validation`` (:func:`promokit.cli.support.validation_option`'s value) as ``tune_conversion`` takes it:
    (the fraction cut from --data, the validation table's path or None). tune takes a fraction or a table given
    apart; another form is the library's one-line error naming ``validation``."""
    from promokit.conversion.defaults import VALIDATION_FRACTION
    from promokit.data.split import FRACTION, TABLE, parse_validation

    choice = parse_validation(validation, default=VALIDATION_FRACTION, model="conversion tune",
                              takes={FRACTION: "a fraction in [0, 1) of the rows", TABLE: "a table's path"})
    return (choice.fraction, None) if choice.form == FRACTION else (VALIDATION_FRACTION, choice.value)

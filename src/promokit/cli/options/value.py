"""The options of ``promokit value …`` as typed annotations (their flags and help), which the commands of
:mod:`promokit.cli.value` take: a module without torch, so ``--help`` loads no model. The options every domain
shares are in :mod:`promokit.cli.options.common`."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli.options import common as co
from promokit.cli.support import flags_in_errors
from promokit.value.defaults import DEFAULT_TRAIN

#: The deliveries' label roles (promokit.value.contract.LABELS).
LABEL_ROLES = ("click", "convert", "amount")
#: How a library error names a Python argument or says fit, and what the value commands say instead.
FLAG_WORDS = (("split='random'", "--split random"), ("repair_labels=True", "--repair-labels"),
              ("at must be", "--at must be"), ("held_out: ", ""), ("the data fit was given", "the data train was given"))
#: The value commands' flags that library errors name as `argument`.
ARGUMENT_FLAGS = {**co.VALIDATION_FLAG, "wide": "--wide", "contexts": "--contexts", "users_list": "--users-list", "all_rows": "--all",
                  "floor": "--floor", "models": "--model", "allow_leaky": "--allow-leaky", "method": "--method",
                  "start": "--from", "by": "--by"}
#: from-transactions' flags, by the argument of promokit.value.transactions.from_transactions they set.
TRANSACTION_FLAGS = {"transactions": "--transactions", "out": "--out", "feature_window": "--feature-window",
                     "target_window": "--target-window", "customer": "--customer", "time": "--time",
                     "time_format": "--time-format", "amount": "--amount", "product": "--product",
                     "quantity": "--quantity"}

DataOpt = Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv.")]
PartsDataOpt = Annotated[Path, typer.Option("--data", help="Dataset folder: deliveries, users, funds [, behaviors, consumption] as .parquet or .csv; or in parts: users/, deliveries/ [, behaviors/, consumption/] directories of Parquet parts co-partitioned by user, and one funds table.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for initialisation, sampling and shuffling.")]
ModelOpt = Annotated[str, typer.Option("--model", help="hurdle (the floor; two-part: its deprecated name) | esdpm | esdpm-ncg | mtl-ziln | mtl-mse | esmm | mmoe | shared-bottom | dnn | auto (the best of hurdle, esdpm-ncg, esdpm on validation)")]
ModelsOpt = Annotated[str, typer.Option(help="Comma-separated models; the floor hurdle is always added, first.")]
ModelDirOpt = Annotated[Path, typer.Option("--model", help="Model directory written by train.")]
RepairOpt = Annotated[bool, typer.Option("--repair-labels", help="Set conversions without a click or an amount, and amounts without a conversion, to 0 (counted) instead of failing.")]
MonitorOpt = Annotated[Optional[str], typer.Option("--monitor", help="What picks the epoch on the validation deliveries: loss (§5.1) | auc.", show_default=DEFAULT_TRAIN.monitor)]
ModelOutOpt = Annotated[Path, typer.Option("--out", help="Model directory to write.")]
ReportOutOpt = Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json.")]

# train
SplitOpt = Annotated[str, typer.Option("--split", help="time (the latest deliveries are held out, §5.1) | random (for deliveries that share one time).")]

# predict
PredictOutOpt = Annotated[Path, typer.Option("--out", help="Folder for scores.parquet, deliveries.parquet and summary.json; with --data in parts, scores/ and deliveries/ (part k from input part k) and summary.json.")]
AtOpt = Annotated[Optional[str], typer.Option("--at", help="Score as of this time (a date or a number like the deliveries' times); default just after the latest delivery.")]
ContextsOpt = Annotated[int, typer.Option(help="Delivery contexts averaged over per user × fund.")]
UsersListOpt = Annotated[Optional[Path], typer.Option("--users-list", help="Table with a user_id column (other columns ignored): score these users only, in its order — a campaign's users for allocate quota.")]

# evaluate
EvaluateOutOpt = Annotated[Path, typer.Option("--out", help="Folder for report.md / report.json / deciles.png.")]
FloorOpt = Annotated[Optional[Path], typer.Option("--floor", help="A hurdle model directory to show beside the model; default: the floor fitted on the deliveries the model trained on (with --all: none).")]

# recalibrate
RecalibrateByOpt = Annotated[Optional[str], typer.Option("--by", help="fund: one map per fund, shrunk toward the overall map where a fund has few deliveries; funds it did not see get the overall map (default: one map for every delivery).")]
RecalibrateFromOpt = Annotated[Optional[str], typer.Option("--from", help="Only deliveries shown from this time on (a date or a number like the deliveries' times): the latest labelled period (default: every delivery).")]

# synth, bench, simulate
SynthOutOpt = Annotated[Path, typer.Option("--out", help="Folder for the world's tables, true ETVs and quotas.")]
MeanDeliveriesOpt = Annotated[float, typer.Option(help="Mean deliveries per user.")]
SeedsOpt = Annotated[str, typer.Option(help="Comma-separated seeds (world, split and training).")]
WorldOpt = Annotated[Path, typer.Option("--world", help="Folder written by synth (tables, truth_etv.parquet, quotas.csv).")]
TrainedModelsOpt = Annotated[list[Path], typer.Option("--model", help="Model directory trained on this world; repeat for several.")]
AllocatorsOpt = Annotated[str, typer.Option(help="Comma-separated: manual, ha, prices, exact.")]

# from-transactions
TransactionsOpt = Annotated[Path, typer.Option("--transactions", help="Purchase log, one row per purchase (.csv or .parquet): customer, time, amount [, product].")]
TablesOutOpt = Annotated[Path, typer.Option("--out", help="Folder for deliveries, users, funds and behaviors (.parquet): a value dataset.")]
FeatureWindowOpt = Annotated[str, typer.Option("--feature-window", help="START,END (END excluded; START may be empty: from the first purchase), or a duration ending where the target window starts (273D).")]
TargetWindowOpt = Annotated[str, typer.Option("--target-window", help="START,END (END excluded), or a duration starting where the feature window ends (273D).")]
CustomerOpt = Annotated[str, typer.Option("--customer", help="The customer column.")]
TimeOpt = Annotated[str, typer.Option("--time", help="The time column: datetimes, or text that parses as one.")]
TimeFormatOpt = Annotated[Optional[str], typer.Option("--time-format", help="How the times are written, e.g. %Y%m%d for 19970101 (default: any date or datetime).")]
AmountOpt = Annotated[str, typer.Option("--amount", help="The amount column (numbers ≥ 0).")]
ProductOpt = Annotated[Optional[str], typer.Option("--product", help="A column whose values become the funds (default: one fund).")]
QuantityOpt = Annotated[Optional[str], typer.Option("--quantity", help="A numeric column (units bought) summed as a feature.")]
FundOpt = Annotated[str, typer.Option("--fund", help="The one fund's name, without --product.")]


@contextmanager
def flag_errors():
    """Library errors name Python arguments; the value commands' errors name their flags."""
    from promokit.data import DataError

    try:
        with flags_in_errors(ARGUMENT_FLAGS):
            yield
    except DataError as exc:
        message = str(exc)
        for argument, flag in FLAG_WORDS:
            message = re.sub(rf"(?<![\w-]){re.escape(argument)}", flag, message)
        raise DataError(message) from None


LabelOpt = co.label_option(LABEL_ROLES)
AllowLeakyOpt = co.allow_leaky_option(label="the conversion")
MethodOpt = co.recalibration_method_option("pCTCVR")
TestFractionOpt = co.test_fraction_option("the latest deliveries with --split time, drawn at random with --split random")

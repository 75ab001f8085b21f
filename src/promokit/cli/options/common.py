"""The typer option types that the commands of every domain share (``--params``, ``--executor``, the training flags,
the hold-out and label options …) and the builders of those whose help names the domain. A module without torch
(NumPy alone, for the bootstrap's default), so ``--help`` loads no model; each domain's own options are the module
of its name in :mod:`promokit.cli.options`, and what turns the options' text into the library's arguments is
:mod:`promokit.cli.support`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.metrics.bootstrap import RESAMPLES

ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue an interrupted run from its checkpoint "
                                         "(.OUT.checkpoint beside --out).")]
ParamsOpt = Annotated[Optional[str], typer.Option("--params", help="Parameters as a JSON object or a JSON file "
                                                  "(what tune writes): model parameters, min_count and training "
                                                  "fields such as lr or embedding_decay; flags given win.")]
MinCountOpt = Annotated[Optional[int], typer.Option("--min-count", help="Ids seen fewer times in training share "
                                                    "the out-of-vocabulary row.", show_default="1: every id seen "
                                                    "in training has its own row")]
TrialsOpt = Annotated[int, typer.Option("--trials", help="Finished trials the study should hold (a resumed study "
                                        "runs only the missing ones).")]
TimeoutOpt = Annotated[Optional[float], typer.Option("--timeout", help="Stop starting trials after this many "
                                                     "seconds.")]
StorageOpt = Annotated[Optional[Path], typer.Option("--storage", help="SQLite file of the study (default: study.db "
                                                    "in --out); run the same command again to continue it.")]
TunedOpt = Annotated[Optional[Path], typer.Option("--tuned", help="Folder of tune results: DIR/<model>/params.json "
                                                 "(tune --out DIR/<model>) replaces that model's parameters.")]
# What every table option accepts (promokit.data.parts): one file, or a table in parts.
TABLE_HELP = "CSV/Parquet file, or a directory/glob of Parquet parts"
# The type of feature columns, whatever the inference says (FeatureSpec.types): every train command that infers them.
CategoricalOpt = Annotated[Optional[str], typer.Option(
    "--categorical", help="Comma-separated feature columns to encode as categories whatever their inferred type, "
    "e.g. an integer code with more than 64 distinct values.")]
NumericOpt = Annotated[Optional[str], typer.Option(
    "--numeric", help="Comma-separated feature columns to encode as numbers whatever their inferred type, e.g. an "
    "integer count with at most 64 distinct values.")]
# Where a partitioned job runs (promokit.scale): shared by every command that takes --executor.
ExecutorOpt = Annotated[str, typer.Option("--executor", help="local (this process, one partition after another) | "
                                          "ray (a Ray cluster: --address, $RAY_ADDRESS, or one started on this "
                                          "machine).")]
# --engine, the former name of --executor: hidden, and for one release still accepted with a warning (executor_option).
EngineOpt = Annotated[Optional[str], typer.Option("--engine", hidden=True, help="Deprecated: use --executor.")]
AddressOpt = Annotated[Optional[str], typer.Option("--address", help="Address of a running Ray cluster "
                                                   "(host:port or ray://host:port), with --executor ray.")]
WorkersOpt = Annotated[Optional[int], typer.Option("--workers", help="Ray workers (one CPU each) sharing the "
                                                   "partitions; default every CPU of the cluster.")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="Torch threads of this process (default: the "
                                                   "cores free now: the cores it may run on minus the busy ones, by "
                                                   "the load average or the tasks running now, at least 1; "
                                                   "OMP_NUM_THREADS, when set, instead).")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", show_default="auto", help="Where the neural model "
                                                  "trains and predicts: auto (CUDA when torch finds a GPU, else the "
                                                  "CPU) | cpu | cuda | cuda:<n>.")]

WideOpt = Annotated[Optional[str], typer.Option("--wide", help="The linear floor's term in every logit of a neural "
                                                "model: none | joint (trained with it) | offset (the solved lr, "
                                                "fixed; the network learns the correction). Default: the model's.")]
#: The training flags every domain's train, tune and bench take: the TrainConfig field and its help.
TRAINING_FLAGS = {
    "epochs": "Most epochs to train.",
    "batch_size": "Rows per training step.",
    "lr": "Adam learning rate.",
    "patience": "Epochs without a better validation score before stopping.",
    "embedding_decay": "Decoupled L2 (weight decay) on embedding rows, applied lazily to the rows a batch touches; "
                       "0 turns it off.",
    "weight_decay": "Decoupled L2 (AdamW) on the dense weights.",
}


class TrainingFlags:
    """The training flags of one domain, each an ``Annotated`` option whose ``--help`` shows that domain's default
    (its ``DEFAULT_TRAIN``: the default is stated once, in the library). A flag not given is None: the domain's
    default, or the value in ``--params``. Use as ``epochs: flags.epochs = None``."""

    def __init__(self, default):
        for name, help_text in TRAINING_FLAGS.items():
            kind = int if name in ("epochs", "batch_size", "patience") else float
            option = typer.Option("--" + name.replace("_", "-"), help=help_text,
                                  show_default=f"{getattr(default, name):g}")
            setattr(self, name, Annotated[Optional[kind], option])


#: Where demos (and benches with a default) write without --out: promokit-runs/<command>, e.g.
#: promokit-runs/conversion-demo; `make demo` too (promokit-runs/campaign-demo).
RUNS = Path("promokit-runs")


def allow_leaky_option(columns: str = "feature columns", label: str = "a label"):
    """``--allow-leaky``: ``columns`` the label-leak guard (:mod:`promokit.data.leakage`) leaves alone."""
    return Annotated[Optional[str], typer.Option("--allow-leaky", help=f"Comma-separated {columns} the label-leak "
                                                 f"guard leaves alone: those that alone predict {label} almost "
                                                 f"perfectly, and are meant to.")]


def recalibration_method_option(fitted: str = "the probability"):
    """``--method`` of a ``recalibrate`` command (:class:`promokit.training.Recalibration`)."""
    return Annotated[str, typer.Option("--method", help=f"isotonic | platt | prior-shift: the map fitted to {fitted} "
                                                        f"on the labelled rows.")]


def runs_out_option(contents: str):
    """The ``--out`` option of a demo or bench whose default is ``RUNS / "<command>"``; ``contents``: what it writes."""
    return Annotated[Path, typer.Option("--out", help=f"Folder for {contents}; by default promokit-runs/<command>, "
                                        "as for every demo.")]


def test_fraction_option(rule: str):
    """``train --test-fraction``: the share held out for ``evaluate`` (default the same in every domain), by ``rule``."""
    from promokit.data.split import TEST_FRACTION

    return Annotated[float, typer.Option("--test-fraction", help=f"Share held out for evaluate, never trained or "
                                         f"validated on ({rule}); 0 trains on everything. Default "
                                         f"{TEST_FRACTION:g} in every domain.")]


# fit(validation=…) of every domain (promokit.data.split.parse_validation): the text, as support.validation_option
# turns it into the library's argument; the library says which forms a domain refuses, naming --validation.
ValidationOpt = Annotated[Optional[str], typer.Option(
    "--validation", show_default=False, help="Validation rows: a fraction of the rows left after the test hold-out "
    "(default 0.1; 0: none), a time (the rows from it on), or (conversion) a table's path.")]
#: The library's argument that --validation sets, as its errors name it → the flag (for flags_in_errors).
VALIDATION_FLAG = {"validation": "--validation"}
AllRowsOpt = Annotated[bool, typer.Option("--all", help="Score every row of the data (new data), not what train held "
                                          "out.")]
RefitOpt = Annotated[bool, typer.Option("--refit/--no-refit", help="After choosing the epoch (the L2 strength, the "
                                        "trees) on the validation rows, fit again on every row with it fixed, "
                                        "held-out and validation rows too, as scikit-learn's refit=True; evaluate "
                                        "then reports the held-out metrics scored before the refit. --no-refit keeps "
                                        "the selected model.")]


def label_option(roles: tuple[str, ...]):
    """``--label ROLE=COLUMN`` (repeatable) of the train and evaluate commands: the table's column holding a label."""
    return Annotated[Optional[list[str]], typer.Option(
        "--label", help=f"ROLE=COLUMN: the column that holds a label, e.g. --label {roles[0]}=is_{roles[0]} "
        f"(repeat for several); roles: {', '.join(roles)}.")]


# ---- compare: every domain's `compare` command (RESAMPLES: --resamples' default)
CompareModelsOpt = Annotated[str, typer.Option("--models", help="Comma-separated models to compare; the floor is always added, first.")]
CompareOutOpt = Annotated[Path, typer.Option("--out", help="Folder for leaderboard.parquet, report.md and report.json (results.csv holds each model's row as it finishes).")]
CompareSeedsOpt = Annotated[str, typer.Option("--seeds", help="Comma-separated training seeds; the models of one seed hold out the same rows.")]
ResamplesOpt = Annotated[int, typer.Option("--resamples", min=1, help="Paired bootstrap resamples of the held-out rows, seeded by the training seed.")]

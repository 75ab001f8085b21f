"""What every domain's commands share: one-line user errors, the console and tables. Imports nothing heavy."""

from __future__ import annotations

import json
import numbers
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.console import get_console, print_table

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


@contextmanager
def user_errors(**local_outputs: Path | None):
    """Turn contract violations into one red line (never wrapped) and exit code 2, not a traceback; warnings into
    one yellow line each. ``local_outputs``: the command's local-only outputs by option (``out=out`` is ``--out``),
    each refused first when it is a URI (:func:`local_out`), before the command reads or computes anything."""
    from rich.markup import escape

    from promokit.data.errors import DataError
    from promokit.extras import MissingExtra, missing_extra

    def show(message, category, filename, lineno, file=None, line=None):
        get_console(stderr=True).print(f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False,
                                       emoji=False, soft_wrap=True)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            for option, path in local_outputs.items():
                local_out(path, "--" + option.replace("_", "-"))
            yield
    except (DataError, MissingExtra, ModuleNotFoundError) as exc:  # text, not markup: "[cart, favorite]" as written
        if isinstance(exc, ModuleNotFoundError) and (exc := missing_extra(exc, "this command")) is None:
            raise
        get_console(stderr=True).print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, emoji=False,
                                       soft_wrap=True)  # "constant:x:" must not print as an emoji
        raise typer.Exit(2) from None


@contextmanager
def flags_in_errors(flags: dict[str, str]):
    """Library errors and warnings name their arguments as `name`; a command's name its flags instead (``flags``:
    argument → flag, e.g. ``{"bootstrap": "--bootstrap"}``). Inside :func:`user_errors`, whose warning lines it
    rewords."""
    import re

    from promokit.data.errors import DataError

    def reword(text: str) -> str:
        return re.sub(r"`(\w+)`", lambda name: flags.get(name[1], name[0]), text)

    show = warnings.showwarning
    warnings.showwarning = lambda message, *args, **kwargs: show(reword(str(message)), *args, **kwargs)
    try:
        yield
    except DataError as exc:
        raise DataError(reword(str(exc))) from None
    finally:
        warnings.showwarning = show


def executor_option(executor: str, engine: str | None) -> str:
    """``--executor``, or the value of ``--engine``, its deprecated former name, with a warning."""
    if engine is None:
        return executor
    if executor not in ("local", engine):
        from promokit.data.errors import DataError

        raise DataError(f"--engine is the former name of --executor: give --executor alone, got --executor "
                        f"{executor} and --engine {engine}")
    warnings.warn(f"--engine is deprecated: the same option is now --executor (--executor {engine})", FutureWarning,
                  stacklevel=2)
    return engine


def executor_from_options(kind: str, address: str | None, workers: int | None):
    """:func:`promokit.scale.make_executor` for a command: its errors name --executor, --address and --workers."""
    from promokit.scale.executor import make_executor

    with flags_in_errors({"kind": "--executor", "address": "--address", "workers": "--workers"}):
        return make_executor(kind, address, workers)


def deferred_executor(kind: str, address: str | None, workers: int | None):
    """:func:`executor_from_options`, where a Ray cluster starts only when the executor is first used: the library
    reads its ``name`` and may refuse the job before (a model that cannot train over parts starts no cluster)."""
    if kind != "ray":
        return executor_from_options(kind, address, workers)
    return _StartedOnUse(kind, lambda: executor_from_options(kind, address, workers))


class _StartedOnUse:
    """An executor known by its ``name``, made by ``make`` when anything else of it is first asked for."""

    def __init__(self, name: str, make):
        self.name, self._make, self._executor = name, make, None

    def __getattr__(self, attribute: str):
        if self._executor is None:
            self._executor = self._make()
        return getattr(self._executor, attribute)


def free_cores() -> int:
    """The cores free now (:func:`promokit.training.threads.free_cores`): ``--threads`` when not given."""
    from promokit.training import threads

    return threads.free_cores()


def set_threads(threads: int | None) -> int:
    """``--threads``: torch's intra-op threads, the cores free now when not given (unless OMP_NUM_THREADS or the
    like chose a count: :func:`promokit.training.threads.set_threads`); returns the number in force."""
    from promokit.training import threads as torch_threads

    with flags_in_errors({"threads": "--threads"}):
        return torch_threads.set_threads(threads)


def json_option(flag: str, text: str | None, default=None):
    """The value of a JSON command-line option (``default`` when not given), or a one-line error naming it."""
    from promokit.data.errors import DataError

    if not text:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{flag} is not valid JSON: {exc}") from None


def params_option(flag: str, text: str | None) -> dict:
    """A JSON object given inline or as the path of a JSON file (what ``tune`` writes); ``{}`` when not given."""
    from promokit.data.errors import DataError

    if text and not text.lstrip().startswith("{"):
        path = Path(text)
        if not path.is_file():
            raise DataError(f"{flag} is neither a JSON object nor a JSON file: {text!r}")
        text = path.read_text(encoding="utf-8")
    value = json_option(flag, text, {})
    if not isinstance(value, dict):
        raise DataError(f"{flag} must be a JSON object of parameters, got {type(value).__name__}")
    return value


def bench_models(text: str) -> list[str]:
    """A bench's comma-separated models, with the linear floor ``lr`` first when not named: every bench shows
    what the deep models have to beat."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    return names if "lr" in names else ["lr", *names]


def seeds_option(text: str) -> list[int]:
    """``--seeds 0,1,2`` as integers, or a one-line error."""
    from promokit.data.errors import DataError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise DataError(f"--seeds must be comma-separated whole numbers, got {text!r}") from None
    if not seeds:
        raise DataError("--seeds names no seed")
    return seeds


def tuned_params(folder: Path | None, names: list[str]) -> dict[str, dict]:
    """``--tuned DIR``: the parameters ``tune`` wrote for each benched model (``DIR/<model>/params.json``). A tuned
    comparison is fair only when every model, the floor included, had the same search: each must have been tuned,
    with as many finished trials (complete or pruned, from its ``report.json``) as the others."""
    from promokit.data.errors import DataError

    if folder is None:
        return {}
    if not folder.is_dir():
        raise DataError(f"--tuned {folder}: no such folder")
    found = {name: params_option("--tuned", str(folder / name / "params.json"))
             for name in names if (folder / name / "params.json").is_file()}
    if not found:
        raise DataError(f"--tuned {folder}: none of {names} has a params.json (expected {folder}/<model>/params.json)")
    untuned = [name for name in names if name not in found]
    if untuned:
        raise DataError(f"--tuned {folder}: {untuned} have no params.json while {sorted(found)} do; a tuned "
                        f"comparison gives every model, the floor included, the same search (tune --model "
                        f"{untuned[0]} --out {folder}/{untuned[0]} with the others' --trials)")
    budgets = {name: _finished_trials(folder / name / "report.json") for name in names}
    if len(set(budgets.values())) > 1:
        raise DataError(f"--tuned {folder}: the models had different searches (finished trials: "
                        f"{', '.join(f'{k} {v}' for k, v in budgets.items())}); tune each with the same --trials")
    return found


def _finished_trials(report: Path) -> int | None:
    """Complete and pruned trials of a ``tune`` report (None without one: parameters not written by ``tune``)."""
    if not report.is_file():
        return None
    try:
        trials = json.loads(report.read_text()).get("trials", [])
    except (ValueError, AttributeError):
        return None
    return sum(t.get("state") in ("complete", "pruned") for t in trials)


def training_options(base, params: str | None, min_count: int | None = None, wide: str | None = None, **flags):
    """The ``TrainConfig`` and model parameters of a command: ``base``, then the training fields among
    ``--params`` (``lr``, ``embedding_decay`` …, as ``tune`` writes them), then the flags given (not None).
    ``--min-count`` joins the model parameters (the estimators pass it to the vocabulary), as ``--wide`` does."""
    from dataclasses import replace

    config, model_params = base.merged(params_option("--params", params))
    config = replace(config, **{k: v for k, v in flags.items() if v is not None})
    if min_count is not None:
        model_params["min_count"] = min_count
    if wide is not None:
        from promokit.data.errors import DataError
        from promokit.nn.wide import WIDE_MODES

        if wide not in WIDE_MODES:
            raise DataError(f"--wide must be one of {', '.join(WIDE_MODES)}, got {wide!r}")
        model_params["wide"] = wide
    return config, model_params


def set_device(device: str | None) -> None:
    """``--device`` of a command that loads a model: where it predicts (``auto`` when not given), checked at once."""
    from promokit.training.device import set_device as choose

    choose(device)


def bench_training(base, params: str | None, **flags):
    """:func:`training_options` for a bench: the same, without the per-epoch progress display."""
    from dataclasses import replace

    config, model_params = training_options(base, params, **flags)
    return replace(config, progress=False), model_params


def write_metrics_report(out, title: str, model_name: str, metrics: dict, table_title: str,
                         tables: dict | None = None) -> None:
    """An ``evaluate`` command's output: ``report.md`` / ``report.json`` in ``out`` with the metrics and the
    evaluation's ``tables`` (calibration by decile …), and the metrics on screen."""
    import pandas as pd

    out = local_out(out)

    from promokit.report import Report

    values = [int(v) if isinstance(v, numbers.Integral) else float(v) for v in metrics.values()]
    frame = pd.DataFrame({"metric": list(metrics), "value": pd.Series(values, dtype=object)})
    tables = tables or {}
    report = Report(title, data={"model": model_name, "metrics": metrics,
                                 **{name: table.to_dict(orient="records") for name, table in tables.items()}})
    report.add("Metrics", frame)
    for name, table in tables.items():
        report.add(name.replace("_", " ").capitalize(), table)
    report.write(out)
    print_table(table_title, frame.set_index("metric"))


def write_bench_report(out, title: str, results, oracle: dict | None, setup: str, summary,
                       tables: dict | None = None, floor: tuple[str, tuple[str, ...]] | None = None) -> None:
    """A bench's report.md / report.json in the folder ``out``: the per-seed ``results``, the oracle row, the
    ``setup`` line, the ``summary`` table, any further ``tables`` (section title → table) and, with ``floor`` (the
    floor model and metrics), how the models stand against the floor."""
    from promokit.experiments.bench_summary import add_floor_section, floor_verdict
    from promokit.report import Report

    report = Report(title, data={"results": results.to_dict(orient="records"), "oracle": oracle})
    report.add("Setup", setup)
    report.add("Mean ± std over seeds", summary)
    for section, table in (tables or {}).items():
        report.add(section, table)
    if floor is not None:
        add_floor_section(report, [floor_verdict(results, floor[0], metric, what=f"test {metric}")
                                   for metric in floor[1]])
    report.write(out)
    get_console().print(f"report written to {out}/report.md")


def run_tune(out: Path, storage: Path | None, title: str, setup: str, search) -> None:
    """A ``tune`` command's run and output: ``search(storage, on_trial)`` runs the study (a
    :class:`~promokit.experiments.tuning.TuneResult`); ``out/params.json`` gets the best parameters (for
    ``train --params``), ``out/report.md`` / ``report.json`` every trial, ``out/study.db`` the study."""
    import pandas as pd

    from promokit.data.io import write_json
    from promokit.report import Report

    console = get_console()
    storage = storage or out / "study.db"
    out.mkdir(parents=True, exist_ok=True)

    def on_trial(record: dict) -> None:
        value = "—" if record["value"] is None else f"{record['value']:.4f}"
        epochs = f" after {record['epochs']} epochs" if record["epochs"] else ""
        console.print(f"  trial {record['trial']:>3} {record['state']:>8}: {value}{epochs} ({record['seconds'] or 0:.0f} s)",
                      highlight=False)

    result = search(storage, on_trial)
    write_json(result.best_params, out / "params.json")
    trials = pd.DataFrame(result.trials).set_index("trial")
    report = Report(title, data={"best_params": result.best_params, "best_score": result.best_score,
                                 "trials": result.trials, "interrupted": result.interrupted})
    report.add("Setup", f"{setup}; study {storage}").add("Trials", trials.astype(str)).write(out)
    if result.interrupted:
        console.print(f"interrupted: {len(result.trials)} trials are stored in {storage}; run the same command to "
                      "continue the search")
    console.print(f"best validation score {result.best_score:.4f} with {json.dumps(result.best_params)}",
                  highlight=False, soft_wrap=True)
    console.print(f"parameters written to {out / 'params.json'}; use them with: train --params {out / 'params.json'}")


def checkpoint_dir(out: Path) -> Path:
    """Where ``train --out OUT`` keeps its per-epoch checkpoint: ``.OUT.checkpoint`` beside OUT (a local folder: a URI
    is a one-line error naming ``--out``)."""
    out = local_out(out)
    return out.parent / f".{out.name}.checkpoint"


def local_out(path: Path | None, flag: str = "--out") -> Path | None:
    """A command's local-only output ``path`` (a model directory, a report, a plan, a campaign; None kept): a URI is
    a one-line error naming ``flag`` (:func:`promokit.data.uris.local_dir`). Called first in a command, before it
    reads or computes anything."""
    from promokit.data.uris import local_dir

    return None if path is None else local_dir(path, flag)


def types_option(categorical: str | None, numeric: str | None) -> dict[str, str]:
    """``--categorical`` / ``--numeric`` as column → type (:attr:`promokit.data.FeatureSpec.types`); a column named
    twice is a one-line error."""
    from promokit.data.errors import DataError

    types: dict[str, str] = {}
    for flag, text in (("categorical", categorical), ("numeric", numeric)):
        names = [name.strip() for name in (text or "").split(",") if name.strip()]
        if text is not None and not names:
            raise DataError(f"--{flag} names no column ({text!r}); give comma-separated column names")
        twice = sorted({name for name in names if names.count(name) > 1 or name in types})
        if twice:
            raise DataError(f"--{flag}: columns {twice} are named more than once in --categorical / --numeric")
        types.update(dict.fromkeys(names, flag))
    return types


def print_feature_types(specs: dict, inferred: bool) -> None:
    """The type of every feature column a model was trained with, per table (``specs``: table name →
    :class:`~promokit.data.FeatureSpec`, as the model directory's config.json keeps them), and how the types came."""
    from promokit.data.spec import MAX_INTEGER_LEVELS

    console = get_console()
    for table, spec in specs.items():
        console.print(f"{table} features: categorical ({len(spec.categorical)}) {', '.join(map(str, spec.categorical))}"
                      f"; numeric ({len(spec.numeric)}) {', '.join(map(str, spec.numeric))}", markup=False,
                      highlight=False, soft_wrap=True)
    given = {name: kind for spec in specs.values() for name, kind in spec.types.items()}
    how = ("types inferred: text and booleans categorical; an integer column categorical when its name ends in id "
           f"or it has at most {MAX_INTEGER_LEVELS} distinct values, else numeric; other numbers numeric"
           if inferred else "features and types as listed in the spec")
    given_text = ", ".join(f"{name} {kind}" for name, kind in given.items())
    console.print(f"{how}{'; given: ' + given_text if given else ''} (--categorical / --numeric set a column's type)",
                  markup=False, highlight=False, soft_wrap=True)


def finish_training(out: Path, history) -> None:
    """Print a trainer ``History`` in one line; keep the checkpoint only when the run was interrupted (for
    ``--resume``), else remove it."""
    if history is not None:
        console = get_console()
        console.print(history.summary())
        if history.stopped == "interrupted":
            console.print("interrupted: the best model so far is saved; continue with --resume")
            return
    shutil.rmtree(checkpoint_dir(out), ignore_errors=True)


# ---- The conventions every domain's commands share (docs/conventions.md): the test hold-out, label columns under
# the user's names, and predict --out as a folder.

def test_fraction_option(rule: str):
    """``train --test-fraction``: the share held out for ``evaluate`` (default the same in every domain), by ``rule``."""
    from promokit.data.split import TEST_FRACTION

    return Annotated[float, typer.Option("--test-fraction", help=f"Share held out for evaluate, never trained or "
                                         f"validated on ({rule}); 0 trains on everything. Default "
                                         f"{TEST_FRACTION:g} in every domain.")]


AllRowsOpt = Annotated[bool, typer.Option("--all", help="Score every row of the data (new data), not what train held "
                                          "out.")]
RefitOpt = Annotated[bool, typer.Option("--refit/--no-refit", help="After choosing the epoch (the L2 strength, the "
                                        "trees) on the validation rows, fit again on every row with it fixed, "
                                        "held-out and validation rows too, as scikit-learn's refit=True; evaluate "
                                        "then reports the held-out metrics scored before the refit. --no-refit keeps "
                                        "the selected model.")]


def print_refit(holdout: dict | None, what: str) -> None:
    """train's lines saying which model ``--model auto`` chose and why, what the refit learnt from, and the held-out
    metrics scored before it (nothing without a refit)."""
    auto = (holdout or {}).get("auto")
    if auto:
        get_console().print(f"--model auto: {auto['reason']}", highlight=False, soft_wrap=True)
    refit = (holdout or {}).get("refit")
    if not refit:
        return
    chosen = [f"{refit['epochs']} epochs"] if refit.get("epochs") else []
    chosen += [f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in refit["params"].items()
               if k.startswith(("l2", "n_trees"))]
    plural = what[:-1] + "ies" if what.endswith("y") else what + "s"  # a delivery, deliveries
    text = f"refit on all {refit['rows']:,} {plural}" + (f" with {', '.join(chosen)}" if chosen else "")
    scores = {k: v for k, v in (refit.get("evaluation") or {}).items() if "auc" in k and isinstance(v, float)}
    if scores:
        text += "; held out before the refit: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items())
    get_console().print(text, highlight=False, soft_wrap=True)


def relabelled(label: list[str] | None, roles: tuple[str, ...], trained: dict | None) -> bool:
    """Whether ``--label`` maps a role to another column than the model was trained with (``trained``: role → column)."""
    return any((trained or {}).get(role, role) != column for role, column in (label_options(label, roles) or {}).items())


def held_out_evaluation(model, data, all_rows: bool, asked: dict | None = None):
    """What ``evaluate`` reports of a refit model's held-out rows: its metrics scored before the refit
    (``model.held_out_evaluation``), after checking ``data`` is what train was given; None with ``--all``, without
    a refit, or when the held-out rows of ``data`` are not those train scored (score the rows). With ``asked`` (flag →
    whether given) asking for other metrics than train scored, the rows are scored again, by the refit model, and a
    warning says that it learnt from them."""
    from promokit.training.refit import unscored_refit

    options = " and ".join(flag for flag, given in (asked or {}).items() if given)
    if all_rows or not (model.holdout or {}).get("refit"):
        return None
    held_out_rows(model, data)
    unscored = unscored_refit(model.holdout)
    if unscored:
        warnings.warn(unscored, stacklevel=2)
        return None
    stored = model.held_out_evaluation(data)
    if stored is None:  # other rows than train held out and scored: score them
        return None
    if options:
        warnings.warn(f"{options}: scored by the refit model, which learnt from these held-out rows, so the metrics "
                      "flatter it; without them evaluate reports the held-out metrics scored before the refit "
                      "(train with --no-refit to keep the selected model)", stacklevel=2)
        return None
    return stored


def label_option(roles: tuple[str, ...]):
    """``--label ROLE=COLUMN`` (repeatable) of the train and evaluate commands: the table's column holding a label."""
    return Annotated[Optional[list[str]], typer.Option(
        "--label", help=f"ROLE=COLUMN: the column that holds a label, e.g. --label {roles[0]}=is_{roles[0]} "
        f"(repeat for several); roles: {', '.join(roles)}.")]


def label_options(values: list[str] | None, roles: tuple[str, ...]) -> dict[str, str] | None:
    """``--label ROLE=COLUMN`` values as role → column (None when not given), or a one-line error."""
    from promokit.data.errors import DataError

    if not values:
        return None
    labels: dict[str, str] = {}
    for value in values:
        role, sep, column = (part.strip() for part in value.partition("="))
        if not sep or not role or not column:
            raise DataError(f"--label {value!r}: give ROLE=COLUMN, e.g. --label {roles[0]}=is_{roles[0]}")
        if role not in roles:
            raise DataError(f"--label {value!r}: unknown label role {role!r}; the roles are {', '.join(roles)}")
        if role in labels:
            raise DataError(f"--label: the role {role!r} is mapped twice ({labels[role]!r} and {column!r})")
        labels[role] = column
    return labels


@contextmanager
def convention_errors():
    """Library errors name the Python arguments of the conventions: how to map a label column
    (``labels={'click': 'is_click'}``, or in a feature spec) and ``test_fraction``; a train or evaluate command says
    its options instead (``--label click=is_click``, ``--test-fraction``)."""
    import re

    from promokit.data.errors import DataError

    try:
        yield
    except DataError as exc:
        message = re.sub(r"(?:FeatureSpec\()?labels=\{'([^']+)': '([^']+)'\}\)?", r"--label \1=\2", str(exc))
        message = re.sub(r"(?<![\w-])test_fraction(=| )", lambda m: "--test-fraction" + (" " if m[1] == "=" else m[1]),
                         message)
        raise DataError(message.replace("test_fraction:", "--test-fraction:")) from None


def print_held_out(held: str | None, what: str) -> None:
    """train's line saying what it held out (``held``: how many ``what`` and by which rule; None: nothing)."""
    text = (f"held out for evaluate: {held}; evaluate scores them by default (--all: every {what}), "
            "--test-fraction 0 trains on them too" if held else
            "held out for evaluate: nothing (--test-fraction 0); evaluate new data with --all")
    get_console().print(text, highlight=False, soft_wrap=True)


def held_out_rows(model, data):
    """What ``evaluate`` scores by default: the rows ``model.held_out(data)`` (whatever form the domain gives them),
    or a one-line error that says --all when the model held nothing out or ``data`` is not what it was fitted on."""
    from promokit.data.errors import DataError

    if not (model.holdout or {}).get("test_fraction"):
        raise DataError("the model held nothing out (trained with --test-fraction 0, or before the hold-out was "
                        "kept): evaluate data it did not train on with --all")
    try:
        return model.held_out(data)
    except DataError as exc:
        message = str(exc).removeprefix("held_out: ").replace("fit was given", "train was given")
        raise DataError(message.replace("every row of new data", "every row of new data with --all")) from None


def predictions_folder(out: Path, flag: str = "--out") -> Path | None:
    """``predict --out``: a folder, whatever the domain (predictions.parquet or the domain's tables, and
    summary.json). The old form of conversion and voucher, a file ending in .parquet or .csv, is still written
    for one release with a warning: returns that file, else None."""
    if out.suffix.lower() not in (".parquet", ".csv"):
        return None
    warnings.warn(f"{flag} {out}: a file is deprecated and will be refused in the next release; {flag} is a folder "
                  f"(predictions.parquet and summary.json are written in it)", FutureWarning, stacklevel=2)
    return out


# ---- compare: every domain's `compare` command
from promokit.metrics.bootstrap import RESAMPLES  # noqa: E402 - NumPy alone, as the domains' options load

CompareModelsOpt = Annotated[str, typer.Option("--models", help="Comma-separated models to compare; the floor is always added, first.")]
CompareOutOpt = Annotated[Path, typer.Option("--out", help="Folder for leaderboard.parquet, report.md and report.json (results.csv holds each model's row as it finishes).")]
CompareSeedsOpt = Annotated[str, typer.Option("--seeds", help="Comma-separated training seeds; the models of one seed hold out the same rows.")]
ResamplesOpt = Annotated[int, typer.Option("--resamples", min=1, help="Paired bootstrap resamples of the held-out rows, seeded by the training seed.")]


def run_compare(domain: str, data, models: str, seeds: str, out: Path, resamples: int = RESAMPLES, *, options: dict | None = None,
                validation=None, **training) -> None:
    """A ``compare`` command: :func:`promokit.experiments.compare.compare` with the training flags given (the
    domain's defaults for the others; no per-epoch display), then the leaderboard, the verdicts and the model it
    recommends on screen."""
    from promokit.experiments.compare import compare

    train = {"progress": False, **{name: value for name, value in training.items() if value is not None}}
    comparison = compare(data, models, domain=domain, seeds=seeds_option(seeds), train=train, options=options,
                         validation=validation, resamples=resamples, out=out)
    print_table(f"{domain}: held-out metrics against the floor {comparison.floor}", comparison.table())
    console = get_console()
    for line in comparison.verdicts():
        console.print(line, highlight=False, soft_wrap=True)
    choice = comparison.best()
    console.print(f"which model? {choice.model}: {choice.reason}", highlight=False, soft_wrap=True)
    console.print(f"leaderboard written to {out / 'leaderboard.parquet'} (report: {out / 'report.md'}, report.json)")

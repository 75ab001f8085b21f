"""What every command does with its options: the parsing of their text into the library's arguments, and the
one-line errors (a library error names a Python argument; a command says its flag). Imports nothing heavy; the
options themselves are :mod:`promokit.cli.options`, the conventions every domain's commands share (the hold-out,
label columns, predict --out) :mod:`promokit.cli.conventions`, what the commands print :mod:`promokit.cli.printing`."""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import typer

from promokit.console import get_console


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


def validation_option(text: str | None):
    """``--validation``: the library's ``fit(validation=…)`` (:func:`promokit.data.split.parse_validation`): None when
    not given (the domain's default), a float when the text parses as a number (a fraction; 0: no validation), else
    the text as given (a time, a table's path), for the library to read or refuse in one line naming it."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


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
    """A bench's comma-separated models, with the linear floor ``lr`` first when not named
    (:func:`promokit.experiments.bench_summary.with_floor`)."""
    from promokit.experiments.bench_summary import with_floor

    return with_floor([name.strip() for name in text.split(",") if name.strip()])


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


def tuned_option(folder: Path | None, names: list[str]) -> dict[str, dict]:
    """``--tuned DIR``: the parameters ``tune`` wrote for each benched model
    (:func:`promokit.experiments.tune_results.tuned_params`), its errors naming --tuned and --trials."""
    from promokit.experiments.tune_results import tuned_params

    with flags_in_errors({"tuned": "--tuned", "trials": "--trials"}):
        return tuned_params(folder, names)


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

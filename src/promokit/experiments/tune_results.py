"""A tuning study's results folder, written by a ``tune`` run and read back by a bench.

:func:`run_study` runs a search (:func:`promokit.experiments.tuning.tune`, through a domain's ``tune_<domain>``) and
writes its folder: ``params.json`` (the best parameters, as ``train --params`` reads them), ``report.md`` /
``report.json`` (every trial) beside the study's SQLite file. :func:`tuned_params` reads the ``params.json`` of each
model of a folder of such folders (``DIR/<model>/``), for a bench that compares tuned models: a fair comparison only
when every model, the floor included, had the same search.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from promokit.data.errors import DataError

#: The best parameters of a study, in its folder.
PARAMS = "params.json"


def run_study(out: str | os.PathLike, storage: str | os.PathLike, search: Callable, *, title: str, setup: str,
              on_trial: Callable[[dict], None] | None = None):
    """Run ``search(storage, on_trial)`` (a :class:`~promokit.experiments.tuning.TuneResult`: the study kept in the
    SQLite file ``storage``, continued when it holds one) and write the folder ``out``: ``params.json``, the best
    parameters, and ``report.md`` / ``report.json`` with every trial, under ``title`` with the ``setup`` line.
    Returns the result (``interrupted`` when Ctrl-C stopped the search: what finished is written)."""
    import pandas as pd

    from promokit.data.io import write_json
    from promokit.data.uris import local_dir
    from promokit.report import Report

    out = local_dir(out, "out")
    out.mkdir(parents=True, exist_ok=True)
    result = search(storage, on_trial or (lambda record: None))
    write_json(result.best_params, out / PARAMS)
    trials = pd.DataFrame(result.trials).set_index("trial")
    report = Report(title, data={"best_params": result.best_params, "best_score": result.best_score,
                                 "trials": result.trials, "interrupted": result.interrupted})
    report.add("Setup", f"{setup}; study {storage}").add("Trials", trials.astype(str)).write(out)
    return result


def tuned_params(tuned: str | os.PathLike | None, names: Sequence[str]) -> dict[str, dict]:
    """The parameters a tuning study wrote for each model of ``names``: ``tuned/<model>/params.json`` (``{}`` when
    ``tuned`` is None). Every model must have been tuned, with as many finished trials (complete or pruned, from its
    ``report.json``) as the others; else a one-line error naming ``tuned``."""
    if tuned is None:
        return {}
    folder = Path(tuned)
    if not folder.is_dir():
        raise DataError(f"`tuned` {folder}: no such folder")
    found = {name: _read_params(folder / name / PARAMS) for name in names if (folder / name / PARAMS).is_file()}
    if not found:
        raise DataError(f"`tuned` {folder}: none of {list(names)} has a {PARAMS} (expected {folder}/<model>/{PARAMS})")
    untuned = [name for name in names if name not in found]
    if untuned:
        raise DataError(f"`tuned` {folder}: {untuned} have no {PARAMS} while {sorted(found)} do; a tuned comparison "
                        f"gives every model, the floor included, the same search (tune {untuned[0]} into "
                        f"{folder}/{untuned[0]} with as many `trials` as the others)")
    budgets = {name: _finished_trials(folder / name / "report.json") for name in names}
    if len(set(budgets.values())) > 1:
        raise DataError(f"`tuned` {folder}: the models had different searches (finished trials: "
                        f"{', '.join(f'{k} {v}' for k, v in budgets.items())}); tune each with the same `trials`")
    return found


def _read_params(path: Path) -> dict:
    """The JSON object of parameters in ``path``, or a one-line error naming ``tuned``."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"`tuned` {path} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise DataError(f"`tuned` {path} must hold a JSON object of parameters, got {type(value).__name__}")
    return value


def _finished_trials(report: Path) -> int | None:
    """Complete and pruned trials of a study's ``report.json`` (None without one: parameters not written by a
    study)."""
    if not report.is_file():
        return None
    try:
        trials = json.loads(report.read_text()).get("trials", [])
    except (ValueError, AttributeError):
        return None
    return sum(t.get("state") in ("complete", "pruned") for t in trials)

"""The value model's jobs on a dataset folder, as ``promokit value train / predict / evaluate / recalibrate`` run them:
train on one folder or on a dataset in parts, score a dataset into a folder, evaluate a model beside the floor, and
recalibrate a model directory on a later labelled period.

A dataset in parts (:mod:`promokit.value.parts`) runs on the executor it is given (made by the caller, never here;
``promokit.scale.make_executor``); a folder of whole tables runs in this process and leaves the executor unused.
"""

from __future__ import annotations

import tempfile
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import DataError, write_json, write_parquet
from promokit.data.part_scoring import means
from promokit.data.uris import as_path, local_dir
from promokit.report import Report
from promokit.training.recalibration import DEFAULT_METHOD, write_recalibration
from promokit.training.refit import unscored_refit
from promokit.value.contract import read_folder, table_paths
from promokit.value.defaults import DEFAULT_TRAIN, SCORE_CONTEXTS
from promokit.value.estimator import ValueModel, check_contexts, scoring_time
from promokit.value.evaluate import FLOOR, beside_floor
from promokit.value.parts import PartValues, in_parts, predict_parts, score_stats, train_parts
from promokit.value.scoring import event_times, read_users_list, scoring_notes, time_text

ROLES = ("train", "valid", "test")


@dataclass(frozen=True)
class Trained:
    """What :func:`train` did: whether the dataset was in parts, its deliveries per role (``train``, ``valid``,
    ``test``), the tables' counts worth saying (rows of unknown users dropped, labels repaired) and what it held out
    for evaluate (None: nothing)."""

    in_parts: bool
    rows: dict[str, int]
    counts: dict[str, int]
    held_out: str | None


def train(estimator: ValueModel, data, executor, *, validation: float | None = None, checkpoint_dir=None,
          resume: bool = False, repair_labels: bool = False, types: dict[str, str] | None = None) -> Trained:
    """Fit ``estimator`` on the dataset folder ``data``: its tables whole (:meth:`ValueModel.fit`), or a dataset in
    parts part by part on ``executor`` (:func:`~promokit.value.parts.train_parts`), validating on the fraction
    ``validation`` of the deliveries not held out (None: ``fit``'s default). ``checkpoint_dir`` keeps the epoch
    checkpoint (``resume``: continue from it); ``repair_labels`` and ``types`` (column → type of an inferred
    feature) are :func:`~promokit.value.contract.check_tables`'."""
    paths = table_paths(data)
    if in_parts(paths):
        with nullcontext(checkpoint_dir) if checkpoint_dir is not None else tempfile.TemporaryDirectory() as where:
            counts = train_parts(estimator, paths, _executor(executor, data), Path(where) / "user-keys", validation,
                                 checkpoint_dir, resume, repair_labels, types)
        rows = {role: counts.pop(role) for role in ROLES}
    else:
        tables = read_folder(data, True, repair_labels, None, types, estimator.labels)
        rows = dict(zip(ROLES, map(len, estimator.split_rows(tables, validation))))
        estimator.fit(tables, validation=validation, checkpoint_dir=checkpoint_dir, resume=resume)
        counts = {what: n for what, n in tables.counts.items()
                  if what.endswith("(dropped)") and n or what.startswith("repaired")}
    rule = (f"the latest {estimator.test_fraction:.0%} by time" if estimator.split == "time" else
            f"drawn at random, seed {estimator.train_config.seed}")
    held = f"{rows['test']:,} of {estimator.holdout_['rows']:,} deliveries ({rule})" if rows["test"] else None
    return Trained(in_parts(paths), rows, counts, held)


@dataclass(frozen=True)
class Prediction:
    """What :func:`predict` wrote: the ``summary`` (also in summary.json), where the ETV table is (``scores``:
    scores.parquet, or scores/ of parts), whether the dataset was in parts, and what to know of the scoring time."""

    summary: dict
    scores: Path
    in_parts: bool
    notes: tuple[str, ...] = ()


def predict(model, data, out, executor, *, at=None, contexts: int = SCORE_CONTEXTS, users_list=None) -> Prediction:
    """Score the dataset folder ``data`` with the model directory ``model`` into the folder ``out``: the ETV of every
    user × fund (or of the users of the table ``users_list``, in its order) as of ``at`` (None: just after the
    latest delivery) in ``contexts`` drawn delivery contexts, the outputs of every delivery, and summary.json. A
    dataset in parts is scored part by part on ``executor`` into ``scores/`` and ``deliveries/``; without
    deliveries, users × funds are scored in the contexts the model kept from its training deliveries. ``data`` and
    ``out`` may be URIs (:mod:`promokit.data.uris`)."""
    check_contexts(contexts)
    out = as_path(out)
    paths = table_paths(data, deliveries_optional=True)
    if in_parts(paths):
        if users_list is not None or "deliveries" not in paths:
            raise DataError(f"{data} holds parts: `users_list` and scoring without deliveries/ serve a dataset in one "
                            "folder")
        name, values = predict_parts(Path(model), paths, out, _executor(executor, data), at, contexts)
        scores, notes = out / "scores", ()
    else:
        estimator = ValueModel.load(model)
        tables = read_folder(data, False, specs=estimator.feature_specs_)
        values, notes = _predict_folder(estimator, tables, out, at, contexts, users_list)
        name, scores = estimator.model, out / "scores.parquet"
    summary = prediction_summary(name, values)
    write_json(summary, out / "summary.json")
    return Prediction(summary, scores, in_parts(paths), tuple(notes))


def _predict_folder(estimator: ValueModel, tables, out: Path, at, contexts: int, users_list
                    ) -> tuple[list[PartValues], list[str]]:
    """:func:`predict` on one folder: the scores of every user (or of the listed ones) as of ``at``, the outputs of
    every delivery when there are deliveries, and notes on the behaviours the scoring time reads."""
    users = None if users_list is None else read_users_list(users_list, tables)
    times = event_times(tables)
    when = scoring_time(times, at)
    scores = estimator.score_table(tables, when, contexts, users=users)
    write_parquet(scores, out / "scores.parquet")
    notes = []
    if len(tables.deliveries):
        write_parquet(estimator.predict(tables), out / "deliveries.parquet")
    else:
        notes.append("no deliveries table: users × funds scored in the delivery contexts the model kept")
    notes.append(f"scored as of {time_text(when)}" if at or not len(times) else
                 f"scored just after the latest event, {time_text(times.max())}")
    if estimator.encoders_.max_len:  # a model trained without behaviours reads none
        notes += scoring_notes(tables, when, at is not None, estimator.trained_until_)
    return [score_stats(scores, len(tables.deliveries))], notes


def prediction_summary(model: str, values: list[PartValues]) -> dict:
    """summary.json of :func:`predict` from the :class:`~promokit.value.parts.PartValues` of one table or of every
    part: the mean ETV per fund over every user and each fund's share of the users whose highest ETV it is."""
    etv = pd.Series(means([v.etv for v in values]), dtype="float64")
    best = pd.DataFrame([v.best for v in values]).sum()
    users = sum(v.etv.rows for v in values)
    share = (best[best > 0] / users).sort_values(ascending=False, kind="stable")
    return {"model": model, "users": users, "funds": [c.removeprefix("score_") for c in etv.index],
            "mean_etv": etv.round(6).to_dict(), "deliveries": sum(v.deliveries for v in values),
            "best_fund_share": share.round(4).to_dict()}


@dataclass
class FloorEvaluation:
    """What :func:`evaluate` gives: the report to write (report.md, report.json, deciles.png), its title line, the
    metrics beside the floor's, the calibration per fund, and whether the floor is missing because every delivery was evaluated (none is
    left to fit it on)."""

    report: Report
    title: str
    table: pd.DataFrame
    funds: pd.DataFrame
    floor_missing: bool


def evaluate(model, data, *, all_rows: bool = False, repair_labels: bool = False,
             labels: dict[str, str] | None = None, floor=None, held_out_evaluation=None) -> FloorEvaluation:
    """Evaluate the model directory (or :class:`ValueModel`) ``model`` on the dataset folder ``data``: on the
    deliveries it held out (every one with ``all_rows``), read with the label columns ``labels`` (default: those it
    was trained with), beside the floor (:data:`~promokit.value.evaluate.FLOOR`) — the model directory ``floor``,
    else one fitted on the deliveries the model trained and validated on, without a refit (none for the floor
    itself, or with ``all_rows``).

    A model refit on every delivery (:mod:`promokit.training.refit`) has learnt the held-out deliveries too: its
    held-out metrics and tables are those train scored before the refit (:meth:`ValueModel.held_out_evaluation`),
    found by ``held_out_evaluation(model, tables)`` (default: the model's own, for
    the label columns it was trained with); None from it scores the deliveries with the model. So is a refit floor
    directory ``floor``'s. A model refit over parts kept none (:func:`~promokit.training.refit.unscored_refit`):
    the default warns that the deliveries it scores were learnt."""
    from promokit.metrics.value import decile_figure

    estimator = model if isinstance(model, ValueModel) else ValueModel.load(model)
    tables = read_folder(data, True, repair_labels, estimator.feature_specs_,
                         labels=estimator.labels if labels is None else labels)
    rows = None if all_rows else _held_out(estimator, tables)
    if held_out_evaluation is None:
        def held_out_evaluation(fitted, read):
            unscored = unscored_refit(fitted.holdout_)
            if unscored:
                warnings.warn(unscored, stacklevel=3)
            return fitted.held_out_evaluation(read) if labels in (None, fitted.labels) else None
    stored = None if all_rows else held_out_evaluation(estimator, tables)
    floor_model = _floor(estimator, tables, floor, all_rows)
    floor_metrics = None
    if floor_model is not None:
        floor_stored = None if all_rows or not (floor_model.holdout_ or {}).get("refit") else \
            _stored_floor(floor_model, tables, rows)
        floor_metrics = dict(floor_stored if floor_stored is not None else floor_model.evaluate(tables, rows=rows))
    evaluation = stored if stored is not None else estimator.evaluate(tables, rows=rows)
    metrics = dict(evaluation)
    deciles, funds = evaluation.tables["decile_calibration"], evaluation.tables["calibration_per_fund"]
    table = beside_floor(metrics, floor_metrics)
    report = Report(evaluation.title, data={
        "model": estimator.model, "metrics": metrics, "floor": floor_metrics,
        "deciles": deciles.to_dict(orient="records"), "funds": funds.to_dict(orient="records")})
    report.add("Metrics" + ("" if floor_metrics is None else " (floor: hurdle on the same deliveries)"), table)
    report.add("Decile calibration", deciles).add("Calibration per fund", funds)
    for name, other in evaluation.tables.items():  # pCTCVR against convert, by decile and by fund
        if name not in ("decile_calibration", "calibration_per_fund"):
            report.add(f"pCTCVR {name.replace('_', ' ')}", other)
            report.data[name] = other.to_dict(orient="records")
    report.figures["deciles"] = decile_figure(deciles, f"{estimator.model}: mean ETV and amount per decile")
    title = f"{estimator.model} on {metrics['deliveries']:,} " + (
        "held-out deliveries, scored before the refit on every delivery" if stored is not None else "deliveries")
    return FloorEvaluation(report, title, table, funds,
                           floor_missing=all_rows and floor is None and estimator.model != FLOOR)


def _stored_floor(floor: ValueModel, tables, rows: np.ndarray):
    """A refit floor directory's held-out metrics scored before its refit, when it held out these deliveries
    (``rows`` of ``tables``, the model's); else None."""
    try:
        if not np.array_equal(floor.held_out(tables), rows):
            return None
        return floor.held_out_evaluation(tables)
    except DataError:  # fitted on other data: score it
        return None


def recalibrate(model, data, *, start=None, method: str = DEFAULT_METHOD, repair_labels: bool = False,
                labels: dict[str, str] | None = None, by: str | None = None) -> dict:
    """Recalibrate the pCTCVR of the model directory ``model`` (:meth:`ValueModel.recalibrate`, ``method``; by
    ``fund`` with ``by="fund"``) on the
    labelled deliveries of the dataset folder ``data`` shown from ``start`` on (a time like the deliveries' — a date
    or a number: the latest labelled period; None: every delivery), read with the label columns ``labels`` (default:
    those it was trained with). Writes ``recalibration.json`` into ``model`` atomically, leaving the rest of the
    directory as it is, so ``predict`` and ``evaluate`` apply it. Returns what it was fitted on
    (:attr:`Recalibration.fitted_on`: ``rows``, ``positives``, ``rate`` observed, ``mean_p`` before and
    ``mean_p_after``; by fund also ``groups`` and ``own_maps``) with the ``method`` and ``by``."""
    local_dir(model, "model")  # the model directory it writes into: a local folder
    estimator = ValueModel.load(model)
    tables = read_folder(data, True, repair_labels, estimator.feature_specs_,
                         labels=estimator.labels if labels is None else labels)
    rows = None
    if start is not None:
        rows = np.flatnonzero(tables.time >= scoring_time(tables.time, start, "`start`"))
        if not len(rows):
            raise DataError(f"`start` {start}: no delivery is shown from then on; the latest is at "
                            f"{time_text(tables.time.max())}")
    estimator.recalibrate(tables, method=method, rows=rows, by=by)
    write_recalibration(model, estimator.recalibration_)
    return {"method": method, "by": by, **estimator.recalibration_.fitted_on}


def _held_out(estimator: ValueModel, tables):
    """The deliveries ``estimator`` held out of ``tables``, or an error that says how to evaluate every one."""
    if not (estimator.holdout_ or {}).get("test_fraction"):
        raise DataError("the model held nothing out (trained with test_fraction=0, or before the hold-out was "
                        "kept): evaluate data it did not train on with `all_rows`")
    try:
        return estimator.held_out(tables)
    except DataError as exc:
        raise DataError(f"{exc} with `all_rows`") from None


def _floor(estimator: ValueModel, tables, path, all_rows: bool) -> ValueModel | None:
    """The floor shown beside ``estimator``: the model directory ``path``, else one fitted on the deliveries
    ``estimator`` trained and validated on, not refit (none with ``all_rows``, or for the floor itself)."""
    if path is not None:
        floor = ValueModel.load(path)
        if floor.model != FLOOR:
            raise DataError(f"`floor` {path}: holds the model {floor.model!r}, not the floor {FLOOR!r}")
        return floor
    if estimator.model == FLOOR or all_rows:
        return None
    floor = ValueModel(FLOOR, train=replace(DEFAULT_TRAIN, seed=estimator.train_config.seed), split=estimator.split,
                       test_fraction=estimator.test_fraction, refit=False)  # scored on the held-out rows: unseen
    return floor.fit(tables, validation=estimator.holdout_["valid_fraction"])


def _executor(executor, data):
    """The executor a dataset in parts runs on, or a one-line error when none was given."""
    if executor is None:
        raise DataError(f"`data` {data} is a dataset in parts: give the `executor` that runs it "
                        "(promokit.scale.make_executor())")
    return executor

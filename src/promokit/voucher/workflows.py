"""The voucher model's jobs on files, as ``promokit voucher train``, ``predict`` and ``recalibrate`` run them: fit a
model on tables read from files and write its directory; score sessions (one table, or a table in parts:
:mod:`promokit.voucher.parts`) into a folder; recalibrate a model directory on labelled sessions."""

from __future__ import annotations

import tempfile
from pathlib import Path

from promokit.data import DataError, write_json, write_parquet
from promokit.data.part_scoring import means
from promokit.data.parts import is_partitioned
from promokit.data.uris import as_path, local_dir
from promokit.training.recalibration import DEFAULT_METHOD, write_recalibration
from promokit.training.refit import refit_after_selection
from promokit.voucher.contract import agreed_options, read_tables
from promokit.voucher.history import as_time, sessions_from
from promokit.voucher.parts import Reading, output_columns, predict_parts


def train(estimator, files: dict, out: Path, *, validation=None, labels: dict | None = None, checkpoint_dir=None,
          resume: bool = False, executor=None, **options):
    """Fit ``estimator`` (a :class:`~promokit.voucher.estimator.VoucherModel`) on the labelled tables of ``files``
    (table name → path) read with ``options`` and the label's column ``labels``
    (:func:`~promokit.voucher.contract.read_tables`), validating on ``validation`` and keeping the epoch checkpoint
    in ``checkpoint_dir`` (``resume``: continue from it), as :meth:`~VoucherModel.fit` does; write it as the model
    directory ``out``. Sessions in parts (a directory or glob of Parquet parts, the events in as many) train part by
    part on ``executor`` (:func:`~promokit.voucher.train_parts.train_parts`; made by the caller), then, with the
    estimator's ``refit``, over the parts again on every session with the epochs chosen (the held-out sessions'
    metrics before that refit are not kept: train with ``refit=False`` to score them). Returns the fitted
    estimator."""
    if is_partitioned(files["sessions"]):
        from promokit.voucher.train_parts import check_trains_over_parts, train_parts

        check_trains_over_parts(estimator)  # before a Ray cluster starts
        if executor is None:
            raise DataError(f"`sessions` {files['sessions']} is a table in parts: give the `executor` that trains "
                            "over it (promokit.scale.make_executor())")
        def over_parts(model, scratch, validation=validation, checkpoint_dir=checkpoint_dir, resume=resume):
            return train_parts(model, files["sessions"], files["events"], files["items"], files.get("voucher_items"),
                               executor, Path(scratch) / "keys", options={**options, "labels": labels},
                               validation=validation, checkpoint_dir=checkpoint_dir, resume=resume)

        with tempfile.TemporaryDirectory(prefix="promokit-user-keys-") as scratch:
            over_parts(estimator, scratch)
            # over the parts again, validating on nothing; the held-out sessions are not read whole to be scored
            # first, so no held-out metrics are kept
            refit_after_selection(estimator, None, None, fit=lambda twin: over_parts(twin, scratch, 0.0, None, False))
    else:
        if executor is not None and executor.name != "local":
            raise DataError(f"`executor` {executor.name} trains over a table in parts: give `sessions` as a directory "
                            "or glob of Parquet parts (and `events` in as many parts)")
        tables = read_tables(files, require_labels=True, labels=labels, **options)
        estimator.fit(tables, validation=validation, checkpoint_dir=checkpoint_dir, resume=resume)
    estimator.save(out)
    return estimator


def predict(model: Path, sessions: Path, items: Path, out: Path, *, events: Path | None = None,
            voucher_items: Path | None = None, validity=None, start=None, executor=None,
            file: Path | None = None, **options) -> tuple[int, Path]:
    """Score the sessions of the files ``sessions`` (one table, or a table in parts: the module docstring) with the
    model directory ``model``, from ``start`` on (a time; None: every session), the tables read as its training
    tables were (``options`` given must agree: :meth:`VoucherModel.read`). Writes ``predictions.parquet`` (in
    parts: ``predictions/``, part *k* from sessions part *k*) and ``summary.json`` into the folder ``out``, or, in
    the deprecated form, the predictions into ``file`` (in parts: that folder, with the summary beside it); ``out``
    and the tables in parts may be URIs (:mod:`promokit.data.uris`). A table
    in parts is scored on ``executor`` (``promokit.scale.make_executor``; made by the caller); one table in this
    process. Returns the predictions' count and where they were written."""
    out = as_path(out)
    from promokit.voucher.estimator import VoucherModel

    estimator = VoucherModel.load(model)
    if is_partitioned(sessions):
        options = {**agreed_options(estimator.table_options_, **options), "validity": validity,
                   "labels": estimator.labels_}
        reading = Reading(model, items, voucher_items, options, None if start is None else as_time("start", start))
        if executor is None:
            raise DataError(f"`sessions` {sessions} is a table in parts: give the `executor` that scores it "
                            "(promokit.scale.make_executor())")
        written = file or out / "predictions"
        parts = predict_parts(executor, reading, sessions, events, written)
        rows, averages = sum(p.rows for p in parts), means(parts)
        write_json({"rows": rows, "parts": len(parts), "executor": executor.name, "model": estimator.model,
                    "outputs": list(averages), "means": averages},
                   file.with_suffix(".json") if file else out / "summary.json")
        return rows, written
    if executor is not None and executor.name != "local":
        raise DataError(f"`executor` {executor.name} scores a table in parts: give `sessions` as a directory or glob "
                        "of Parquet parts (and `events` in as many parts)")
    files = {"sessions": sessions, "events": events, "items": items, "voucher_items": voucher_items}
    tables = estimator.read(files, validity=validity, **options)
    predictions = estimator.predict(tables, rows=sessions_from(tables.sessions, start))
    written = write_parquet(predictions, file or out / "predictions.parquet")
    if file is None:
        averages = {c: float(predictions[c].mean()) for c in output_columns(predictions)}
        write_json({"rows": len(predictions), "parts": 1, "model": estimator.model, "outputs": list(averages),
                    "means": averages}, out / "summary.json")
    return len(predictions), written


def recalibrate(model: Path, sessions: Path, items: Path, *, events: Path | None = None,
                voucher_items: Path | None = None, validity=None, start=None, method: str = DEFAULT_METHOD,
                by: str | None = None, labels: dict | None = None, **options) -> dict:
    """Recalibrate the model directory ``model`` (:meth:`VoucherModel.recalibrate`, ``method``; by the sessions
    column ``by``, one map per value, when given) on the labelled sessions of the files ``sessions`` collected from
    ``start`` on (a time: the latest labelled period; None: every session), the tables read as its training tables
    were (``labels``: the label's column, as in ``evaluate``). Writes ``recalibration.json`` into ``model``
    atomically, leaving the rest of the directory as it is, so ``predict`` and ``evaluate`` apply it. Returns what it
    was fitted on (:attr:`Recalibration.fitted_on`: ``rows``, ``positives``, ``rate`` observed, ``mean_p`` before
    and ``mean_p_after``; by group also ``groups`` and ``own_maps``, the groups with a map of their own) with the
    ``method`` and ``by``."""
    local_dir(model, "model")  # the model directory it writes into: a local folder
    from promokit.voucher.estimator import VoucherModel

    estimator = VoucherModel.load(model)
    files = {"sessions": sessions, "events": events, "items": items, "voucher_items": voucher_items}
    tables = estimator.read(files, require_labels=True, validity=validity, labels=labels, **options)
    estimator.recalibrate(tables, method=method, rows=sessions_from(tables.sessions, start), by=by)
    write_recalibration(model, estimator.recalibration_)
    return {"method": method, "by": by, **estimator.recalibration_.fitted_on}

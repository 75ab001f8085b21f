"""The conversion model's jobs on files, as ``promokit conversion predict`` and ``recalibrate`` run them: score a
table (one file, or a directory or glob of parts) into a folder; recalibrate a model directory on a labelled table.
Training on files is :meth:`ConversionModel.fit` itself (``executor=`` for a table in parts)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

from promokit.conversion.estimator import ConversionModel
from promokit.data import write_json
from promokit.data.part_scoring import means, score_parts
from promokit.data.parts import is_partitioned
from promokit.data.uris import as_path, local_dir
from promokit.training import read_model_config
from promokit.training.recalibration import DEFAULT_METHOD, write_recalibrations


def predict(model: str | os.PathLike, data, out: str | os.PathLike, executor, *, keep: list[str] | None = None,
            file: str | os.PathLike | None = None) -> tuple[dict, Path]:
    """Score the table ``data`` with the model directory ``model`` on ``executor`` (``promokit.scale.make_executor``;
    one part after another in this process, or on Ray) into the folder ``out``: ``predictions.parquet`` (in parts:
    ``predictions/``, part *k* from input part *k*) with the key columns or ``keep``, and ``summary.json``; in the
    deprecated form, the predictions into ``file`` and the summary beside it. Returns the summary and where the
    predictions are."""
    written = as_path(file) if file else as_path(out) / ("predictions" if is_partitioned(data) else
                                                         "predictions.parquet")
    summary = predict_parts(model, data, written, executor, keep)
    write_json(summary, written.with_suffix(".json") if file else as_path(out) / "summary.json")
    return summary, written


def recalibrate(model: str | os.PathLike, data, *, method: str = DEFAULT_METHOD,
                labels: dict[str, str] | None = None) -> dict[str, dict]:
    """Recalibrate the model directory ``model`` (:meth:`ConversionModel.recalibrate`, ``method``) on every row of the
    labelled table ``data`` (a later period than the training one; ``labels``: role → column, as in ``evaluate``).
    Writes ``recalibration.json`` into ``model`` atomically, leaving the rest of the directory as it is, so
    ``predict`` and ``evaluate`` apply it. Returns, per probability fitted, what it was fitted on
    (:attr:`Recalibration.fitted_on`: ``rows``, ``positives``, ``rate`` observed, ``mean_p`` before and
    ``mean_p_after``)."""
    local_dir(model, "model")  # the model directory it writes into: a local folder
    from promokit.conversion.estimator import ConversionModel

    estimator = ConversionModel.load(model).recalibrate(data, method=method, labels=labels)
    write_recalibrations(model, estimator.recalibrations_)
    return {name: r.fitted_on for name, r in estimator.recalibrations_.items()}


def predict_parts(model: str | os.PathLike, data, out: str | os.PathLike, executor,
                  keep: list[str] | None = None) -> dict:
    """Score the table at ``data`` (one file, or a directory or glob of parts) with the model directory ``model``
    on ``executor``, part by part, into ``out`` (a file for one file, else ``out/part-NNNNN.parquet`` from input part
    k): :meth:`ConversionModel.predict`'s columns, with ``keep``. Returns the summary: rows, parts, executor, model,
    the output columns and their means."""
    name = read_model_config(model, "conversion")["model"]  # a bad directory fails before any work starts
    parts = score_parts(executor, partial(ConversionModel.load, model), partial(ConversionModel.predict, keep=keep),
                        data, out)
    averages = means(parts)
    outputs = [c for c in averages if c.startswith("p_")]
    return {"rows": sum(p.rows for p in parts), "parts": len(parts), "executor": executor.name, "model": name,
            "outputs": outputs, "means": {c: averages[c] for c in outputs}}

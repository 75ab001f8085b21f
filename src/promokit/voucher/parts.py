"""``voucher predict`` over tables in parts: sessions part *k* and events part *k* → predictions part *k*.

A session is scored from its own behaviour graph and its user's earlier redeemed sessions (the history, DMBGN
§3.5), so a part can be scored alone when it holds every session of its users: the sessions are partitioned by
**user**, and part *k* of the events (keyed by ``session_id`` or ``user_id``) holds the events of sessions part
*k* — the same number of parts, paired in sorted path order. Checked before any part is scored: a user in two
sessions parts (or in two parts of a user-level log) is a one-line error naming both files; per part, the contract
refuses an event of a session that is not in the paired sessions part. (A user-level log partitioned by user
otherwise than the sessions is not detected: its users' events would be ignored, as a one-file log's events of
users without sessions are.) The reference tables (items, voucher_items) are single files read once per worker,
with the model (the executor's ``setup``). Each part is validated by the contract's :func:`check_tables` and
scored by :meth:`VoucherModel.predict`, so its rows are the one-file predict's for those sessions, in the same
order (by collection time).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.data import DataError, read_table
from promokit.data.io import write_part
from promokit.data.part_keys import check_unique_keys
from promokit.data.part_scoring import PartScore
from promokit.data.parts import is_partitioned, list_parts, parquet_schema, part_name, read_part
from promokit.data.uris import begin_parts, finish_parts, scratch_dir
from promokit.voucher.contract import check_tables


@dataclass(frozen=True)
class Reading:
    """What every worker needs to read and score a part: the model directory, the reference tables' files,
    the :func:`check_tables` options (``categorical``, ``numeric``, ``terms``, ``item_features``, ``validity``,
    ``labels``) and ``start``, the collection time scored from (None: every session)."""

    model: Path
    items: Path
    voucher_items: Path | None
    options: dict
    start: pd.Timestamp | None = None


@dataclass
class Scorer:
    """One worker's state: the loaded model and the reference tables, read once."""

    reading: Reading
    model: object
    items: pd.DataFrame
    voucher_items: pd.DataFrame | None


def reference_tables(reading: Reading) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The items and voucher_items tables (each one file, or one table in parts read whole)."""
    return read_table(reading.items), read_table(reading.voucher_items) if reading.voucher_items else None


def load(reading: Reading) -> Scorer:
    """The executor's ``setup``: the model directory and the reference tables, once per worker."""
    from promokit.voucher.estimator import VoucherModel

    return Scorer(reading, VoucherModel.load(reading.model), *reference_tables(reading))


def pair_parts(sessions: Path, events: Path | None) -> list[tuple[Path, Path | None]]:
    """(sessions part, events part) pairs in sorted path order; the events must be in as many parts."""
    session_parts = list_parts(sessions)
    if events is None:
        return [(part, None) for part in session_parts]
    if not is_partitioned(events):
        raise DataError(f"sessions {sessions} is a table in parts: events must be in parts too, part k holding "
                        f"the events of sessions part k; got the single file {events}")
    event_parts = list_parts(events)
    if len(event_parts) != len(session_parts):
        raise DataError(f"sessions {sessions} has {len(session_parts)} parts and events {events} has "
                        f"{len(event_parts)} (from {event_parts[0]}): part k of the events holds the events of "
                        "sessions part k, so both need the same number of parts")
    return list(zip(session_parts, event_parts))


def check_users(executor, pairs: list[tuple[Path, Path | None]], scratch: Path) -> None:
    """A one-line error naming both files for a user in two sessions parts, or, in a user-level log, in two events
    parts (:func:`~promokit.data.part_keys.check_unique_keys`: the ``user_id`` columns hashed on the executor, with
    ``scratch`` as its folder)."""
    check_unique_keys([sessions for sessions, _ in pairs], "user_id", scratch, map_parts=executor.map)
    if pairs[0][1] is not None and _user_log(pairs[0][1]):
        check_unique_keys([events for _, events in pairs], "user_id", scratch, map_parts=executor.map)


def _user_log(path: Path) -> bool:
    """Whether an events part is a user-level log (``user_id``, no ``session_id``), from its Parquet schema."""
    try:
        columns = parquet_schema(path).names
    except (OSError, ValueError):
        columns = list(read_part(path).columns)  # a part that cannot be read: its one-line error
    return "session_id" not in columns and "user_id" in columns


def predict_parts(executor, reading: Reading, sessions: Path, events: Path | None, out: Path) -> list[PartScore]:
    """Score every (sessions, events) part pair into ``out/part-NNNNN.parquet`` on ``executor``, after checking the
    pairing, the users' partitioning and that the reference tables read (``out`` a URI: written part by part,
    :func:`~promokit.data.uris.begin_parts`, the users' hashes in a local temporary folder)."""
    pairs = pair_parts(sessions, events)
    reference_tables(reading)  # a missing or unreadable items table fails here, not in every worker's setup
    out.mkdir(parents=True, exist_ok=True)
    with scratch_dir(out, ".user-keys") as scratch:
        check_users(executor, pairs, scratch)
    jobs = [(k, sessions_part, events_part, out) for k, (sessions_part, events_part) in enumerate(pairs)]
    begin_parts(out)
    scores = executor.map(score_part, jobs, setup=partial(load, reading), label="scoring parts")
    finish_parts(out, [part_name(k) for k in range(len(jobs))], [s.rows for s in scores])
    return scores


def score_part(scorer: Scorer, job: tuple[int, Path, Path | None, Path]) -> PartScore:
    """Validate part pair *k* with the contract, score its sessions (from ``reading.start`` on) and write output
    part *k*."""
    k, sessions, events, out = job
    reading = scorer.reading
    session_frame, event_frame = read_part(sessions), read_part(events) if events else None
    with naming_parts({"sessions": sessions, "events": events, "items": reading.items,
                       "voucher_items": reading.voucher_items}):
        tables = check_tables(session_frame, event_frame, scorer.items, **reading.options, require_labels=False,
                              voucher_items=scorer.voucher_items)
    collect = tables.sessions["collect_time"]
    rows = np.flatnonzero(collect >= reading.start) if reading.start is not None else np.arange(len(collect))
    predictions = scorer.model.predict(tables, rows=rows)
    write_part(predictions, out, k)
    return PartScore(len(predictions), {c: float(predictions[c].sum()) for c in output_columns(predictions)})


def output_columns(predictions: pd.DataFrame) -> list[str]:
    """The scores of :meth:`VoucherModel.predict`'s frame, without its keys: ``p_redeem``, and ``p_redeem_raw`` for a
    recalibrated model."""
    return [c for c in predictions.columns if c.startswith("p_")]


@contextmanager
def naming_parts(files: dict[str, Path | None]):
    """Prefix a contract error with the file of the table it names (``events: …`` → the events part, followed by
    its sessions part), else with the sessions part."""
    try:
        yield
    except DataError as exc:
        message = str(exc)
        table = message.split(":", 1)[0]
        if table == "events":
            message += f" (the events part paired with {files['sessions']})"
        raise DataError(f"{files.get(table) or files['sessions']}: {message}") from None

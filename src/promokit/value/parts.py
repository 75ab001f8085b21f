"""A value dataset in parts, predicted part by part on an engine (``value predict --data DIR --engine local|ray``).

Layout: the user-keyed tables — ``users``, ``deliveries`` and the optional ``behaviors`` and ``consumption`` — are
each a directory of Parquet parts, co-partitioned by user: part k of each (its k-th file in sorted path order) holds
the rows of the same users. ``funds`` stays one table every part shares. The dataset means the one-folder dataset
whose tables are its parts concatenated in order, and predicting it gives that dataset's outputs, part by part:

1. checks: every user-keyed directory has as many parts as ``users/``, and each user is in one part
   (:func:`promokit.scale.keys.check_unique_keys`, hashed on the engine);
2. a map reads each part's delivery times: their counts and latest times give the scoring time (just after the
   latest delivery of any part, as one folder) and the delivery rows whose contexts every pair is scored in
   (:func:`~promokit.value.estimator.draw_contexts` over all the deliveries; the driver reads those few rows);
3. a map with the model loaded once per worker (the engine's ``setup``): each part is validated by
   :func:`~promokit.value.contract.check_tables` (``part=True``: a row whose user is not in the part's users is an
   error) and scored by :meth:`ValueModel.score_table` and :meth:`ValueModel.predict_with_keys` into
   ``OUT/scores/part-k`` and ``OUT/deliveries/part-k``; only its sums travel back (:class:`PartValues`).

A model that reads the consumption graph (``esdpm``) is refused: a merchant joins users of different parts, so a
part alone does not hold its users' graph neighbourhoods.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import read_table
from promokit.scale.batch import PartScore, part_score
from promokit.scale.keys import check_unique_keys
from promokit.scale.parts import list_parts, naming, part_name, read_part, write_part
from promokit.value.contract import TIME, USER, ValueTables, check_tables, parse_times

if TYPE_CHECKING:  # the model (torch) is imported where a part is scored, not where its times are read
    from promokit.value.estimator import ValueModel

USER_KEYED = ("users", "deliveries", "behaviors", "consumption")
OUTPUTS = ("scores", "deliveries")  # the folders of OUT that parts are written to


@dataclass(frozen=True)
class ValuePart:
    """Part ``index`` of a dataset in parts: its file of each user-keyed table, the shared funds table and the
    output folder."""

    index: int
    files: dict
    funds: str
    out: str


@dataclass(frozen=True)
class PartTimes:
    """A part's deliveries: how many, the latest time (contract form) and its kind (None when it has none)."""

    rows: int
    latest: int | float | None
    kind: str | None


@dataclass(frozen=True)
class PartValues:
    """What a scored part reports: the rows and ``score_<fund>`` sums of its ETV table, per fund the users whose
    highest ETV it is, and its deliveries."""

    etv: PartScore
    best: dict
    deliveries: int


def in_parts(paths: dict[str, Path]) -> bool:
    """True when a user-keyed table of the dataset (:func:`~promokit.value.contract.table_paths`) is a directory."""
    return any(paths[name].is_dir() for name in USER_KEYED if name in paths)


def score_stats(scores: pd.DataFrame, deliveries: int) -> PartValues:
    """The :class:`PartValues` of an ETV table (``value predict``'s scores, one folder or one part)."""
    etv = scores[[c for c in scores.columns if c.startswith("score_")]]
    best = np.bincount(np.argmax(etv.to_numpy(), axis=1), minlength=etv.shape[1]) if len(etv) else \
        np.zeros(etv.shape[1], dtype=np.int64)
    return PartValues(part_score(etv), dict(zip(etv.columns, best.tolist())), deliveries)


def predict_parts(model: Path, paths: dict[str, Path], out: Path, engine, at, contexts: int
                  ) -> tuple[str, list[PartValues]]:
    """Score the dataset in parts at ``paths`` with the model directory ``model`` on ``engine`` into ``out`` as
    of ``at`` (None: just after the latest delivery) in ``contexts`` drawn delivery contexts (module docstring);
    return the model's name and each part's :class:`PartValues`."""
    from promokit.training import read_model_config
    from promokit.value.estimator import ValueModel

    config = read_model_config(model, "value")
    if config["params"]["graph"]:
        raise DataError(f"{model}: model {config['model']!r} reads the consumption graph, whose merchants join users "
                        f"of different parts, so a part cannot be scored alone; score the tables as one folder, or "
                        f"train a model without the graph (esdpm-ncg)")
    parts = _parts(paths, out)
    check_unique_keys([p.files["users"] for p in parts], USER, out / ".user-keys", map_parts=engine.map)
    times = engine.map(_times, parts, label="reading delivery times")
    score = partial(_score_part, _when(paths["deliveries"], parts, times, at), _contexts(parts, times, contexts))
    values = engine.map(score, parts, setup=partial(ValueModel.load, model), label="scoring parts")
    for folder in OUTPUTS:  # parts an earlier run with more input parts left there
        for stale in set((out / folder).glob("part-*.parquet")) - {out / folder / part_name(p.index) for p in parts}:
            stale.unlink()
    return config["model"], values


def _parts(paths: dict[str, Path], out: Path) -> list[ValuePart]:
    """Part k of every user-keyed table, checked to be directories of as many parts."""
    keyed = {name: paths[name] for name in USER_KEYED if name in paths}
    directory = next(path for path in keyed.values() if path.is_dir())
    for path in keyed.values():
        if not path.is_dir():
            raise DataError(f"{path}: one file, but {directory} is a directory of parts: in a dataset in parts every "
                            "user-keyed table (users, deliveries, behaviors, consumption) is a directory of parts, "
                            "co-partitioned by user")
    files = {name: list_parts(path) for name, path in keyed.items()}
    for name, listed in files.items():
        if len(listed) != len(files["users"]):
            raise DataError(f"{keyed[name]}: {len(listed)} parts, but {keyed['users']} has {len(files['users'])}: "
                            "part k of every user-keyed table holds the rows of the same users (co-partitioned by "
                            "user)")
    return [ValuePart(k, {name: str(listed[k]) for name, listed in files.items()}, str(paths["funds"]), str(out))
            for k in range(len(files["users"]))]


def _times(part: ValuePart) -> PartTimes:
    """A part's delivery times, its ``time`` column alone read."""
    path = part.files["deliveries"]
    try:
        frame = pd.read_parquet(path, columns=[TIME])
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: cannot read its 'time' column: "
                        f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
    if frame.empty:
        return PartTimes(0, None, None)
    with naming(path):
        time, kind = parse_times(frame, "deliveries", None)
    return PartTimes(len(time), time.max(), kind)


def _when(deliveries: Path, parts: list[ValuePart], times: list[PartTimes], at):
    """The scoring time of every part: ``at``, or just after the latest delivery of any part."""
    from promokit.value.estimator import scoring_time

    filled = [(part, t) for part, t in zip(parts, times) if t.rows]
    if not filled:
        raise DataError(f"{deliveries}: no deliveries in its {len(parts)} parts; pairs are scored in the contexts of "
                        "deliveries")
    first, kind = filled[0][0].files["deliveries"], filled[0][1].kind
    for part, t in filled[1:]:
        if t.kind != kind:
            raise DataError(f"{part.files['deliveries']}: column 'time' holds {t.kind}s but {first} holds {kind}s; "
                            "give every part times of one kind")
    return scoring_time(np.array([t.latest for _, t in filled]), at)


def _contexts(parts: list[ValuePart], times: list[PartTimes], contexts: int) -> pd.DataFrame:
    """The delivery rows :func:`draw_contexts` draws from every part's deliveries in order, read from their parts."""
    from promokit.value.estimator import draw_contexts

    counts = np.array([t.rows for t in times])
    ends = np.cumsum(counts)
    rows = draw_contexts(int(ends[-1]), contexts)
    owners = np.searchsorted(ends, rows, side="right")
    frames = {k: read_part(parts[k].files["deliveries"]) for k in set(owners.tolist())}
    return pd.concat([frames[k].iloc[[row - (ends[k] - counts[k])]] for k, row in zip(owners, rows)],
                     ignore_index=True)


def _score_part(when, context: pd.DataFrame, model: ValueModel, part: ValuePart) -> PartValues:
    """Validate and score one part at time ``when`` in the ``context`` rows; write its output parts."""
    tables = _read_part(part, model.specs)
    scores = model.score_table(tables, when, context_rows=context)
    deliveries = model.predict_with_keys(tables)
    for folder, frame in zip(OUTPUTS, (scores, deliveries)):
        write_part(frame, Path(part.out) / folder, part.index)
    return score_stats(scores, len(deliveries))


def _read_part(part: ValuePart, specs: dict) -> ValueTables:
    """A part's tables, validated; an error names the file of the table it is about."""
    frames = {name: read_part(path) for name, path in part.files.items()}  # a read error names the file
    funds = read_table(part.funds)
    try:
        return check_tables(frames["deliveries"], frames["users"], funds, frames.get("behaviors"),
                            frames.get("consumption"), require_labels=False, specs=specs, part=True)
    except DataError as exc:
        table = str(exc).split(":", 1)[0]
        files = {**part.files, "funds": part.funds, "context": part.files["deliveries"]}
        raise DataError(f"{files.get(table, part.files['users'])}: {exc}") from None

"""One part of a value dataset in parts (:mod:`promokit.value.parts`): its file of each user-keyed table —
``users``, ``deliveries`` and the optional ``behaviors`` and ``consumption``, co-partitioned by user — with the
shared ``funds`` table, and its tables read and validated as one folder's are."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from promokit.data.encoders import check_numeric_columns
from promokit.data.errors import DataError
from promokit.data.io import read_table
from promokit.data.parts import list_parts, read_part
from promokit.value.contract import ValueTables, check_tables

USER_KEYED = ("users", "deliveries", "behaviors", "consumption")


@dataclass(frozen=True)
class ValuePart:
    """Part ``index`` of a dataset in parts: its file of each user-keyed table, the shared funds table and the
    output folder (predict)."""

    index: int
    files: dict
    funds: str
    out: str | None = None


def dataset_parts(paths: dict[str, Path], out: Path | None = None) -> list[ValuePart]:
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
    return [ValuePart(k, {name: str(listed[k]) for name, listed in files.items()}, str(paths["funds"]),
                      str(out) if out is not None else None) for k in range(len(files["users"]))]


def read_part_tables(part: ValuePart, specs: dict | None, require_labels: bool = False, repair: bool = False,
                     types: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> ValueTables:
    """A part's tables, validated (with the labels when ``require_labels``, read from the columns ``labels`` names;
    the features of ``specs``, else inferred with the ``types`` given); an error names the file of the table it is
    about."""
    frames = {name: read_part(path) for name, path in part.files.items()}  # a read error names the file
    funds = read_table(part.funds)
    try:
        tables = check_tables(frames["deliveries"], frames["users"], funds, frames.get("behaviors"),
                              frames.get("consumption"), require_labels=require_labels, repair_labels=repair,
                              specs=specs, part=True, types=types, labels=labels)
        for table, frame, spec in (("deliveries", tables.deliveries, tables.context_spec),
                                   ("users", tables.users, tables.user_spec)):
            try:
                check_numeric_columns(frame, spec.numeric)
            except DataError as exc:
                raise DataError(f"{table}: {exc}") from None
        return tables
    except DataError as exc:
        table = str(exc).split(":", 1)[0]
        files = {**part.files, "funds": part.funds, "context": part.files["deliveries"]}
        raise DataError(f"{files.get(table, part.files['users'])}: {exc}") from None

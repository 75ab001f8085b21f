"""A population's lookup built from its score table part by part: memory bounded by a few parts, whatever the rows.

:func:`spill` reads the table (a DataFrame, a file, or a directory or glob of Parquet parts) one part at a time,
checks each part as :func:`check_table` does, writes its rows sorted by id to a run file in a scratch folder,
appends them to the wide copy of the table, and accumulates the population's column sums and the campaign's
fingerprint. :func:`write_lookup` then merges the sorted runs k ways into ``ids.npy`` (sorted UTF-8 bytes),
``scores.npy`` (their rows, in that order) and ``mean.npy``, written sequentially, never mapped: what the service
memory-maps (:class:`promokit.campaign.directory.Population`). The merge holds about ``MERGE_ROWS`` rows over all runs.

A table read whole gives the same bytes as its parts: the ids and rows do not depend on where the parts split, the
column sums are summed row after row in the table's order (numpy's pairwise ``sum`` would group rows by part),
and the fingerprint hashes the whole table's ids (joined by newlines), then its scores' bytes, as the one-table
build did. An id in two parts is an error naming it and both parts (a long table keeps all of a user's rows in
one part). The mean is the sequential sum over the rows divided by their count, which may differ from numpy's
pairwise ``mean`` in the last bits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.allocation.tables import USER, BudgetTable, key_column, read_budget_table
from promokit.data.errors import DataError
from promokit.data.io import atomic_path, read_table, write_npy
from promokit.data.parts import is_partitioned, list_parts, naming, read_part

#: Rows the k-way merge holds at once, shared by the runs (each reads blocks of ``MERGE_ROWS // runs`` rows).
MERGE_ROWS = 1 << 18
WIDE = "wide.parquet"  # the wide copy of the table, in the scratch folder
#: Bytes of the spilled table-order scores hashed at a time.
HASH_BLOCK = 1 << 20


@dataclass
class Run:
    """One part's rows sorted by id, in a file of records (id, scores, the row in its part)."""

    path: Path
    part: str
    rows: int
    dtype: np.dtype


@dataclass
class Spilled:
    """One population's table after :func:`spill`: its sorted runs, the wide copy and the column sums."""

    population: str
    key: str
    runs: list[Run] = field(default_factory=list)
    rows: int = 0
    width: int = 1  # the longest id's UTF-8 bytes
    sums: np.ndarray | None = None
    wide: Path | None = None


def check_table(population: str, table: BudgetTable, levels, row_numbers: bool = False) -> None:
    """Levels as the plan's and scores on the population's scale: a customer's f_j is a redemption probability
    in [0, 1] (eq. 19); a merchant's is a normalised share count, shares / max(prior shares, 1), finite and
    ≥ 0 but not bounded by 1 (``incentive predict``'s merchant head; eq. 20 prices it as such). With
    ``row_numbers`` the message gives the bad row's number in a wide table as well."""
    if table.value is not None or table.cost is not None:
        raise DataError(f"the {population} score table has value_/cost_ columns; the service prices levels itself "
                        f"(value f, cost r·f) and takes score tables without them")
    if table.levels.tolist() != [float(x) for x in levels]:
        raise DataError(f"the {population} score table offers levels {table.levels.tolist()} but the budget plan "
                        f"was solved for {list(levels)}")
    scores = np.asarray(table.scores, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        if population == "merchant":
            bad, what = ~np.isfinite(scores) | (scores < 0), "a share that is missing, infinite or negative"
        else:
            bad, what = ~((scores >= 0) & (scores <= 1)), "a response probability outside [0, 1] or missing"
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        where = f" (row {row})" if row_numbers and table.layout == "wide" else ""
        raise DataError(f"the {population} score table has {int(bad.any(axis=1).sum())} rows with {what}, e.g. "
                        f"score_{table.levels[col]:g} = {float(scores[row, col])!r} for user_id "
                        f"{table.user_ids[row]!r}{where}")


def encode_ids(ids) -> np.ndarray:
    """Ids as UTF-8 bytes of one width (numpy's fixed-width strings: an id must not end with NUL)."""
    text = pd.Series(np.asarray(ids, dtype=object)).astype(str)
    trailing = text.str.endswith("\x00").to_numpy(dtype=bool)
    if trailing.any():  # numpy's fixed-width strings drop trailing NULs: "a\x00" would answer as "a"
        raise DataError(f"user_id {text[trailing].iloc[0]!r} ends with a NUL character; ids must not")
    return np.char.encode(text.to_numpy(dtype=str), "utf-8") if len(text) else np.zeros(0, dtype="S1")


def add_rows(sums: np.ndarray | None, scores: np.ndarray) -> np.ndarray:
    """``sums`` plus every row of ``scores``, added one row after the other (the same bits however the rows are
    split: a cumulative sum is sequential by definition)."""
    if sums is None:
        sums = np.zeros(scores.shape[1])
    return np.cumsum(np.vstack([sums, scores]), axis=0)[-1] if len(scores) else sums


def wide_frame(table: BudgetTable) -> pd.DataFrame:
    """The table in the wide layout of ``allocate budget --scores``: ``user_id, score_<level> …``."""
    columns = {f"score_{level:g}": table.scores[:, j] for j, level in enumerate(table.levels)}
    return pd.DataFrame({USER: table.user_ids.astype(str), **columns})


def spill(population: str, source, levels, scratch: Path, digest=None) -> Spilled:
    """First pass over one population's score table (a DataFrame, a file, or a directory or glob of Parquet parts):
    check each part, write its sorted run and its wide rows under ``scratch``, sum its columns, and feed
    ``digest`` (a hashlib object, or None) the population's name, its ids joined by newlines and its scores'
    bytes in the table's order. Empty parts are skipped; errors name the part (and the row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    scratch.mkdir(parents=True, exist_ok=True)
    spilled = Spilled(population, USER, wide=scratch / WIDE)
    hashed = scratch / "scores.bin"  # the scores in table order, hashed after every id
    with ExitStack() as stack:
        scores_file = stack.enter_context(open(hashed, "wb")) if digest is not None else None
        writer = None
        if digest is not None:
            digest.update(population.encode())
        for part, frame in _parts(source):
            with naming(part) if part != _FRAME else nullcontext():
                spilled.key = key_column(frame)
                table = read_budget_table(frame, key=spilled.key)
                check_table(population, table, levels, row_numbers=part != _FRAME)
                ids = encode_ids(table.user_ids)
            scores = np.ascontiguousarray(table.scores, dtype=np.float64)
            if digest is not None:
                text = "\n".join(table.user_ids.astype(str).tolist())
                digest.update((("\n" if spilled.rows else "") + text).encode())
                scores_file.write(scores.tobytes())
            spilled.sums = add_rows(spilled.sums, scores)
            spilled.width = max(spilled.width, ids.dtype.itemsize)
            spilled.runs.append(_write_run(scratch / f"run-{len(spilled.runs):05d}.bin", part, ids, scores))
            spilled.rows += len(ids)
            wide = pa.Table.from_pandas(wide_frame(table), preserve_index=False)
            if writer is None:
                writer = stack.enter_context(pq.ParquetWriter(spilled.wide, wide.schema))
            writer.write_table(wide.cast(writer.schema))
    if digest is not None:
        with open(hashed, "rb") as file:
            while block := file.read(HASH_BLOCK):
                digest.update(block)
        hashed.unlink()
    return spilled


_FRAME = "the table"  # how a DataFrame given as the table is named (its errors carry no file)


def _parts(source) -> Iterator[tuple[str, pd.DataFrame]]:
    """(name, rows) of each non-empty part of the table, in order; parts must share their columns."""
    if isinstance(source, pd.DataFrame):
        if source.empty:
            raise DataError(f"the table has no rows (columns: {list(source.columns)})")
        yield _FRAME, source.reset_index(drop=True)
        return
    if not is_partitioned(source):
        yield str(source), read_table(source)
        return
    files, columns, rows = list_parts(source), None, 0
    for file in files:
        with naming(file):
            frame = read_part(file)
        if columns is None:
            columns = list(frame.columns)
        elif set(frame.columns) != set(columns):
            raise DataError(f"{file}: columns {list(frame.columns)} differ from {columns} in {files[0]}: every part "
                            f"of a table has the same columns")
        if len(frame):
            rows += len(frame)
            yield str(file), frame
    if not rows:
        raise DataError(f"{source}: the table has no rows in its {len(files)} parts (columns: {columns})")


def _write_run(path: Path, part: str, ids: np.ndarray, scores: np.ndarray) -> Run:
    order = np.argsort(ids, kind="stable")
    records = np.empty(len(ids), dtype=_record(ids.dtype.itemsize, scores.shape[1]))
    records["id"], records["f"], records["row"] = ids[order], scores[order], order
    records.tofile(path)
    return Run(path, part, len(ids), records.dtype)


def _record(width: int, levels: int) -> np.dtype:
    return np.dtype([("id", f"S{width}"), ("f", "<f8", (levels,)), ("row", "<i8")])


def write_lookup(spilled: Spilled, folder: Path, merge_rows: int | None = None) -> None:
    """Merge the sorted runs into ``folder``'s ``ids.npy``, ``scores.npy`` and ``mean.npy``, each written
    atomically, and remove the runs; an id in two parts is an error naming it, both parts and its rows there."""
    ids_type = np.dtype(f"S{spilled.width}")
    levels = len(spilled.sums)
    block = max(1, (merge_rows or MERGE_ROWS) // len(spilled.runs))
    with ExitStack() as stack:
        files = {}
        for name, dtype, shape in (("ids", ids_type, (spilled.rows,)), ("scores", "<f8", (spilled.rows, levels))):
            tmp = stack.enter_context(atomic_path(folder / f"{name}.npy"))
            files[name] = stack.enter_context(open(tmp, "wb"))
            np.lib.format.write_array_header_1_0(files[name], {"descr": np.lib.format.dtype_to_descr(
                np.dtype(dtype)), "fortran_order": False, "shape": shape})
        for ids, scores in _merged(spilled, ids_type, block, stack):
            files["ids"].write(ids.tobytes())
            files["scores"].write(scores.tobytes())
        for file in files.values():
            file.close()  # before atomic_path renames it
    write_npy(spilled.sums / spilled.rows, folder / "mean.npy")
    for run in spilled.runs:
        run.path.unlink()


def _merged(spilled: Spilled, ids_type: np.dtype, block: int, stack: ExitStack) -> Iterator[tuple]:
    """The runs' rows in id order, a batch at a time: each batch every row up to the smallest last id of the
    runs' current blocks, which no row still on disk can precede."""
    files = [stack.enter_context(open(run.path, "rb", buffering=0)) for run in spilled.runs]  # noqa: SIM115
    heads: dict[int, tuple] = {}  # run → its current block: (ids, scores, rows in the part)

    def load(r: int) -> None:
        records = np.fromfile(files[r], dtype=spilled.runs[r].dtype, count=block)
        if len(records):
            heads[r] = (records["id"].astype(ids_type), records["f"], records["row"])

    for r in range(len(files)):
        load(r)
    while heads:
        bound = min(ids[-1] for ids, _, _ in heads.values())
        taken = []
        for r, (ids, scores, rows) in list(heads.items()):
            k = int(np.searchsorted(ids, bound, side="right"))
            taken.append((ids[:k], scores[:k], rows[:k], np.full(k, r)))
            if k == len(ids):
                del heads[r]
                load(r)
            else:
                heads[r] = (ids[k:], scores[k:], rows[k:])
        ids, scores, rows, owners = (np.concatenate(columns) for columns in zip(*taken))
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        twice = np.flatnonzero(ids[1:] == ids[:-1])
        if len(twice):
            i, rows, owners = int(twice[0]), rows[order], owners[order]
            _repeated(spilled, ids[i], (int(owners[i]), int(rows[i])), (int(owners[i + 1]), int(rows[i + 1])))
        yield ids, scores[order]


def _repeated(spilled: Spilled, key: bytes, first: tuple, second: tuple) -> None:
    (a, row_a), (b, row_b) = sorted([first, second])
    name = f"{spilled.key} {key.decode('utf-8')!r}"
    if a == b:
        raise DataError(f"{spilled.runs[a].part}: the {spilled.population} score table holds {name} twice "
                        f"(rows {row_a} and {row_b}); each id needs one row")
    raise DataError(f"{name} is in two parts, {spilled.runs[a].part} (row {row_a}) and {spilled.runs[b].part} "
                    f"(row {row_b}): each {spilled.key} must be in one part")

"""Batch scoring over a partitioned table on an executor (any object with ``map``, :mod:`promokit.scale.executor`):
input part *k* → output part *k*, keys in the input's row order.

The domain supplies two module-level callables: ``load()``, run once per worker (loads the model directory), and
``score(model, frame)``, the domain's own predict on one partition's rows. Workers read their part, score it
and write their output part themselves; only a few numbers per part (rows, column sums) travel back. Source and
``out`` may be URIs (:mod:`promokit.data.uris`): a directory written there is marked ``_SUCCESS`` last.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from promokit.data.io import write_parquet
from promokit.data.parts import is_partitioned, list_parts, naming, part_name, read_part
from promokit.data.uris import as_path, begin_parts, finish_parts


@dataclass(frozen=True)
class PartScore:
    """What one scored part reports back: its rows and the sum of each numeric output column."""

    rows: int
    sums: dict


def score_parts(executor, load: Callable, score: Callable, source: str | Path, out: str | Path,
                label: str = "scoring parts") -> list[PartScore]:
    """Score every part of ``source`` into ``out/part-NNNNN.parquet`` on ``executor``; a one-file ``source`` (a
    table of one part, which must have rows) is scored into the file ``out``."""
    if not is_partitioned(source):
        return executor.map(partial(_score_part, score), [(as_path(source), as_path(out), False)], setup=load,
                            label=label)
    jobs = [(part, as_path(out) / part_name(k), True) for k, part in enumerate(list_parts(source))]
    as_path(out).mkdir(parents=True, exist_ok=True)
    begin_parts(out)
    scores = executor.map(partial(_score_part, score), jobs, setup=load, label=label)
    finish_parts(out, [target.name for _, target, _ in jobs], [s.rows for s in scores])
    return scores


def means(scores: list[PartScore]) -> dict:
    """The mean of each numeric output column over every part's rows."""
    rows = sum(s.rows for s in scores)
    columns = scores[0].sums.keys() if scores else ()
    return {c: (sum(s.sums[c] for s in scores) / rows if rows else float("nan")) for c in columns}


def part_score(frame: pd.DataFrame) -> PartScore:
    """The rows of a scored part and the sum of each of its numeric columns (what :func:`means` averages)."""
    numeric = frame.select_dtypes(include=[np.number])
    return PartScore(len(frame), {c: float(numeric[c].sum()) for c in numeric.columns})


def _score_part(score: Callable, model, job: tuple[Path, Path, bool]) -> PartScore:
    source, target, allow_empty = job
    with naming(source):
        result = score(model, read_part(source, allow_empty=allow_empty))
    write_parquet(result.reset_index(drop=True), target)
    return part_score(result)


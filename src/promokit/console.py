"""The terminal, for the library and the CLI alike: a rich console on stdout or stderr, a table printed on it, and
the progress bar of a map over parts. Imports rich only when called."""

from __future__ import annotations


def get_console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def print_table(title: str, frame) -> None:
    """A DataFrame as a rich table (its named index becomes the first column): floats to 4 decimals, a column of
    whole numbers as counts (``11,556``). A table wider than the terminal folds its headers and cells onto more
    lines rather than cutting them to the same ``ctcvr_…``."""
    from rich.table import Table

    table = Table(title=title)
    frame = frame.reset_index() if any(name is not None for name in frame.index.names) else frame
    formats = [_cell_format(frame[column]) for column in frame.columns]
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(text(v) for text, v in zip(formats, row)))
    get_console().print(table)


def _cell_format(column):
    """How to print the cells of ``column``: counts when every number in it is whole, else 4 decimals."""
    import numpy as np
    import pandas as pd

    numbers = pd.to_numeric(column, errors="coerce") if column.dtype.kind in "fiu" else None
    whole = numbers is not None and numbers.notna().any() and bool(np.all(np.mod(numbers.dropna(), 1) == 0))

    def text(value) -> str:
        if isinstance(value, (float, np.floating)):
            if np.isnan(value):
                return "—"
            return f"{value:,.0f}" if whole else f"{value:.4f}"
        return f"{value:,}" if whole and isinstance(value, (int, np.integer)) else str(value)

    return text


def map_progress(label: str, total: int):
    """A transient progress bar on stderr for ``total`` items (none for a single item): description, bar,
    done/total and time elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=get_console(stderr=True), transient=True, disable=total <= 1)

"""The terminal, for the library and the CLI alike: a rich console on stdout or stderr, a table printed on it, and
the progress bar of a map over parts. Imports rich only when called."""

from __future__ import annotations


def get_console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


def print_table(title: str, frame) -> None:
    """A DataFrame as a rich table (its named index becomes the first column), floats to 4 decimals."""
    from rich.table import Table

    table = Table(title=title)
    frame = frame.reset_index() if any(name is not None for name in frame.index.names) else frame
    for column in frame.columns:
        table.add_column(str(column))
    for row in frame.itertuples(index=False):
        table.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row))
    get_console().print(table)


def map_progress(label: str, total: int):
    """A transient progress bar on stderr for ``total`` items (none for a single item): description, bar,
    done/total and time elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=get_console(stderr=True), transient=True, disable=total <= 1)

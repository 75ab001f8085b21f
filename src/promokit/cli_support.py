"""What every domain's commands share: one-line user errors and the console. Imports nothing heavy."""

from __future__ import annotations

from contextlib import contextmanager

import typer


@contextmanager
def user_errors():
    """Turn contract violations into one red line (never wrapped) and exit code 2, not a traceback."""
    from promokit.data.errors import DataError

    try:
        yield
    except DataError as exc:
        get_console(stderr=True).print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def get_console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)

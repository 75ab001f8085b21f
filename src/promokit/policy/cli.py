"""``promokit policy …``: judge plans and score tables on a randomized log."""

from __future__ import annotations

import typer

app = typer.Typer(help="Judge decisions on a randomized log: off-policy estimates of plans, uplift curves.",
                  no_args_is_help=True)

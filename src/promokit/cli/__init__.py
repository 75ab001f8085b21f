"""The ``promokit`` command: one module per noun mounts its sub-commands (``conversion``, ``voucher``, ``incentive``,
``value``, ``allocate``, ``policy``, ``campaign``; ``serve``), ``datasets`` the loader commands of the domains'
groups, ``options`` the options' typer types, ``support``, ``conventions`` and ``printing`` what the commands share.
The CLI parses, calls the library and prints; heavy libraries load inside the commands."""

from __future__ import annotations

import typer

from promokit import __version__
from promokit.cli import allocate, campaign, conversion, incentive, policy, serve, value, voucher

app = typer.Typer(help="promokit: predict responses to promotions and decide who gets which.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


def _print_version(value: bool) -> None:
    if value:
        print(f"promokit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", help="Print the version and exit.",
                                          callback=_print_version, is_eager=True)) -> None:
    """promokit: predict responses to promotions and decide who gets which."""


app.add_typer(conversion.app, name="conversion")
app.add_typer(allocate.app, name="allocate")
app.add_typer(voucher.app, name="voucher")
app.add_typer(incentive.app, name="incentive")
app.add_typer(value.app, name="value")
app.add_typer(policy.app, name="policy")
app.add_typer(campaign.app, name="campaign")
app.command("serve")(serve.serve)


def main() -> None:
    app()

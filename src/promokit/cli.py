"""The ``promokit`` command. Each domain mounts its sub-commands; heavy libraries load inside commands."""

from __future__ import annotations

import typer

from promokit import __version__

from promokit.allocation.cli import app as allocate_app
from promokit.campaign.cli import demo as campaign_demo
from promokit.conversion.cli import app as conversion_app
from promokit.incentive.cli import app as incentive_app
from promokit.policy.cli import app as policy_app
from promokit.serve.cli import campaign_app, serve
from promokit.value.cli import app as value_app
from promokit.voucher.cli import app as voucher_app

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


app.add_typer(conversion_app, name="conversion")
app.add_typer(allocate_app, name="allocate")
app.add_typer(voucher_app, name="voucher")
app.add_typer(incentive_app, name="incentive")
app.add_typer(value_app, name="value")
app.add_typer(policy_app, name="policy")
campaign_app.command("demo")(campaign_demo)
app.add_typer(campaign_app, name="campaign")
app.command("serve")(serve)


def main() -> None:
    app()


if __name__ == "__main__":
    main()

"""``promokit serve``: the decision service, serving a campaign directory (:mod:`promokit.cli.campaign` makes it)."""

from __future__ import annotations

import ipaddress
import os
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.cli.campaign import CampaignOpt
from promokit.cli.support import flags_in_errors, user_errors
from promokit.console import get_console
from promokit.data.durations import DURATION_FORMS, parse_duration
from promokit.serve.defaults import DEADLINE_SECONDS


def serve(campaign: CampaignOpt,
          ledger: Annotated[Optional[str], typer.Option("--ledger", help="sqlite:///FILE (default: ledger.sqlite in the campaign) or postgresql://USER@HOST/DB.")] = None,
          host: Annotated[str, typer.Option("--host", help="Address to bind; loopback unless you mean otherwise.")] = "127.0.0.1",
          port: Annotated[int, typer.Option("--port")] = 8000,
          workers: Annotated[int, typer.Option("--workers", help="Worker processes; they share the ledger.")] = 1,
          explore: Annotated[Optional[float], typer.Option("--explore", help="Replace the campaign's exploration share for this run (its seed stays the campaign's).")] = None,
          deadline: Annotated[str, typer.Option("--deadline", help=f"How long a decision or outcome may wait for the ledger before it answers 503 with Retry-After, nothing written ({DURATION_FORMS}; 0.3 is 300 ms).")] = f"{DEADLINE_SECONDS:g}"):
    """Serve real-time decisions (eqs. 19–20) under a hard cap on money at risk. Needs $PROMOKIT_API_TOKEN."""
    with user_errors(), flags_in_errors({"ledger_url": "--ledger"}):
        import uvicorn

        from promokit.data.errors import DataError
        from promokit.serve.app import DEADLINE_ENV, TOKEN_ENV, prepare_workers
        from promokit.serve.metrics import multiprocess_dir

        if not os.environ.get(TOKEN_ENV):
            raise DataError(f"set {TOKEN_ENV} to the bearer token clients must send with POST requests")
        if workers < 1 or not 0 < port < 65536:
            raise DataError(f"--workers must be ≥ 1 and --port in 1..65535, got {workers} and {port}")
        seconds = parse_duration(deadline, "--deadline").total_seconds()
        if seconds <= 0:
            raise DataError(f"--deadline must be longer than 0, got {deadline!r}")
        os.environ[DEADLINE_ENV] = repr(seconds)
        loaded, url = prepare_workers(campaign, ledger, explore)
        console = get_console()
        if not _loopback(host):
            console.print(f"[yellow]binding {host}: the service is reachable from other machines[/]")
        console.print(f"serving campaign {loaded.config.model_version} on http://{host}:{port} with {workers} "
                      f"worker(s), ledger {url.split('@')[-1]}, deadline {seconds * 1e3:g} ms"
                      + (f", exploring {loaded.config.explore:.2%} of subjects" if loaded.config.explore else ""))
        # request metrics summed over the workers, in a directory per port: a restart after kill -9 empties it
        with multiprocess_dir(Path(tempfile.gettempdir()) / f"promokit-metrics-{port}"):
            uvicorn.run("promokit.serve.app:app_from_environment", factory=True, host=host, port=port,
                        workers=workers, loop="uvloop", http="httptools", log_level="warning", access_log=False)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"

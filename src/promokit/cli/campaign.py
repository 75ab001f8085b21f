"""``promokit campaign …``: build, switch and export a campaign directory (what the decision service serves, and the
log its ledger leaves), and demo, the campaign demo: the main job end to end on the embedded synthetic world
(``make demo``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from promokit.campaign.defaults import (
    COLD_START,
    CURRENCY_EXPONENT,
    PACING_EVERY,
    PACING_GAIN,
    PACING_WINDOW,
    WHEN_EXHAUSTED,
)
from promokit.cli.options.common import RUNS, TABLE_HELP, TrainingFlags, runs_out_option
from promokit.cli.support import flags_in_errors, user_errors
from promokit.console import get_console
from promokit.data.durations import DURATION_FORMS, parse_duration
from promokit.experiments.incentive.demo import DEMO_TRAIN

app = typer.Typer(help="Campaign directories (what the decision service serves), and the campaign demo.",
                  no_args_is_help=True)

CampaignOpt = Annotated[Path, typer.Option("--campaign", help="Campaign directory made by `promokit campaign build`.")]
#: The demo's training flags, showing its defaults.
TRAIN = TrainingFlags(DEMO_TRAIN)


@app.command("build")
def build(out: Annotated[Path, typer.Option("--out", help="Campaign directory to write.")],
          scores: Annotated[Path, typer.Option("--scores", help=f"Customers' score table, wide ({TABLE_HELP}): incentive predict's customers.parquet, or the parts given to allocate budget --scores.")],
          budget_plan: Annotated[Path, typer.Option("--budget-plan", help="Folder `allocate budget --out` wrote for these scores (its report.json holds λ*, B, levels).")],
          cap: Annotated[str, typer.Option("--cap", help="Hard cap on money at risk: face value of open coupons + money paid (a decimal with at most --currency-exponent decimals).")],
          merchants: Annotated[Optional[Path], typer.Option("--merchants", help=f"Merchants' score table (eq. 20), same levels ({TABLE_HELP}).")] = None,
          quota_plan: Annotated[Optional[Path], typer.Option("--quota-plan", help="The plan of `allocate quota` (user_id, fund): OUT/plan.parquet, or OUT/plan/ when it solved parts; served by GET /v1/assignments.")] = None,
          coupon_ttl: Annotated[str, typer.Option("--coupon-ttl", help=f"How long a coupon stays valid, {DURATION_FORMS}; an expired one no longer counts as money at risk.")] = "7D",
          when_exhausted: Annotated[str, typer.Option("--when-exhausted", help="lowest (the lowest level if it fits, else none) | none (no incentive) once the cap is reached.")] = WHEN_EXHAUSTED,
          merchant_paid_on: Annotated[Optional[str], typer.Option("--merchant-paid-on", help="response | request (default: what allocate budget was given, from its report; response for a plan without merchants).")] = None,
          cold_start: Annotated[str, typer.Option("--cold-start", help="An id the score table does not hold: mean (the rule on the population's mean curve; anyone can mint ids, so this gives coupons to unknown ids) | lowest (the lowest level) | none (no incentive).")] = COLD_START,
          currency_exponent: Annotated[int, typer.Option("--currency-exponent", help="Decimals of the currency's minor unit (2 for cents, 0 for yen): the ledger keeps money in integer minor units.")] = CURRENCY_EXPONENT,
          explore: Annotated[float, typer.Option("--explore", help="Share of subjects, in [0, 1), answered with a level drawn uniformly among the levels (under the same cap), chosen by a keyed hash of their id: the log `campaign export` writes for off-policy evaluation.")] = 0.0,
          explore_seed: Annotated[int, typer.Option("--explore-seed", help="Key of the hashes that choose the explored subjects and their levels, an integer in [0, 2^64).")] = 0,
          pacing_window: Annotated[int, typer.Option("--pacing-window", help="Recent requests λ is re-solved on.")] = PACING_WINDOW,
          pacing_every: Annotated[int, typer.Option("--pacing-every", help="Re-solve λ after this many decisions (per worker).")] = PACING_EVERY,
          pacing_gain: Annotated[float, typer.Option("--pacing-gain", help="Feedback exponent g of B_t = B·(B/ρ̂)^g; 0 follows traffic only.")] = PACING_GAIN,
          pacing: Annotated[bool, typer.Option("--pacing/--no-pacing", help="Re-solve λ online (ratio budgets only).")] = True,
          model_version: Annotated[Optional[str], typer.Option("--model-version", help="Version string returned with every decision (default: a hash of the score tables); it names the version's folder when OUT holds a campaign.")] = None,
          activate: Annotated[bool, typer.Option("--activate", help="When OUT holds a campaign: make the new version live at once (a running service follows within a second).")] = False):
    """Make a campaign directory from `incentive predict` score tables and the `allocate budget` plan. Into a
    directory that holds a campaign, write a new version beside the live one (a refresh: switch to it with
    `campaign switch`, POST /v1/campaign/switch or --activate)."""
    with user_errors(out=out):
        from promokit.campaign import Pacing, load_campaign
        from promokit.campaign import build as build_campaign

        campaign = build_campaign(out, scores, budget_plan, cap, merchants=merchants, quota_plan=quota_plan,
                                  coupon_ttl=parse_duration(coupon_ttl, "--coupon-ttl"), when_exhausted=when_exhausted,
                                  merchant_paid_on=merchant_paid_on, cold_start=cold_start,
                                  currency_exponent=currency_exponent, explore=explore, explore_seed=explore_seed,
                                  pacing=Pacing(pacing_window, pacing_every, pacing_gain, pacing),
                                  model_version=model_version, activate=activate)
        sizes = ", ".join(f"{len(p):,} {name}s" for name, p in campaign.populations.items())
        config = campaign.config
        live = load_campaign(out).config.model_version
        where = "" if live == config.model_version else \
            f" beside the live version {live} (switch with `promokit campaign switch --campaign {out}`)"
        get_console().print(f"campaign {config.model_version} in {campaign.folder}{where}: {sizes}, levels "
                            f"{config.levels}, λ* {config.lam:.6g}, cap {config.cap:,.{config.currency_exponent}f}"
                            + (f", exploring {config.explore:.2%} of subjects" if config.explore else ""))


@app.command("switch")
def switch(campaign: CampaignOpt,
           version: Annotated[Optional[str], typer.Option("--version", help="The version to make live (default: the newest built).")] = None):
    """Make another version of a campaign directory live; a running service follows within a second (or at once
    on SIGHUP), keeping its ledger, cap and pacing. A version whose levels or currency differ is refused."""
    with user_errors(campaign=campaign):
        from promokit.campaign import activate_version, load_campaign

        previous = load_campaign(campaign).config.model_version
        live = activate_version(campaign, version).config.model_version
        get_console().print(f"campaign {campaign}: version {live} is live" +
                            ("" if previous == live else f" (was {previous})"))


@app.command("export")
def export(campaign: CampaignOpt,
           out: Annotated[Path, typer.Option("--out", help="The log to write (.parquet or .csv).")],
           ledger: Annotated[Optional[str], typer.Option("--ledger", help="sqlite:///FILE or postgresql://USER@HOST/DB (default: ledger.sqlite in the campaign).")] = None,
           customers: Annotated[Optional[Path], typer.Option("--customers", help=f"Customer features ({TABLE_HELP}) keyed by customer_id: write a customers table for `incentive train` (id, level, redeemed, these features) instead of the log.")] = None,
           population: Annotated[str, typer.Option("--population", help="customer | merchant: whose decisions (the id column is customer_id or merchant_id).")] = "customer",
           bucket: Annotated[str, typer.Option("--bucket", help="all | explore (the randomized part alone) | exploit.")] = "all",
           every_decision: Annotated[bool, typer.Option("--every-decision", help="One row per decision, not per subject (the first): ids may repeat.")] = False):
    """Write the ledger's decisions and outcomes as a log in the incentive contract, with propensities, for
    `policy evaluate` and `incentive train`."""
    with user_errors(), flags_in_errors({"ledger_url": "--ledger", "features": "--customers"}):
        from promokit.data.errors import DataError
        from promokit.data.io import write_table
        from promokit.data.parts import TABLE_SUFFIXES
        from promokit.data.uris import as_path
        from promokit.serve.export import export_log

        out = as_path(out)  # a URI whole: the log is written there
        if out.suffix not in TABLE_SUFFIXES or out.is_dir():
            raise DataError(f"--out must be a file ending in .parquet or .csv, got {out}")
        result = export_log(campaign, ledger, population=population, bucket=bucket, every_decision=every_decision,
                            features=customers)
        write_table(result.log, out)
        left_out = ", ".join(f"{n:,} {why}" for why, n in result.left_out.items() if n) or "none"
        get_console().print(f"{len(result.log):,} rows written to {out} from {result.decisions:,} {population} "
                            f"decisions (left out: {left_out})")


@app.command("demo")
def demo(out: runs_out_option("the world, models, scores, plan, campaign, ledger and report (overwritten)") = RUNS / "campaign-demo",
         customers: Annotated[int, typer.Option(help="Customers in the synthetic world (each asks for one decision).")] = 20_000,
         merchants: Annotated[int, typer.Option(help="Merchants in the synthetic world.")] = 2_000,
         seed: Annotated[int, typer.Option("--seed", help="Seed of the world, the training, the request order and the outcome draws.")] = 0,
         epochs: TRAIN.epochs = None,
         ratio: Annotated[Optional[float], typer.Option("--ratio", help="Budget B of eq. 16: expected incentive per expected redemption (default: the median level).")] = None,
         cap_factor: Annotated[float, typer.Option("--cap-factor", help="Cap on money at risk as a multiple of the plan's expected spend Σ r·f.")] = 1.1,
         waves: Annotated[int, typer.Option("--waves", help="Waves of decisions, each followed by its outcomes: 1/WAVES of the coupons are open at once.")] = 50,
         concurrency: Annotated[int, typer.Option("--concurrency", help="Requests in flight at most.")] = 16,
         max_seconds: Annotated[float, typer.Option("--max-seconds", help="Time allowed for sending the decisions; customers not reached stay undecided.")] = 180.0,
         explore: Annotated[float, typer.Option("--explore", help="Share of customers answered with a uniformly random level: the log the plans are then judged on.")] = 0.1):
    """The campaign demo on a synthetic world: train, score, allocate, build a campaign directory and serve it,
    replay traffic with outcomes from the true curves, and report redemptions, spend, budget safety and latency."""
    with user_errors(out=out):
        from promokit.experiments.campaign.demo import DemoConfig, print_summary, run_demo

        config = DemoConfig(customers=customers, merchants=merchants, seed=seed, epochs=epochs, ratio=ratio,
                            cap_factor=cap_factor, waves=waves, concurrency=concurrency, max_seconds=max_seconds,
                            explore=explore)
        print_summary(run_demo(out, config), out)

"""``promokit campaign demo``, the campaign demo: the main job end to end on the embedded synthetic world
(``make demo``).

Mounted on the ``campaign`` command group with ``campaign_app.command("demo")(demo)``.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from promokit.cli_support import RUNS, TrainingFlags, runs_out_option, user_errors
from promokit.experiments.incentive.demo import DEMO_TRAIN

#: The training flags, showing the demo's defaults.
TRAIN = TrainingFlags(DEMO_TRAIN)


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

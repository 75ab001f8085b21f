"""End to end on a synthetic coupon experiment: response model → score tables → budget plan → campaign directory
(what `promokit serve` serves) → the plan judged on the randomized log of customers the model never saw.

    python examples/end_to_end.py [OUT]     # OUT: where everything is written (default: a temporary folder)
"""

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

import promokit as pk

out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="promokit-end-to-end-"))

# 1. a randomized experiment: every customer was offered a coupon value drawn at random
world = pk.experiments.incentive.make_world(n_customers=3000, n_merchants=300, seed=0)
tables = {"customers": world.customers, "merchants": world.merchants, "edges": world.edges}

# 2. the response model, trained on 85 % of the customers, and every customer's score at every value
model = pk.IncentiveModel("gnn-hazard", refit=False)  # judged below on held-out customers it never learnt from
model.set_params(train=replace(model.train_config, epochs=8, progress=False))  # shorter, no epoch lines
model.fit(tables).save(out / "model")
scores, _ = model.score_tables(tables)  # user_id, score_<value>
scores.to_parquet(out / "scores.parquet")

# 3. one value per customer: the most expected redemptions at ≤ 100 spent per expected redemption
plan = pk.plan_budget(scores, ratio=100, out=out / "plan")
print(plan.headline())

# 4. the campaign directory the decision service serves, with a hard cap on money at risk
cap = round(1.2 * plan.summary["expected_spend"], 2)
campaign = pk.campaign.build(out / "campaign", scores, out / "plan", cap=cap)
print(f"campaign: λ* {campaign.config.lam:.4g}, cap {cap:,.2f}; serve it with "
      f"PROMOKIT_API_TOKEN=… promokit serve --campaign {out / 'campaign'}")

# 5. the plan judged on the held-out customers, whose values were drawn at random (DR, with 95 % intervals)
held_out = model.held_out(tables)[0]
log = world.customers.iloc[held_out][["customer_id", "level", "redeemed"]]
judged = pk.policy.evaluate(log, {"gnn-hazard": out / "plan"}, scores=scores, design="uniform", model=out / "model")
judged.write(out / "judged")
print("\n".join(judged.headlines()))

# the truth the log estimates: per held-out customer, expected redemptions and spend under the plan and at random
level = plan.plan["level"].to_numpy()[held_out]
truth = world.customer_truth[held_out]  # P(redeem) at every value
planned = truth[np.arange(len(held_out)), np.searchsorted(world.levels, level)]
print(f"true per customer: plan {planned.mean():.3f} redemptions, {(planned * level).mean():.1f} spent; "
      f"random values {truth.mean():.3f} redemptions, {(truth * world.levels).mean():.1f} spent")
print(f"everything written to {out}")

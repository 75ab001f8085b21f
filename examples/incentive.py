"""Incentive response: a GNN with piecewise hazard regression learns each customer's redemption curve over the
coupon values from a small randomized experiment on a customer–merchant graph, and is checked against the truth.

    python examples/incentive.py [OUT]     # OUT: where the model and the score tables go (default: a temporary folder)
"""

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import promokit as pk

out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="promokit-incentive-"))

# customers (each offered a coupon value at random, and whether they redeemed), merchants, payment edges
world = pk.experiments.incentive.make_world(n_customers=3000, n_merchants=300, seed=0)
tables = {"customers": world.customers, "merchants": world.merchants, "edges": world.edges}
print(f"{len(world.customers)} customers, coupon values {world.levels.tolist()}")

model = pk.IncentiveModel("gnn-hazard", refit=False)  # the selected model: the held-out nodes stay unseen
model.set_params(train=replace(model.train_config, epochs=8, progress=False))  # shorter, no epoch lines
model.fit(tables)  # holds 10 % of the labelled customers and of the merchants out
metrics = model.evaluate(tables, truth=world.customer_truth)  # on the held-out nodes
print(f"AUC_c {metrics['auc_c']:.3f}, mean error of the curves against the truth {metrics['curve_mae_c']:.3f}")

scores = model.predict(tables)  # customer_id, then score_<value>: P(redeem) at every value, monotone
print("customer c000000, predicted:", scores.iloc[0, 1:].round(2).tolist())
print("customer c000000, true:     ", world.customer_truth[0].round(2).tolist())

customers, merchants = model.score_tables(tables)  # both sides as `promokit allocate budget` reads them
(out / "scores").mkdir(parents=True, exist_ok=True)
customers.to_parquet(out / "scores" / "customers.parquet")
merchants.to_parquet(out / "scores" / "merchants.parquet")
model.save(out / "model")
metrics.write(out / "report")
print(f"model, score tables and report written to {out}")

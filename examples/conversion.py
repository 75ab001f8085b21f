"""Conversion after a click: ESM² against the linear floor LR on a small synthetic impression log.

    python examples/conversion.py [OUT]     # OUT: where the model and its report go (default: a temporary folder)
"""

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import promokit as pk

out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="promokit-conversion-"))

# one row per impression: features, then the labels click, daction (a purchase-related action) and purchase
world = pk.experiments.conversion.make_world(n_users=300, n_items=120, n_impressions=40_000, seed=0)
train, test = world.table.iloc[:32_000], world.table.iloc[32_000:]  # our own split: fit holds nothing out

clicked = test.index[test["click"] == 1]  # CVR is judged on clicked impressions; the world knows P(buy | click)
oracle = pk.metrics.auc(test.loc[clicked, "purchase"], world.truth.loc[clicked, "p_cvr"])
print(f"oracle CVR AUC {oracle:.3f}")
for name in ("lr", "esm2"):
    model = pk.ConversionModel(name, test_fraction=0)
    model.set_params(train=replace(model.train_config, progress=False))  # its defaults, without epoch lines
    metrics = model.fit(train).evaluate(test)
    print(f"{name:6s} CVR AUC {metrics['cvr_auc']:.3f}, CTCVR AUC {metrics['ctcvr_auc']:.3f}")

predictions = model.predict(test)  # user_id, item_id, then p_ctr, p_cvr, p_ctavr, p_ctcvr
print(predictions.head(3).round(4).to_string(index=False))
model.save(out / "esm2")
metrics.write(out / "esm2-report")
print(f"model and report written to {out}")

"""Voucher redemption: DMBGN against the linear floor LR on a small synthetic voucher world, split by time.

    python examples/voucher.py [OUT]     # OUT: where the model and its report go (default: a temporary folder)
"""

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

import promokit as pk

out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="promokit-voucher-"))

# sessions (a user collects a voucher: its terms, when, whether redeemed), behaviour events and items
world = pk.voucher.make_voucher_world(n_users=700, n_vouchers=40, n_items=200, n_sessions=4000, seed=0)
sessions = world.tables.sessions
test = np.flatnonzero(sessions["collect_time"] >= sessions["collect_time"].quantile(0.8))  # the latest 20 %
train = np.setdiff1d(np.arange(len(sessions)), test)  # fit validates on the latest 10 % of these

print(f"oracle AUC {pk.metrics.auc(sessions['redeemed'].iloc[test], world.truth[test]):.3f}")
# the networks start from the floor's logit (their wide part) and, on this little data, barely move from it
for name in ("lr", "dmbgn"):
    model = pk.VoucherModel(name)
    model.set_params(train=replace(model.train_config, epochs=4, progress=False))  # shorter, no epoch lines
    metrics = model.fit(world.tables, rows=train).evaluate(world.tables, rows=test)
    print(f"{name:6s} AUC {metrics['auc']:.3f}, logloss {metrics['logloss']:.3f} on {metrics['n']} sessions")

predictions = model.predict(world.tables, rows=test)  # session_id, user_id, voucher_id, p_redeem
print(predictions.head(3).round(4).to_string(index=False))
model.save(out / "dmbgn")
metrics.write(out / "dmbgn-report")
print(f"model and report written to {out}")

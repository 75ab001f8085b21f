"""Voucher redemption: DMBGN against the linear floor LR on a small synthetic voucher world, split by time.

    python examples/voucher.py [OUT]     # OUT: where the model and its report go (default: a temporary folder)
"""

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import promokit as pk

out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="promokit-voucher-"))

# sessions (a user collects a voucher: its terms, when, whether redeemed), behaviour events and items
world = pk.experiments.voucher.make_world(n_users=700, n_vouchers=40, n_items=200, n_sessions=4000, seed=0)
sessions = world.tables.sessions

# the networks start from the floor's logit (their wide term) and, on this little data, barely move from it
for name in ("lr", "dmbgn"):
    model = pk.VoucherModel(name, test_fraction=0.2)  # fit holds out the latest 20 %, validates on 10 % of the rest
    model.set_params(train=replace(model.train_config, epochs=4, progress=False))  # shorter, no epoch lines
    test = model.fit(world.tables).held_out(world.tables)  # the sessions collected from the hold-out's cut on
    # fit then refit on every session; these are the selected model's metrics on the held-out ones, scored before
    metrics = model.held_out_evaluation(world.tables)
    print(f"{name:6s} AUC {metrics['auc']:.3f}, logloss {metrics['logloss']:.3f} on {metrics['n']} sessions")
print(f"oracle AUC {pk.metrics.auc(sessions['redeemed'].iloc[test], world.truth[test]):.3f}")

predictions = model.predict(world.tables, rows=test)  # session_id, user_id, voucher_id, p_redeem
print(predictions.head(3).round(4).to_string(index=False))
model.save(out / "dmbgn")
metrics.write(out / "dmbgn-report")
print(f"model and report written to {out}")

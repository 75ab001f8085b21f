"""Expected transaction value: the hurdle floor and ESDPM predict what each user would invest in each fund, a
quota plan gives every user one fund, and each plan is scored by the synthetic world's true expected values.

    python examples/value.py [OUT]     # OUT: where the models, ETV tables and plans go (default: a temporary folder)
"""

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

import promokit as pk

out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="promokit-value-"))

# deliveries (a fund shown to a user: click, convert, amount), users (with a risk tolerance), funds (with a risk),
# the users' earlier behaviours and their payments to merchants (the consumption graph)
world = pk.experiments.value.make_world(n_users=1200, n_funds=4, seed=0)
tables = {name: getattr(world, name) for name in ("deliveries", "users", "funds", "behaviors", "consumption")}
quotas = world.funds[["fund", "risk"]].assign(max=len(world.users) * 2 // 5)  # no fund to more than 40 % of users


def true_value(etv, name):  # plan by these ETVs (fund risk ≤ user tolerance, quotas met), scored by the truth
    plan = pk.plan_quota(etv, quotas, out=out / name / "plan").plan
    return plan.merge(world.truth_etv, on=["user_id", "fund"])["true_etv"].sum()


for name in ("hurdle", "esdpm"):
    model = pk.ValueModel(name, refit=False)  # the selected model: the held-out deliveries stay unseen
    model.set_params(train=replace(model.train_config, epochs=3, progress=False))  # shorter, no epoch lines
    model.fit(tables)  # holds the latest 10 % of the deliveries out
    metrics = model.evaluate(tables, rows=model.split_rows(tables)[2])
    etv = model.score_table(pk.value.value_tables(tables))  # user_id, score_<fund>: ETV, tolerance
    model.save(out / name / "model")
    print(f"{name:8s} held-out AUC {metrics['auc']:.3f}, Gini {metrics['gini']:.3f}; "
          f"true value of its plan {true_value(etv, name):,.0f}")

truth = (world.truth_etv.pivot(index="user_id", columns="fund", values="true_etv").add_prefix("score_")
         .join(world.users.set_index("user_id")["tolerance"]).reset_index())
columns = [c for c in etv if c.startswith("score_")]
noise = etv.assign(**dict(zip(columns, np.random.default_rng(0).random((len(columns), len(etv))))))
print(f"true value of the plan by the true ETVs {true_value(truth, 'oracle'):,.0f}, "
      f"by random scores {true_value(noise, 'random'):,.0f}")
print(f"models and plans written to {out}")

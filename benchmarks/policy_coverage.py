"""Coverage, bias, error and width of ``policy evaluate``'s estimates over replications of a randomized log, on the
synthetic incentive and value worlds whose true responses are known; and how optimistic a plan looks on its own
training log.

**incentive** (:func:`promokit.experiments.incentive.world.make_world`, ``--customers`` customers, seed ``--world-seed``):
the world's own randomized log (drawn with the world's seed, outside the replications) trains ``IncentiveModel("lr")``
— the linear floor — once; its ``score_tables`` give q̂ for every customer × level. Plans: **model**, the
``allocate budget --ratio B`` plan (``ratio_form`` + ``solve_budget`` on the model's scores, ``--ratio``), and
**constant**, every customer at ``--constant-level``. Replication r = 1 … R draws a new log on the same customers
(level uniform over the 8 levels, redeemed ~ Bernoulli(true curve at that level), seeded by r), reads it with
``read_log(..., design="uniform")`` and runs ``promokit.policy.judge`` (IPS, SNIPS, DM, DR, SNDR; the
logging policy as the reference; ``--bootstrap`` replicates seeded by r). Truths on those customers: responses =
mean of the true curve at the plan's level, spend = mean of level × that, spend per response = their ratio.

**value** (:func:`promokit.experiments.value.world.make_world`, ``--users`` users, 8 funds): the world's deliveries train an
``esdpm-ncg`` ``ValueModel`` once (``--value-epochs``; its ETV of every user × fund by ``score_matrix``). Plans:
**model**, ``allocate quota``'s default method (``solve_quota(..., method="prices")``) on that ETV under the
``feasible_quotas`` of the world and the risk rule, and **constant**, every user the fund ``--constant-fund``
(risk 1: allowed to everyone). Replication r gives every user one delivery of a uniformly random fund and draws its
outcome with ``draw_outcomes(truth_etv, users, funds, seed)``; evaluation as above (q̂ = the model's ETV for the
amount; conversions have no model in a quota score table, so IPS and SNIPS only). Truths: amount = mean true ETV at
the plan's fund, conversions = mean true p_ctcvr there (``truth_etv``).

Per world, plan, outcome and estimator: the truth (mean over replications; the subjects are fixed, so it is fixed),
coverage of the 95 % interval (share of replications whose interval holds the truth, with its binomial standard
error), bias (mean estimate − truth), mean absolute error, mean interval width. Beside promokit's intervals for SNIPS
and SNDR, the rows ``SNIPS (obp CI)`` and ``SNDR (obp CI)`` give the coverage of Open Bandit Pipeline's procedure on
the same logs (the per-subject values w·y / mean(w) or DM + w·(y − q̂) / mean(w), with the FULL sample's mean weight,
resampled and averaged; the point estimate is the same), and ``IPS (normal CI)`` and ``DR (normal CI)`` that of the
estimate ± 1.96 bootstrap standard deviations; the skewness of the estimates over the replications; per plan and
outcome, the matched rows (logged action = the plan's) with an outcome > 0 and the share of Σ w·y their largest 5 %
carry.

**in-sample vs held out**: for each of ``--optimism-seeds`` incentive worlds, ``IncentiveModel(--optimism-model)``
trains on half the customers' log (``test_fraction=0.5``: the model's own split; the training half is its
training and validation customers), its ``allocate budget`` plan is built for all customers, and DR (with IPS and DM
for context) judges the plan on the training half's log and on the other half's, each against the plan's true value
on that half. The mean gap estimate − truth of each is printed, and the paired difference of the two gaps over the
seeds. ``--optimism-overfit EPOCHS`` trains the model that many epochs without a validation split or dropout instead
(a model that memorises its training customers).

**tail** (``--tail-sizes``): IPS of the constant fund's amount on value worlds of growing size (truth and logs only,
no model): coverage against the number of matched conversions and the share of Σ w·y their largest 5 % carry.

The load (``uptime``) before and after and the wall time of each part are printed; ``--out`` writes every figure as
JSON.

Usage::

    .venv/bin/python benchmarks/policy_coverage.py                       # 200 replications per world, ~3.5 minutes
    .venv/bin/python benchmarks/policy_coverage.py --tail-sizes 10000,40000,160000 --out coverage.json  # ~7.5 min
    .venv/bin/python benchmarks/policy_coverage.py --worlds "" --optimism-model dnn --optimism-overfit 50  # ~1 min
    .venv/bin/python benchmarks/policy_coverage.py --replications 100 --bootstrap 200 --worlds incentive
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.allocation.budget import ratio_form, solve_budget
from promokit.allocation.quota import solve_quota
from promokit.policy.estimators import Terms, bootstrap_sums, estimate, from_sums, interval
from promokit.policy.judging import judge, predicted_outcomes
from promokit.policy.log import read_log
from promokit.policy.plans import Plan, on_actions, reference_plan

ESTIMATORS = ("IPS", "SNIPS", "DM", "DR", "SNDR")
OBP_STYLE = ("SNIPS", "SNDR")
LEVEL = 0.95


# ------------------------------------------------------------------------------------------------ the worlds


class IncentiveCase:
    """Fixed customers, true curves, the LR model's scores and the two plans (module docstring)."""

    outcomes = ("responses", "spend")

    def __init__(self, customers: int, seed: int, ratio: float, constant: float):
        from promokit.experiments.incentive.world import make_world
        from promokit.incentive.contract import check_tables
        from promokit.incentive.estimator import DEFAULT_TRAIN, IncentiveModel
        from promokit.training import TrainConfig

        world = make_world(n_customers=customers, n_merchants=max(customers // 10, 1), seed=seed)
        tables = check_tables(world.customers, world.merchants, world.edges)
        config = TrainConfig(**{**DEFAULT_TRAIN.to_dict(), "progress": False, "seed": seed})
        model = IncentiveModel("lr", train=config).fit(tables)
        scores = model.score_tables(tables)[0]
        self.levels = world.levels.astype(np.float64)
        self.q = scores[[c for c in scores.columns if c.startswith("score_")]].to_numpy(dtype=np.float64)
        self.ids = world.customers["customer_id"].to_numpy().astype(str)
        self.truth = world.customer_truth
        if constant not in self.levels:
            raise SystemExit(f"--constant-level {constant:g} is not a level of the world: {self.levels.tolist()}")
        self.plans = {"model": budget_plan(self.q, self.levels, ratio),
                      "constant": np.full(len(self.ids), int(np.searchsorted(self.levels, constant)))}
        self.describe = (f"incentive world: {customers:,} customers, levels {self.levels.astype(int).tolist()}, "
                         f"LR trained on the world's own log ({len(model.history_.epochs)} epochs); model plan = "
                         f"allocate budget --ratio {ratio:g} (mean level "
                         f"{self.levels[self.plans['model']].mean():.1f}), "
                         f"constant plan = level {constant:g}")

    def truths(self, plan: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
        rows = np.arange(len(self.ids)) if rows is None else rows
        p = self.truth[rows, plan[rows]]
        spend = self.levels[plan[rows]] * p
        return {"responses": float(p.mean()), "spend": float(spend.mean()),
                "spend per response": float(spend.sum() / p.sum())}

    def draw_log(self, seed: int) -> pd.DataFrame:
        rng = np.random.default_rng([seed, 22])
        level = rng.integers(0, len(self.levels), len(self.ids))
        redeemed = rng.random(len(self.ids)) < self.truth[np.arange(len(self.ids)), level]
        return pd.DataFrame({"customer_id": self.ids, "level": self.levels[level], "redeemed": redeemed.astype(int)})

    def predicted(self, log, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        q = self.q if rows is None else self.q[rows]
        return predicted_outcomes(log, q, self.levels, log.actions)


class ValueCase:
    """Fixed users, true ETV and conversion, the esdpm-ncg model's ETV and the two plans (module docstring)."""

    outcomes = ("conversions", "amount")

    def __init__(self, users: int, seed: int, epochs: int, constant: str):
        from promokit.experiments.value.bench import true_etv_matrix
        from promokit.experiments.value.world import feasible_quotas
        from promokit.experiments.value.world import make_world
        from promokit.training import TrainConfig
        from promokit.value.contract import check_tables
        from promokit.value.estimator import DEFAULT_TRAIN, ValueModel

        world = make_world(n_users=users, seed=seed)
        tables = check_tables(world.deliveries, world.users, world.funds, world.behaviors, world.consumption)
        config = TrainConfig(**{**DEFAULT_TRAIN.to_dict(), "progress": False, "seed": seed, "epochs": epochs})
        started = time.perf_counter()
        model = ValueModel("esdpm-ncg", train=config).fit(tables)
        etv = model.score_matrix(tables)
        self.train_seconds = time.perf_counter() - started
        funds = np.asarray(tables.fund_names).astype(str)
        order = np.argsort(funds)  # the log's actions are the fund names, sorted
        self.funds = funds[order]
        self.q = etv[:, order]
        self.ids = tables.users["user_id"].to_numpy().astype(str)
        self.truth_etv = world.truth_etv
        self.truth = true_etv_matrix(world, tables)[:, order]
        wide = world.truth_etv.pivot(index="user_id", columns="fund", values="true_p_ctcvr")
        wide.index, wide.columns = wide.index.astype(str), wide.columns.astype(str)
        self.truth_conversion = wide.loc[self.ids, list(self.funds)].to_numpy(dtype=np.float64)
        #: E[y² | user, fund] of the amount (y = expm1(μ + σz) when converted; the cent rounding left out)
        moments = {}
        for column in ("true_mu", "true_sigma"):
            table = world.truth_etv.pivot(index="user_id", columns="fund", values=column)
            table.index, table.columns = table.index.astype(str), table.columns.astype(str)
            moments[column] = table.loc[self.ids, list(self.funds)].to_numpy(dtype=np.float64)
        mu, sigma = moments["true_mu"], moments["true_sigma"]
        self.second_moment = self.truth_conversion * (np.exp(2 * mu + 2 * sigma ** 2)
                                                      - 2 * np.exp(mu + sigma ** 2 / 2) + 1)
        quotas = feasible_quotas(tables.tolerance(), tables.risk(), tables.fund_names, seed)
        plan = solve_quota(etv, quotas["quota"].to_numpy(), tables.tolerance(), tables.risk(), method="prices")
        if constant not in self.funds:
            raise SystemExit(f"--constant-fund {constant} is not a fund of the world: {self.funds.tolist()}")
        self.plans = {"model": np.searchsorted(self.funds, funds[plan.assignment]),
                      "constant": np.full(len(self.ids), int(np.searchsorted(self.funds, constant)))}
        best = self.truth.argmax(axis=1)
        self.describe = (f"value world: {users:,} users, funds {self.funds.tolist()}, esdpm-ncg trained on the world's "
                         f"{len(world.deliveries):,} deliveries ({len(model.history_.epochs)} epochs, "
                         f"{self.train_seconds:.0f} s with scoring; its best fund = the true best for "
                         f"{(self.q.argmax(axis=1) == best).mean():.0%} of users); model plan = allocate quota "
                         f"(method prices, the world's feasible quotas and risk rule), constant plan = fund {constant}")

    def truths(self, plan: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
        rows = np.arange(len(self.ids)) if rows is None else rows
        return {"conversions": float(self.truth_conversion[rows, plan[rows]].mean()),
                "amount": float(self.truth[rows, plan[rows]].mean())}

    def oracle_dr(self, plan: np.ndarray) -> str:
        """How far DR with the TRUE ETV as q̂ could bring the amount's standard deviation below IPS's, on a log
        uniform over K funds: per subject Var(w·y) = K·E[y²] − V² against Var(q + w·(y − q)) = K·E[Var(y | x)] +
        Var(q)."""
        rows = np.arange(len(self.ids))
        q, second, k = self.truth[rows, plan], self.second_moment[rows, plan], len(self.funds)
        ips = k * second.mean() - q.mean() ** 2
        dr = k * (second - q ** 2).mean() + q.var()
        return (f"E[Var(y | x)] {np.mean(second - q ** 2):.3g}, Var(E[y | x]) {q.var():.3g}: DR with the true ETV "
                f"as q̂ would have sd {np.sqrt(dr / ips):.3f} × IPS's")

    def draw_log(self, seed: int) -> pd.DataFrame:
        from promokit.experiments.value.world import draw_outcomes

        rng = np.random.default_rng([seed, 23])
        fund = self.funds[rng.integers(0, len(self.funds), len(self.ids))]
        drawn = draw_outcomes(self.truth_etv, self.ids, fund, seed)
        return pd.DataFrame({"user_id": self.ids, "fund": fund, "convert": drawn["convert"],
                             "amount": drawn["amount"]})

    def predicted(self, log, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        q = self.q if rows is None else self.q[rows]
        return predicted_outcomes(log, q, self.funds, log.actions)


#: the intervals policy evaluate gives in the replications (--interval)
INTERVAL = "bca"

def budget_plan(q: np.ndarray, levels: np.ndarray, ratio: float) -> np.ndarray:
    """The level index per customer that ``allocate budget --ratio`` gives for the scores ``q``."""
    return solve_budget(*ratio_form(q, levels, ratio)).choice


def as_plan(name: str, choice: np.ndarray, actions: np.ndarray) -> Plan:
    return Plan(name, actions, np.eye(len(actions))[choice], len(choice))


# ------------------------------------------------------------------------------------------------ replications


def replicate(case, r: int, replicates: int) -> list[dict]:
    """One replication: a fresh log, every plan judged, each estimate against the plan's truth."""
    log = read_log(case.draw_log(r), "log", design="uniform")
    if len(log.actions) != case.q.shape[1]:
        raise SystemExit(f"replication {r}: the log holds {len(log.actions)} of {case.q.shape[1]} actions")
    plans = [as_plan(name, choice, log.actions) for name, choice in case.plans.items()]
    predicted = case.predicted(log)
    judged = judge(log, plans, reference_plan("logging", log), predicted, bootstrap=replicates, seed=r,
                   interval=INTERVAL)
    rows = []
    for plan, result in zip(plans, judged.plans):
        truth = case.truths(case.plans[plan.name])
        for outcome in case.outcomes:
            for estimator, e in result.means[outcome].items():
                rows.append(_row(r, plan.name, outcome, estimator, e.value, e.low, e.high, truth[outcome]))
            rows.extend(other_intervals(log, plan, outcome, predicted.get(outcome), truth[outcome], replicates, r))
        for estimator, e in (result.ratio.items() if len(np.unique(case.plans[plan.name])) > 1 else ()):
            rows.append(_row(r, plan.name, "spend per response", estimator, e.value, e.low, e.high,
                             truth["spend per response"]))
    return rows


def other_intervals(log, plan: Plan, outcome: str, q: np.ndarray | None, truth: float, replicates: int,
                    seed: int) -> list[dict]:
    """On the same log: SNIPS and SNDR with Open Bandit Pipeline's interval (the per-subject values with the full
    sample's mean weight, resampled and averaged: ``estimate_confidence_interval_by_bootstrap``), and IPS and DR with
    a normal interval (estimate ± 1.96 bootstrap standard deviations); the tail of the matched outcomes."""
    action = np.searchsorted(log.actions, log.labels)
    y = log.outcomes[outcome]
    terms = Terms.of(on_actions(plan, log.actions), action, log.propensity, y, q)
    mean_w = terms.w.mean()
    per_subject = {"SNIPS (obp CI)": terms.wy / mean_w}
    if terms.dm is not None:
        per_subject["SNDR (obp CI)"] = terms.dm + terms.wres / mean_w
    rows = []
    for name, values in per_subject.items():
        draws = bootstrap_sums(values[:, None], replicates, seed)[:, 0] / len(values)
        rows.append(_row(seed, plan.name, outcome, name, float(values.mean()), *interval(draws, LEVEL), truth))
    draws = bootstrap_sums(terms.matrix(), replicates, seed)
    for estimator in terms.estimators:
        if estimator in ("IPS", "DR"):
            value, sd = estimate(terms, estimator), from_sums(draws, estimator).std(ddof=1)
            rows.append(_row(seed, plan.name, outcome, f"{estimator} (normal CI)", value, value - 1.96 * sd,
                             value + 1.96 * sd, truth))
    # the tail: how many matched rows have an outcome, and how much of Σ w·y the largest 5 % of them carry
    matched = np.sort(terms.wy[terms.wy > 0])[::-1]
    top = matched[:max(1, len(matched) // 20)].sum() / matched.sum() if len(matched) else float("nan")
    rows[0].update(positive_matched=len(matched), top_share=top)
    return rows


def _row(r, plan, outcome, estimator, value, low, high, truth) -> dict:
    return {"replication": r, "plan": plan, "outcome": outcome, "estimator": estimator, "estimate": value,
            "low": low, "high": high, "truth": truth}


def summarise(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame["covered"] = (frame["low"] <= frame["truth"]) & (frame["truth"] <= frame["high"])
    frame["error"] = frame["estimate"] - frame["truth"]
    frame["width"] = frame["high"] - frame["low"]
    frame["below"] = frame["high"] < frame["truth"]
    frame["above"] = frame["low"] > frame["truth"]
    grouped = frame.groupby(["plan", "outcome", "estimator"], sort=False)
    out = grouped.agg(truth=("truth", "mean"), replications=("covered", "size"), coverage=("covered", "mean"),
                      below=("below", "mean"), above=("above", "mean"), bias=("error", "mean"), sd=("estimate", "std"),
                      mae=("error", lambda e: e.abs().mean()), width=("width", "mean"),
                      skew=("estimate", lambda e: float(pd.Series(e).skew()))).reset_index()
    if "positive_matched" in frame:
        tail = frame.dropna(subset=["positive_matched"]).groupby(["plan", "outcome"], sort=False).agg(
            positive_matched=("positive_matched", "mean"), top_share=("top_share", "mean"))
        out = out.merge(tail.reset_index(), on=["plan", "outcome"], how="left")
    out["coverage_se"] = np.sqrt(out["coverage"] * (1 - out["coverage"]) / out["replications"])
    return out


def markdown(summary: pd.DataFrame, alternatives: bool = False) -> str:
    """promokit's estimates and intervals, or (``alternatives``) the other intervals on the same logs."""
    rows = summary[summary["estimator"].str.contains("(", regex=False) == alternatives]
    lines = ["| plan | outcome | estimator | truth | coverage of 95 % CI | CI above / below truth | bias | sd | "
             "skewness | MAE | mean width |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows.itertuples():
        flag = "" if row.estimator not in ("IPS", "DR") or 0.90 <= row.coverage <= 0.98 else " ⚠"
        lines.append(f"| {row.plan} | {row.outcome} | {row.estimator} | {_num(row.truth)} | "
                     f"{row.coverage:.1%} ± {row.coverage_se:.1%}{flag} | {row.above:.1%} / {row.below:.1%} | "
                     f"{_num(row.bias, signed=True)} | {_num(row.sd)} | {row.skew:.2f} | {_num(row.mae)} | "
                     f"{_num(row.width)} |")
    return "\n".join(lines)


def tail_markdown(summary: pd.DataFrame) -> str:
    rows = summary.dropna(subset=["positive_matched"]).drop_duplicates(["plan", "outcome"])
    lines = ["| plan | outcome | matched rows with an outcome > 0, per log | share of Σ w·y from their top 5 % |",
             "|---|---|---:|---:|"]
    for row in rows.itertuples():
        lines.append(f"| {row.plan} | {row.outcome} | {row.positive_matched:.0f} | {row.top_share:.0%} |")
    return "\n".join(lines)


def mae_ratios(summary: pd.DataFrame) -> list[str]:
    lines = []
    for (plan, outcome), group in summary.groupby(["plan", "outcome"], sort=False):
        by = group.set_index("estimator")["mae"]
        if "DR" in by and "IPS" in by:
            lines.append(f"- {plan} / {outcome}: MAE DR {_num(by['DR'])} vs IPS {_num(by['IPS'])} "
                         f"(DR / IPS = {by['DR'] / by['IPS']:.2f})")
    return lines


def _num(x: float, signed: bool = False) -> str:
    text = f"{x:+.4g}" if signed else f"{x:.4g}"
    return text


def tail_scaling(sizes: list[int], replications: int, replicates: int, seed: int, fund: str) -> pd.DataFrame:
    """IPS of the amount of the constant plan ``fund`` on value worlds of growing size (no model: the truth and the
    log only), so that coverage can be read against the number of matched conversions."""
    from promokit.experiments.value.world import draw_outcomes, make_world

    rows = []
    for n in sizes:
        world = make_world(n_users=n, seed=seed, behaviors_per_user=0.0, deliveries_per_user=1.0)
        truth_etv = world.truth_etv
        ids = truth_etv["user_id"].astype(str).unique()
        funds = np.array(sorted(truth_etv["fund"].astype(str).unique()))
        j = int(np.searchsorted(funds, fund))
        truth = float(truth_etv[truth_etv["fund"].astype(str) == fund]["true_etv"].mean())
        plan = np.zeros((n, len(funds)))
        plan[:, j] = 1.0
        for r in range(1, replications + 1):
            chosen = np.random.default_rng([r, 23]).integers(0, len(funds), n)
            y = draw_outcomes(truth_etv, ids, funds[chosen], r)["amount"].to_numpy()
            terms = Terms.of(plan, chosen, np.full(n, 1.0 / len(funds)), y)
            value = estimate(terms, "IPS")
            draws = from_sums(bootstrap_sums(terms.matrix(), replicates, r), "IPS")
            low, high = interval(draws, LEVEL)
            sd = draws.std(ddof=1)
            matched = np.sort(terms.wy[terms.wy > 0])[::-1]
            rows.append({"users": n, "truth": truth, "estimate": value, "percentile": low <= truth <= high,
                         "below": high < truth, "normal": value - 1.96 * sd <= truth <= value + 1.96 * sd,
                         "positive_matched": len(matched),
                         "top_share": matched[:max(1, len(matched) // 20)].sum() / max(matched.sum(), 1e-300)})
    return pd.DataFrame(rows)


def tail_scaling_markdown(frame: pd.DataFrame, fund: str) -> str:
    lines = [f"| users | true amount of constant {fund} | matched conversions per log | share of Σ w·y from their "
             "top 5 % | skewness of the IPS estimates | percentile CI coverage | CI below truth | normal CI coverage |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n, g in frame.groupby("users"):
        lines.append(f"| {n:,} | {g['truth'].iloc[0]:.1f} | {g['positive_matched'].mean():.0f} | "
                     f"{g['top_share'].mean():.0%} | {g['estimate'].skew():.2f} | {g['percentile'].mean():.1%} | "
                     f"{g['below'].mean():.1%} | {g['normal'].mean():.1%} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ in-sample


def optimism(customers: int, seeds: list[int], ratio: float, model_name: str, replicates: int,
             overfit: int | None = None) -> pd.DataFrame:
    """DR (and IPS, DM) of a plan on its model's training half and on the held-out half, against the truth.
    ``overfit``: train that many epochs without a validation split or dropout (lr 3e-3), a model that memorises."""
    from promokit.experiments.incentive.world import make_world
    from promokit.incentive.contract import check_tables
    from promokit.incentive.estimator import DEFAULT_TRAIN, IncentiveModel
    from promokit.training import TrainConfig

    rows = []
    for seed in seeds:
        world = make_world(n_customers=customers, n_merchants=max(customers // 10, 1), seed=seed)
        tables = check_tables(world.customers, world.merchants, world.edges)
        config = TrainConfig(**{**DEFAULT_TRAIN.to_dict(), "progress": False, "seed": seed})
        if overfit:
            config = TrainConfig(**{**config.to_dict(), "epochs": overfit, "lr": 3e-3, "lr_decay": 1.0,
                                    "patience": overfit})
            model = IncentiveModel(model_name, {"dropout": 0.0}, config, test_fraction=0.5).fit(tables, validation=0.0)
        else:
            model = IncentiveModel(model_name, train=config, test_fraction=0.5).fit(tables)
        split = model.split_rows(tables)
        scores = model.score_tables(tables)[0]
        q = scores[[c for c in scores.columns if c.startswith("score_")]].to_numpy(dtype=np.float64)
        levels = world.levels.astype(np.float64)
        choice = budget_plan(q, levels, ratio)
        halves = {"in-sample (training half)": np.sort(np.concatenate([split.train_customers, split.valid_customers])),
                  "held out (other half)": np.sort(split.test_customers)}
        for name, rows_of in halves.items():
            frame = world.customers.iloc[rows_of][["customer_id", "level", "redeemed"]]
            log = read_log(frame, name, design="uniform")
            plan = as_plan("model", choice[rows_of], log.actions)
            predicted = predicted_outcomes(log, q[rows_of], levels, log.actions)
            result = judge(log, [plan], reference_plan("logging", log), predicted, bootstrap=replicates,
                           seed=seed).plans[0]
            p = world.customer_truth[rows_of, choice[rows_of]]
            for estimator in ("DR", "IPS", "DM"):
                e = result.means["responses"][estimator]
                rows.append({"seed": seed, "half": name, "estimator": estimator, "subjects": len(rows_of),
                             "estimate": e.value, "truth": float(p.mean()), "gap": e.value - float(p.mean()),
                             "covered": e.low <= p.mean() <= e.high})
    return pd.DataFrame(rows)


def optimism_markdown(frame: pd.DataFrame) -> str:
    lines = ["| half | estimator | seeds | mean estimate | mean truth | mean gap (estimate − truth) | gap per seed | "
             "CI holds truth |", "|---|---|---:|---:|---:|---:|---|---:|"]
    for (half, estimator), g in frame.groupby(["half", "estimator"], sort=False):
        per_seed = ", ".join(f"{x:+.4f}" for x in g["gap"])
        lines.append(f"| {half} | {estimator} | {len(g)} | {g['estimate'].mean():.4f} | {g['truth'].mean():.4f} | "
                     f"{g['gap'].mean():+.4f} | {per_seed} | {int(g['covered'].sum())}/{len(g)} |")
    halves = list(dict.fromkeys(frame["half"]))
    for estimator, g in frame.groupby("estimator", sort=False):
        paired = (g[g["half"] == halves[0]]["gap"].to_numpy() - g[g["half"] == halves[1]]["gap"].to_numpy())
        se = paired.std(ddof=1) / np.sqrt(len(paired)) if len(paired) > 1 else float("nan")
        lines.append(f"\n{estimator}: in-sample gap − held-out gap = {paired.mean():+.4f} ± {se:.4f} (mean ± standard "
                     f"error over {len(paired)} seeds; > 0 where it is {int((paired > 0).sum())} of them)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_world(case, replications: int, replicates: int, first: int) -> tuple[pd.DataFrame, float]:
    started = time.perf_counter()
    rows = []
    for r in range(first, first + replications):
        rows.extend(replicate(case, r, replicates))
    return summarise(rows), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", default="incentive,value", help="incentive, value or both")
    parser.add_argument("--replications", type=int, default=200, help="randomized logs per world (≥ 100)")
    parser.add_argument("--bootstrap", type=int, default=300, help="bootstrap replicates per evaluation")
    parser.add_argument("--interval", default="bca", choices=("percentile", "bca"),
                        help="the intervals policy evaluate gives: bootstrap percentiles or BCa")
    parser.add_argument("--first", type=int, default=1, help="seed of the first replication's log")
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--world-seed", type=int, default=1000, help="seed of the worlds and of the training logs")
    parser.add_argument("--ratio", type=float, default=90.0, help="B of allocate budget --ratio for the model plan")
    parser.add_argument("--constant-level", type=float, default=100.0)
    parser.add_argument("--constant-fund", default="F1")
    parser.add_argument("--value-epochs", type=int, default=5)
    parser.add_argument("--optimism-seeds", default=",".join(str(2000 + k) for k in range(20)),
                        help="incentive worlds for the in-sample vs held-out gap (empty: skip)")
    parser.add_argument("--optimism-model", default="lr", help="the incentive model trained on half the log")
    parser.add_argument("--optimism-overfit", type=int, default=0,
                        help="train the optimism model this many epochs without validation split or dropout (0: its "
                             "defaults, with early stopping)")
    parser.add_argument("--tail-sizes", default="",
                        help="value worlds of these sizes (comma-separated users) for IPS coverage of the constant "
                             "fund's amount against the number of matched conversions (empty: skip)")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    args = parser.parse_args()
    global INTERVAL
    INTERVAL = args.interval
    torch.set_num_threads(1)
    worlds = [w.strip() for w in args.worlds.split(",") if w.strip()]
    report = {"args": vars(args) | {"out": str(args.out) if args.out else None}, "load_before": uptime()}
    print(f"load before: {report['load_before']}")
    started = time.perf_counter()
    for world in worlds:
        built = time.perf_counter()
        if world == "incentive":
            case = IncentiveCase(args.customers, args.world_seed, args.ratio, args.constant_level)
        elif world == "value":
            case = ValueCase(args.users, args.world_seed, args.value_epochs, args.constant_fund)
        else:
            raise SystemExit(f"unknown world {world!r}")
        setup = time.perf_counter() - built
        summary, seconds = run_world(case, args.replications, args.bootstrap, args.first)
        print(f"\n## {world}: {args.replications} replications, {args.bootstrap} bootstrap replicates each\n")
        print(case.describe)
        truths = {name: case.truths(choice) for name, choice in case.plans.items()}
        print("true values: " + "; ".join(f"{n}: " + ", ".join(f"{k} {v:.4g}" for k, v in t.items())
                                          for n, t in truths.items()))
        print()
        print(markdown(summary))
        print("\nOther intervals on the same logs (obp's bootstrap for SNIPS and SNDR; normal intervals with the "
              "bootstrap standard deviation for IPS and DR):\n")
        print(markdown(summary, alternatives=True))
        print("\nThe tail of the matched outcomes (rows whose logged action is the plan's):\n")
        print(tail_markdown(summary))
        print("\nDR's mean absolute error against IPS's:")
        print("\n".join(mae_ratios(summary)))
        if hasattr(case, "oracle_dr"):
            for name, choice in case.plans.items():
                print(f"- {name} / amount, the ceiling: {case.oracle_dr(choice)}")
        print(f"\n{world}: setup (world, training, plans) {setup:.1f} s, replications {seconds:.1f} s "
              f"({seconds / args.replications:.2f} s each)")
        report[world] = {"describe": case.describe, "truths": truths, "setup_seconds": setup,
                         "replication_seconds": seconds, "summary": summary.to_dict(orient="records")}
    seeds = [int(s) for s in args.optimism_seeds.split(",") if s.strip()]
    if seeds:
        began = time.perf_counter()
        frame = optimism(args.customers, seeds, args.ratio, args.optimism_model, args.bootstrap,
                         args.optimism_overfit or None)
        seconds = time.perf_counter() - began
        how = (f", {args.optimism_overfit} epochs without validation or dropout" if args.optimism_overfit else
               " (early stopping on a validation tenth)")
        print(f"\n## in-sample vs held out: {args.optimism_model}{how} trained on half of each world's log "
              f"({args.customers:,} customers, seeds {seeds}), its allocate budget --ratio {args.ratio:g} plan judged "
              "on each half (responses per customer)\n")
        print(optimism_markdown(frame))
        print(f"\nin-sample vs held out: {seconds:.1f} s")
        report["optimism"] = {"model": args.optimism_model, "overfit": args.optimism_overfit, "seconds": seconds,
                              "rows": frame.to_dict(orient="records")}
    sizes = [int(x) for x in args.tail_sizes.split(",") if x.strip()]
    if sizes:
        began = time.perf_counter()
        frame = tail_scaling(sizes, args.replications, args.bootstrap, args.world_seed, args.constant_fund)
        seconds = time.perf_counter() - began
        print(f"\n## value: IPS of the constant plan's amount as the world grows ({args.replications} logs each; "
              f"no model)\n")
        print(tail_scaling_markdown(frame, args.constant_fund))
        print(f"\ntail scaling: {seconds:.1f} s")
        report["tail_scaling"] = {"seconds": seconds, "rows": frame.to_dict(orient="records")}
    report["seconds"] = time.perf_counter() - started
    report["load_after"] = uptime()
    print(f"\nwall time {report['seconds']:.0f} s; load after: {report['load_after']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()

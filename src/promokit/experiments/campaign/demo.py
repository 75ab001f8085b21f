"""``promokit campaign demo``: the main job on the embedded incentive world, one command, no download.

Each step runs the code of the matching command, and ``OUT`` keeps what it wrote (``OUT/stages.json`` lists the steps
finished, so an interrupted run keeps them and says so):

1. **World**: :func:`~promokit.experiments.incentive.world.make_world`, a randomized coupon experiment on a
   customer–merchant payment graph, with the true response curves f_c(u, r) kept (``OUT/world``).
2. **Train and score**: the paper's model ``gnn-hazard`` and the baseline ``dnn-h`` (the same piecewise-hazard head
   without the graph), trained with the incentive demo's settings
   (:data:`~promokit.experiments.incentive.demo.DEMO_TRAIN`) on one node split. Each scores every customer at every
   level (``OUT/models/<model>``, and ``OUT/scores/<model>/customers.parquet`` in ``allocate budget``'s wide layout)
   and is evaluated on the held-out customers.
3. **Allocate**: ``allocate budget --ratio B`` (eq. 16: expected incentive per expected redemption ≤ B) on the
   paper's model's scores gives λ* and the offline plan (``OUT/plan``). By default B is the median level, as in
   ``incentive simulate`` and ``bench``.
4. **Campaign**: :func:`promokit.campaign.build` (``OUT/campaign``, coupons valid for 7 days) with a
   hard cap on money at risk of ``cap_factor`` × the plan's expected spend Σ r·f. An open coupon counts at its face
   value, so the cap binds when the model underrates the response or when many coupons are open at once.
5. **Serve and replay**: ``promokit serve`` runs on loopback with a random token. The customers, in a seeded random
   order, each ask for a decision once, in ``waves`` waves with at most ``concurrency`` requests in flight.
   ``retry_share`` of each wave's requests are sent again and must come back ``replayed`` with the first answer.
   After a wave's decisions, each answered customer's outcome is drawn from the TRUE curve at the level issued
   (redeemed ~ Bernoulli(f_c(u, r))) and posted to ``/v1/outcomes`` with amount = face value. A customer without a
   coupon cannot redeem: f_c(u, 0) = 0. The pacing controller therefore sees real redemptions. ``GET /v1/status``
   after each wave's decisions and after its outcomes records money at risk, λ and the realised spend per
   redemption.
6. **Compare** at the same B, scored by the true curves:

   - ``served``: the decisions the service issued.
   - From :func:`~promokit.experiments.allocation.simulate.simulate_budget`, for each model: ``planned``, the plan on
     the model's own scores (for gnn-hazard this is ``OUT/plan``), and ``paced``, with λ moved until the truth spends
     B per redemption (what perfect pacing would reach).
   - ``random``: random increasing curves allocated the same way. Its ``paced`` row spends exactly B and is the
     floor at the same budget.
   - ``uniform level``: a level drawn uniformly per customer, with no budget (it spends what it spends).
   - ``oracle``: the true curves allocated. This is the ceiling.
7. **Report**: ``OUT/report.md``, ``report.html``, ``report.json``, the PNGs and ``status.html`` (the service's live
   page at the end). It covers:

   - budget safety from the ledger: money at risk ≤ cap, the ledger's audit equal to its running totals, one
     decision per customer, retries replayed, and the count of capped answers;
   - latency on the client and server sides, and throughput;
   - the controller trace;
   - four figures.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from promokit.campaign.directory import build as build_campaign
from promokit.campaign.money import to_major, to_minor
from promokit.data.errors import DataError
from promokit.data.io import write_json, write_parquet, write_text
from promokit.data.uris import local_dir
from promokit.experiments.allocation.simulate import simulate_budget
from promokit.experiments.incentive.demo import DEMO_TRAIN
from promokit.experiments.incentive.world import IncentiveWorld, make_world, write_world
from promokit.incentive.contract import CUSTOMER, check_tables
from promokit.incentive.estimator import IncentiveModel, Responses, wide_scores
from promokit.incentive.offline_metrics import ORACLE, evaluate
from promokit.report import Report, count, money, percent
from promokit.serve.ledger import Ledger
from promokit.serve.replay import ReplayResult, run_replay, running_service

PAPER, BASELINE = "gnn-hazard", "dnn-h"
SERVED, UNIFORM = "served", "uniform level"
#: A customer's entry in the issued level indices: the service answered "no incentive" or did not answer.
NO_COUPON, UNDECIDED = -1, -2
#: Fields of a decision that a retried request must get back unchanged.
DECISION_FIELDS = ("level", "level_index", "expected_response", "expected_cost", "lam", "reason", "expires_at",
                   "model_version")
#: Ledger totals that its audit (recomputed from the decision rows) must reproduce.
AUDITED = ("decisions", "responses", "committed", "paid", "at_risk")


@dataclass
class DemoConfig:
    """The demo's sizes and settings. ``epochs`` None keeps DEMO_TRAIN's; ``ratio`` None is the median level."""

    customers: int = 20_000
    merchants: int = 2_000
    seed: int = 0
    epochs: int | None = None
    ratio: float | None = None
    cap_factor: float = 1.1
    waves: int = 50
    concurrency: int = 16
    retry_share: float = 0.02
    max_seconds: float = 180.0  # time allowed for sending the decisions of all waves
    explore: float = 0.1  # share of customers the service answers with a uniformly random level
    bootstrap: int = 500  # replicates of the off-policy intervals

    def check(self) -> None:
        if self.customers < 100 or self.merchants < 10:
            raise DataError(f"the demo needs ≥ 100 customers and ≥ 10 merchants, got {self.customers} and "
                            f"{self.merchants}")
        if not 1 <= self.waves <= self.customers or self.concurrency < 1:
            raise DataError(f"need 1 ≤ waves ≤ customers and concurrency ≥ 1, got {self.waves} and {self.concurrency}")
        if self.ratio is not None and not (math.isfinite(self.ratio) and self.ratio > 0):
            raise DataError(f"ratio B must be a finite number > 0, got {self.ratio}")
        if self.epochs is not None and self.epochs < 1:
            raise DataError(f"epochs must be ≥ 1, got {self.epochs}")
        if not 0 < self.explore < 1:
            raise DataError(f"explore must be a share in (0, 1): the demo judges plans on the exploration log, "
                            f"got {self.explore}")
        if not (self.cap_factor > 0 and 0 <= self.retry_share <= 1 and self.max_seconds > 0):
            raise DataError(f"need cap_factor > 0, 0 ≤ retry_share ≤ 1 and max_seconds > 0, got {self.cap_factor}, "
                            f"{self.retry_share} and {self.max_seconds}")


@dataclass
class Served:
    """What the replay against the service produced."""

    level_index: np.ndarray  # per customer: the level index issued, NO_COUPON or UNDECIDED
    redeemed: np.ndarray  # per customer: the outcome drawn from the true curve (False without a coupon)
    decisions: ReplayResult  # every decision request of every wave, retries included
    outcomes: ReplayResult
    retries: dict
    trace: list[dict]  # /v1/status after each wave's decisions and after its outcomes
    started: float  # epoch seconds of the first request
    status: dict  # the last /v1/status
    page: str  # the last GET /


def run_demo(out: str | Path, config: DemoConfig | None = None, console=None) -> dict:
    """Run the whole path of the module docstring into ``out``, write the report and return its data."""
    from promokit.allocation.budget_plan import plan_budget
    from promokit.console import get_console

    config = config or DemoConfig()
    config.check()
    out, console = local_dir(out, "out"), console or get_console()
    stages = _Stages(console, out)
    with stages("world"):
        world = make_world(config.customers, config.merchants, seed=config.seed)
        write_world(world, out / "world")
        tables = check_tables(world.customers, world.merchants, world.edges)
    B = float(config.ratio if config.ratio is not None else np.median(world.levels))
    responses, models = _train(world, tables, config, out, stages)
    with stages("allocate"):
        plan_budget(_scores_path(out, PAPER), ratio=B, seed=config.seed, out=out / "plan")
        plan = json.loads((out / "plan" / "report.json").read_text(encoding="utf-8"))
    # the campaign's expected spend by the model: the plan's on the customers it serves and a uniformly random level's
    # on the exploration bucket; the cap is cap_factor times it, in cents (floored, not rounded)
    explored = config.explore * float((responses[PAPER].customers * world.levels).mean(axis=1).sum())
    expected_spend = (1 - config.explore) * plan["expected_spend"] + explored
    cap = math.floor(config.cap_factor * expected_spend * 100) / 100
    campaign_dir = out / "campaign"
    with stages("campaign"):
        shutil.rmtree(campaign_dir, ignore_errors=True)  # a rerun into OUT starts a new campaign and ledger
        build_campaign(campaign_dir, _scores_path(out, PAPER), out / "plan", cap, explore=config.explore,
                       explore_seed=config.seed)
    with stages("serve and replay"):
        served = _serve(campaign_dir, world, config)
    with stages("compare"):
        arms = _arms(world, responses, served, B, config.seed)
        safety = _safety(campaign_dir, cap, served)
    with stages("judge on the exploration log"):
        plan_budget(_scores_path(out, BASELINE), ratio=B, seed=config.seed, out=out / "plan-baseline")
        judged = _judge(out, world, config)
    data = {"setup": {**asdict(config), "B": B, "cap": cap, "expected_spend": expected_spend,
                      "levels": world.levels.tolist(),
                      "edges": len(world.edges), "change_point": list(world.change_point)},
            "models": models.to_dict(orient="records"), "plan": plan, "arms": arms.to_dict(orient="records"),
            "safety": safety, "latency": _latency(served), "retries": served.retries,
            "served_levels": _served_levels(world, responses[PAPER], served).to_dict(orient="records"),
            "waves": served.trace, "pacing_trace": served.status["pacing"]["trace"],
            "timeline": served.status["timeline"], "replay_started": served.started, "judged": judged,
            "seconds": stages.seconds}
    with stages("report"):
        _report(data).write(out, html=True)
        write_text(served.page, out / "status.html")
    return data


# ------------------------------------------------------------------------------------------------ steps 2–4
def _train(world: IncentiveWorld, tables, config: DemoConfig, out: Path, stages) -> tuple[dict, pd.DataFrame]:
    """Fit both models on one split, save them, write their score tables; held-out metrics with the oracle's."""
    train = replace(DEMO_TRAIN, seed=config.seed, **({"epochs": config.epochs} if config.epochs else {}))
    responses, rows = {}, []
    for name in (PAPER, BASELINE):
        stage = f"train and score {name}"
        with stages(stage):
            model = IncentiveModel(name, train=train, refit=False).fit(tables)  # scored on the held-out customers
            model.save(out / "models" / name)
            responses[name] = model.responses(tables)
            write_parquet(wide_scores(tables.customers[CUSTOMER], responses[name].customers, world.levels),
                          _scores_path(out, name))
        rows.append((name, responses[name], len(model.history_.epochs), stages.seconds[stage]))
    split = model.split_rows(tables)  # the same for both: the split follows the training seed
    rows.append((ORACLE, Responses(world.levels, world.customer_truth, world.merchant_truth, None), 0, 0.0))
    metrics = []
    for name, r, epochs, seconds in rows:
        found = evaluate(r, tables, split.test_customers, split.test_merchants, world.customer_truth).metrics
        metrics.append({"model": name, "epochs": epochs, "seconds": seconds,
                        **{k: found[k] for k in ("auc_c", "mae_c", "curve_mae_c", "customers")},
                        "mean_response": float(r.customers.mean())})
    return responses, pd.DataFrame(metrics)


def _scores_path(out: Path, model: str) -> Path:
    return out / "scores" / model / "customers.parquet"


# ------------------------------------------------------------------------------------------------ step 5
def _serve(campaign_dir: Path, world: IncentiveWorld, config: DemoConfig) -> Served:
    """Step 5 of the module docstring against a ``promokit serve`` subprocess."""
    n, levels, truth = len(world.customers), world.levels, world.customer_truth
    rng = np.random.default_rng(config.seed)
    order, uniform = rng.permutation(n), rng.random(n)  # the outcome draws are fixed per customer up front
    ids = world.customers[CUSTOMER].astype(str).to_numpy()
    request = lambda i: {"request_id": f"demo-{ids[i]}", "customer_id": ids[i]}  # noqa: E731
    level_index, redeemed = np.full(n, UNDECIDED), np.zeros(n, dtype=bool)
    decisions, outcomes, trace = [], [], []
    retries = {"sent": 0, "answered_once": 0, "same_answer": 0}
    token = secrets.token_urlsafe(24)
    with running_service(campaign_dir, token) as base:
        started, deadline = time.time(), time.perf_counter() + config.max_seconds
        for wave, rows in enumerate(np.array_split(order, config.waves), start=1):
            again = rng.choice(len(rows), int(round(config.retry_share * len(rows))), replace=False)
            result = run_replay(base, token, [request(i) for i in (*rows, *rows[again])], config.concurrency,
                                max_seconds=max(deadline - time.perf_counter(), 1e-3))
            decisions.append(result)
            answers = [a if s == 200 else None for s, a in zip(result.statuses, result.answers)]
            for i, answer in zip(rows, answers):
                if answer is not None:
                    level_index[i] = NO_COUPON if answer["level_index"] is None else answer["level_index"]
            for first, second in zip((answers[k] for k in again), answers[len(rows):]):
                _check_retry(first, second, retries)
            trace.append(_status_point(base, wave, "decisions", started))

            mine = rows[level_index[rows] != UNDECIDED]
            issued = level_index[mine]
            p = np.where(issued >= 0, truth[mine, np.maximum(issued, 0)], 0.0)
            redeemed[mine] = uniform[mine] < p
            bodies = [{"request_id": request(i)["request_id"], "redeemed": bool(redeemed[i]),
                       **({"amount": float(levels[j])} if redeemed[i] else {})} for i, j in zip(mine, issued)]
            outcomes.append(run_replay(base, token, bodies, config.concurrency, path="/v1/outcomes"))
            trace.append(_status_point(base, wave, "outcomes", started))
        status, page = _get(base, "/v1/status"), _get(base, "/", parse=False)
    return Served(level_index, redeemed, _merge(decisions), _merge(outcomes), retries, trace, started, status, page)


def _check_retry(first: dict | None, second: dict | None, counts: dict) -> None:
    """Count a retried request: exactly one of its two answers is fresh (the other ``replayed``), both the same."""
    counts["sent"] += 1
    if first is not None and second is not None and first["replayed"] + second["replayed"] == 1:
        counts["answered_once"] += 1
        counts["same_answer"] += all(first[k] == second[k] for k in DECISION_FIELDS)


def _status_point(base: str, wave: int, after: str, started: float) -> dict:
    status = _get(base, "/v1/status")
    budget, pacing = status["budget"], status["pacing"]
    return {"wave": wave, "after": after, "seconds": status["time"] - started,
            **{k: budget[k] for k in ("decisions", "responses", "capped", "committed", "paid", "at_risk")},
            "lam": pacing["lam"], "target": pacing["target"], "realised_ratio": pacing["realised_ratio"]}


def _get(base: str, path: str, parse: bool = True):
    with urllib.request.urlopen(base + path, timeout=30) as answer:
        body = answer.read().decode("utf-8")
    return json.loads(body) if parse else body


def _merge(results: list[ReplayResult]) -> ReplayResult:
    return ReplayResult(np.concatenate([r.statuses for r in results]), [a for r in results for a in r.answers],
                        np.concatenate([r.latency_ms for r in results]), sum(r.seconds for r in results))


# ------------------------------------------------------------------------------------------------ steps 6–7
def _arms(world: IncentiveWorld, responses: dict[str, Responses], served: Served, B: float, seed: int) -> pd.DataFrame:
    """Step 6: every allocation at ratio budget B, scored by the true curves."""
    levels, truth = world.levels, world.customer_truth
    sim = simulate_budget(levels, truth, None, {name: (r.customers, None) for name, r in responses.items()}, B, seed)
    rows = np.flatnonzero(served.level_index >= 0)
    p = truth[rows, served.level_index[rows]]
    redemptions, spend = float(p.sum()), float((levels[served.level_index[rows]] * p).sum())
    served_row = {"model": PAPER, "budget": SERVED, "redemptions": redemptions,
                  "drawn_redemptions": int(served.redeemed.sum()), "customer_spend": spend,
                  "spend_per_redemption": spend / max(redemptions, 1e-12), "lam": served.status["pacing"]["lam"]}
    rng = np.random.default_rng(seed)
    j = rng.integers(len(levels), size=len(truth))  # a level drawn uniformly per customer: no budget at all
    p = truth[np.arange(len(truth)), j]
    uniform_row = {"model": UNIFORM, "budget": "none", "redemptions": float(p.sum()),
                   "drawn_redemptions": int((rng.random(len(p)) < p).sum()),
                   "customer_spend": float((levels[j] * p).sum()),
                   "spend_per_redemption": float((levels[j] * p).sum() / max(p.sum(), 1e-12)), "lam": float("nan")}
    arms = pd.concat([pd.DataFrame([served_row, uniform_row]), sim[list(served_row)]], ignore_index=True)
    arms = arms.rename(columns={"customer_spend": "spend"})
    arms["ratio_to_B"] = arms["spend_per_redemption"] / B
    ceiling = arms.loc[(arms.model == ORACLE) & (arms.budget == "planned"), "redemptions"].iloc[0]
    arms["share_of_oracle"] = arms["redemptions"] / ceiling
    return arms


def _judge(out: Path, world: IncentiveWorld, config: DemoConfig) -> dict:
    """The loop closed on the service's own log: the exploration bucket's decisions and outcomes, exported from the
    ledger (``campaign export --bucket explore``, with each level's propensity), judge the paper's plan against the
    baseline model's plan by off-policy evaluation (``policy evaluate``, DR on the paper's scores), beside the TRUE
    values of both plans on the same customers from the world's curves."""
    from promokit.policy.judging import judge, predicted_outcomes, read_scores, union_of_actions
    from promokit.policy.log import read_log
    from promokit.policy.plans import read_plan
    from promokit.serve.export import export_log

    exported = export_log(out / "campaign", bucket="explore")
    write_parquet(exported.log, out / "log.parquet")
    log = read_log(exported.log, "the exploration log", propensity="propensity")
    paper, _ = read_plan(out / "plan", log, PAPER)
    baseline, _ = read_plan(out / "plan-baseline", log, BASELINE)
    values, actions = read_scores(_scores_path(out, PAPER), log)
    predicted = predicted_outcomes(log, values, actions, union_of_actions(log, [paper, baseline]))
    evaluation = judge(log, [paper], baseline, predicted, bootstrap=config.bootstrap, seed=config.seed)
    evaluation.setup = {"log": f"{out / 'log.parquet'}: the exploration bucket's {len(log):,} customers",
                        "scores": f"{PAPER}'s", "reference": f"{BASELINE}'s plan"}
    evaluation.write(out / "ope")
    row = pd.Index(world.customers[CUSTOMER].astype(str)).get_indexer(log.ids)
    truth = {}
    for plan in (paper, baseline):
        level = plan.actions[plan.probabilities.argmax(axis=1)]
        p = world.customer_truth[row, np.searchsorted(world.levels, level)]
        truth[plan.name] = {"responses": float(p.mean()), "spend": float((level * p).mean())}
    result = evaluation.plans[0]
    return {"customers": len(log), "left_out": exported.left_out,
            "estimates": {name: {outcome: {e: v.to_dict() for e, v in by.items()} for outcome, by in means.items()}
                          for name, means in ((PAPER, result.means), (BASELINE, evaluation.reference.means))},
            "difference": {o: {e: v.to_dict() for e, v in by.items()} for o, by in result.differences.items()},
            "relative": {o: {e: v.to_dict() for e, v in by.items()} for o, by in result.relative.items()},
            "truth": truth, "diagnostics": result.diagnostics, "warnings": result.warnings}


def _safety(campaign_dir: Path, cap: float, served: Served) -> dict:
    """Step 7's budget checks from the ledger the service wrote (read after it stopped); money compared exactly,
    in the ledger's minor units."""
    ledger = Ledger(f"sqlite:///{(campaign_dir / 'ledger.sqlite').resolve()}")
    try:
        audit, totals = ledger.audit(), ledger.totals()
    finally:
        ledger.close()
    peak = max([p["at_risk"] for p in served.trace] + [t["at_risk"] for t in served.status["timeline"]])
    n, e = len(served.level_index), totals["exponent"]
    major = lambda units: to_major(units, e)  # noqa: E731
    return {"cap": cap, "peak_at_risk": peak, "at_risk": major(totals["at_risk"]), "paid": major(totals["paid"]),
            "committed": major(totals["committed"]),
            "within_cap": to_minor(peak, e, "peak") <= totals["cap"] == to_minor(cap, e, "cap"),
            "audit": {k: audit[k] for k in (*AUDITED, "distinct_ids")}, "totals": {k: totals[k] for k in AUDITED},
            "audit_matches": all(audit[k] == totals[k] for k in AUDITED),
            "exponent": e, "customers": n, "decided": int((served.level_index != UNDECIDED).sum()),
            "decided_once": totals["decisions"] == audit["distinct_ids"] == n,
            "ledger_replays": totals["replays"], "capped": totals["capped"],
            "no_coupon": int((served.level_index == NO_COUPON).sum()),
            "failed_decisions": int((served.decisions.statuses != 200).sum()),
            "failed_outcomes": int((served.outcomes.statuses != 200).sum())}


def _latency(served: Served) -> dict:
    def client(result: ReplayResult) -> dict:
        return {"requests": len(result.statuses), **result.percentiles(), "seconds": result.seconds,
                "throughput": result.throughput}

    return {"decisions": client(served.decisions), "outcomes": client(served.outcomes),
            "server_decisions": served.status["requests"]["latency_ms"]}


def _served_levels(world: IncentiveWorld, scores: Responses, served: Served) -> pd.DataFrame:
    """Per level issued: decisions, the drawn redemption rate, the mean true response and the model's."""
    rows = np.flatnonzero(served.level_index >= 0)
    j = served.level_index[rows]
    frame = pd.DataFrame({"level": world.levels[j], "drawn": served.redeemed[rows],
                          "true": world.customer_truth[rows, j], "model": scores.customers[rows, j]})
    table = frame.groupby("level").agg(decisions=("drawn", "size"), drawn_rate=("drawn", "mean"),
                                       true_rate=("true", "mean"), model_rate=("model", "mean"))
    table = table.reindex(world.levels)
    table["decisions"] = table["decisions"].fillna(0).astype(int)
    return table.reset_index()


def _report(data: dict) -> Report:
    """The report: what happened first, then each part with the figure that explains it, numbers for people."""
    s, safety, lat, plan, retries = data["setup"], data["safety"], data["latency"], data["plan"], data["retries"]
    report = Report("promokit campaign demo: world → model → allocation → service → outcomes", data=data)
    report.add("What happened", "\n".join(f"- {line}" for line in headline(data)))
    report.add("Setup", f"A synthetic incentive world (seed {s['seed']}): {count(s['customers'])} customers, "
                        f"{count(s['merchants'])} merchants, {count(s['edges'])} payment edges; coupon levels "
                        f"{', '.join(f'{v:g}' for v in s['levels'])} (the true response curves change slope between "
                        f"{s['change_point'][0]:g} and {s['change_point'][1]:g}). Budget: at most B = {s['B']:g} of "
                        f"expected incentive per expected redemption (eq. 16). Cap on money at risk "
                        f"{money(s['cap'])} ({s['cap_factor']:g} × the campaign's expected spend by the model: the plan's, and a "
                        f"random level's on the {percent(s['explore'])} of customers in the exploration bucket). The "
                        "customers ask in "
                        f"{s['waves']} waves, {s['concurrency']} requests in flight, {retries['sent']} of the requests "
                        "sent twice.")
    report.add("Allocations at the same budget, scored by the true curves", _arms_table(data), figures=("arms",))
    judged = data["judged"]
    report.add(f"Judged on the service's own exploration log ({count(judged['customers'])} customers given a random "
               f"level), beside the truth", _judged_table(judged)
               + f"\n\nThe paper's plan against the baseline's, paired: {_judged_difference(judged)}. The customers "
               f"are the exploration bucket ({percent(s['explore'])} of them, by a hash of their id); the levels and "
               "propensities are the ledger's (`campaign export`); DR uses the paper's scores. The full "
               "off-policy report is in ope/.")
    report.add("Budget safety, from the ledger", _safety_table(safety, retries), figures=("budget_burn",))
    by_level = pd.DataFrame(data["served_levels"])
    report.add("Redemptions by level issued: drawn, true and predicted rates", pd.DataFrame({
        "level": [f"{v:g}" for v in by_level["level"]], "decisions": by_level["decisions"].map(count),
        **{name: by_level[column].map(percent) for name, column in (("drawn rate", "drawn_rate"),
                                                                   ("true rate", "true_rate"),
                                                                   ("model's rate", "model_rate"))}}),
        figures=("served_levels",))
    waves = pd.DataFrame(data["waves"])
    shown = np.unique(np.linspace(1, s["waves"], min(s["waves"], 10)).round().astype(int))
    waves = waves[waves["wave"].isin(shown)]
    report.add(f"Pacing: λ and the budget after the decisions and after the outcomes of waves "
               f"{', '.join(map(str, shown))} (every wave in report.json)", pd.DataFrame({
                   "wave": waves["wave"], "after": waves["after"], "seconds": waves["seconds"].map("{:.1f}".format),
                   "decisions": waves["decisions"].map(count), "redemptions": waves["responses"].map(count),
                   "capped": waves["capped"].map(count), "money at risk": waves["at_risk"].map(money),
                   "paid": waves["paid"].map(money), "λ": waves["lam"].map("{:.4g}".format),
                   "target B_t": waves["target"].map("{:.2f}".format),
                   "realised spend per redemption": waves["realised_ratio"].map(
                       lambda v: "—" if v is None or not math.isfinite(v) else f"{v:.2f}")}),
               figures=("pacing",))
    models = pd.DataFrame(data["models"])
    report.add("Models on the held-out customers (one split; oracle = the true curves)", pd.DataFrame({
        "model": models["model"], "epochs": models["epochs"], "training seconds": models["seconds"].map("{:.0f}".format),
        "AUC": models["auc_c"].map("{:.3f}".format), "MAE": models["mae_c"].map("{:.4f}".format),
        "curve MAE": models["curve_mae_c"].map("{:.4f}".format), "customers": models["customers"].map(count),
        "mean response": models["mean_response"].map(percent)}))
    report.add("The offline plan (allocate budget on gnn-hazard's scores)",
               f"λ* = {plan['lam']:.6g}: {count(plan['expected_responses'])} expected redemptions and "
               f"{money(plan['expected_spend'])} of spend by the model's own scores ({money(plan['spend_per_response'])} "
               f"per redemption); solved in {plan['seconds']:.2f} s, relative gap {plan['relative_gap']:.1e}.")
    report.add("Latency (ms) and throughput", pd.DataFrame([
        {"measured": name, "requests": count(v.get("requests", v.get("count"))),
         **{k: "—" if v.get(k) is None else f"{v[k]:.1f}" for k in ("p50", "p90", "p99", "max")},
         "per second": "—" if v.get("throughput") is None else count(v["throughput"])}
        for name, v in (("client: decisions", lat["decisions"]), ("client: outcomes", lat["outcomes"]),
                        ("server: decision handler", lat["server_decisions"]))]))
    report.add("Seconds per step", pd.DataFrame({"step": list(data["seconds"]),
                                                 "seconds": [f"{v:.1f}" for v in data["seconds"].values()]}))
    report.figures.update(_figures(data))
    return report


def headline(data: dict) -> list[str]:
    """What happened, in a few lines: the served decisions against the oracle and the baseline at the budget, the
    cap, the service."""
    s, safety, lat, retries = data["setup"], data["safety"], data["latency"], data["retries"]
    arms = pd.DataFrame(data["arms"]).set_index(["model", "budget"])
    served, planned = arms.loc[(PAPER, SERVED)], arms.loc[(PAPER, "planned")]
    baseline, oracle = arms.loc[(BASELINE, "planned")], arms.loc[(ORACLE, "planned")]
    d = lat["decisions"]
    return [f"The paper's plan ({PAPER}) reaches {percent(planned['share_of_oracle'])} of the oracle's expected "
            f"redemptions at the budget B = {s['B']:g} ({count(planned['redemptions'])} of "
            f"{count(oracle['redemptions'])}), {percent(planned['redemptions'] / baseline['redemptions'] - 1, signed=True)}"
            f" against the baseline model's plan ({BASELINE}), by the true curves.",
            f"The service's decisions, {percent(s['explore'])} of them a random level for the exploration log, reach "
            f"{percent(served['share_of_oracle'])} of the oracle's ({count(served['redemptions'])}), spending "
            f"{money(served['spend_per_redemption'])} per redemption.",
            f"Money at risk peaked at {money(safety['peak_at_risk'])} of the {money(safety['cap'])} cap: "
            + ("never above it." if safety["within_cap"] else "ABOVE IT.")
            + f" {count(safety['capped'])} answers were changed by the cap; the ledger's audit "
            + ("equals its running totals to the cent." if safety["audit_matches"] else "DIFFERS from its totals."),
            f"On the service's own exploration log ({count(data['judged']['customers'])} customers), off-policy "
            f"evaluation puts the paper's plan against the baseline's at {_judged_difference(data['judged'])}.",
            f"{count(d['throughput'])} decisions a second at p50 {d['p50']:.1f} ms and p99 {d['p99']:.1f} ms on the "
            f"client; {retries['same_answer']} of {retries['sent']} retried requests came back with their first "
            "answer."]


def _judged_table(judged: dict) -> str:
    """Each plan's DR and IPS estimates per customer with their intervals, and its TRUE value on the same
    customers."""
    lines = ["| plan | estimator | redemptions per customer | true | spend per customer | true |", "|---|---|---|---|---|---|"]
    for plan, estimates in judged["estimates"].items():
        truth = judged["truth"][plan]
        for estimator in ("DR", "IPS"):
            r, c = estimates["responses"][estimator], estimates["spend"][estimator]
            lines.append(f"| {plan} | {estimator} | {_interval(r, percent)} | {percent(truth['responses'])} | "
                         f"{_interval(c, money)} | {money(truth['spend'])} |")
    return "\n".join(lines)


def _judged_difference(judged: dict) -> str:
    truth = judged["truth"]
    true = truth[PAPER]["responses"] / truth[BASELINE]["responses"] - 1
    dr = judged["relative"]["responses"]["DR"]
    return (f"{percent(dr['estimate'], signed=True)} [{percent(dr['low'], signed=True)}, "
            f"{percent(dr['high'], signed=True)}] redemptions by DR (true {percent(true, signed=True)})")


def _interval(e: dict, form) -> str:
    return f"{form(e['estimate'])} [{form(e['low'])}, {form(e['high'])}]"


def _arms_table(data: dict) -> pd.DataFrame:
    arms = pd.DataFrame(data["arms"])
    return pd.DataFrame({"model": arms["model"], "budget": arms["budget"],
                         "expected redemptions": arms["redemptions"].map(count),
                         "drawn redemptions": arms["drawn_redemptions"].map(count),
                         "spend per redemption": arms["spend_per_redemption"].map(money),
                         "share of the oracle": arms["share_of_oracle"].map(percent),
                         "λ": arms["lam"].map(lambda v: "—" if not math.isfinite(v) else f"{v:.4g}")})


def _audited(key: str, safety: dict) -> str:
    """A ledger total for people: a count, or money (kept in minor units) with the currency's decimals."""
    value = safety["totals"][key]
    if key in ("decisions", "responses"):
        return count(value)
    return money(float(to_major(value, safety["exponent"])), safety["exponent"])


def _safety_table(safety: dict, retries: dict) -> pd.DataFrame:
    mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
    checks = [("money at risk ≤ cap, at its peak", f"{money(safety['peak_at_risk'])} ≤ {money(safety['cap'])}",
               safety["within_cap"]),
              ("the ledger's audit = its running totals, exactly (money in minor units)",
               ", ".join(f"{k.replace('_', ' ')} {_audited(k, safety)}" for k in AUDITED), safety["audit_matches"]),
              ("every customer decided once", f"{count(safety['decided'])} of {count(safety['customers'])}; ledger "
               f"rows {count(safety['audit']['distinct_ids'])}", safety["decided_once"]),
              ("retries replayed with the same answer", f"{retries['same_answer']} of {retries['sent']}; ledger "
               f"replays {count(safety['ledger_replays'])}", retries["same_answer"] == retries["sent"]),
              ("answers changed by the cap", f"{count(safety['capped'])} ({count(safety['no_coupon'])} without a "
               "coupon)", True),
              ("failed requests", f"{safety['failed_decisions']} decisions, {safety['failed_outcomes']} outcomes",
               safety["failed_decisions"] + safety["failed_outcomes"] == 0)]
    return pd.DataFrame([(name, value, mark(ok)) for name, value, ok in checks], columns=["check", "value", "ok"])


def _figures(data: dict) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {}
    s, started = data["setup"], data["replay_started"]
    waves, timeline = pd.DataFrame(data["waves"]), pd.DataFrame(data["timeline"])
    fig, ax = plt.subplots(figsize=(8, 3.6))
    if len(timeline):
        ax.plot(timeline["second"] - started, timeline["at_risk"], label="money at risk (ledger, per second)")
        ax.plot(timeline["second"] - started, timeline["paid"], label="paid (ledger, per second)")
    ax.plot(waves["seconds"], waves["at_risk"], "k.-", linewidth=0.6, label="money at risk after each wave's "
            "decisions / outcomes")
    ax.plot(waves["seconds"], waves["paid"], "g.-", linewidth=0.6, label="paid after each wave step")
    ax.axhline(s["cap"], color="red", linestyle="--", label=f"cap {s['cap']:,.0f}")
    ax.set(xlabel="seconds since the first request", ylabel="money", title="Budget burn")
    ax.legend(fontsize=7)
    figures["budget_burn"] = fig

    trace = pd.DataFrame(data["pacing_trace"])
    fig, ax = plt.subplots(figsize=(8, 3.6))
    if len(trace):
        x = trace["time"] - started
        ax.step(x, trace["lam"], where="post", label="λ")
        right = ax.twinx()
        right.step(x, trace["target"], where="post", color="tab:orange", label="B_t (corrected target)")
        right.axhline(s["B"], color="tab:orange", linestyle=":", label=f"B = {s['B']:g}")
        right.set_ylabel("spend per redemption target")
        right.legend(fontsize=7, loc="lower right")
    ax.set(xlabel="seconds since the first request", ylabel="λ", title="Pacing: λ re-solved on recent traffic")
    ax.legend(fontsize=7, loc="upper left")
    figures["pacing"] = fig

    levels = pd.DataFrame(data["served_levels"])
    fig, ax = plt.subplots(figsize=(8, 3.6))
    positions = np.arange(len(levels))
    ax.bar(positions, levels["decisions"], color="lightgray", label="decisions")
    ax.set(xticks=positions, xticklabels=[f"{v:g}" for v in levels["level"]], xlabel="level issued",
           ylabel="decisions", title="Served: redemption rate by level")
    right = ax.twinx()
    for column, style in (("drawn_rate", "ko"), ("true_rate", "g^-"), ("model_rate", "bs--")):
        right.plot(positions, levels[column], style, label=column.replace("_", " "))
    right.set_ylabel("redemption rate")
    right.legend(fontsize=7, loc="upper left")
    figures["served_levels"] = fig

    arms = pd.DataFrame(data["arms"])
    labels = [f"{m} {b}" for m, b in zip(arms["model"], arms["budget"])]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    left.barh(labels, arms["redemptions"], color="tab:blue")
    left.set(xlabel="expected redemptions (true curves)", title="Redemptions")
    right.barh(labels, arms["spend_per_redemption"], color="tab:orange")
    right.axvline(s["B"], color="black", linestyle="--", label=f"B = {s['B']:g}")
    right.set(xlabel="spend per redemption (true curves)", title="Spend per redemption")
    right.legend(fontsize=7)
    left.invert_yaxis()
    fig.tight_layout()
    figures["arms"] = fig
    return figures


# ------------------------------------------------------------------------------------------------ progress
class _Stages:
    """Times each step, prints one line when it ends and records the steps finished so far in ``out/stages.json``;
    on Ctrl-C, says which step was interrupted and that ``out`` keeps what the finished ones wrote."""

    def __init__(self, console, out: Path):
        self.console, self.out, self.seconds = console, out, {}

    @contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        except KeyboardInterrupt:
            done = ", ".join(self.seconds) or "none"
            self.console.print(f"interrupted during {name!r}: {self.out} keeps what the finished stages wrote "
                               f"({done}; {self.out / 'stages.json'})", highlight=False, soft_wrap=True)
            raise
        self.seconds[name] = time.perf_counter() - started
        write_json({"finished": self.seconds}, self.out / "stages.json")
        self.console.print(f"{name}: {self.seconds[name]:.1f} s", highlight=False)


def print_summary(data: dict, out: Path, console=None) -> None:
    """The headline table and lines on screen."""
    from promokit.console import get_console, print_table

    console = console or get_console()
    print_table(f"allocations at B = {data['setup']['B']:g}, scored by the true curves",
                _arms_table(data).drop(columns="λ").set_index(["model", "budget"]))
    for line in headline(data):
        console.print(f"- {line}", highlight=False)
    judged = data["judged"]
    rows = {plan: {"redemptions per customer (DR)": _interval(estimates["responses"]["DR"], percent),
                   "true": percent(judged["truth"][plan]["responses"]),
                   "spend per customer (DR)": _interval(estimates["spend"]["DR"], money),
                   "true spend": money(judged["truth"][plan]["spend"])}
            for plan, estimates in judged["estimates"].items()}
    print_table(f"plans judged on the exploration log ({count(judged['customers'])} customers)",
                pd.DataFrame(rows).T.rename_axis("plan"))
    console.print(f"total {sum(data['seconds'].values()):.0f} s; report written to {out / 'report.md'} "
                  f"(+ report.html, report.json, PNGs, status.html)", highlight=False)

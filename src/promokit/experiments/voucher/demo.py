"""The voucher demo: every model of the DMBGN paper on the synthetic voucher world, against the oracle."""

from __future__ import annotations

import pandas as pd

from promokit.experiments.bench_summary import add_floor_section, floor_verdict
from promokit.experiments.voucher import bench
from promokit.experiments.voucher.bench import time_split
from promokit.experiments.voucher.settings import DEMO_TRAIN
from promokit.experiments.voucher.world import DEMO_WORLD, VoucherWorld, make_world
from promokit.report import Report
from promokit.training import TrainConfig

MODELS = ["lr", "gbdt", "dnn", "wdl", "din", "dmbgn-avgpooling", "dmbgn-pretrained", "dmbgn"]


def run_demo(world: dict | None = None, seed: int = 0, models=MODELS, train: TrainConfig = DEMO_TRAIN,
             on_result=None) -> tuple[pd.DataFrame, Report]:
    """Every model with ``train`` (``DEMO_TRAIN``) on one voucher world (``world``: :func:`make_world`'s sizes over
    ``DEMO_WORLD``) split by time; returns the DMBGN Table 3 summary with the oracle and the report.
    ``on_result(row)`` sees each model's test row as it finishes."""
    world_params = {**DEMO_WORLD, **(world or {})}
    voucher_world = make_world(**world_params, seed=seed)
    split = time_split(voucher_world.tables)
    results = bench.run(voucher_world.tables, split, list(models), [seed], None, train, on_result=on_result)
    oracle = bench.oracle_row(voucher_world.tables, split.test, voucher_world.truth)
    summary = bench.summarise(results, oracle)
    return summary, demo_report(summary, results, oracle, voucher_world, split)


def demo_report(summary: pd.DataFrame, results: pd.DataFrame, oracle: dict, world: VoucherWorld,
                split: bench.Split) -> Report:
    sessions = world.tables.sessions
    parts = pd.DataFrame({"sessions": [len(split.train), len(split.valid), len(split.test)],
                          "redeemed": [int(sessions["redeemed"].iloc[r].sum()) for r in
                                       (split.train, split.valid, split.test)]},
                         index=pd.Index(["train", "valid", "test"], name="part"))
    report = Report("promokit voucher demo: DMBGN and its baselines on the synthetic voucher world")
    report.add("Data", f"{len(sessions):,} sessions, {sessions.user_id.nunique():,} users, "
                       f"{sessions.voucher_id.nunique():,} vouchers, {len(world.tables.events):,} behaviour events; "
                       "split by collection time 80/10/10; epochs chosen on validation.")
    report.add("Split", parts)
    report.add("Test metrics (DMBGN Table 3 shape; oracle = the generator's true probabilities)", summary)
    add_floor_section(report, [floor_verdict(results, "lr", "auc", what="test AUC")])
    report.data = {"results": results.to_dict(orient="records"), "oracle": oracle,
                   "split": parts.reset_index().to_dict(orient="records")}
    report.figures["auc_vs_oracle"] = auc_figure(results, oracle)
    return report


def auc_figure(results: pd.DataFrame, oracle: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = results.groupby("model", sort=False)["auc"].mean()
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(values), 3.2))
    ax.bar(values.index, values.to_numpy(), color="#4c72b0")
    ax.axhline(oracle["auc"], color="#c44e52", linestyle="--", label="oracle")
    ax.set_ylim(max(0.5, min(values.min(), oracle["auc"]) - 0.03), None)
    ax.set_ylabel("test AUC")
    ax.tick_params(axis="x", rotation=30)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig

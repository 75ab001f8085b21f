"""The main job: every model of the ESM² paper on the synthetic world, against the oracle, as a report."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from promokit.conversion.estimator import DEFAULT_TRAIN
from promokit.experiments.bench_summary import add_floor_section, floor_verdict
from promokit.experiments.conversion import bench
from promokit.experiments.conversion.bench import world_split
from promokit.experiments.conversion.world import ConversionWorld, make_world
from promokit.report import Report
from promokit.training import TrainConfig

MODELS = ["lr", "gbdt", "dnn", "dnn-os", "esmm", "esm2"]
# The defaults with at most 4 epochs: on the demo world the validation CVR AUC peaks by the fourth epoch and the
# later ones (up to 8 with patience 2) add minutes, not accuracy.
DEMO_TRAIN = replace(DEFAULT_TRAIN, epochs=4)


def run_demo(n_users: int, n_items: int, n_impressions: int, seed: int = 0, models=MODELS,
             train: TrainConfig = DEMO_TRAIN, on_result=None, n_micro: int = 0) -> tuple[pd.DataFrame, Report]:
    """Every model with its defaults (``train``: ``DEMO_TRAIN``) on one world; with ``n_micro`` micro-behaviours
    declared as labels (for ``gmcm`` and the ``mcm-*`` ablations) and scored as node AUCs."""
    world = make_world(n_users=n_users, n_items=n_items, n_impressions=n_impressions, seed=seed, n_micro=n_micro)
    split, truth, spec = world_split(world, seed)
    spec = replace(spec, micro_behaviors=world.micro_behaviors)
    results = bench.run(split, list(models), [seed], spec, None, train, on_result=on_result, truth=truth)
    oracle = bench.oracle_row(split.test, truth, spec)
    table = pd.concat([results, pd.DataFrame([oracle])], ignore_index=True)
    report = demo_report(table, world, split)
    if world.micro_behaviors:
        report.add("GMCM's Tables 2–3 (RI of gmcm in ‰) and node AUCs",
                   bench.with_oracle(bench.gmcm_summary(results, world.micro_behaviors), oracle))
    return table, report


def demo_report(table: pd.DataFrame, world: ConversionWorld, split: bench.Split) -> Report:
    columns = ["model", *bench.HEADLINE, "ctavr_auc", "fit_seconds"]
    headline = table[[c for c in columns if c in table.columns]].set_index("model")
    oracle = headline.loc["oracle"]
    gaps = headline.drop(index="oracle")[list(bench.HEADLINE[:4])] - oracle[list(bench.HEADLINE[:4])]
    t = world.table
    stats = pd.DataFrame({"rows": [len(split.train), len(split.valid), len(split.test)],
                          "clicks": [int(s.click.sum()) for s in (split.train, split.valid, split.test)],
                          "dactions": [int(s.daction.sum()) for s in (split.train, split.valid, split.test)],
                          "purchases": [int(s.purchase.sum()) for s in (split.train, split.valid, split.test)]},
                         index=pd.Index(["train", "valid", "test"], name="part"))
    report = Report("promokit conversion demo: ESM² and its baselines on the synthetic world")
    report.add("Data", f"{len(t):,} impressions, {t.user_id.nunique():,} users, {t.item_id.nunique():,} items; "
                       "random 80/10/10 split.")
    report.add("Split", stats)
    report.add("Test metrics (ESM² Table 3 shape; oracle = the generator's true probabilities)", headline)
    report.add("Gap to the oracle (model − oracle)", gaps)
    add_floor_section(report, [floor_verdict(table, "lr", metric, what=f"test {metric}")
                               for metric in ("cvr_auc", "ctcvr_auc")])
    report.data = {"results": table.to_dict(orient="records"), "split": stats.reset_index().to_dict(orient="records")}
    report.figures["auc_vs_oracle"] = auc_figure(headline)
    return report


def auc_figure(headline: pd.DataFrame):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["cvr_auc", "ctcvr_auc", "ctcvr_gauc"]
    models = [m for m in headline.index if m != "oracle"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.2))
    for ax, metric in zip(axes, metrics):
        values = headline.loc[models, metric].astype(float)
        ax.bar(models, values, color="#4c72b0")
        ax.axhline(float(headline.loc["oracle", metric]), color="#c44e52", linestyle="--", label="oracle")
        low = min(values.min(), float(headline.loc["oracle", metric]))
        ax.set_ylim(max(0.5, low - 0.03), None)
        ax.set_title(metric)
        ax.tick_params(axis="x", rotation=30)
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    return fig

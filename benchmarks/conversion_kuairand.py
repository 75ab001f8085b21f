"""GBDT, DNN, DNN-OS, ESMM and ESM² on KuaiRand-Pure, split by day: the ESM² paper's Table 3 on real data.

Mapping (see :mod:`promokit.conversion.kuairand`): click = ``is_click``, DAction = like | comment | forward |
profile enter, purchase = ``is_follow`` — both on clicked rows only (orphans on unclicked rows set to 0).
Split by time on ``date``: train on the earliest days, early-stop on the next day, test on the last day.

KuaiRand (Gao et al., CIKM 2022) is CC BY-SA 4.0; this script reads a local copy and writes only metrics.

Usage::

    .venv/bin/python benchmarks/conversion_kuairand.py                          # 5 models × seeds 0,1,2
    .venv/bin/python benchmarks/conversion_kuairand.py --models esmm,esm2 --seeds 0 --score-on valid

``--score-on valid`` scores on the validation day instead of the test day: use it (and the printed
validation losses) to choose settings, so the test day is looked at once.

Defaults were chosen on the validation day (2022-04-29), never the test day: towers (128, 64, 32), 8-dim
embeddings, dropout 0.1, Adam lr 5e-4, batch 1000, up to 10 epochs, early stopping with patience 2 on the
validation loss. The networks reach their best validation loss at epoch 3–7 and stop 2 epochs later
(overfitting, not undertraining). The id fields (user, video, author) are left out by default: with them
the CTR part of the validation loss improves (≈ 0.606–0.611 vs 0.616–0.617) but the CTCVR part gets worse
(best ≈ 0.0096–0.0099 vs 0.0093–0.0095; a constant predictor scores ≈ 0.0097), since ~60 training follows
cannot fit tens of thousands of id embeddings. ``--ids`` puts them back.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from promokit.conversion import bench
from promokit.conversion.estimator import ConversionModel
from promokit.conversion.kuairand import LOG_FILE, kuairand_spec, load_kuairand
from promokit.data import DataError
from promokit.metrics import auc
from promokit.training import TrainConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = (REPO / ".." / "shared" / "data" / "kuairand_pure").resolve()
#: Narrow towers for ~95k rows, like promokit.conversion.demo.DEMO_NET.
NET = {"emb_dim": 8, "hidden": (128, 64, 32), "dropout": 0.1}
HEADLINE = ("cvr_auc", "ctcvr_auc", "ctcvr_gauc", "ctr_auc")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help=f"KuaiRand-Pure folder (default {DEFAULT_DATA})")
    p.add_argument("--log", default=LOG_FILE, help="log file in the folder")
    p.add_argument("--models", default="gbdt,dnn,dnn-os,esmm,esm2")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--patience", type=int, default=2)
    p.add_argument("--params", default=None, help="network parameters for every neural model, JSON "
                                                   f"(default {json.dumps(NET)})")
    p.add_argument("--valid-days", type=int, default=1, help="days before the test day(s) used for early stopping")
    p.add_argument("--test-days", type=int, default=1, help="last days used for testing")
    p.add_argument("--score-on", choices=("test", "valid"), default="test",
                   help="'valid' scores on the validation day(s), for choosing settings without the test day")
    p.add_argument("--ids", action="store_true",
                   help="also use the user/item/author ids as features (they help CTR but overfit the ~60 "
                        "training follows: higher validation CTCVR loss, so they are off by default)")
    p.add_argument("--bootstrap", type=int, default=1000,
                   help="paired bootstrap resamples of the scored day for ESM² − ESMM (0: skip)")
    p.add_argument("--out", type=Path, default=None, help="folder for report.md / report.json / results.csv")
    return p.parse_args(argv)


def day_split(table: pd.DataFrame, valid_days: int, test_days: int) -> tuple[bench.Split, dict[str, list[int]]]:
    """Train on all but the last ``valid_days + test_days`` dates, validate on the next, test on the last."""
    dates = sorted(int(d) for d in table["date"].unique())
    if valid_days < 1 or test_days < 1 or len(dates) < valid_days + test_days + 1:
        raise DataError(f"cannot cut {len(dates)} days ({dates}) into train / {valid_days} valid / "
                        f"{test_days} test days")
    cut_valid, cut_test = dates[-(valid_days + test_days)], dates[-test_days]
    date = table["date"]
    parts = bench.Split(table[date < cut_valid], table[(date >= cut_valid) & (date < cut_test)],
                        table[date >= cut_test])
    days = {"train": [d for d in dates if d < cut_valid], "valid": [d for d in dates if cut_valid <= d < cut_test],
            "test": [d for d in dates if d >= cut_test]}
    return parts, days


def part_stats(split: bench.Split, days: dict[str, list[int]]) -> pd.DataFrame:
    rows = []
    for name in ("train", "valid", "test"):
        part = getattr(split, name)
        d = days[name]
        rows.append({"part": name, "days": f"{d[0]}–{d[-1]}" if len(d) > 1 else str(d[0]), "rows": len(part),
                     "users": part["user_id"].nunique(), "clicks": int(part["click"].sum()),
                     "dactions": int(part["daction"].sum()), "purchases": int(part["purchase"].sum())})
    return pd.DataFrame(rows).set_index("part")


def auc_standard_error(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley & McNeil (1982) standard error of an AUC from n_pos positives and n_neg negatives."""
    if not (n_pos and n_neg) or not math.isfinite(auc):
        return float("nan")
    q1, q2 = auc / (2 - auc), 2 * auc ** 2 / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc ** 2) + (n_neg - 1) * (q2 - auc ** 2)) / (n_pos * n_neg)
    return math.sqrt(max(var, 0.0))


def paired_bootstrap(labels: np.ndarray, scores: dict[str, list[np.ndarray]], a: str, b: str, n_boot: int,
                     seed: int = 0) -> dict[str, float]:
    """Difference of the seed-averaged AUC of model ``a`` minus model ``b`` on ``n_boot`` resamples of the rows
    (both models scored on the same resample): mean, 95 % interval and the share of resamples where a > b."""
    rng = np.random.default_rng(seed)
    n, diffs = len(labels), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(n_boot):
            rows = rng.integers(0, n, n)
            y = labels[rows]
            if y.min() == y.max():
                continue
            mean_auc = {m: np.mean([auc(y, p[rows]) for p in scores[m]]) for m in (a, b)}
            diffs.append(mean_auc[a] - mean_auc[b])
    diffs = np.asarray(diffs)
    observed = np.mean([auc(labels, p) for p in scores[a]]) - np.mean([auc(labels, p) for p in scores[b]])
    return {"observed": float(observed), "low": float(np.quantile(diffs, 0.025)),
            "high": float(np.quantile(diffs, 0.975)), "share_a_better": float((diffs > 0).mean()),
            "resamples": len(diffs)}


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore", message=".*imputed with the training mean.*")
    started = time.perf_counter()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    net = json.loads(args.params) if args.params else NET
    try:
        table, report = load_kuairand(args.data_dir, log=args.log)
        split, days = day_split(table, args.valid_days, args.test_days)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = kuairand_spec(table, ids=args.ids)
    stats = part_stats(split, days)
    print(report.summary())
    print("KuaiRand: Gao et al., CIKM 2022, CC BY-SA 4.0.\n")
    print(f"time split on date (scored on: {args.score_on})")
    print(stats.to_string(), "\n")
    print(f"features: {len(spec.categorical)} categorical {spec.categorical}, numeric {spec.numeric}")
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, patience=args.patience,
                         progress=False)
    print(f"network {json.dumps(net)}; training {config.to_dict()}\n")

    scored = split if args.score_on == "test" else bench.Split(split.train, split.valid, split.valid)
    histories: list[dict] = []
    predictions: dict[str, list[pd.DataFrame]] = {}  # model → its predictions on the scored part, one per seed

    def record(model: ConversionModel) -> None:
        """Keep each neural model's training history and the ESMM / ESM² predictions for the bootstrap."""
        h = model.report.history
        if h is not None:
            histories.append({"model": model.name, "seed": model.train_config.seed, "epochs": len(h.epochs),
                              "best_epoch": h.best_epoch + 1, "best_valid_loss": h.best_score,
                              "valid_losses": [round(e.get("valid_loss", float("nan")), 5) for e in h.epochs],
                              "stopped": h.stopped})
        if model.name in ("esmm", "esm2"):
            predictions.setdefault(model.name, []).append(model.predict(scored.test))

    def done(row):
        h = next((h for h in reversed(histories) if h["model"] == row["model"] and h["seed"] == row["seed"]), None)
        trained = (f"  best valid loss {h['best_valid_loss']:.5f} at epoch {h['best_epoch']}/{h['epochs']}"
                   if h else "")
        print(f"  seed {row['seed']} {row['model']:>7}: CVR AUC {row['cvr_auc']:.4f}  CTCVR AUC "
              f"{row['ctcvr_auc']:.4f}  CTCVR GAUC {row['ctcvr_gauc']:.4f}  CTR AUC {row['ctr_auc']:.4f}  "
              f"({row['fit_seconds']:.0f} s){trained}", flush=True)

    results = bench.run(scored, models, seeds, spec, {m: net for m in models if m != "gbdt"}, config,
                        on_result=done, on_fitted=record)

    summary = bench.summarise(results, base="esmm" if "esmm" in models else None, metrics=HEADLINE)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 20)
    print("\nmean ± std over seeds", seeds)
    print(summary.to_string())

    evaluated = scored.test
    clicked = evaluated[evaluated["click"] == 1]
    n_pos, n_clicked = int(evaluated["purchase"].sum()), len(clicked)
    mean_cvr = results.groupby("model")["cvr_auc"].mean()
    se = {m: auc_standard_error(a, n_pos, n_clicked - n_pos) for m, a in mean_cvr.items()}
    part = "test" if args.score_on == "test" else "valid"
    gauc_users = int(results["ctcvr_gauc_groups"].iloc[0] - results["ctcvr_gauc_skipped"].iloc[0]) \
        if "ctcvr_gauc_groups" in results else 0
    mean_se = float(np.nanmean(list(se.values())))
    note = (f"\n{part} part: {len(evaluated):,} impressions, {n_clicked:,} clicks, {int(evaluated['daction'].sum())} "
            f"dactions, {n_pos} purchases (follows) — only {report.purchases} in the whole log. Noise warning: "
            f"the CVR AUC rests on {n_pos} positives among {n_clicked:,} clicked rows; its sampling standard "
            f"error (Hanley–McNeil) is ≈ {mean_se:.3f} per model, far larger than the seed std above (which "
            f"measures training noise only). The CTCVR AUC rests on the same {n_pos} positives, and the CTCVR "
            f"GAUC averages over only {gauc_users} users (those with both a follow and a non-follow "
            f"impression), so it is noisier still. Compare models with the paired bootstrap below, not by "
            f"eye.")
    print(note)
    boot = {}
    if args.bootstrap and {"esmm", "esm2"} <= set(predictions):
        click = evaluated["click"].to_numpy() == 1
        purchase = evaluated["purchase"].to_numpy()
        for metric, rows, column in (("cvr_auc", click, "p_cvr"), ("ctcvr_auc", slice(None), "p_ctcvr")):
            scores = {m: [p[column].to_numpy()[rows] for p in predictions[m]] for m in ("esm2", "esmm")}
            boot[metric] = paired_bootstrap(purchase[rows], scores, "esm2", "esmm", args.bootstrap)
        lines = [f"  {metric}: {b['observed']:+.4f}  95 % interval [{b['low']:+.4f}, {b['high']:+.4f}]  "
                 f"ESM² ahead in {100 * b['share_a_better']:.0f} % of resamples" for metric, b in boot.items()]
        boot_text = (f"paired bootstrap of the {part} day ({args.bootstrap} row resamples, seed-averaged AUC), "
                     "ESM² − ESMM:\n" + "\n".join(lines))
        print("\n" + boot_text)
    elapsed = time.perf_counter() - started
    print(f"total runtime {elapsed / 60:.1f} min")

    if args.out is not None:
        from promokit.report import Report

        args.out.mkdir(parents=True, exist_ok=True)
        results.to_csv(args.out / "results.csv", index=False)
        out = Report("promokit conversion models on KuaiRand-Pure (time split)",
                     data={"results": results.to_dict(orient="records"), "histories": histories,
                           "split": stats.reset_index().to_dict(orient="records"), "network": net,
                           "train": config.to_dict(), "load_report": report.summary(), "bootstrap": boot})
        out.add("Data", report.summary() + "\n\nKuaiRand: Gao et al., CIKM 2022, CC BY-SA 4.0.")
        out.add("Time split", stats)
        out.add(f"Mean ± std over seeds {seeds} ({part} part)", summary)
        out.add("Noise", note.strip() + ("\n\n" + boot_text if boot else ""))
        out.write(args.out)
        print(f"report written to {args.out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

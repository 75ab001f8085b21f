"""The conversion models against the linear floor on KuaiRand-Pure, split by day: defaults and tuned.

Mapping (see :mod:`promokit.conversion.kuairand`): click = ``is_click``; purchase = ``--purchase``
(``is_follow``, or ``is_like``); DAction = like | comment | forward | profile enter without the purchase
behaviour — both on clicked rows only (orphans on unclicked rows set to 0). Train on 04-25…04-28, early-stop
on 04-29, test on 04-30 (``--valid-days`` / ``--test-days`` move the cut). Every model runs with its defaults;
``--tuned DIR`` adds a second row per model with the parameters ``promokit conversion tune`` wrote to
``DIR/<model>/params.json`` (tuned on the validation day only). A paired bootstrap of the test day compares
each model with each ``--against`` model (LR, the floor every deep model has to beat, and ESMM by default).

Micro-behaviours (GMCM): the post-click behaviours of ``--micro-behaviors`` (default like, comment, forward,
profile enter, long view, hate without the purchase behaviour) are written as 0/1 labels nested under the click
and declared in the spec; they are never features. The models that learn from them (gmcm, mcm-2, mcm-10,
mcm-gru) get node AUCs, and a second table gives the GMCM paper's Tables 2–3 (CVR/CTCVR AUC, CTCVR GAUC, CVR/CTCVR
MSE, RI of gmcm in permille).

KuaiRand (Gao et al., CIKM 2022) is CC BY-SA 4.0; this script reads a local copy and writes only metrics.

Usage::

    .venv/bin/python benchmarks/conversion_kuairand.py --purchase is_like --tuned tuned/like
    .venv/bin/python benchmarks/conversion_kuairand.py --models lr,esm2 --seeds 0 --score-on valid
    .venv/bin/python benchmarks/conversion_kuairand.py --models lr,esmm,esm2,base,dcn,mcm-10,mcm-gru,gmcm

``--score-on valid`` scores on the validation day instead of the test day, for choosing settings without
looking at the test day.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from promokit.conversion.estimator import ConversionModel
from promokit.experiments.conversion import bench
from promokit.conversion.kuairand import (
    DACTION_BEHAVIOURS,
    LOG_FILE,
    MICRO_BEHAVIOURS,
    kuairand_spec,
    load_kuairand,
)
from promokit.data import DataError
from promokit.metrics import auc, paired_bootstrap

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = (REPO / ".." / "shared" / "data" / "kuairand_pure").resolve()
HEADLINE = ("cvr_auc", "ctcvr_auc", "ctcvr_gauc", "ctr_auc")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help=f"KuaiRand-Pure folder (default {DEFAULT_DATA})")
    p.add_argument("--log", default=LOG_FILE, help="log file in the folder")
    p.add_argument("--purchase", default="is_follow", help="log column that is the conversion (is_follow, is_like)")
    p.add_argument("--models", default="lr,gbdt,esmm,esm2")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--tuned", type=Path, default=None,
                   help="folder of tune results: DIR/<model>/params.json gives a second, tuned row per model")
    p.add_argument("--no-ids", action="store_true", help="leave out the user / video / author ids")
    p.add_argument("--valid-days", type=int, default=1, help="days before the test day(s) used for early stopping")
    p.add_argument("--test-days", type=int, default=1, help="last days used for testing")
    p.add_argument("--score-on", choices=("test", "valid"), default="test",
                   help="'valid' scores on the validation day(s), for choosing settings without the test day")
    p.add_argument("--micro-behaviors", default=None,
                   help="comma-separated log columns written as micro-behaviour labels ('none': none; default: "
                        "like, comment, forward, profile enter, long view, hate without the purchase)")
    p.add_argument("--against", default="lr,esmm",
                   help="comma-separated models every other model is compared with in the paired bootstrap")
    p.add_argument("--bootstrap", type=int, default=1000,
                   help="paired bootstrap resamples of the scored day, each model − each --against model (0: skip)")
    p.add_argument("--wide", default=None,
                   help="comma-separated wide settings (none, joint, offset): a row per neural model and setting, "
                        "labelled '<model> <setting>' (default: each model's own default)")
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


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*imputed with the training mean.*")
    started = time.perf_counter()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    tuned = {m: json.loads((args.tuned / m / "params.json").read_text()) for m in models
             if args.tuned is not None and (args.tuned / m / "params.json").is_file()}
    try:
        daction = tuple(b for b in DACTION_BEHAVIOURS if b != args.purchase)
        micro = (MICRO_BEHAVIOURS if args.micro_behaviors is None else () if args.micro_behaviors == "none"
                 else tuple(c.strip() for c in args.micro_behaviors.split(",")))
        table, report = load_kuairand(args.data_dir, log=args.log, daction=daction, purchase=args.purchase,
                                      micro=micro)
        split, days = day_split(table, args.valid_days, args.test_days)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = kuairand_spec(table, ids=not args.no_ids)
    stats = part_stats(split, days)
    print(report.summary())
    print("KuaiRand: Gao et al., CIKM 2022, CC BY-SA 4.0.\n")
    print(f"time split on date (scored on: {args.score_on})")
    print(stats.to_string(), "\n")
    print(f"features: {len(spec.categorical)} categorical {spec.categorical}, numeric {spec.numeric}; "
          f"micro-behaviour labels: {spec.micro_behaviors}")
    print("tuned parameters: " + (json.dumps(tuned) if tuned else "none") + "\n")

    scored = split if args.score_on == "test" else bench.Split(split.train, split.valid, split.valid)
    histories: list[dict] = []
    predictions: dict[str, list[pd.DataFrame]] = {}  # row label → its predictions on the scored part, per seed
    variants = [(m, m, None) for m in models] + [(f"{m} tuned", m, p) for m, p in tuned.items()]
    if args.wide:
        settings = [w.strip() for w in args.wide.split(",") if w.strip()]
        variants = [v for label, name, p in variants
                    for v in ([(label, name, p)] if name in bench.SHALLOW else
                              [(f"{label} {w}", name, {**(p or {}), "wide": w}) for w in settings])]

    def record(label: str):
        def on_fitted(model: ConversionModel) -> None:
            h = model.history_
            if h is not None and h.unit == "epoch":
                histories.append({"model": label, "seed": model.train_config.seed, "epochs": len(h.epochs),
                                  "best_epoch": h.best_epoch + 1, "monitor": h.monitor, "best": h.best_score,
                                  "stopped": h.stopped})
            predictions.setdefault(label, []).append(model.predict(scored.test))
        return on_fitted

    def done(label: str):
        def on_result(row):
            print(f"  seed {row['seed']} {label:>11}: CVR AUC {row['cvr_auc']:.4f}  CTCVR AUC {row['ctcvr_auc']:.4f}  "
                  f"CTCVR GAUC {row['ctcvr_gauc']:.4f}  CTR AUC {row['ctr_auc']:.4f}  ({row['fit_seconds']:.0f} s)",
                  flush=True)
        return on_result

    frames = []
    for label, name, params in variants:
        runs = seeds if name != "lr" else seeds[:1]  # LR is solved to its optimum: seeds change nothing
        result = bench.run(scored, [name], runs, spec, {name: params} if params else None,
                           on_result=done(label), on_fitted=record(label))
        frames.append(result.assign(model=label))
    results = pd.concat(frames, ignore_index=True)

    summary = bench.summarise(results, base="lr" if "lr" in models else None, metrics=HEADLINE)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 20)
    print("\nmean ± std over seeds", seeds)
    print(summary.to_string())
    gmcm_table = bench.gmcm_summary(results, spec.micro_behaviors) if spec.micro_behaviors else None
    if gmcm_table is not None:
        print("\nGMCM's Tables 2–3 (RI of gmcm in ‰) and node AUCs")
        print(gmcm_table.to_string())

    evaluated = scored.test
    clicked = evaluated[evaluated["click"] == 1]
    n_pos, n_clicked = int(evaluated["purchase"].sum()), len(clicked)
    se = auc_standard_error(float(results["cvr_auc"].mean()), n_pos, n_clicked - n_pos)
    part = "test" if args.score_on == "test" else "valid"
    note = (f"{part} part: {len(evaluated):,} impressions, {n_clicked:,} clicks, {n_pos} purchases "
            f"({args.purchase}). The CVR AUC rests on {n_pos} positives among {n_clicked:,} clicked rows: its "
            f"sampling standard error (Hanley–McNeil) is ≈ {se:.3f}, beside which the seed std above (training "
            f"noise only) is small. Compare models with the paired bootstrap, not by eye.")
    print("\n" + note)
    boot, boot_text = {}, ""
    references = [m.strip() for m in args.against.split(",") if m.strip() in predictions]
    if args.bootstrap and references:
        click = evaluated["click"].to_numpy() == 1
        purchase = evaluated["purchase"].to_numpy()
        lines = []
        for k, reference in enumerate(references):  # a pair once: no esmm − lr after lr − esmm
            for label in (v[0] for v in variants if v[0] not in references[:k + 1] and v[0] in predictions):
                for metric, rows, column in (("cvr_auc", click, "p_cvr"), ("ctcvr_auc", slice(None), "p_ctcvr")):
                    scores = {m: [p[column].to_numpy()[rows] for p in predictions[m]] for m in (label, reference)}
                    b = boot[f"{label} − {reference} {metric}"] = asdict(paired_bootstrap(
                        auc, purchase[rows], scores[label], scores[reference], resamples=args.bootstrap))
                    lines.append(f"  {label:>11} − {reference:<5} {metric:>9}: {b['observed']:+.4f}  95 % interval "
                                 f"[{b['low']:+.4f}, {b['high']:+.4f}]  ahead in {100 * b['share_ahead']:.0f} % "
                                 "of resamples")
        boot_text = (f"paired bootstrap of the {part} day ({args.bootstrap} row resamples, seed-averaged AUC), "
                     f"model − {' / '.join(references)}:\n" + "\n".join(lines))
        print("\n" + boot_text)
    elapsed = time.perf_counter() - started
    print(f"total runtime {elapsed / 60:.1f} min")

    if args.out is not None:
        from promokit.report import Report

        args.out.mkdir(parents=True, exist_ok=True)
        results.to_csv(args.out / "results.csv", index=False)
        out = Report(f"promokit conversion models on KuaiRand-Pure (purchase = {args.purchase}, time split)",
                     data={"results": results.to_dict(orient="records"), "histories": histories,
                           "split": stats.reset_index().to_dict(orient="records"), "tuned": tuned,
                           "load_report": report.summary(), "bootstrap": boot})
        out.add("Data", report.summary() + "\n\nKuaiRand: Gao et al., CIKM 2022, CC BY-SA 4.0.")
        out.add("Time split", stats)
        out.add(f"Mean ± std over seeds {seeds} ({part} part)", summary)
        if gmcm_table is not None:
            out.add("GMCM's Tables 2–3 (RI of gmcm in ‰) and node AUCs", gmcm_table)
        out.add("Noise", note + ("\n\n" + boot_text if boot else ""))
        out.write(args.out)
        print(f"report written to {args.out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

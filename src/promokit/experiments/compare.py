"""One comparison a user can trust: the floor, LightGBM and the paper models of a domain fitted on the same split with
the same training budget, and one leaderboard of their held-out headline metrics, each with a paired bootstrap
interval of its difference against the floor and a verdict in words.

The comparison itself is domain-free; each domain gives a :class:`Domain` (its estimator, models, floor, headline
metrics, how its data are read once and how a fitted model's held-out rows are scored) in
``promokit.experiments.<domain>.compare``. Every model of one seed holds out the same rows (``held_out``), since
they share the seed and ``test_fraction``; a model that holds out other rows is reported as failed, not compared.
"""

from __future__ import annotations

import importlib
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from promokit.data.errors import DataError
from promokit.data.io import write_table
from promokit.data.uris import local_dir
from promokit.experiments.finished_rows import FinishedRows
from promokit.metrics.bootstrap import RESAMPLES, paired_bootstrap, signed
from promokit.report import Report
from promokit.training.config import TrainConfig

DOMAINS = ("conversion", "voucher", "incentive", "value")
#: A leaderboard row's ``status``: the floor, a model compared with it, one the data do not suit (a one-line
#: DataError of its fit, e.g. a graph model on customers-only data) and one whose fit or scoring failed otherwise.
FLOOR, FITTED, SKIPPED, FAILED = "floor", "fitted", "skipped", "failed"
LEVEL = 0.95


@dataclass(frozen=True)
class Scored:
    """A fitted model's held-out rows (``rows``: positions in the data) and, per headline metric, its
    ``(labels, scores, groups or None)`` on them; ``seconds`` its prediction took. The first headline's scores are
    probabilities of its 0/1 labels (the calibration ratio is theirs)."""

    rows: np.ndarray
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]
    seconds: float


@dataclass(frozen=True)
class Domain:
    """What a comparison needs of a domain: its ``estimator`` class (built as ``estimator(model, params, train,
    **options)``), its ``models`` (names), its ``floor``, its ``headlines`` (metric name → ``metric(labels, scores)``,
    higher better, the first the one models are ranked by), ``read(data, options)`` (the data read once, as every
    fit and score takes them, given the estimators' ``options``) and ``score(fitted, data)`` (:class:`Scored`: the model's held-out rows)."""

    name: str
    estimator: type
    models: Sequence[str]
    floor: str
    headlines: Mapping[str, Callable[[np.ndarray, np.ndarray], float]]
    read: Callable[[object, Mapping], object]
    score: Callable[[object, object], Scored]


class Choice(NamedTuple):
    """The model :func:`best_model` names and why, in one sentence."""

    model: str
    reason: str


@dataclass
class Comparison:
    """What :func:`compare` returns: the ``leaderboard`` (one row per model × seed: ``model``, ``seed``, ``status``,
    per headline metric its value and ``<metric>_diff`` / ``_low`` / ``_high`` against the floor of that seed,
    ``calibration_ratio``, ``fit_seconds``, ``predict_seconds``, ``test_rows`` and the ``verdict`` sentence), the
    ``domain``, its ``floor`` and ``headlines``, and the ``setup`` in words."""

    domain: str
    floor: str
    headlines: tuple[str, ...]
    leaderboard: pd.DataFrame
    setup: str

    def table(self) -> pd.DataFrame:
        """The leaderboard to read: per model (and seed, with several), each headline with its difference against
        the floor and interval, the calibration ratio, fit and predict seconds and a one-word verdict."""
        board = self.leaderboard
        shown = pd.DataFrame({"model": board["model"]})
        if board["seed"].nunique() > 1:
            shown["seed"] = board["seed"]
        for metric in self.headlines:
            shown[metric] = board[metric]
            shown[f"{metric} vs {self.floor} [{LEVEL:.0%}]"] = [
                "—" if not np.isfinite(d) else f"{signed(d)} [{signed(lo)}, {signed(hi)}]"
                for d, lo, hi in zip(board[f"{metric}_diff"], board[f"{metric}_low"], board[f"{metric}_high"])]
        shown["calibration"] = board["calibration_ratio"]
        shown["fit s"] = [_seconds(s, 1) for s in board["fit_seconds"]]
        shown["predict s"] = [_seconds(s, 2) for s in board["predict_seconds"]]
        shown["verdict"] = [_word(row, self.headlines[0]) for row in board.to_dict(orient="records")]
        return shown.set_index("model")

    def verdicts(self) -> list[str]:
        """One sentence per row: how it stands against the floor, or why it was skipped or failed."""
        return list(self.leaderboard["verdict"])

    def best(self) -> Choice:
        return best_model(self.leaderboard)

    def report(self) -> Report:
        choice = self.best()
        report = Report(f"promokit {self.domain} compare", data={
            "domain": self.domain, "floor": self.floor, "headlines": list(self.headlines), "setup": self.setup,
            "best": choice._asdict(), "leaderboard": self.leaderboard.to_dict(orient="records")})
        report.add("Setup", self.setup)
        report.add("Leaderboard", self.table().reset_index())
        report.add("Verdicts", "\n".join(f"- {line}" for line in self.verdicts()))
        report.add("Which model?", f"**{choice.model}**: {choice.reason}")
        return report

    def write(self, out: str | os.PathLike) -> Path:
        """``out/leaderboard.parquet`` and the report (``report.md``, ``report.json``), in a local folder (a URI is a
        one-line error naming ``out``)."""
        out = local_dir(out, "out")
        write_table(self.leaderboard, out / "leaderboard.parquet")
        return self.report().write(out)


def compare(data, models: Sequence[str], *, domain: str, seeds: Sequence[int] = (0,), train=None,
            params: Mapping[str, dict] | None = None, options: Mapping | None = None, validation=None,
            resamples: int = RESAMPLES, out: str | os.PathLike | None = None,
            progress: bool = True) -> Comparison:
    """Fit the floor and ``models`` of ``domain`` (``conversion``, ``voucher``, ``incentive`` or ``value``) on
    ``data`` for each of ``seeds`` and compare them on the rows every fit held out.

    The floor (``lr``; value's ``hurdle``) is added first when not named. Every model is built with the same
    ``train`` (a :class:`~promokit.training.TrainConfig` or a dict of its settings, over the domain's defaults: the
    same training budget) with the seed set, ``params[name]`` (its parameters) and ``options`` (the estimator's
    other arguments, shared: ``spec``, ``test_fraction``, ``split`` …), and fitted with ``validation`` when given;
    an estimator that refits on every row after selection (``refit``, :mod:`promokit.training.refit`) is built
    with ``refit=False``, so that the held-out rows it is scored on stay unseen.
    A model whose fit raises a one-line :class:`~promokit.data.DataError` (data it cannot use: a graph model on
    customers-only data, a value graph model without the consumption table) is ``skipped`` with that line; one
    failing otherwise is ``failed`` with its first line. Each headline metric gets the difference against the floor
    of the same seed with a paired bootstrap interval (:func:`~promokit.metrics.paired_bootstrap`: ``resamples``
    draws of the held-out rows, or groups for a grouped metric, seeded by the seed) and a verdict: better (the
    interval above 0), worse (below) or not better.

    With ``progress``, one line per model as it finishes; with ``out``, each finished row is on disk at once
    (:class:`~promokit.experiments.finished_rows.FinishedRows`: an interrupted run keeps them) and the comparison
    is written there at the end (:meth:`Comparison.write`). An unknown model is a one-line DataError before
    anything is read."""
    out = None if out is None else local_dir(out, "out")  # the leaderboard and the report: a local folder
    spec = domain_spec(domain)
    names = checked_models(spec, models)
    seeds = _checked_seeds(seeds)
    params, options = dict(params or {}), dict(options or {})
    for name in names:  # every name, parameter and option checked before the data are read
        spec.estimator(name, params.get(name), _seeded(train, seeds[0]), **options)
    data = spec.read(data, options)
    fit_options = {} if validation is None else {"validation": validation}
    show = _progress_line(spec) if progress else None
    with FinishedRows(out, f"promokit {spec.name} compare", on_result=show) as finished:
        for seed in seeds:
            floor = None
            for name in names:
                row, scored = _fit_and_score(spec, name, seed, data, params.get(name), train, options, fit_options)
                if name == spec.floor:
                    floor = scored
                row.update(_against(spec, name, scored, floor, resamples, seed))
                finished.add(row)
    held = max((row["test_rows"] for row in finished.rows), default=0)
    setup = (f"{spec.name}: {', '.join(names)} on the {held:,} rows each fit held out, seeds {list(seeds)}; training "
             f"{_budget(train)}; floor {spec.floor}; {resamples} paired bootstrap resamples of the held-out rows, "
             f"{LEVEL:.0%} percentile intervals")
    comparison = Comparison(spec.name, spec.floor, tuple(spec.headlines), pd.DataFrame(finished.rows), setup)
    if out is not None:
        comparison.write(out)
    return comparison


def best_model(leaderboard: pd.DataFrame) -> Choice:
    """The model a comparison's ``leaderboard`` (:attr:`Comparison.leaderboard`, or its ``leaderboard.parquet``)
    recommends, by its first headline metric (the first column with a ``<metric>_diff`` beside it), averaged over
    seeds: of the models better than the floor in every seed (the interval above 0), the highest; when none is,
    the floor, which is as good here and the simplest. Models that were skipped or failed are not candidates."""
    metric = next(c for c in leaderboard.columns if f"{c}_diff" in leaderboard.columns)
    ran = leaderboard[leaderboard["status"].isin([FLOOR, FITTED])]
    floors = ran.loc[ran["status"] == FLOOR, "model"]
    if ran.empty:
        raise DataError("no model could be fitted on these data: each was skipped or failed, and the leaderboard "
                        "says why")
    means = ran.groupby("model", sort=False)[[metric, f"{metric}_diff"]].mean()
    if floors.empty:
        top = means[metric].idxmax()
        return Choice(top, f"the highest {metric} ({means.loc[top, metric]:.4f}); no floor fitted to compare with")
    floor = floors.iloc[0]
    better = ran[ran["status"] == FITTED].groupby("model", sort=False)[f"{metric}_low"].apply(lambda low: (low > 0).all())
    winners = means.loc[better[better].index]
    if len(winners):
        top = winners[metric].idxmax()
        return Choice(top, f"the highest {metric} ({means.loc[top, metric]:.4f}) of the models better than the floor "
                           f"{floor}: {_difference(ran, top, metric)}")
    others = means.drop(index=floor)
    if others.empty:
        return Choice(floor, "only the floor was fitted")
    top = others[metric].idxmax()
    return Choice(floor, f"no model is better than the floor on {metric} here (the highest, {top}: "
                         f"{_difference(ran, top, metric)}); the floor is as good and the simplest")


def domain_spec(domain: str) -> Domain:
    """The :class:`Domain` of ``domain`` (``promokit.experiments.<domain>.compare.DOMAIN``), or a one-line error."""
    if domain not in DOMAINS:
        raise DataError(f"`domain`: unknown domain {domain!r}; choose one of {list(DOMAINS)}")
    return importlib.import_module(f"promokit.experiments.{domain}.compare").DOMAIN


def checked_models(spec: Domain, models: Sequence[str]) -> list[str]:
    """``models`` (names, or one comma-separated string) with the floor first, each a model of the domain."""
    names = [m.strip() for m in (models.split(",") if isinstance(models, str) else models) if m.strip()]
    unknown = [name for name in names if name not in spec.models]
    if unknown:
        raise DataError(f"`models`: unknown {spec.name} model {unknown[0]!r}; choose among {sorted(spec.models)}")
    return list(dict.fromkeys([spec.floor, *names]))


def _checked_seeds(seeds: Sequence[int]) -> list[int]:
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in seeds):
        raise DataError(f"`seeds` must be one or more whole numbers, got {seeds!r}")
    return seeds


def _seeded(train, seed: int):
    """``train`` (None, a dict of settings or a TrainConfig) with ``seed``, as settings over the domain's defaults."""
    if isinstance(train, TrainConfig):
        return {**train.given(), "seed": seed}
    if train is None or isinstance(train, Mapping):
        return {**(train or {}), "seed": seed}
    raise DataError(f"train must be a TrainConfig, a dict of its settings or None, got {type(train).__name__}")


def _budget(train) -> str:
    given = train.given() if isinstance(train, TrainConfig) else dict(train or {})
    given.pop("progress", None)
    return ", ".join(f"{k}={v}" for k, v in given.items()) or "the domain's defaults"


def _fit_and_score(spec: Domain, name: str, seed: int, data, params, train, options: dict,
                   fit_options: dict) -> tuple[dict, Scored | None]:
    """A leaderboard row's own columns (no comparison yet) and the model's held-out scores (None when it did not
    fit)."""
    row = {"model": name, "seed": seed, "status": FLOOR if name == spec.floor else FITTED,
           "fit_seconds": np.nan, "predict_seconds": np.nan, "test_rows": 0}
    estimator = spec.estimator(name, params, _seeded(train, seed), **options)
    if "refit" in estimator.get_params(deep=False):  # a model refit on every row has learnt the held-out rows
        estimator.set_params(refit=False)
    started = time.perf_counter()
    try:
        estimator.fit(data, **fit_options)
        row["fit_seconds"] = time.perf_counter() - started
        scored = spec.score(estimator, data)
    except DataError as exc:
        return {**row, "status": SKIPPED, "verdict": f"{name} skipped: {_line(exc)}"}, None
    except Exception as exc:  # noqa: BLE001 - any model's failure is one line of the leaderboard, not a traceback
        return {**row, "status": FAILED, "verdict": f"{name} failed: {type(exc).__name__}: {_line(exc)}"}, None
    return {**row, "predict_seconds": scored.seconds, "test_rows": len(scored.rows)}, scored


def _against(spec: Domain, name: str, scored: Scored | None, floor: Scored | None, resamples: int,
             seed: int) -> dict:
    """The row's headline metrics, their differences against the floor's with intervals, its calibration ratio and
    its verdict."""
    columns = {f"{m}{suffix}": np.nan for m in spec.headlines for suffix in ("", "_diff", "_low", "_high")}
    columns["calibration_ratio"] = np.nan
    if scored is None:
        return columns
    with warnings.catch_warnings():  # a metric undefined on these rows is NaN in the leaderboard, not a warning
        warnings.simplefilter("ignore")
        for metric, fn in spec.headlines.items():
            columns[metric] = fn(*scored.pairs[metric][:2])
    labels, scores, _ = scored.pairs[next(iter(spec.headlines))]
    columns["calibration_ratio"] = float(scores.mean() / labels.mean()) if labels.mean() > 0 else np.nan
    if name == spec.floor:
        return {**columns, "verdict": f"{name} is the floor the other models are compared with"}
    if floor is None:
        return {**columns, "verdict": f"{name} is not compared: the floor {spec.floor} did not fit"}
    if not np.array_equal(scored.rows, floor.rows):
        return {**columns, "status": FAILED, "verdict": f"{name} failed: it held out other rows than the floor "
                f"{spec.floor} ({len(scored.rows)} against {len(floor.rows)}): compare with the same test_fraction"}
    clauses = []
    for metric, fn in spec.headlines.items():
        labels, scores, groups = scored.pairs[metric]
        difference = paired_bootstrap(fn, labels, scores, floor.pairs[metric][1], groups=groups,
                                      resamples=resamples, seed=seed, level=LEVEL)
        columns.update({f"{metric}_diff": difference.observed, f"{metric}_low": difference.low,
                        f"{metric}_high": difference.high})
        clauses.append(f"{standing(difference.low, difference.high)} {'than ' + spec.floor + ' ' if not clauses else ''}"
                       f"on {metric}: {difference}")
    return {**columns, "verdict": f"{name} is " + "; ".join(clauses)}


def standing(low: float, high: float) -> str:
    """A difference's verdict from its interval: ``better`` (above 0), ``worse`` (below 0) or ``not better``."""
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "not better"


def _word(row: dict, metric: str) -> str:
    """A row's verdict in a word or two (on the first headline)."""
    if row["status"] in (FLOOR, SKIPPED, FAILED):
        return row["status"]
    if not np.isfinite(row[f"{metric}_diff"]):
        return "not compared"
    return standing(row[f"{metric}_low"], row[f"{metric}_high"])


def _difference(rows: pd.DataFrame, model: str, metric: str) -> str:
    """A model's difference against the floor on ``metric``, with its interval (the first seed's)."""
    first = rows[rows["model"] == model].iloc[0]
    return f"{signed(first[f'{metric}_diff'])} [{signed(first[f'{metric}_low'])}, {signed(first[f'{metric}_high'])}]"


def _seconds(value: float, digits: int) -> str:
    return "—" if not np.isfinite(value) else f"{value:.{digits}f}"


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _progress_line(spec: Domain) -> Callable[[dict], None]:
    """The line printed as each model finishes: fit seconds and the first headline metric against the floor."""
    from promokit.console import get_console

    console, metric = get_console(), next(iter(spec.headlines))

    def show(row: dict) -> None:
        if row["status"] in (SKIPPED, FAILED):
            text = row["verdict"]
        else:
            against = "" if not np.isfinite(row[f"{metric}_diff"]) else (
                f" ({signed(row[f'{metric}_diff'])} [{signed(row[f'{metric}_low'])}, "
                f"{signed(row[f'{metric}_high'])}] vs {spec.floor})")
            text = f"{row['model']}: fit {row['fit_seconds']:.1f} s, {metric} {row[metric]:.4f}{against}"
        console.print(f"  seed {row['seed']} {text}", highlight=False, soft_wrap=True)

    return show

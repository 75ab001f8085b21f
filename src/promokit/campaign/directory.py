"""A campaign directory: everything the decision service needs, made offline by the existing commands.

Layout (every file written atomically; nothing is unpickled when it is read back)::

    campaign.json        levels, budget form and B, λ* of the offline plan, the money-at-risk cap, coupon
                         lifetime, what to answer when the cap is reached, the exploration share and its seed,
                         pacing settings, model version
    customers.parquet    the customers' score table, wide layout (``user_id``, ``score_<level>`` …) as written by
                         ``incentive predict`` and read by ``allocate budget --scores``: a row group per part
    merchants.parquet    optional, the merchants' score table (``allocate budget --merchants``)
    assignments.parquet  optional, ``user_id, fund`` from an ``allocate quota`` plan
    lookup/<population>/ ids.npy (the ids as sorted UTF-8 bytes), scores.npy (their rows, in that order),
                         mean.npy (the population's mean curve): what the service reads
    versions/<version>/  the same files for each version built beside the live one (:mod:`promokit.campaign.versions`)
    live.json            which version is live (without it, the one at the root)
    ledger.sqlite        the ledger, when the service keeps its own: shared by every version

:func:`build` checks that the score tables offer the levels the budget plan was solved for and that
the plan's λ* and B are there, reading the tables part by part (:mod:`promokit.campaign.lookup`: memory bounded by
a few parts); :func:`load_campaign` memory-maps each population's lookup: the service starts at
once whatever the population's size, and the workers of one machine share one copy of it in the page cache
(a dictionary of 10⁶ ids took 1.4 s and 530 MB per worker; 10⁸ would not fit).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from promokit import __version__
from promokit.allocation.tables import FUND, USER, read_budget_table
from promokit.campaign.defaults import (
    COLD_START,
    COUPON_TTL_SECONDS,
    CURRENCY_EXPONENT,
    PACING_EVERY,
    PACING_GAIN,
    PACING_WINDOW,
    WHEN_EXHAUSTED,
)
from promokit.campaign.lookup import WIDE, add_rows, check_table, encode_ids, spill, write_lookup
from promokit.campaign.money import EXPONENTS, to_minor
from promokit.campaign.versions import CONFIG, live_version, new_folder, point_live, version_folder, version_names
from promokit.data.durations import parse_duration
from promokit.data.errors import DataError
from promokit.data.io import read_table, write_json, write_npy, write_parquet
from promokit.data.uris import as_path, local_dir

TABLES = {"customer": "customers.parquet", "merchant": "merchants.parquet"}
ASSIGNMENTS = "assignments.parquet"
LOOKUP = "lookup"
LEDGER = "ledger.sqlite"  # the campaign's own ledger, unless the service is given another
EXHAUSTED_ANSWERS = ("lowest", "none")
PAID_ON = ("response", "request")
COLD_START_ANSWERS = ("mean", "lowest", "none")


@dataclass
class Pacing:
    """How λ follows the traffic (see :mod:`promokit.serve.pacing`)."""

    window: int = PACING_WINDOW
    every: int = PACING_EVERY
    gain: float = PACING_GAIN
    enabled: bool = True


@dataclass
class CampaignConfig:
    levels: list[float]
    form: str  # "ratio" (eq. 16, B is spend per response) or "absolute" (B is the expected spend)
    B: float
    lam: float  # λ* of the offline plan; the service starts from it
    cap: float  # hard cap on money at risk (face value of open coupons + money paid), ≤ currency_exponent decimals
    coupon_ttl_seconds: float = COUPON_TTL_SECONDS
    when_exhausted: str = WHEN_EXHAUSTED  # "lowest" level if its face value fits, else none; "none" at once
    merchant_paid_on: str = "response"
    cold_start: str = COLD_START  # an id the score table does not hold: "mean" curve, "lowest" level, or "none"
    currency_exponent: int = CURRENCY_EXPONENT  # decimals of the currency's minor unit: money is kept in minor units
    explore: float = 0.0  # share of subjects answered with a uniformly random level (promokit.serve.explore)
    explore_seed: int = 0  # key of the hashes that pick those subjects and their levels
    model_version: str = ""
    pacing: Pacing = field(default_factory=Pacing)

    def to_dict(self) -> dict:
        return {"promokit": __version__, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> CampaignConfig:
        data = {k: v for k, v in data.items() if k != "promokit"}
        if "currency_exponent" not in data and _is_number(data.get("cap")):
            # no currency_exponent: the money is in cents, and a cap with more decimals is floored to the cent
            data["cap"] = math.floor(Decimal(str(data["cap"])).scaleb(2)) / 100
        try:
            config = cls(**{**data, "pacing": Pacing(**data.get("pacing", {}))})
        except TypeError as exc:
            raise DataError(f"{CONFIG}: {exc}") from None
        config.check()
        return config

    def check(self) -> None:
        levels = np.asarray(self.levels, dtype=np.float64)
        if levels.ndim != 1 or len(levels) < 1 or not np.isfinite(levels).all() or (levels < 0).any() \
                or (np.diff(levels) <= 0).any():
            raise DataError(f"levels must be increasing finite numbers ≥ 0, got {self.levels}")
        if self.form not in ("ratio", "absolute"):
            raise DataError(f"form must be 'ratio' or 'absolute', got {self.form!r}")
        for name in ("B", "lam", "cap", "coupon_ttl_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise DataError(f"{name} must be a finite number ≥ 0, got {value!r}")
        if self.coupon_ttl_seconds <= 0:
            raise DataError(f"coupon_ttl_seconds must be > 0, got {self.coupon_ttl_seconds!r}")
        for name, allowed in (("when_exhausted", EXHAUSTED_ANSWERS), ("merchant_paid_on", PAID_ON),
                              ("cold_start", COLD_START_ANSWERS)):
            if getattr(self, name) not in allowed:
                raise DataError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        if isinstance(self.currency_exponent, bool) or self.currency_exponent not in EXPONENTS:
            raise DataError(f"currency_exponent must be an integer in 0..{EXPONENTS[-1]}, got "
                            f"{self.currency_exponent!r}")
        if isinstance(self.explore, bool) or not isinstance(self.explore, (int, float)) \
                or not 0 <= self.explore < 1:
            raise DataError(f"explore must be a share in [0, 1), got {self.explore!r}")
        if isinstance(self.explore_seed, bool) or not isinstance(self.explore_seed, int) \
                or not 0 <= self.explore_seed < 2**64:
            raise DataError(f"explore_seed must be an integer in [0, 2^64), got {self.explore_seed!r}")
        self.cap_minor
        self.level_faces
        p = self.pacing
        if p.window < 16 or p.every < 1 or not (0 <= p.gain <= 2):
            raise DataError(f"pacing needs window ≥ 16, every ≥ 1 and 0 ≤ gain ≤ 2, got {asdict(p)}")

    @property
    def cap_minor(self) -> int:
        """The cap in minor units of the currency."""
        return to_minor(self.cap, self.currency_exponent, "cap")

    @property
    def level_faces(self) -> list[int]:
        """Each level's face value in minor units (a level finer than the minor unit is an error)."""
        return [to_minor(level, self.currency_exponent, f"level {level:g}") for level in self.levels]


@dataclass
class Population:
    """One population's precomputed responses, ordered by id: ``ids`` the ids as sorted UTF-8 bytes, row i of
    ``scores`` the response f of ``ids[i]`` over the levels, ``mean`` the population's mean curve (for an id the
    table does not hold: cold start). Read from a campaign directory, ``ids`` and ``scores`` are memory-mapped."""

    ids: np.ndarray  # (N,) bytes, sorted
    scores: np.ndarray  # (N, K) float64
    mean: np.ndarray  # (K,)

    @classmethod
    def of(cls, ids: np.ndarray, scores: np.ndarray) -> Population:
        """From ids in any order (unique, as a score table's are) and their rows of scores."""
        encoded = encode_ids(ids)
        order = np.argsort(encoded, kind="stable")
        scores = np.asarray(scores, dtype=np.float64)
        return cls(encoded[order], scores[order], add_rows(None, scores) / max(len(scores), 1))

    def __len__(self) -> int:
        return len(self.ids)

    def row(self, subject_id: str) -> int | None:
        """The row of ``subject_id``, or None when the table does not hold it (a binary search on the ids)."""
        key = subject_id.encode("utf-8")
        ids = self._plain_ids
        if len(key) > ids.dtype.itemsize or key.endswith(b"\0"):
            return None
        # the key as an element of the ids' own type (it fits: checked above), searched with the array's method:
        # ≈ 1 µs, where np.searchsorted(memmap, bytes) took ≈ 4 µs of every decision
        i = int(ids.searchsorted(np.array(key, ids.dtype)))
        return i if i < len(ids) and ids[i] == key else None

    @cached_property
    def _plain_ids(self) -> np.ndarray:
        """``ids`` as a plain array (no copy): indexing a ``np.memmap`` goes through its Python methods."""
        return np.asarray(self.ids)

    @cached_property
    def plain_scores(self) -> np.ndarray:
        """``scores`` as a plain array (no copy), for the decision path (:class:`~promokit.serve.decision_rule.
        DecisionRule`)."""
        return np.asarray(self.scores)

    def save(self, folder: Path) -> None:
        for name in ("ids", "scores", "mean"):
            write_npy(getattr(self, name), folder / f"{name}.npy")

    @classmethod
    def load(cls, folder: Path) -> Population:
        ids, scores = (np.load(folder / f"{name}.npy", mmap_mode="r") for name in ("ids", "scores"))
        if len(ids) != len(scores):
            raise DataError(f"{folder}: {len(ids)} ids but {len(scores)} rows of scores; build the campaign again")
        return cls(ids, scores, np.load(folder / "mean.npy"))


@dataclass
class Campaign:
    path: Path  # the campaign directory: what the service is given, where its ledger lives
    config: CampaignConfig
    populations: dict[str, Population]
    assignments: dict[str, str]
    folder: Path  # the folder of this version's files: ``path``, or ``path/versions/<model_version>``

    @property
    def levels(self) -> np.ndarray:
        return np.asarray(self.config.levels, dtype=np.float64)

    def ledger_url(self, url: str | None = None) -> str:
        """``url``, or by default the URL of the campaign's own SQLite ledger."""
        return url or f"sqlite:///{(self.path / LEDGER).resolve()}"


def build(out: str | os.PathLike, customers, budget_report: str | os.PathLike, cap: float | str, *, merchants=None,
          quota_plan=None, coupon_ttl=COUPON_TTL_SECONDS, when_exhausted: str = WHEN_EXHAUSTED,
          merchant_paid_on: str | None = None, cold_start: str = COLD_START,
          currency_exponent: int = CURRENCY_EXPONENT, explore: float = 0.0, explore_seed: int = 0,
          pacing: Pacing | None = None, model_version: str | None = None, activate: bool = False) -> Campaign:
    """Write a campaign directory at ``out`` (``promokit campaign build``; :func:`promokit.campaign.build`) from
    ``incentive predict``'s score tables (``customers``, optional ``merchants``: frames, or paths of a file or of a
    directory/glob of Parquet parts, read part by part: each id in one part, empty parts skipped; keyed by ``user_id``, else their only ``*_id`` column, as
    ``IncentiveModel.predict``'s ``customer_id``), the folder (or ``report.json``) ``allocate budget``
    wrote for them (``budget_report``), a ``cap`` on money at risk (a number, or a decimal as text) and an optional
    quota plan (a frame, ``plan.parquet`` or ``plan/`` of parts). ``coupon_ttl`` is a coupon's lifetime, a duration
    (:func:`~promokit.data.durations.parse_duration`: ``"7D"``, ``"12h"`` or a number of seconds; default a week).
    ``model_version`` defaults to a hash of the score tables; ``pacing`` to :class:`Pacing`'s defaults.

    Into a directory that already holds a campaign, the build writes a new version beside the live one
    (``versions/<model_version>/``) and keeps the live one, which a running service goes on serving until it
    switches (:func:`activate`, or ``activate=True`` here). A build keeps the live version, the one it writes and
    the root's; other versions of ``versions/`` are removed. A build whose ``model_version`` is the live one's
    returns the live campaign when its settings are the same, and is refused when they differ.

    ``merchant_paid_on`` defaults to the cost model the plan's λ* was solved under (its report says, when it was
    solved with merchants; else ``response``); another one is refused, as it would serve λ* under other costs.
    """
    out = local_dir(out)
    report = _read_report(Path(budget_report))
    planned = report.get("merchant_paid_on")
    if merchant_paid_on is not None and planned is not None and merchant_paid_on != planned:
        raise DataError(f"the budget plan was solved with merchants paid on {planned!r}; merchant_paid_on "
                        f"{merchant_paid_on!r} would serve its λ* under another cost (eq. 16 vs eq. 20)")
    merchant_paid_on = merchant_paid_on or planned or "response"
    config = CampaignConfig(levels=[float(x) for x in report["levels"]], form=report["form"], B=float(report["B"]),
                            lam=float(report["lam"]), cap=_decimal_number(cap),
                            coupon_ttl_seconds=parse_duration(coupon_ttl, "coupon_ttl").total_seconds(),
                            when_exhausted=when_exhausted,
                            merchant_paid_on=merchant_paid_on, cold_start=cold_start,
                            currency_exponent=currency_exponent, explore=explore, explore_seed=explore_seed,
                            pacing=pacing or Pacing())
    config.check()
    plan = None if quota_plan is None else _read_assignments(quota_plan)
    sources = {"customer": customers, **({} if merchants is None else {"merchant": merchants})}
    with _scratch(out) as scratch:
        digest = None if model_version else hashlib.sha256()
        built = {}
        for population in sorted(sources):  # the fingerprint hashes them in this order
            built[population] = scratch / population
            write_lookup(spill(population, sources[population], report["levels"], built[population], digest),
                         built[population] / LOOKUP)
        config.model_version = model_version or digest.hexdigest()[:12]
        live = live_version(out)
        if live is None:
            folder = out
        elif config.model_version == live:
            return _same_as_live(out, config, plan)
        else:
            folder = new_folder(out, config.model_version)
            _remove_versions(out, keep={live, config.model_version})
        _write_version(folder, config, built, plan)
    if live is not None and activate:
        return activate_version(out, config.model_version)
    return load_campaign(out, version=config.model_version)


@contextmanager
def _scratch(out: Path):
    """A scratch folder inside ``out`` where each population's files are made before any is moved into place,
    removed afterwards (with ``out`` if the build made it and fails)."""
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix=".build-", dir=out) as scratch:
            yield Path(scratch)
    except BaseException:
        if made and not any(out.iterdir()):
            out.rmdir()
        raise


def _write_version(folder: Path, config: CampaignConfig, built: dict[str, Path], plan) -> None:
    """Move each population's files from its scratch folder (``built``) into the version's ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for population in TABLES:
        if population not in built and (folder / TABLES[population]).exists():
            (folder / TABLES[population]).unlink()  # a rebuilt campaign without merchants must not keep old ones
            shutil.rmtree(folder / LOOKUP / population, ignore_errors=True)
    for population, scratch in built.items():
        os.replace(scratch / WIDE, folder / TABLES[population])
        (folder / LOOKUP / population).mkdir(parents=True, exist_ok=True)
        for file in (scratch / LOOKUP).iterdir():
            os.replace(file, folder / LOOKUP / population / file.name)
    if plan is not None:
        write_parquet(plan, folder / ASSIGNMENTS)
    elif (folder / ASSIGNMENTS).exists():
        (folder / ASSIGNMENTS).unlink()
    write_json(config.to_dict(), folder / CONFIG)  # last: a folder without it is not a version


def _same_as_live(root: Path, config: CampaignConfig, plan) -> Campaign:
    live = load_campaign(root)
    planned = {} if plan is None else dict(zip(plan[USER].tolist(), plan[FUND].tolist()))
    if live.config.to_dict() != config.to_dict() or live.assignments != planned:
        raise DataError(f"version {config.model_version!r} is live in {root} with other settings; a new version "
                        f"needs another model_version")
    return live


def _remove_versions(root: Path, keep: set[str]) -> None:
    for name in version_names(root):
        folder = version_folder(root, name)
        if name not in keep and folder != root:
            shutil.rmtree(folder)


def activate_version(root: str | os.PathLike, version: str | None = None, explore: float | None = None) -> Campaign:
    """Make ``version`` (default: the newest built) the live version of the campaign directory ``root`` and return
    it; a running service follows within a second (:mod:`promokit.serve.refresh`), or keeps its version when the
    populations differ. The version must load and fit the live one's ledger (:func:`refresh_problem`), else
    nothing changes."""
    root = local_dir(root, "root")
    live = load_campaign(root, explore)
    version = version or version_names(root)[-1]
    campaign = load_campaign(root, explore, version=version)
    problem = refresh_problem(live, campaign, serving=False)
    if problem:
        raise DataError(problem)
    point_live(root, version)
    return campaign


def refresh_problem(live: Campaign, new: Campaign, serving: bool = True) -> str | None:
    """Why ``new`` cannot replace ``live`` (None when it can): the ledger keeps money in the live currency's minor
    units and decisions by level index; a running service (``serving``) also keeps its request schema, which
    follows the populations."""
    old, config = live.config, new.config
    checks = [("levels", old.levels, config.levels),
              ("currency_exponent", old.currency_exponent, config.currency_exponent)]
    if serving:
        checks.append(("populations", sorted(live.populations), sorted(new.populations)))
    for what, before, after in checks:
        if before != after:
            return (f"version {config.model_version!r} has {what} {after} where the live version "
                    f"{old.model_version!r} has {before}; "
                    + ("restart the service to serve it" if what == "populations" else
                       f"a campaign with other {what} needs its own directory and ledger"))
    return None


def load_campaign(path: str | os.PathLike, explore: float | None = None, version: str | None = None) -> Campaign:
    """The campaign directory at ``path``, at its live version or at ``version``; ``explore`` replaces its
    exploration share."""
    root = Path(path)
    version = version or live_version(root)
    if version is None:
        raise DataError(f"{as_path(path)} is not a campaign directory: {CONFIG} is missing (make one with "
                        f"`promokit campaign build`)")
    path = version_folder(root, version)
    try:
        data = json.loads((path / CONFIG).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path / CONFIG} is not valid JSON: {exc}") from None
    config = CampaignConfig.from_dict(data if explore is None else {**data, "explore": explore})
    populations = {}
    for population, name in TABLES.items():
        if (path / LOOKUP / population / "ids.npy").is_file():
            populations[population] = Population.load(path / LOOKUP / population)
        elif (path / name).is_file():  # no lookup: the score table, read into memory
            table = read_budget_table(path / name)
            check_table(population, table, config.levels)
            populations[population] = Population.of(table.user_ids, table.scores)
    if "customer" not in populations:
        raise DataError(f"{path} holds no {TABLES['customer']}")
    assignments = {}
    if (path / ASSIGNMENTS).is_file():
        plan = _read_assignments(path / ASSIGNMENTS)
        assignments = dict(zip(plan[USER].tolist(), plan[FUND].tolist()))
    return Campaign(root, config, populations, assignments, path)


def _read_report(path: Path) -> dict:
    file = path / "report.json" if path.is_dir() else path
    if not file.is_file():
        raise DataError(f"{file} not found: give the folder allocate budget wrote, or its report.json")
    try:
        report = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{file} is not valid JSON: {exc}") from None
    missing = [key for key in ("problem", "form", "B", "lam", "levels") if key not in report]
    if missing or report.get("problem") != "budget":
        raise DataError(f"{file} is not an `allocate budget` report (missing {missing or ['problem: budget']})")
    return report


def _read_assignments(source) -> pd.DataFrame:
    frame = source if isinstance(source, pd.DataFrame) else read_table(source)
    missing = [c for c in (USER, FUND) if c not in frame.columns]
    if missing:
        raise DataError(f"the quota plan needs columns {missing} ({len(frame)} rows; columns are "
                        f"{list(frame.columns)[:8]})")
    plan = pd.DataFrame({USER: frame[USER].astype(str), FUND: frame[FUND].astype(str)})
    repeated = plan[USER].duplicated()
    if repeated.any():
        raise DataError(f"the quota plan gives {int(repeated.sum())} users more than one fund, e.g. user_id "
                        f"{plan[USER][repeated].iloc[0]!r}")
    return plan


def _decimal_number(value):
    """A cap given as text or a number, kept as the number JSON writes (exactness is checked by ``check``)."""
    if isinstance(value, str):
        try:
            value = Decimal(value)
        except ArithmeticError:
            raise DataError(f"cap must be a number, got {value!r}") from None
    if isinstance(value, Decimal):  # a whole number stays an int in campaign.json; ±∞ and 1e400 fail ``check``
        return int(value) if value.is_finite() and value == value.to_integral_value() and abs(value) < 2**53 \
            else float(value)
    return float(value) if _is_number(value) else value


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)

"""Request metrics aggregated over every worker, and the ``/metrics`` exposition (``prometheus_client``).

``promokit serve --workers N`` runs N processes; each answers a share of the requests, so figures one process
keeps in memory describe only that share. Here every process records its requests in ``prometheus_client``
metrics, and with ``$PROMETHEUS_MULTIPROC_DIR`` set (:func:`multiprocess_dir`, in the parent before the
workers start) those live in per-process files of that directory that any worker sums on reading. Without it
(one process, tests) they live in an ordinary in-process registry. Which of the two a process uses is fixed
when ``prometheus_client`` is first imported in it, so the variable must be set before the workers start.

- :class:`RequestMetrics`: ASGI middleware counting requests by route template and status, and timing them.
- :func:`summary`: requests by status class and code, latency percentiles of decisions: for ``/v1/status``.
- :func:`render_metrics`: the ``/metrics`` text: these metrics plus :class:`StatusCollector`, the ledger's
  figures of a ``/v1/status`` dict (budget, pacing, per level, ledger health).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, values
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.routing import Match

ENV = "PROMETHEUS_MULTIPROC_DIR"
LEDGER_STATES = ("up", "degraded", "down")  # promokit.serve.health
#: Content type of :func:`render_metrics` (the Prometheus text format every scraper reads).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
#: Route label of requests no route of the app matches (404s), so unknown paths cannot grow the label set.
OTHER = "other"
DECISIONS = "/v1/decisions"
#: Latency bucket bounds in seconds: dense from 0.5 ms to 30 ms where decisions are answered, coarse to 1 s.
BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
           0.1, 0.25, 0.5, 1.0)

#: Whether this process records in files (prometheus_client chose when it was imported, by $PROMETHEUS_MULTIPROC_DIR).
MULTIPROCESS = values.ValueClass._multiprocess
_DIRECTORY = os.environ.get(ENV) if MULTIPROCESS else None
_REGISTRY = None if MULTIPROCESS else CollectorRegistry()
REQUESTS = Counter("promokit_http_requests", "HTTP requests answered, by route template and status.",
                   ["route", "status_class", "status"], registry=_REGISTRY)
LATENCY = Histogram("promokit_http_request_duration_seconds", "Time from request to the last byte of the answer.",
                    ["route", "status_class"], buckets=BUCKETS, registry=_REGISTRY)
LEDGER_ERRORS = Counter("promokit_ledger_errors", "Ledger transactions or reads that raised.", registry=_REGISTRY)
LEDGER_TROUBLE = {
    "timeouts": Counter("promokit_ledger_timeouts", "Ledger transactions or reads past the deadline.",
                        registry=_REGISTRY),
    "lock_waits": Counter("promokit_ledger_lock_waits", "Ledger transactions whose lock wait ran past its limit "
                          "(another session held the budget row or the SQLite write lock).", registry=_REGISTRY),
    "slow_commits": Counter("promokit_ledger_slow_commits", "Ledger transactions that committed slower than half "
                            "the deadline.", registry=_REGISTRY)}
_CHILDREN: dict[tuple[str, int], tuple] = {}  # (route, status) -> labelled children: .labels() costs µs


@contextmanager
def multiprocess_dir(directory: str | os.PathLike | None = None) -> Iterator[Path]:
    """Set ``$PROMETHEUS_MULTIPROC_DIR`` to an empty directory for the workers started inside the block.

    ``directory`` is created if needed and its ``*.db`` files (a previous run's counts) removed; without it a
    temporary directory is made and removed afterwards. The variable is restored on exit.
    """
    path = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="promokit-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()
    before = os.environ.get(ENV)
    os.environ[ENV] = str(path)
    try:
        yield path
    finally:
        if before is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = before
        if directory is None:
            shutil.rmtree(path, ignore_errors=True)


def record_ledger_error() -> None:
    """Count one ledger transaction or read that raised (summed over workers, unlike a per-worker tally)."""
    LEDGER_ERRORS.inc()


def record_ledger_trouble(kind: str) -> None:
    """Count one timeout, lock wait or slow commit (a key of :data:`LEDGER_TROUBLE`)."""
    LEDGER_TROUBLE[kind].inc()


class RequestMetrics:
    """ASGI middleware: counts each HTTP request by route template and status code, and observes its latency.

    Add it last (``app.add_middleware(RequestMetrics)`` after the others) so it also sees the answers other
    middleware give, such as 413. A handler's unhandled exception is counted as the 500 it becomes.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500

        async def send_and_note(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            elapsed = time.perf_counter() - started
            route = _route(scope)
            children = _CHILDREN.get((route, status))
            if children is None:
                status_class = f"{status // 100}xx"
                children = _CHILDREN[route, status] = (REQUESTS.labels(route, status_class, str(status)),
                                                       LATENCY.labels(route, status_class))
            children[0].inc()
            children[1].observe(elapsed)


def _route(scope) -> str:
    """The matched route's template; for a request answered before routing, the route its path matches."""
    route = scope.get("route")  # set by the router on this same scope
    if route is None:
        routes = getattr(scope.get("app"), "routes", ())
        route = next((r for r in routes if r.matches(scope)[0] is not Match.NONE), None)
    return getattr(route, "path", OTHER)


def _request_families() -> list[Metric]:
    """The request metrics of every worker (multiprocess mode) or of this process, summed."""
    if MULTIPROCESS:
        return list(MultiProcessCollector(None, path=_DIRECTORY).collect())
    return list(_REGISTRY.collect())


def summary(latency_route: str = DECISIONS) -> dict:
    """Requests of all workers since start: totals by status class, code and route, the ledger errors, and
    latency percentiles (ms) of the 2xx answers of ``latency_route``.

    The percentiles are estimated from the histogram buckets by linear interpolation within a bucket, as
    Prometheus' ``histogram_quantile`` does, so they are as coarse as :data:`BUCKETS`. No rate: a counter and
    ``time`` suffice for a reader to take the rate between two readings, whichever worker answers them.
    """
    families = {f.name: f for f in _request_families()}
    by_class, by_status, by_route = defaultdict(int, {"2xx": 0, "4xx": 0, "5xx": 0}), defaultdict(int), defaultdict(int)
    for sample in _samples(families, "promokit_http_requests", "_total"):
        n = int(sample.value)
        by_class[sample.labels["status_class"]] += n
        by_status[sample.labels["status"]] += n
        by_route[sample.labels["route"]] += n
    buckets = _buckets(families, latency_route)
    count = int(buckets[-1][1]) if buckets else 0
    latency = {f"p{q}": _quantile(q / 100, buckets) for q in (50, 90, 99)}
    errors = sum(s.value for s in _samples(families, "promokit_ledger_errors", "_total"))
    return {"time": time.time(), "total": sum(by_class.values()), "by_class": dict(by_class),
            "by_status": dict(sorted(by_status.items())), "by_route": dict(sorted(by_route.items())),
            "latency_ms": {"route": latency_route, "count": count, **latency}, "ledger_errors": int(errors)}


def _samples(families: dict[str, Metric], name: str, suffix: str):
    family = families.get(name)
    return [s for s in family.samples if s.name == name + suffix] if family else []


def _buckets(families: dict[str, Metric], route: str) -> list[tuple[float, float]]:
    """Cumulative ``(upper bound s, count)`` of the 2xx latency histogram of ``route``, by bound."""
    rows = [(float(s.labels["le"]), s.value)
            for s in _samples(families, "promokit_http_request_duration_seconds", "_bucket")
            if s.labels["route"] == route and s.labels["status_class"] == "2xx"]
    return sorted(rows)


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """``histogram_quantile`` in ms: linear within the bucket holding rank q·n; the top finite bound past it."""
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if math.isinf(upper):
                return 1e3 * lower
            return 1e3 * (lower + (upper - lower) * (rank - below) / (cumulative - below))
        lower, below = upper, cumulative
    return 1e3 * lower


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class StatusCollector(Collector):
    """The figures of one ``/v1/status`` dict as metric families; missing, None or non-finite values are left out.

    Budget and per-level figures come from the shared ledger, so any worker reports the same; λ and B_t are
    the pacer's of the worker that answers.
    """

    def __init__(self, status: dict):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        budget, pacing = self.status.get("budget") or {}, self.status.get("pacing") or {}
        ledger = self.status.get("ledger") or {}
        for key, help_text in (("cap", "Hard cap on money at risk."),
                               ("at_risk", "Face value of open coupons plus paid."),
                               ("committed", "Face value of open coupons."),
                               ("remaining", "Cap minus money at risk (0 in an overdraft)."),
                               ("overdraft", "Money at risk above a lowered cap: what must come back before a coupon "
                                             "is issued again.")):
            yield from _single(GaugeMetricFamily, f"promokit_budget_{key}", help_text, budget.get(key))
        yield from _single(CounterMetricFamily, "promokit_paid", "Money paid for redeemed coupons.", budget.get("paid"))
        for key in ("decisions", "responses", "capped", "replays", "explored"):
            yield from _single(CounterMetricFamily, f"promokit_{key}", f"{key.capitalize()} recorded in the ledger.",
                               budget.get(key))
        yield from _single(GaugeMetricFamily, "promokit_lambda", "λ of the real-time rule (the answering worker).",
                           pacing.get("lam"))
        yield from _single(GaugeMetricFamily, "promokit_pacing_target", "B_t, the corrected spend-per-response target.",
                           pacing.get("target"))
        yield from _single(GaugeMetricFamily, "promokit_spend_per_response",
                           "Realised spend per response (expected for open coupons).", pacing.get("realised_ratio"))
        for key in ("decisions", "responses"):
            family = CounterMetricFamily(f"promokit_level_{key}", f"{key.capitalize()} by level.",
                                         labels=["population", "level"])
            for row in self.status.get("levels") or []:
                if _finite(row.get(key)):
                    level = "none" if row.get("level") is None else f"{row['level']:g}"
                    family.add_metric([str(row.get("population")), level], row[key])
            if family.samples:
                yield family
        campaign = self.status.get("campaign") or {}
        if campaign.get("model_version") is not None:
            info = GaugeMetricFamily("promokit_campaign_info", "1, labelled with the version the answering worker "
                                     "serves.", labels=["model_version"])
            info.add_metric([str(campaign["model_version"])], 1)
            yield info
        yield from _single(GaugeMetricFamily, "promokit_campaign_live_since_seconds",
                           "Unix time the answering worker began serving its version.", campaign.get("live_since"))
        for key, help_text in (("switches", "Switches of the answering worker to another campaign version."),
                               ("refused", "Campaign versions the answering worker refused to switch to.")):
            yield from _single(CounterMetricFamily, f"promokit_campaign_{key}", help_text, campaign.get(key))
        if "up" in ledger:
            yield GaugeMetricFamily("promokit_ledger_up", "1 unless the ledger is down (the answering worker's view).",
                                    float(bool(ledger["up"])))
        if ledger.get("state") in LEDGER_STATES:
            family = GaugeMetricFamily("promokit_ledger_state", "1 for the ledger's state as the answering worker "
                                       "sees it: up, degraded (slow, waiting on locks, past the deadline) or down.",
                                       labels=["state"])
            for state in LEDGER_STATES:
                family.add_metric([state], float(state == ledger["state"]))
            yield family
        yield from _single(GaugeMetricFamily, "promokit_ledger_state_seconds",
                           "Seconds the ledger has been in its state (the answering worker's view).",
                           ledger.get("state_for_s"))
        yield from _single(GaugeMetricFamily, "promokit_ledger_read_seconds",
                           "Duration of the status reads of the ledger.",
                           ledger["read_ms"] / 1e3 if _finite(ledger.get("read_ms")) else None)
        yield from _single(GaugeMetricFamily, "promokit_ledger_last_read_age_seconds",
                           "Seconds since the last successful status read of the ledger (the figures' age).",
                           ledger.get("last_read_age_s"))
        yield from _single(GaugeMetricFamily, "promokit_ledger_last_commit_age_seconds",
                           "Seconds since the ledger's last committed write.", ledger.get("last_commit_age_s"))


def _single(kind, name: str, help_text: str, value) -> Iterator[Metric]:
    if _finite(value):
        yield kind(name, help_text, value=value)


def _latency_gauge(families: list[Metric]) -> Iterator[Metric]:
    """``promokit_decision_latency_ms{quantile}``: the name dashboards know, now a bucket estimate over workers."""
    buckets = _buckets({f.name: f for f in families}, DECISIONS)
    gauge = GaugeMetricFamily("promokit_decision_latency_ms", "Decision latency percentiles since start, all "
                              "workers, estimated from promokit_http_request_duration_seconds.", labels=["quantile"])
    for q in (50, 90, 99):
        value = _quantile(q / 100, buckets)
        if value is not None:
            gauge.add_metric([str(q)], value)
    if gauge.samples:
        yield gauge


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def render_metrics(status: dict) -> bytes:
    """The ``/metrics`` answer (:data:`CONTENT_TYPE`): request metrics of all workers read once, the decision
    latency gauge derived from them, and :class:`StatusCollector` over ``status``."""
    families = _request_families()
    registry = CollectorRegistry()
    registry.register(_Snapshot([*families, *_latency_gauge(families)]))
    registry.register(StatusCollector(status))
    return generate_latest(registry)

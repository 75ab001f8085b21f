"""The decision service: FastAPI over a campaign directory and a budget ledger.

``POST /v1/decisions`` proposes a level with eq. 19/20 at the current λ (:mod:`promokit.serve.decision_rule`), then
awaits the ledger, which issues it (or a fallback under the cap) and records it; the answer is sent only after
that transaction commits, so every acknowledged decision is in the ledger. Requests are written in batches
(:class:`~promokit.serve.writer.BatchWriter`), each answered within the deadline: a busy service commits hundreds
of decisions per transaction, an idle one answers at once, and a ledger that cannot commit in time answers 503.
The status endpoints answer from the last figures read (:mod:`promokit.serve.figures`) and the ledger's health
(:mod:`promokit.serve.health`) whatever the ledger does. What the endpoints take and answer is
:mod:`promokit.serve.schema`.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import hmac
import json
import math
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from promokit.campaign.directory import Campaign, load_campaign
from promokit.campaign.money import to_major, to_minor
from promokit.campaign.versions import UnknownVersion
from promokit.data.errors import DataError
from promokit.serve.body_limit import BodyLimit
from promokit.serve.decision_rule import level_of
from promokit.serve.defaults import DEADLINE_SECONDS
from promokit.serve.figures import Figures
from promokit.serve.health import DOWN, UNAVAILABLE, LedgerHealth
from promokit.serve.hot_path import HotRoutes, RequestRoute
from promokit.serve.ledger import CapRequest, Ledger, LedgerConflict, LedgerTimeout, OutcomeRequest
from promokit.serve.metrics import CONTENT_TYPE, RequestMetrics, render_metrics, summary
from promokit.serve.pacing import realised_ratio
from promokit.serve.refresh import WATCH_SECONDS, LiveVersion
from promokit.serve.schema import (
    Assignment,
    DecisionIn,
    DecisionOut,
    Invalid,
    Key,
    Liveness,
    OutcomeIn,
    OutcomeOut,
    Readiness,
    SwitchIn,
    SwitchOut,
    amount_schema,
    decision_body,
    parse_body,
    request_body,
    responses,
)
from promokit.serve.writer import BatchWriter

TOKEN_ENV = "PROMOKIT_API_TOKEN"
# what the parent tells the workers uvicorn starts (prepare_workers → app_from_environment)
CAMPAIGN_ENV, LEDGER_ENV, EXPLORE_ENV = "PROMOKIT_CAMPAIGN", "PROMOKIT_LEDGER", "PROMOKIT_EXPLORE"
WATCH_ENV = "PROMOKIT_WATCH_SECONDS"  # how often a worker reads live.json (promokit.serve.refresh); 0: never
DEADLINE_ENV = "PROMOKIT_DEADLINE"  # seconds a decision or outcome may wait for the ledger (promokit.serve.writer)
#: Seconds a client is asked to wait before it retries a 503.
RETRY_AFTER = 1
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Service:
    """What one worker process holds: the live version of the campaign and its decision rule (with its pacer;
    :class:`~promokit.serve.refresh.LiveVersion`), ledger, its health, writer, and the ledger's figures as last
    read. ``deadline``: seconds a decision or outcome may wait for the ledger."""

    def __init__(self, campaign: Campaign, ledger: Ledger, explore: float | None = None,
                 watch_seconds: float = WATCH_SECONDS, deadline: float = DEADLINE_SECONDS):
        self.ledger, self.watch_seconds = ledger, watch_seconds
        self.exponent = campaign.config.currency_exponent  # the same in every version (refresh_problem)
        self.live = LiveVersion(campaign, explore)
        self.health = LedgerHealth(slow_seconds=deadline / 2)
        self.writer = BatchWriter(ledger, self.health, deadline)
        self.figures = Figures(ledger, self.health, deadline)
        self._pacing = ThreadPoolExecutor(1, thread_name_prefix="pacing")
        self._reads = ThreadPoolExecutor(2, thread_name_prefix="reads")  # campaign versions, status answers

    @property
    def campaign(self) -> Campaign:
        return self.live.campaign

    async def decide(self, body: DecisionIn) -> bytes:
        rule = self.live.rule  # read once: a request finishes on the version it started on
        population, subject = ("customer", body.customer_id) if body.customer_id is not None \
            else ("merchant", body.merchant_id)
        if population not in rule.campaign.populations:
            raise Invalid([{"loc": ["body", f"{population}_id"], "msg": f"this campaign has no {population} score "
                            f"table; send customer_id", "type": "value_error"}])
        request, due = rule.propose(body.request_id, population, subject)
        try:
            row = await self.writer.submit(request)
        finally:  # the pacer waits for this re-solve, even when the ledger failed this request
            if due:
                asyncio.get_running_loop().run_in_executor(self._pacing, self._resolve, rule.pacer)
        if isinstance(row, LedgerConflict):
            raise HTTPException(row.status, str(row))
        return self.decision_json(row)

    def decision_json(self, row: dict) -> bytes:
        index = level_of(row["level_index"])
        return json.dumps({
            "request_id": row["request_id"], "population": row["population"], "subject_id": row["subject_id"],
            "level": None if index is None else to_major(row["face"], self.exponent), "level_index": index,
            "expected_response": row["expected_response"], "expected_cost": row["expected_cost"], "lam": row["lam"],
            "model_version": row["model_version"], "reason": row["reason"], "cold_start": bool(row["cold_start"]),
            "bucket": row["bucket"], "propensity": row["propensity"], "expires_at": row["expires_at"],
            "replayed": row["replayed"]}).encode()

    def _resolve(self, pacer) -> None:
        totals = self.ledger.last_totals  # None until this worker's first commit: then λ follows the traffic only
        pacer.resolve(None if totals is None else realised_ratio(totals))

    async def switch(self, version: str | None, how: str) -> dict:
        """:meth:`LiveVersion.switch` with this worker's reads executor and ledger."""
        return await self.live.switch(version, how, self.read, self.set_cap)

    async def follow(self) -> None:
        """:meth:`LiveVersion.follow` with this worker's reads executor and ledger."""
        await self.live.follow(self.read, self.set_cap, self.watch_seconds)

    async def set_cap(self, cap: int) -> None:
        """The ledger's cap (minor units), written in turn with the decisions, within the deadline."""
        await self.writer.submit(CapRequest(cap))

    async def outcome(self, body: OutcomeIn) -> bytes:
        amount = None
        if body.amount is not None:
            try:
                amount = to_minor(body.amount, self.exponent, "amount")
            except DataError as exc:
                raise Invalid([{"loc": ["body", "amount"], "msg": str(exc), "type": "value_error"}]) from None
        row = await self.writer.submit(OutcomeRequest(body.request_id, body.redeemed, amount))
        if isinstance(row, LedgerConflict):
            raise HTTPException(row.status, str(row))
        return json.dumps({"request_id": row["request_id"], "state": row["state"], "redeemed": bool(row["redeemed"]),
                           "paid": to_major(row["paid"], self.exponent), "replayed": row["replayed"]}).encode()

    async def read(self, function, *args):
        return await asyncio.get_running_loop().run_in_executor(self._reads, function, *args)

    async def status(self) -> dict:
        """The service's figures, within a small fixed time whatever the ledger does: the ledger's as last read
        (none before a first read, :class:`~promokit.serve.figures.Figures`) with their age, and its health."""
        figures = await self.figures.refresh()
        state = self.health.current()
        read = (figures.read_at, figures.totals, figures.levels, figures.timeline, figures.read_ms, figures.error)
        ledger = {"state": state, "up": state != DOWN, "since": self.health.since, "why": self.health.error,
                  "deadline_s": self.writer.deadline, **self.health.counts}
        return await self.read(self._status, read, ledger)

    def _status(self, read: tuple, ledger: dict) -> dict:
        config, pacer, e = self.campaign.config, self.live.rule.pacer, self.exponent
        read_at, totals, levels, timeline, read_ms, error = read
        money = lambda units: to_major(units, e)  # noqa: E731
        lam, target = pacer.state
        per_level = [{"population": row["population"], "level_index": level_of(row["level_index"]),
                      "level": None if level_of(row["level_index"]) is None else money(config.level_faces[
                          row["level_index"]]),
                      "decisions": row["decisions"], "responses": row["responses"],
                      "redemption_rate": row["responses"] / row["decisions"] if row["decisions"] else None,
                      "paid": money(row["paid"])} for row in levels]
        timeline = [{**row, "at_risk": money(row["at_risk"]), "paid": money(row["paid"])} for row in timeline]
        budget = {} if totals is None else {
            **{k: money(totals[k]) for k in ("cap", "committed", "paid", "at_risk")},
            "remaining": money(max(totals["cap"] - totals["at_risk"], 0)),
            "overdraft": money(max(totals["at_risk"] - totals["cap"], 0)),  # a cap lowered below the money at risk
            **{k: totals[k] for k in ("decisions", "responses", "capped", "replays", "explored", "expected_cost",
                                      "expected_responses")}}
        now, since = time.time(), ledger.pop("since")
        return {
            "time": now,
            "pid": os.getpid(),
            "campaign": {"model_version": config.model_version, "levels": config.levels, "form": config.form,
                         "B": config.B, "cap": money(config.cap_minor), "currency_exponent": e,
                         "coupon_ttl_seconds": config.coupon_ttl_seconds, "when_exhausted": config.when_exhausted,
                         "cold_start": config.cold_start, "explore": config.explore,
                         "populations": {p: len(t) for p, t in self.campaign.populations.items()},
                         "assignments": len(self.campaign.assignments), **self.live.status()},
            "budget": budget,
            "pacing": {"enabled": pacer.enabled, "lam": lam, "target": target, "B": config.B,
                       "realised_ratio": None if totals is None else realised_ratio(totals),
                       "trace": [vars(point) for point in pacer.trace[-500:]]},
            "levels": per_level,
            "timeline": timeline,
            "ledger": {**ledger, "state_for_s": now - since, "error": error, "read_ms": read_ms,
                       "last_read_age_s": None if read_at is None else now - read_at,
                       "down_for_s": now - since if ledger["state"] == DOWN else None,
                       "last_commit_age_s": None if self.writer.last_commit is None
                       else now - self.writer.last_commit},
            "requests": summary(),
        }

    def close(self) -> None:
        self._pacing.shutdown(wait=True)
        self._reads.shutdown(wait=True)
        self.figures.close()
        self.ledger.close()


def create_app(campaign_dir: str | os.PathLike, ledger_url: str | None = None, token: str | None = None,
               explore: float | None = None, watch_seconds: float | None = None,
               deadline: float | None = None) -> FastAPI:
    """The service for one campaign (``promokit serve`` runs it under uvicorn, a worker each). ``ledger_url``
    defaults to ``sqlite:///<campaign>/ledger.sqlite``;
    ``token`` (default ``$PROMOKIT_API_TOKEN``) is the bearer token the mutating endpoints require; ``explore``
    replaces the campaign's exploration share (its seed stays the campaign's); ``watch_seconds`` (default
    ``$PROMOKIT_WATCH_SECONDS``, else 1) is how often a worker reads ``live.json`` to follow a switch, 0 never
    (:mod:`promokit.serve.refresh`); ``deadline`` (default ``$PROMOKIT_DEADLINE``, else
    :data:`~promokit.serve.defaults.DEADLINE_SECONDS`) is how long a decision or outcome may wait for the ledger
    before it answers 503 (:mod:`promokit.serve.writer`)."""
    from promokit.serve.page import render_page

    token = token if token is not None else os.environ.get(TOKEN_ENV, "")
    if not token:
        raise RuntimeError(f"set {TOKEN_ENV} to the bearer token clients must send (mutating endpoints refuse "
                           f"requests without it)")
    campaign = load_campaign(campaign_dir, explore)
    ledger = Ledger(campaign.ledger_url(ledger_url), exponent=campaign.config.currency_exponent)
    expected = f"Bearer {token}".encode()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        ledger.open(campaign.config.cap_minor)
        # The campaign (an id index of every customer) is long-lived: left to the collector, each full collection
        # walks it and stalls every request in flight (p99 101 → 22 ms at 64 clients once frozen).
        gc.freeze()
        await service.writer.start()
        await service.figures.refresh(wait=service.writer.deadline)  # a first status has figures to show
        follower = asyncio.get_running_loop().create_task(service.follow())
        hangup = _on_hangup(service.live.poke)
        yield
        hangup()
        follower.cancel()
        await service.writer.stop()
        service.close()

    watch = _seconds("watch_seconds", WATCH_ENV, watch_seconds, WATCH_SECONDS, least=0)
    service = Service(campaign, ledger, explore, watch, _seconds("deadline", DEADLINE_ENV, deadline, DEADLINE_SECONDS))
    # FastAPI's OpenTelemetry hooks are off: the service exports Prometheus metrics (promokit.serve.metrics), and
    # the hooks' per-request check for a configured provider cost ≈ 5 µs of every decision.
    app = FastAPI(title="promokit decision service", version=campaign.config.model_version, lifespan=lifespan,
                  description="Real-time incentive decisions (eqs. 19–20) under a hard cap on money at risk.",
                  telemetry={"tracing": False, "metrics": False, "logs": False})
    app.state.service = service
    # The hot endpoints read their body themselves (parse_body: strict, exact decimals) and send the JSON they
    # build; the models still document both in the OpenAPI schema. HotRoutes, the innermost middleware, answers
    # them without the router's and FastAPI's per-request layers (promokit.serve.hot_path).
    hot = APIRouter(route_class=RequestRoute)
    app.add_middleware(HotRoutes, router=hot, handlers=app.exception_handlers)
    app.add_middleware(BodyLimit)
    app.add_middleware(RequestMetrics)  # added last, so outermost: it also counts BodyLimit's 413s

    def authorise(request: Request) -> None:
        if not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @hot.post("/v1/decisions", response_model=DecisionOut, openapi_extra=decision_body(campaign.populations),
              responses=responses(401, 409, 413, 422, 503))
    async def decisions(request: Request) -> Response:
        authorise(request)
        body = parse_body(DecisionIn, await request.body())
        return Response(await service.decide(body), media_type="application/json")

    @hot.post("/v1/outcomes", response_model=OutcomeOut,
              openapi_extra=request_body(OutcomeIn, amount=amount_schema(campaign.config.currency_exponent)),
              responses=responses(401, 404, 409, 413, 422, 503))
    async def outcomes(request: Request) -> Response:
        authorise(request)
        body = parse_body(OutcomeIn, await request.body())
        return Response(await service.outcome(body), media_type="application/json")

    app.include_router(hot)

    @app.post("/v1/campaign/switch", response_model=SwitchOut, openapi_extra=request_body(SwitchIn, required=False),
              responses=responses(401, 404, 409, 413, 422, 503, described_as={
                  404: "the campaign directory has no such version",
                  409: "the version cannot replace the live one (it does not load, or its levels, currency or "
                       "populations differ): the live one is kept"}))
    async def switch(request: Request) -> JSONResponse:
        authorise(request)
        raw = await request.body()
        body = parse_body(SwitchIn, raw) if raw.strip() else SwitchIn()
        try:
            return JSONResponse(await service.switch(body.version, "endpoint"))
        except UnknownVersion as exc:
            raise HTTPException(404, str(exc)) from None
        except DataError as exc:
            raise HTTPException(409, str(exc)) from None

    @app.get("/v1/assignments/{user_id}", response_model=Assignment, responses=responses(404, 422))
    async def assignment(user_id: Key) -> Assignment:
        assignments = service.campaign.assignments
        if not assignments:
            raise HTTPException(404, "this campaign has no quota plan (it was built without one)")
        fund = assignments.get(user_id)
        if fund is None:
            raise HTTPException(404, f"user_id {user_id!r} is not in the quota plan")
        return Assignment(user_id=user_id, fund=fund)

    @app.get("/v1/status")
    async def status() -> JSONResponse:
        return JSONResponse(await service.status())

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(render_metrics(await service.status()), media_type=CONTENT_TYPE)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        return HTMLResponse(render_page(await service.status()))

    @app.get("/livez", response_model=Liveness)
    async def livez() -> Liveness:
        return Liveness(live=True)

    @app.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness, "description": "the ledger "
                                                                   "is down: decisions would answer 503"}})
    async def readyz() -> JSONResponse:
        await service.figures.refresh()
        state = service.health.current()
        return JSONResponse(Readiness(ready=state != DOWN, ledger=state).model_dump(),
                            status_code=503 if state == DOWN else 200)

    @app.exception_handler(Invalid)
    async def invalid(request: Request, exc: Invalid) -> JSONResponse:
        return JSONResponse({"detail": exc.errors}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid_parameter(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                                        for e in exc.errors()]}, status_code=422)

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        why = f"{exc}; retry with the same request_id" if isinstance(exc, LedgerTimeout) else type(exc).__name__
        return JSONResponse({"detail": f"ledger unavailable: {why}"}, status_code=503,
                            headers={"Retry-After": str(RETRY_AFTER)})

    for error in UNAVAILABLE:
        app.add_exception_handler(error, unavailable)

    return app


def _seconds(name: str, env: str, given, default: float, least: float | None = None) -> float:
    """``given`` seconds, else ``$env``, else ``default``: a finite number ≥ ``least`` (None: > 0)."""
    given = given if given is not None else os.environ.get(env, default)
    try:
        seconds = float(given)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and (seconds > 0 if least is None else seconds >= least)):
        raise DataError(f"{name} (${env}) must be a number of seconds {'> 0' if least is None else f'≥ {least}'}, "
                        f"got {given!r}")
    return seconds


def _on_hangup(callback):
    """Call ``callback`` on SIGHUP in this process (a worker's main thread); returns the undo. Elsewhere (a test
    client's thread, Windows) nothing: the pointer is still followed."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, callback)
    except (ValueError, RuntimeError, NotImplementedError, AttributeError):
        return lambda: None
    return lambda: loop.remove_signal_handler(signal.SIGHUP)


def prepare_workers(campaign_dir: str | os.PathLike, ledger_url: str | None = None,
                    explore: float | None = None) -> tuple[Campaign, str]:
    """What the parent of the service's workers does before uvicorn starts them: load the campaign (``explore``
    replacing its exploration share), create or migrate its ledger once rather than in every worker at once, and
    put both in the environment :func:`app_from_environment` reads. Returns the campaign and the ledger's URL."""
    campaign = load_campaign(campaign_dir, explore)
    url = campaign.ledger_url(ledger_url)
    ledger = Ledger(url, exponent=campaign.config.currency_exponent)
    ledger.open(campaign.config.cap_minor)
    ledger.close()
    os.environ.update({CAMPAIGN_ENV: str(campaign.path.resolve()), LEDGER_ENV: url,
                       EXPLORE_ENV: repr(campaign.config.explore)})
    return campaign, url


def app_from_environment() -> FastAPI:
    """Factory for ``uvicorn --factory`` and multi-worker runs: the settings come from the environment."""
    exit_with_parent()
    explore = os.environ.get(EXPLORE_ENV)
    return create_app(os.environ[CAMPAIGN_ENV], os.environ.get(LEDGER_ENV) or None,
                      explore=None if explore is None else float(explore))


def exit_with_parent() -> None:
    """In a worker uvicorn spawned, ask Linux for a SIGTERM (uvicorn's graceful stop) when the parent dies.

    uvicorn's workers outlive a parent killed with SIGKILL: they keep the port, so a restarted service cannot
    bind it while the orphans answer with a stale pacer. Not in a single-process service (its parent is the shell).
    """
    parent = multiprocessing.parent_process()
    if parent is None or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent.pid:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)

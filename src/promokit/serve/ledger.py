"""The budget ledger: every decision and outcome, and the money at risk, in SQLite or PostgreSQL.

SQLAlchemy 2.x for the pool, connection set-up, migrations and reads, with the same SQL for both servers
(``ON CONFLICT … DO UPDATE`` and ``IN`` lists read alike in SQLite ≥ 3.24 and PostgreSQL), rather than psycopg 3
alone, because psycopg speaks only PostgreSQL and the embedded default is SQLite. The write transaction, the hot
path, runs once per batch of requests on a DBAPI connection of its own (sqlite3, or psycopg blocking or
asynchronous; see :meth:`Ledger.apply`).

Money is exact: integers of the currency's minor unit (:mod:`promokit.campaign.money`) in ``BIGINT`` columns,
added and compared without rounding. Expectations (expected cost and responses) are model estimates, not money
held, and stay floating point.

Budget safety. Money at risk is ``committed`` (face value of issued coupons that are neither closed nor expired)
plus ``paid`` (money paid out). Every write is one transaction that takes the budget row's lock (``SELECT … FOR
UPDATE`` or an ``UPDATE`` of it on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), so writers in any number of
threads and processes are serialised, and issues a coupon only if ``committed + paid + face ≤ cap``, so the cap
holds whatever the concurrency. A cap lowered below the money at risk (a refresh or a restart onto a lower one) is an
overdraft, not an error: decisions answer what costs nothing until enough money has come back. Decisions are
stamped (``created_at``, by PostgreSQL's clock on PostgreSQL) and numbered (``seq``) with the lock held, so both
follow the commit order. ``request_id`` is the primary key of ``decisions``: the same request seen again gets its
stored answer and is written once; the same id with another body is refused.

Exploration. Each decision records its subject's ``bucket`` (:mod:`promokit.serve.explore`) and the
``propensity`` of the answer it got: the probability, under the service's policy as it stood at that decision,
of that answer. A level chosen for sure (the rule's at its λ, a fallback at the cap, a cold-start setting's) has
1; a level drawn uniformly among K has 1/K, or more when the cap sends several of the drawn levels to one
fallback. It is computed with the budget row locked, from the room the cap left, so it is exact.

Schema migrations are the numbered entries of :data:`MIGRATIONS`; ``schema_version`` records those applied.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from contextlib import closing
import json
import re
import sqlite3
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import psycopg
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from promokit.data.errors import DataError
from promokit.serve.explore import EXPLOIT, EXPLORE

NO_LEVEL = -1
#: How long a new asynchronous write connection (its connect and set-up) may take before it is given up.
CONNECT_SECONDS = 10.0
#: PostgreSQL ends a write connection's transaction left idle this long (ms): its worker is gone mid-way.
IDLE_IN_TRANSACTION_MS = 5000
#: SQLite's busy timeout (ms) outside the service's batches (migrations, reads, a batch without a limit).
BUSY_MS = 60_000
#: sqlite3 error codes of a lock held by another connection.
SQLITE_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

_V2_DECISION_COLUMNS = """request_id VARCHAR(128) PRIMARY KEY, seq BIGINT NOT NULL, population VARCHAR(16) NOT NULL,
            subject_id VARCHAR(128) NOT NULL, level_index INTEGER NOT NULL, face BIGINT NOT NULL,
            expected_response DOUBLE PRECISION NOT NULL, expected_cost DOUBLE PRECISION NOT NULL,
            lam DOUBLE PRECISION NOT NULL, model_version VARCHAR(64) NOT NULL, reason VARCHAR(32) NOT NULL,
            cold_start INTEGER NOT NULL, paid_on VARCHAR(16) NOT NULL, state VARCHAR(16) NOT NULL,
            created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
            redeemed INTEGER, paid BIGINT NOT NULL DEFAULT 0, outcome_at DOUBLE PRECISION"""

#: ``{scale}`` is 10^exponent of the campaign's currency, ``{exponent}`` the exponent (see :meth:`Ledger.migrate`).
MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, [
        """CREATE TABLE budget (
            id INTEGER PRIMARY KEY, cap DOUBLE PRECISION NOT NULL,
            committed DOUBLE PRECISION NOT NULL DEFAULT 0, paid DOUBLE PRECISION NOT NULL DEFAULT 0,
            decisions BIGINT NOT NULL DEFAULT 0, responses BIGINT NOT NULL DEFAULT 0,
            capped BIGINT NOT NULL DEFAULT 0, replays BIGINT NOT NULL DEFAULT 0,
            expected_cost DOUBLE PRECISION NOT NULL DEFAULT 0, expected_responses DOUBLE PRECISION NOT NULL DEFAULT 0,
            open_expected_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
            open_expected_responses DOUBLE PRECISION NOT NULL DEFAULT 0,
            last_sweep DOUBLE PRECISION NOT NULL DEFAULT 0)""",
        """CREATE TABLE decisions (
            request_id VARCHAR(128) PRIMARY KEY, population VARCHAR(16) NOT NULL, subject_id VARCHAR(128) NOT NULL,
            level_index INTEGER NOT NULL, level DOUBLE PRECISION, face DOUBLE PRECISION NOT NULL,
            expected_response DOUBLE PRECISION NOT NULL, expected_cost DOUBLE PRECISION NOT NULL,
            lam DOUBLE PRECISION NOT NULL, model_version VARCHAR(64) NOT NULL, reason VARCHAR(32) NOT NULL,
            cold_start INTEGER NOT NULL, paid_on VARCHAR(16) NOT NULL, state VARCHAR(16) NOT NULL,
            created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
            redeemed INTEGER, paid DOUBLE PRECISION NOT NULL DEFAULT 0, outcome_at DOUBLE PRECISION)""",
        "CREATE INDEX decisions_open ON decisions (state, expires_at)",
        """CREATE TABLE per_level (
            population VARCHAR(16) NOT NULL, level_index INTEGER NOT NULL, decisions BIGINT NOT NULL DEFAULT 0,
            responses BIGINT NOT NULL DEFAULT 0, paid DOUBLE PRECISION NOT NULL DEFAULT 0,
            PRIMARY KEY (population, level_index))""",
        """CREATE TABLE timeline (
            second BIGINT PRIMARY KEY, decisions BIGINT NOT NULL DEFAULT 0, responses BIGINT NOT NULL DEFAULT 0,
            at_risk DOUBLE PRECISION NOT NULL, paid DOUBLE PRECISION NOT NULL, lam DOUBLE PRECISION)""",
    ]),
    (2, [  # money in integer minor units; decisions numbered in commit order (seq); the currency's exponent kept
        """CREATE TABLE budget_v2 (
            id INTEGER PRIMARY KEY, exponent INTEGER NOT NULL, cap BIGINT NOT NULL,
            committed BIGINT NOT NULL DEFAULT 0, paid BIGINT NOT NULL DEFAULT 0,
            decisions BIGINT NOT NULL DEFAULT 0, responses BIGINT NOT NULL DEFAULT 0,
            capped BIGINT NOT NULL DEFAULT 0, replays BIGINT NOT NULL DEFAULT 0,
            expected_cost DOUBLE PRECISION NOT NULL DEFAULT 0, expected_responses DOUBLE PRECISION NOT NULL DEFAULT 0,
            open_expected_cost DOUBLE PRECISION NOT NULL DEFAULT 0,
            open_expected_responses DOUBLE PRECISION NOT NULL DEFAULT 0,
            last_sweep DOUBLE PRECISION NOT NULL DEFAULT 0)""",
        """INSERT INTO budget_v2 SELECT id, {exponent}, CAST(ROUND(cap * {scale}) AS BIGINT),
            CAST(ROUND(committed * {scale}) AS BIGINT), CAST(ROUND(paid * {scale}) AS BIGINT), decisions, responses,
            capped, replays, expected_cost, expected_responses, open_expected_cost, open_expected_responses, last_sweep
            FROM budget""",
        "DROP TABLE budget",
        "ALTER TABLE budget_v2 RENAME TO budget",
        f"CREATE TABLE decisions_v2 ({_V2_DECISION_COLUMNS})",
        """INSERT INTO decisions_v2 SELECT request_id, ROW_NUMBER() OVER (ORDER BY created_at, request_id), population,
            subject_id, level_index, CAST(ROUND(face * {scale}) AS BIGINT), expected_response, expected_cost, lam,
            model_version, reason, cold_start, paid_on, state, created_at, expires_at, redeemed,
            CAST(ROUND(paid * {scale}) AS BIGINT), outcome_at FROM decisions""",
        "DROP TABLE decisions",
        "ALTER TABLE decisions_v2 RENAME TO decisions",
        "CREATE INDEX decisions_open ON decisions (state, expires_at)",
        """CREATE TABLE per_level_v2 (
            population VARCHAR(16) NOT NULL, level_index INTEGER NOT NULL, decisions BIGINT NOT NULL DEFAULT 0,
            responses BIGINT NOT NULL DEFAULT 0, paid BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (population, level_index))""",
        """INSERT INTO per_level_v2 SELECT population, level_index, decisions, responses,
            CAST(ROUND(paid * {scale}) AS BIGINT) FROM per_level""",
        "DROP TABLE per_level",
        "ALTER TABLE per_level_v2 RENAME TO per_level",
        """CREATE TABLE timeline_v2 (
            second BIGINT PRIMARY KEY, decisions BIGINT NOT NULL DEFAULT 0, responses BIGINT NOT NULL DEFAULT 0,
            at_risk BIGINT NOT NULL, paid BIGINT NOT NULL, lam DOUBLE PRECISION)""",
        """INSERT INTO timeline_v2 SELECT second, decisions, responses, CAST(ROUND(at_risk * {scale}) AS BIGINT),
            CAST(ROUND(paid * {scale}) AS BIGINT), lam FROM timeline""",
        "DROP TABLE timeline",
        "ALTER TABLE timeline_v2 RENAME TO timeline",
    ]),
    (3, [  # the exploration bucket: each decision's bucket and the propensity of its level; explored decisions
        # (the rows already there get the defaults: the rule's decision, with probability 1)
        f"ALTER TABLE decisions ADD COLUMN bucket VARCHAR(8) NOT NULL DEFAULT '{EXPLOIT}'",
        "ALTER TABLE decisions ADD COLUMN propensity DOUBLE PRECISION NOT NULL DEFAULT 1",
        "ALTER TABLE budget ADD COLUMN explored BIGINT NOT NULL DEFAULT 0",
    ]),
]

OPEN, REDEEMED, CLOSED, EXPIRED, SETTLED = "issued", "redeemed", "closed", "expired", "settled"


@dataclass(frozen=True)
class Option:
    """One answer the service may give: a level (``index`` −1 for no incentive)."""

    index: int
    face: int  # minor units the coupon can cost: reserved against the cap when it is issued
    expected_response: float
    expected_cost: float  # in the currency's major unit (an expectation, not money held)


@dataclass(frozen=True)
class DecisionRequest:
    request_id: str
    population: str
    subject_id: str
    chosen: Option  # what eq. 19/20 chose at ``lam``
    fallbacks: tuple[Option, ...]  # tried in order when ``chosen`` does not fit under the cap
    lam: float
    model_version: str
    cold_start: bool
    paid_on: str  # "response": paid when redeemed; "request": paid when issued (eq. 20 as printed)
    ttl: float
    reason: str = "rule"  # why ``chosen``: the "rule" (eq. 19/20), "explore" or the campaign's "cold_start" setting
    bucket: str = EXPLOIT  # the subject's exploration bucket (promokit.serve.explore)
    among: tuple[Option, ...] | None = None  # ``chosen`` was drawn uniformly among these; None: chosen for sure


@dataclass(frozen=True)
class OutcomeRequest:
    request_id: str
    redeemed: bool
    amount: int | None  # minor units paid; defaults to the face value when redeemed


@dataclass(frozen=True)
class CapRequest:
    """A new cap in minor units (a switch to a version with another): the decisions after it in its batch, and in
    every later batch, are checked against it."""

    cap: int


class LedgerTimeout(Exception):
    """The ledger did not commit in time: the transaction was rolled back. (When the connection stalled instead,
    the worker gave it up and cannot know whether a commit already sent arrived; a retry with the same
    request_id finds the decision or makes it, once.)"""


class LedgerConflict(DataError):
    """A request the ledger refuses (HTTP ``status``): an unknown request, an expired coupon, an id reused with
    another body, a redemption of no coupon. A refused request changes nothing."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@dataclass
class _Budget:
    exponent: int
    cap: int
    committed: int
    paid: int
    decisions: int
    responses: int
    capped: int
    replays: int
    explored: int
    expected_cost: float
    expected_responses: float
    open_expected_cost: float
    open_expected_responses: float
    last_sweep: float
    levels: dict = field(default_factory=dict)  # (population, level_index) → [decisions, responses, paid]

    @property
    def at_risk(self) -> int:
        return self.committed + self.paid

    def totals(self) -> dict:
        return {**{k: v for k, v in vars(self).items() if k != "levels"}, "at_risk": self.at_risk}

    def level(self, population: str, index: int) -> list:
        """This batch's [decisions, responses, paid] of one level, added to ``per_level`` at commit."""
        return self.levels.setdefault((population, index), [0, 0, 0])


class Ledger:
    """Decisions, outcomes and the money at risk of one campaign, in the database at ``url``.

    ``exponent`` is the campaign currency's (2: amounts in cents); it converts a version-1 ledger's floating-point
    money when it is migrated, and a ledger refuses to open for a campaign with another exponent.
    """

    def __init__(self, url: str, exponent: int = 2, sweep_seconds: float = 1.0):
        self.url = normalise_url(url)
        self.dialect = "sqlite" if self.url.startswith("sqlite") else "postgresql"
        self.exponent = exponent
        self.sweep_seconds = sweep_seconds
        self.engine = _engine(self.url, immediate=True)
        self.reader = _engine(self.url, immediate=False) if self.dialect == "sqlite" else self.engine
        self._last_budget: _Budget | None = None  # as the last committed apply() left it
        self._write_connection = self._write_session = None  # see _session
        self._async_session: _AsyncPostgresSession | None = None  # see apply_async
        self._connecting: asyncio.Future | None = None  # see connect_async

    # ---- set-up ------------------------------------------------------------------------------------------
    def migrate(self) -> int:
        """Apply the migrations not yet applied; returns the schema version. Safe to run from several processes."""
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":  # one migrator at a time; released at commit
                conn.execute(text("SELECT pg_advisory_xact_lock(727274)"))
            conn.execute(text("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                              "applied_at DOUBLE PRECISION NOT NULL)"))
            applied = {row[0] for row in conn.execute(text("SELECT version FROM schema_version"))}
            for version, statements in MIGRATIONS:
                if version in applied:
                    continue
                for statement in statements:
                    conn.execute(text(statement.format(scale=10**self.exponent, exponent=self.exponent)))
                conn.execute(text("INSERT INTO schema_version VALUES (:v, :t)"), {"v": version, "t": time.time()})
            return max(v for v, _ in MIGRATIONS)

    def open(self, cap: int) -> None:
        """Migrate and set the cap in minor units (the campaign's; a restart with a new cap changes it, never
        the money)."""
        try:
            self.migrate()
            with self.engine.begin() as conn:
                kept = conn.execute(text("SELECT exponent FROM budget WHERE id = 1")).scalar()
                if kept is not None and kept != self.exponent:
                    raise DataError(f"the ledger at {self.where} keeps money with currency exponent {kept}; this "
                                    f"campaign's is {self.exponent}: use a new ledger")
                conn.execute(text("INSERT INTO budget (id, exponent, cap) VALUES (1, :exponent, :cap) "
                                  "ON CONFLICT (id) DO UPDATE SET cap = excluded.cap"),
                             {"cap": int(cap), "exponent": self.exponent})
        except OperationalError as exc:
            raise DataError(f"cannot open the ledger at {self.where}: "
                            f"{str(exc.orig).strip().splitlines()[0]}") from None

    @property
    def last_totals(self) -> dict | None:
        """The running totals as this instance's last committed batch left them (None before one)."""
        return None if self._last_budget is None else self._last_budget.totals()

    @property
    def where(self) -> str:
        return self.url.split("@")[-1]

    def close(self) -> None:
        if self._write_connection is not None:
            self._write_connection.close()
            self._write_connection = None
        self.engine.dispose()
        if self.reader is not self.engine:
            self.reader.dispose()

    # ---- writes ------------------------------------------------------------------------------------------
    def apply(self, items: list, now: float | None = None, limit: float | None = None, wait: bool = True) -> list:
        """Decide and record a batch of :class:`DecisionRequest` / :class:`OutcomeRequest` / :class:`CapRequest` in
        one transaction.

        Returns, per item in order, the decision row as a dict (with ``replayed`` True when the same request was
        answered before) or the :class:`LedgerConflict` that refused it. A batch whose every item is refused
        rolls back: a refused request writes nothing. Batching is what makes the ledger fast: one lock, one
        commit and a few ``executemany`` calls for the whole batch. ``now`` (tests) replaces the clock, which is
        otherwise read once the lock is held.

        ``limit`` (seconds; None: no limit) bounds the transaction's waits: every statement and lock wait ends
        after it (PostgreSQL's ``statement_timeout`` and ``lock_timeout``, SQLite's busy timeout), and a
        transaction past it by the time it would commit rolls back instead; either raises, and a wait the
        database cut short (:func:`gave_up`) keeps the connection. On SQLite, ``wait=False`` does not wait for the
        write lock at all: held by another connection, it fails the batch at once (:func:`busy`), nothing done.

        One writer per instance, on a DBAPI connection checked out of SQLAlchemy's pool once, with statements
        written once per dialect: SQLAlchemy Core's Python cost per statement (≈ 60 µs) and per checkout were
        most of a one-decision batch, the hot path at low concurrency. On PostgreSQL a batch of new decisions is
        first tried as one statement (:meth:`_one_statement`).
        """
        steps = self._transaction(items, now, _cutoff(limit))
        session, reply = self._session(), None
        session.limit_ms = _ms(limit) if wait else 0
        try:
            while True:
                step = steps.send(reply)
                reply = getattr(session, step[0])(*step[1:])
        except StopIteration as done:
            return done.value
        except BaseException as exc:
            kept = isinstance(exc, Exception) and gave_up(exc)
            if kept:
                try:
                    session.rollback()  # the database answered: the connection goes on
                except Exception:  # noqa: BLE001 - it did not, after all: closed below
                    kept = False
            if not kept:
                self._write_connection, connection = None, self._write_connection
                connection.invalidate()  # rolled back and closed: the next batch connects afresh
            raise

    async def apply_async(self, items: list, now: float | None = None, limit: float | None = None) -> list:
        """:meth:`apply` on the event loop, for PostgreSQL: the same transaction through psycopg's
        ``AsyncConnection``. The service's worker awaits it instead of handing each batch to a thread, whose
        hand-offs and contention for the GIL cost more of the worker's CPU than the ledger's own work. A caller
        that gives up on it (a stalled connection) calls :meth:`abandon` and cancels it."""
        steps = self._transaction(items, now, _cutoff(limit))
        session = await self.connect_async()
        session.limit_ms, reply = _ms(limit), None
        try:
            while True:
                step = steps.send(reply)
                reply = await getattr(session, step[0])(*step[1:])
        except StopIteration as done:
            return done.value
        except BaseException as exc:
            kept = isinstance(exc, Exception) and gave_up(exc) and session is self._async_session
            if kept:
                try:
                    await session.rollback()  # the server answered: the connection goes on
                except Exception:  # noqa: BLE001 - it did not, after all: closed below
                    kept = False
            if not kept:
                if self._async_session is session:
                    self._async_session = None
                await session.close()  # the server rolls an unfinished transaction back
            raise

    async def connect_async(self) -> "_AsyncPostgresSession":
        """The asynchronous write session, connected if need be. One connection attempt at a time, shared by the
        batches that wait for it: a batch that gives up at its deadline leaves the attempt running (bounded by
        :data:`CONNECT_SECONDS`), so a stalled server is not sent a connection per batch."""
        if self._async_session is None:
            if self._connecting is None:
                self._connecting = asyncio.ensure_future(
                    asyncio.wait_for(_AsyncPostgresSession.connect(self.url), CONNECT_SECONDS))
            connecting = self._connecting
            try:
                session = await asyncio.shield(connecting)
            finally:
                if connecting.done() and self._connecting is connecting:
                    self._connecting = None
            self._async_session = self._async_session or session
        return self._async_session

    def abandon(self) -> None:
        """Give up the asynchronous session a batch is stalled on: the next batch connects afresh, and the
        stalled batch, once cancelled, closes it (the server rolls its transaction back when the close reaches
        it)."""
        self._async_session = None

    async def close_async(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._async_session is not None:
            await self._async_session.close()
            self._async_session = None

    def _transaction(self, items: list, now: float | None, cutoff: float | None):
        """One batch's transaction in two round trips: the budget row's lock with the lookup of the batch's ids,
        then every write and the COMMIT together; rolled back (:class:`LedgerTimeout`) rather than committed
        once ``time.monotonic()`` has passed ``cutoff``.

        A generator of the session's steps (``("begin", ids)``, ``("query", name, params)``, ``("commit",
        writes)``, ``("rollback",)``), each sent back its answer, so that :meth:`apply` and :meth:`apply_async`
        run the same decisions over blocking and asynchronous connections. Returns the batch's results."""
        if self.dialect == "postgresql":
            results = yield from self._one_statement(items, now)
            if results is not None:
                return results
        ids = sorted({item.request_id for item in items if not isinstance(item, CapRequest)})
        budget, known, clock = yield "begin", ids
        now = clock if now is None else now  # read with the lock held: stamps follow the commit order
        expired = 0
        if now - budget.last_sweep >= self.sweep_seconds:
            expiring = yield "query", "expiring", {"open": OPEN, "now": now}  # (face, expected_cost, response)
            if expiring:
                yield "query", "expire", {"expired": EXPIRED, "open": OPEN, "now": now}
            self._expire(budget, expiring, now)
            expired = len(expiring)
        inserted, updates, results = {}, [], []
        for item in items:
            if isinstance(item, DecisionRequest):
                results.append(self._decide(item, budget, known, inserted, now))
            elif isinstance(item, CapRequest):
                budget.cap = item.cap
                results.append({"cap": item.cap})
            else:
                results.append(self._outcome(item, budget, known, inserted, updates, now))
        if all(isinstance(result, LedgerConflict) for result in results):
            yield ("rollback",)
            return results
        responses = sum(isinstance(item, OutcomeRequest) and isinstance(r, dict) and not r["replayed"]
                        and item.redeemed for item, r in zip(items, results))
        rows = list(inserted.values())
        writes = [("insert", row) for row in rows] + [("outcome", update) for update in updates]
        writes += self._save(budget, now, rows, responses, bool(inserted or updates or expired))
        if any(isinstance(item, CapRequest) for item in items):
            writes.append(("save_cap", {"cap": budget.cap}))
        if cutoff is not None and time.monotonic() > cutoff:
            raise LedgerTimeout("the transaction passed its time limit before its commit: rolled back")
        yield "commit", writes
        self._last_budget = budget
        return results

    def _one_statement(self, items: list, now: float | None):
        """A batch of new decisions as ONE statement (:data:`_ONE_STATEMENT`): no round trip with the budget row
        locked. Returns None, having written nothing, when the batch needs the lock-first transaction.

        The levels are chosen against the room this worker's last commit left; the statement adds the batch's
        money to the budget row only if the room the budget row has left is at least the batch's *headroom*
        (other workers may have spent it since), numbers and stamps the decisions from the row it updated (so
        ``seq`` and ``created_at`` still follow the commit order) and returns nothing otherwise. The headroom is
        the money the batch adds, or more where a drawn level's propensity depends on the room: each explored
        decision needs room for the dearest level it drew among, so that the answers and propensities computed
        against this worker's guess are those the locked row would give. A known request_id fails the statement
        on the primary key. Batches with outcomes, a sweep due, a level that did not fit as chosen, a headroom
        beyond the guess or a request_id twice go the lock-first way."""
        last = self._last_budget
        clock = time.time() if now is None else now
        if last is None or clock - last.last_sweep >= self.sweep_seconds \
                or not all(isinstance(item, DecisionRequest) for item in items) \
                or len({item.request_id for item in items}) < len(items):
            return None
        guess, inserted, headroom = dataclasses.replace(last, levels={}), {}, 0
        for item in items:
            headroom = max(headroom, guess.at_risk - last.at_risk + _dearest(item))
            if self._decide(item, guess, {}, inserted, clock)["reason"] == "cap_reached":
                return None
        if last.at_risk + headroom > last.cap:  # a drawn level's propensity depends on the room left: lock first
            return None
        added = {k: getattr(guess, k) - getattr(last, k) for k in _ADDED}
        rows = [{**row, "k": k, "ttl": item.ttl} for k, (item, row) in enumerate(zip(items, inserted.values()), 1)]
        levels = [{"population": p, "level_index": j, "decisions": d, "responses": r, "paid": m}
                  for (p, j), (d, r, m) in guess.levels.items()]
        stamped = yield "one_statement", {**added, "headroom": headroom, "now": now, "rows": json.dumps(rows),
                                          "levels": json.dumps(levels), "lam": rows[-1]["lam"]}
        if not stamped:
            return None
        results = []
        for row, (request_id, seq, created_at, expires_at, *_) in zip(inserted.values(), stamped):
            row.update(seq=seq, created_at=created_at, expires_at=expires_at)
            results.append({**row, "replayed": False})
        self._last_budget = _Budget(*stamped[0][4:])
        return results

    def _session(self) -> "_SQLiteSession | _PostgresSession":
        """The write session, on a DBAPI connection checked out of the pool once (a checkout per batch cost more
        than a one-decision transaction on SQLite)."""
        if self._write_connection is None:
            self._write_connection = self.engine.raw_connection()
            kind = _SQLiteSession if self.dialect == "sqlite" else _PostgresSession
            self._write_session = kind(self._write_connection.driver_connection)
        return self._write_session

    def _decide(self, item: DecisionRequest, budget: _Budget, known: dict, inserted: dict, now: float):
        row = known.get(item.request_id)
        if row is not None:
            if (row["population"], row["subject_id"]) != (item.population, item.subject_id):
                return LedgerConflict(f"request_id {item.request_id!r} was used for {row['population']} "
                                      f"{row['subject_id']!r}; this request is for {item.population} "
                                      f"{item.subject_id!r}: an idempotency key names one request", 409)
            budget.replays += 1
            return {**row, "replayed": True}
        room = budget.cap - budget.at_risk
        option, reason = _served(item, item.chosen, room), item.reason
        if option is not item.chosen:
            budget.capped += 1
            reason = "cap_reached"
        settled = item.paid_on == "request" and option.index != NO_LEVEL
        budget.decisions += 1
        budget.explored += item.bucket == EXPLORE
        row = {"request_id": item.request_id, "seq": budget.decisions, "population": item.population,
               "subject_id": item.subject_id, "level_index": option.index, "face": option.face,
               "expected_response": option.expected_response, "expected_cost": option.expected_cost,
               "lam": item.lam, "model_version": item.model_version, "reason": reason,
               "cold_start": int(item.cold_start), "paid_on": item.paid_on, "state": SETTLED if settled else OPEN,
               "created_at": now, "expires_at": now + item.ttl, "redeemed": None,
               "paid": option.face if settled else 0, "outcome_at": None, "bucket": item.bucket,
               "propensity": _propensity(item, option, room)}
        stats = budget.level(item.population, option.index)
        stats[0] += 1
        if settled:  # eq. 20 as printed: the commission is paid on the request itself
            budget.paid += option.face
            stats[2] += option.face
        else:
            budget.committed += option.face
            budget.open_expected_cost += option.expected_cost
        budget.open_expected_responses += option.expected_response
        budget.expected_cost += option.expected_cost
        budget.expected_responses += option.expected_response
        known[item.request_id] = inserted[item.request_id] = row
        return {**row, "replayed": False}

    def _outcome(self, item: OutcomeRequest, budget: _Budget, known: dict, inserted: dict, updates: list,
                 now: float):
        row = known.get(item.request_id)
        if row is None:
            return LedgerConflict(f"no decision with request_id {item.request_id!r}", 404)
        settled = row["paid_on"] == "request" and row["level_index"] != NO_LEVEL
        if row["redeemed"] is not None:
            paid_now = row["paid"] - (row["face"] if settled else 0)
            if bool(row["redeemed"]) == item.redeemed and (item.amount is None or item.amount == paid_now):
                return {**row, "replayed": True}
            return LedgerConflict(f"request_id {item.request_id!r} already has a different outcome (redeemed="
                                  f"{bool(row['redeemed'])}, paid {paid_now} minor units)", 409)
        if item.redeemed and row["level_index"] == NO_LEVEL:
            return LedgerConflict(f"request_id {item.request_id!r} issued no coupon (level null): there is nothing "
                                  f"to redeem", 409)
        if row["state"] == EXPIRED or (row["state"] == OPEN and row["expires_at"] <= now):  # swept or not yet
            return LedgerConflict(f"the coupon of request_id {item.request_id!r} expired at {row['expires_at']:.3f}",
                                  409)
        limit = row["face"] if item.redeemed and not settled else 0
        amount = limit if item.amount is None else item.amount
        if amount > limit:
            return LedgerConflict(f"amount of {amount} minor units for request_id {item.request_id!r} exceeds what "
                                  f"its coupon can cost now ({limit})", 409)
        if not settled:
            budget.committed -= row["face"]
            budget.open_expected_cost -= row["expected_cost"]
        budget.paid += amount
        budget.open_expected_responses -= row["expected_response"]
        budget.responses += int(item.redeemed)
        stats = budget.level(row["population"], row["level_index"])
        stats[1] += int(item.redeemed)
        stats[2] += amount
        row.update(state=SETTLED if settled else REDEEMED if item.redeemed else CLOSED,
                   redeemed=int(item.redeemed), paid=row["paid"] + amount, outcome_at=now)
        if item.request_id not in inserted:  # one decided in this very batch is inserted with its outcome
            updates.append({k: row[k] for k in ("request_id", "state", "redeemed", "paid", "outcome_at")})
        return {**row, "replayed": False}

    @staticmethod
    def _expire(budget: _Budget, rows: list, now: float) -> None:
        """Release what the coupons past their ``expires_at`` held (``rows``: face, expected cost, response)."""
        budget.committed -= sum(r[0] for r in rows)
        budget.open_expected_cost -= sum(r[1] for r in rows)
        budget.open_expected_responses -= sum(r[2] for r in rows)
        budget.last_sweep = now

    @staticmethod
    def _save(budget: _Budget, now: float, inserted: list[dict], responses: int, moved: bool) -> list:
        """The writes that carry the batch's running totals: the budget row, ``per_level`` and ``timeline``."""
        writes = [("save_budget", {k: getattr(budget, k) for k in _RUNNING})]
        writes += [("save_levels", {"population": p, "level_index": j, "decisions": d, "responses": r, "paid": m})
                   for (p, j), (d, r, m) in budget.levels.items()]
        if moved:
            writes.append(("save_timeline", {"second": int(now), "decisions": len(inserted), "responses": responses,
                                             "at_risk": budget.at_risk, "paid": budget.paid,
                                             "lam": inserted[-1]["lam"] if inserted else None}))
        return writes

    # ---- reads (money in minor units) --------------------------------------------------------------------
    def totals(self) -> dict:
        with self.reader.connect() as conn:
            row = conn.execute(text("SELECT * FROM budget WHERE id = 1")).one()._mapping
            return {**dict(row), "at_risk": row["committed"] + row["paid"]}

    def per_level(self) -> list[dict]:
        with self.reader.connect() as conn:
            rows = conn.execute(text("SELECT * FROM per_level ORDER BY population, level_index")).all()
        return [dict(r._mapping) for r in rows]

    def timeline(self, seconds: int = 3600) -> list[dict]:
        with self.reader.connect() as conn:
            rows = conn.execute(text("SELECT * FROM timeline WHERE second >= (SELECT COALESCE(MAX(second), 0) FROM "
                                     "timeline) - :span ORDER BY second"), {"span": seconds}).all()
        return [dict(r._mapping) for r in rows]

    def schema_version(self) -> int:
        """The last migration applied (0: the database holds no ledger), read without migrating."""
        with self.reader.connect() as conn:
            if not inspect(conn).has_table("schema_version"):
                return 0
            return conn.execute(text("SELECT COALESCE(MAX(version), 0) FROM schema_version")).scalar()

    def decision(self, request_id: str) -> dict | None:
        with self.reader.connect() as conn:
            row = conn.execute(text("SELECT * FROM decisions WHERE request_id = :id"), {"id": request_id}).first()
        return None if row is None else dict(row._mapping)

    def audit(self) -> dict:
        """Recompute the money at risk and the counters from the decision rows (tests and benchmarks check
        that they equal the running totals, exactly)."""
        with self.reader.connect() as conn:
            row = conn.execute(text(
                "SELECT COUNT(*) AS decisions, COUNT(DISTINCT request_id) AS distinct_ids, "
                "COALESCE(MAX(seq), 0) AS last_seq, "
                "COALESCE(SUM(CASE WHEN bucket = :explore THEN 1 ELSE 0 END), 0) AS explored, "
                "COALESCE(SUM(CASE WHEN state = :open THEN face ELSE 0 END), 0) AS committed, "
                "COALESCE(SUM(paid), 0) AS paid, COALESCE(SUM(CASE WHEN redeemed = 1 THEN 1 ELSE 0 END), 0) AS "
                "responses FROM decisions"), {"open": OPEN, "explore": EXPLORE}).one()._mapping
        audit = {key: int(value) for key, value in row.items()}  # PostgreSQL sums BIGINT as NUMERIC
        return {**audit, "at_risk": audit["committed"] + audit["paid"]}


_NONE = Option(NO_LEVEL, 0, 0.0, 0.0)
_DECISION_COLUMNS = ("request_id", "seq", "population", "subject_id", "level_index", "face", "expected_response",
                     "expected_cost", "lam", "model_version", "reason", "cold_start", "paid_on", "state", "created_at",
                     "expires_at", "redeemed", "paid", "outcome_at", "bucket", "propensity")
_BUDGET_COLUMNS = ("exponent", "cap", "committed", "paid", "decisions", "responses", "capped", "replays", "explored",
                   "expected_cost", "expected_responses", "open_expected_cost", "open_expected_responses", "last_sweep")
_RUNNING = ("committed", "paid", "decisions", "responses", "capped", "replays", "explored", "expected_cost",
            "expected_responses", "open_expected_cost", "open_expected_responses", "last_sweep")


#: The write path's statements, with ``:name`` parameters.
_WRITES = {
    "insert": f"INSERT INTO decisions ({', '.join(_DECISION_COLUMNS)}) "
              f"VALUES ({', '.join(':' + c for c in _DECISION_COLUMNS)})",
    "outcome": "UPDATE decisions SET state = :state, redeemed = :redeemed, paid = :paid, outcome_at = :outcome_at "
               "WHERE request_id = :request_id",
    "save_budget": f"UPDATE budget SET {', '.join(f'{k} = :{k}' for k in _RUNNING)} WHERE id = 1",
    "save_cap": "UPDATE budget SET cap = :cap WHERE id = 1",
    "save_levels": "INSERT INTO per_level VALUES (:population, :level_index, :decisions, :responses, :paid) "
                   "ON CONFLICT (population, level_index) DO UPDATE SET decisions = per_level.decisions + "
                   "excluded.decisions, responses = per_level.responses + excluded.responses, "
                   "paid = per_level.paid + excluded.paid",
    "save_timeline": "INSERT INTO timeline VALUES (:second, :decisions, :responses, :at_risk, :paid, :lam) "
                     "ON CONFLICT (second) DO UPDATE SET decisions = timeline.decisions + excluded.decisions, "
                     "responses = timeline.responses + excluded.responses, at_risk = excluded.at_risk, "
                     "paid = excluded.paid, lam = COALESCE(excluded.lam, timeline.lam)",
}
#: Statements whose best plan depends on the values (a range of ``expires_at``): planned at every run.
_QUERIES = {
    "expiring": "SELECT face, expected_cost, expected_response FROM decisions WHERE state = :open AND expires_at <= :now",
    "expire": "UPDATE decisions SET state = :expired WHERE state = :open AND expires_at <= :now",
}
#: PostgreSQL's insert of a batch's decisions: one JSON array of rows keyed by column (floats as ``repr`` gives
#: them, which ``float8`` reads back exactly).
_INSERT_ROWS = (f"INSERT INTO decisions ({', '.join(_DECISION_COLUMNS)}) SELECT {', '.join(_DECISION_COLUMNS)} "
                "FROM json_populate_recordset(CAST(NULL AS decisions), :rows)")
#: PostgreSQL stamps with its own clock, read once the budget row is locked, so that the stamps of every worker
#: host come from one clock.
_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::DOUBLE PRECISION"
_CLOCK = f"SELECT {_NOW}"
_PARAMETER = r"(?<!:):(\w+)"  # ``:name``, not a ``::type`` cast
#: What a batch of new decisions adds to the budget row.
_ADDED = ("committed", "paid", "decisions", "explored", "expected_cost", "expected_responses", "open_expected_cost",
          "open_expected_responses")
_FRESH = ("request_id", "population", "subject_id", "level_index", "face", "expected_response", "expected_cost", "lam",
          "model_version", "reason", "cold_start", "paid_on", "state", "paid", "bucket", "propensity")
_FRESH_TYPES = ("VARCHAR", "VARCHAR", "VARCHAR", "INTEGER", "BIGINT", "DOUBLE PRECISION", "DOUBLE PRECISION",
                "DOUBLE PRECISION", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR", "VARCHAR", "BIGINT", "VARCHAR",
                "DOUBLE PRECISION")
#: PostgreSQL, a batch of new decisions in one statement (see :meth:`Ledger._one_statement`). ``b`` takes the
#: budget row's lock and is empty when the money would pass the cap, which leaves every other part empty;
#: ``clock_timestamp()`` is read once the lock is held.
_ONE_STATEMENT = f"""WITH b AS (
    UPDATE budget SET {', '.join(f'{k} = {k} + :{k}' for k in _ADDED)}
    WHERE id = 1 AND committed + paid + :headroom <= cap
    RETURNING {', '.join(_BUDGET_COLUMNS)}, COALESCE(:now, {_NOW}) AS at),
r AS (SELECT * FROM json_to_recordset(:rows) AS r(k INTEGER, ttl DOUBLE PRECISION,
    {', '.join(f'{c} {t}' for c, t in zip(_FRESH, _FRESH_TYPES))})),
ins AS (INSERT INTO decisions ({', '.join(_DECISION_COLUMNS)})
    SELECT {', '.join('b.decisions - :decisions + r.k' if c == 'seq' else 'b.at' if c == 'created_at'
                      else 'b.at + r.ttl' if c == 'expires_at' else 'NULL' if c in ('redeemed', 'outcome_at')
                      else f'r.{c}' for c in _DECISION_COLUMNS)}
    FROM r, b RETURNING request_id, seq, created_at, expires_at),
levels AS ({_WRITES['save_levels'].split(' VALUES ')[0]}
    SELECT l.* FROM json_to_recordset(:levels) AS l(population VARCHAR, level_index INTEGER, decisions BIGINT,
    responses BIGINT, paid BIGINT), b
    ON CONFLICT {_WRITES['save_levels'].split(' ON CONFLICT ')[1]}),
timeline AS ({_WRITES['save_timeline'].split(' VALUES ')[0]}
    SELECT FLOOR(b.at)::BIGINT, :decisions, 0, b.committed + b.paid, b.paid, :lam FROM b
    ON CONFLICT {_WRITES['save_timeline'].split(' ON CONFLICT ')[1]})
SELECT ins.request_id, ins.seq, ins.created_at, ins.expires_at, {', '.join(f'b.{c}' for c in _BUDGET_COLUMNS)}
FROM ins, b ORDER BY ins.seq"""
_LOCK = f"SELECT {', '.join(_BUDGET_COLUMNS)} FROM budget WHERE id = 1"
_LOOKUP = f"SELECT {', '.join(_DECISION_COLUMNS)} FROM decisions WHERE request_id IN "


class _SQLiteSession:
    """sqlite3 on the caller's thread: ``BEGIN IMMEDIATE`` takes the database's write lock, waiting for it at most
    ``limit_ms`` (the busy timeout); rows of one statement go through ``executemany``."""

    def __init__(self, connection):
        self.connection = connection
        self.limit_ms: int | None = None
        self._busy_ms = BUSY_MS  # what the connection's busy timeout is now

    def begin(self, ids: list[str]) -> tuple[_Budget, dict, float]:
        # closed here, on this thread: a cursor a failed attempt leaves to the garbage collector resets its
        # statement whenever it is freed, under the connection's mutex, which a thread waiting for the write lock
        # on the same connection holds (the event loop then stood still for that wait, the GIL held)
        with closing(self.connection.cursor()) as cursor:
            busy = BUSY_MS if self.limit_ms is None else self.limit_ms
            if busy != self._busy_ms:
                cursor.execute(f"PRAGMA busy_timeout = {busy}")
                self._busy_ms = busy
            cursor.execute("BEGIN IMMEDIATE")
            budget = _Budget(*cursor.execute(_LOCK).fetchone())
            rows = cursor.execute(_LOOKUP + f"({', '.join('?' * len(ids)) or 'NULL'})", ids).fetchall()
        return budget, _known(rows), time.time()

    def query(self, name: str, params: dict) -> list:
        return self.connection.execute(_QUERIES[name], params).fetchall()

    def commit(self, writes: list) -> None:
        for name, group in itertools.groupby(writes, key=lambda write: write[0]):
            self.connection.executemany(_WRITES[name], [params for _, params in group])
        self.connection.commit()

    def rollback(self) -> None:
        if self.connection.in_transaction:
            self.connection.rollback()


class _PostgresText:
    """The text of each PostgreSQL round trip: ONE simple-query string of several statements, the transaction's
    BEGIN and COMMIT in it (the connection is in autocommit mode), parameters bound client-side by
    :class:`psycopg.ClientCursor`.

    The hot statements are prepared (``PREPARE``) once per connection and run as ``EXECUTE name(…)``, so PostgreSQL
    plans them once. Measured per one-decision batch against psycopg's pipeline mode with prepared statements
    planned at every run (the previous path): about half the client CPU and a quarter less of PostgreSQL's.
    """

    SETUP = ("SET plan_cache_mode = auto",  # generic plans for the prepared statements (none scans a range)
             # a worker gone mid-transaction (a cut route) must not hold the budget row's lock for the kernel's hours
             f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
    PREPARED = "SELECT name FROM pg_prepared_statements"

    def __init__(self):
        self.order, self.prepare = {}, {}  # statement name → its parameter names in $1, $2, … order; its PREPARE
        for name, sql in {"lock": _LOCK + " FOR UPDATE", **_WRITES, "insert": _INSERT_ROWS,
                          "one_statement": _ONE_STATEMENT}.items():
            names = list(dict.fromkeys(re.findall(_PARAMETER, sql)))
            numbered = re.sub(_PARAMETER, lambda m: f"${names.index(m.group(1)) + 1}", sql)
            self.order[name], self.prepare[f"promokit_{name}"] = names, f"PREPARE promokit_{name} AS {numbered}"

    def _execute(self, name: str) -> str:
        marks = ", ".join(["%s"] * len(self.order[name]))
        return f"EXECUTE promokit_{name}({marks})" if marks else f"EXECUTE promokit_{name}"

    @staticmethod
    def limits(limit_ms: int | None) -> list[str]:
        """What bounds a transaction's waits: each statement ends after ``limit_ms``, a lock wait a little sooner
        (so that it is told apart: ``LockNotAvailable``, not ``QueryCanceled``)."""
        return [] if limit_ms is None else [f"SET LOCAL statement_timeout = {limit_ms}",
                                            f"SET LOCAL lock_timeout = {max(1, limit_ms * 9 // 10)}"]

    def begin(self, ids: list[str], limit_ms: int | None) -> tuple[str, list, int]:
        """The first round trip's text, parameters and how many results come before the budget row's."""
        head = ["BEGIN", *self.limits(limit_ms)]
        marks = ", ".join(["%s"] * len(ids)) or "NULL"  # a batch of caps alone names no request
        return "; ".join([*head, self._execute("lock"), _CLOCK, f"{_LOOKUP}({marks})"]), ids, len(head)

    @staticmethod
    def query(name: str, params: dict) -> tuple[str, dict]:
        return re.sub(_PARAMETER, r"%(\1)s", _QUERIES[name]), params

    def one_statement(self, params: dict, limit_ms: int | None) -> tuple[str, list, int]:
        """The statement's text (its limits before it: one implicit transaction), parameters and how many results
        come before its own."""
        head = self.limits(limit_ms)
        return ("; ".join([*head, self._execute("one_statement")]),
                [params[key] for key in self.order["one_statement"]], len(head))

    def commit(self, writes: list) -> tuple[str, list]:
        """The batch's new decisions travel as one JSON array (binding 19 literals per row cost ≈ 80 µs of the
        client's CPU per decision), the other writes as their own EXECUTEs."""
        rows = [params for name, params in writes if name == "insert"]
        writes = ([("insert", {"rows": json.dumps(rows)})] if rows else []) \
            + [(name, params) for name, params in writes if name != "insert"]
        texts = [self._execute(name) for name, _ in writes] + ["COMMIT"]
        return "; ".join(texts), [params[key] for name, params in writes for key in self.order[name]]


_PG = _PostgresText()


class _PostgresSession:
    """psycopg, blocking (:meth:`Ledger.apply`): the round trips of :class:`_PostgresText`."""

    def __init__(self, connection):
        self.connection, self.limit_ms = connection, None
        connection.autocommit = True
        for setting in _PG.SETUP:
            connection.execute(setting)
        known = {row[0] for row in connection.execute(_PG.PREPARED)}
        for name, statement in _PG.prepare.items():
            if name not in known:
                connection.execute(statement)

    def begin(self, ids: list[str]) -> tuple[_Budget, dict, float]:
        cursor = psycopg.ClientCursor(self.connection)
        text, params, skip = _PG.begin(ids, self.limit_ms)
        cursor.execute(text, params)
        for _ in range(skip):
            cursor.nextset()
        budget = _Budget(*cursor.fetchone())
        cursor.nextset()
        clock = cursor.fetchone()[0]
        cursor.nextset()
        return budget, _known(cursor.fetchall()), clock

    def one_statement(self, params: dict) -> list:
        cursor = psycopg.ClientCursor(self.connection)
        text, values, skip = _PG.one_statement(params, self.limit_ms)
        try:
            cursor.execute(text, values)
        except psycopg.errors.UniqueViolation:  # a request_id seen before: nothing was written
            return []
        for _ in range(skip):
            cursor.nextset()
        return cursor.fetchall()

    def query(self, name: str, params: dict) -> list:
        cursor = psycopg.ClientCursor(self.connection)
        cursor.execute(*_PG.query(name, params))
        return cursor.fetchall() if cursor.description else []

    def commit(self, writes: list) -> None:
        psycopg.ClientCursor(self.connection).execute(*_PG.commit(writes))

    def rollback(self) -> None:
        if self.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self.connection.execute("ROLLBACK")


class _AsyncPostgresSession:
    """psycopg's ``AsyncConnection`` (:meth:`Ledger.apply_async`): the same round trips, awaited."""

    def __init__(self, connection):
        self.connection, self.limit_ms = connection, None

    @classmethod
    async def connect(cls, url: str) -> "_AsyncPostgresSession":
        connection = await psycopg.AsyncConnection.connect(url.replace("+psycopg", "", 1), autocommit=True,
                                                           **pg_settings(url))
        for statement in (*_PG.SETUP, *_PG.prepare.values()):  # a new connection holds no prepared statement
            await connection.execute(statement)
        return cls(connection)

    async def begin(self, ids: list[str]) -> tuple[_Budget, dict, float]:
        cursor = psycopg.AsyncClientCursor(self.connection)
        text, params, skip = _PG.begin(ids, self.limit_ms)
        await cursor.execute(text, params)
        for _ in range(skip):
            cursor.nextset()
        budget = _Budget(*await cursor.fetchone())
        cursor.nextset()
        clock = (await cursor.fetchone())[0]
        cursor.nextset()
        return budget, _known(await cursor.fetchall()), clock

    async def one_statement(self, params: dict) -> list:
        cursor = psycopg.AsyncClientCursor(self.connection)
        text, values, skip = _PG.one_statement(params, self.limit_ms)
        try:
            await cursor.execute(text, values)
        except psycopg.errors.UniqueViolation:  # a request_id seen before: nothing was written
            return []
        for _ in range(skip):
            cursor.nextset()
        return await cursor.fetchall()

    async def query(self, name: str, params: dict) -> list:
        cursor = psycopg.AsyncClientCursor(self.connection)
        await cursor.execute(*_PG.query(name, params))
        return await cursor.fetchall() if cursor.description else []

    async def commit(self, writes: list) -> None:
        await psycopg.AsyncClientCursor(self.connection).execute(*_PG.commit(writes))

    async def rollback(self) -> None:
        if self.connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            await self.connection.execute("ROLLBACK")

    async def close(self) -> None:
        await self.connection.close()


def _served(item: DecisionRequest, option: Option, room: int) -> Option:
    """``option`` if its face value fits in ``room``, else the first fallback that does. The last fallback is no
    incentive, which costs nothing and so always fits, even when a cap lowered below the money at risk left the
    room negative (an overdraft: then only what costs nothing is issued)."""
    room = max(room, 0)
    return option if option.face <= room else next(o for o in item.fallbacks if o.face <= room)


def _propensity(item: DecisionRequest, served: Option, room: int) -> float:
    """The probability that ``item`` is answered ``served`` with this much ``room`` under the cap: 1 for a level
    chosen for sure (the rule's at its λ, a fallback, a cold-start setting's); for a drawn level, the share of
    the levels it drew among that this room answers with ``served`` (one, or all those the cap sends to it)."""
    if item.among is None:
        return 1.0
    return sum(_served(item, option, room).index == served.index for option in item.among) / len(item.among)


def _dearest(item: DecisionRequest) -> int:
    """The least room in which ``item``'s answer and propensity are what any larger room gives: the face value of
    the dearest level it could be answered with."""
    return max(option.face for option in item.among or (item.chosen,))


def _known(rows: list) -> dict:
    """Decision rows by request_id."""
    return {row[0]: dict(zip(_DECISION_COLUMNS, row)) for row in rows}


def no_incentive() -> Option:
    return _NONE


def gave_up(exc: BaseException) -> bool:
    """Whether ``exc`` is a wait cut short at its limit, the connection still answering: a lock wait or a statement
    past PostgreSQL's ``lock_timeout`` / ``statement_timeout``, SQLite's busy timeout (the write lock held by
    another connection), or a transaction past its limit before its commit (:class:`LedgerTimeout`)."""
    if isinstance(exc, LedgerTimeout):
        return True
    if isinstance(exc, (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled)):
        return True
    return busy(exc)


def _cutoff(limit: float | None) -> float | None:
    return None if limit is None else time.monotonic() + limit


def _ms(limit: float | None) -> int | None:
    return None if limit is None else max(1, int(limit * 1000))


def busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's answer to a write lock held by another connection."""
    return isinstance(exc, sqlite3.OperationalError) and getattr(exc, "sqlite_errorcode", None) in SQLITE_BUSY


def normalise_url(url: str) -> str:
    """``sqlite:///path`` or ``postgresql://…`` (also ``postgres://``); PostgreSQL is reached through psycopg 3."""
    scheme = urlsplit(url).scheme
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return "postgresql+psycopg" + url[len(scheme):]
    if scheme == "sqlite" and url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return url
    raise DataError(f"`ledger_url` must be sqlite:///FILE or postgresql://USER@HOST/DB, got {url!r}")


#: libpq settings a PostgreSQL ledger gets unless its URL sets them (``?connect_timeout=2``): a server that stops
#: answering fails a connection attempt after 5 s, and a connection whose packets are lost (a cut network, not a
#: closed socket) after about 10 s, rather than a read or a write hanging for the kernel's 15 minutes.
PG_TIMEOUTS = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
               "keepalives_count": 3, "tcp_user_timeout": 10_000}


def pg_settings(url: str) -> dict:
    """:data:`PG_TIMEOUTS` less those the URL's query string sets."""
    given = {key for key, _ in parse_qsl(urlsplit(url).query)}
    return {key: value for key, value in PG_TIMEOUTS.items() if key not in given}


def _engine(url: str, immediate: bool) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_size=4, max_overflow=4, pool_pre_ping=True, connect_args=pg_settings(url))
    engine = create_engine(url, connect_args={"timeout": BUSY_MS / 1000})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (SQLAlchemy's pysqlite recipe)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine

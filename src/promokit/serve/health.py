"""The ledger's health as one worker sees it: ``up``, ``degraded`` or ``down``, each change logged once with how long
the state it ends lasted.

- ``down``: the last ledger transaction or read failed for want of the ledger (no connection, a connection lost, an
  unreadable file: :data:`UNAVAILABLE`, but for a wait cut short). Decisions and outcomes answer 503 until it is
  back; the first success ends it.
- ``degraded``: the ledger answers, but not in time: within the last :data:`SETTLE_SECONDS` a transaction or read
  passed its deadline (a *timeout*), a lock wait ran past its limit (a *lock wait*: another session holds the
  budget row or the SQLite write lock) or a commit took longer than the slow threshold (a *slow commit*). A request
  the ledger cannot commit within the deadline answers 503. It ends after :data:`SETTLE_SECONDS` without such
  trouble and with a success since.
- ``up``: otherwise.

Timeouts, lock waits and slow commits are counted (:mod:`promokit.serve.metrics`), and every transition is logged
once, so a worker answering thousands of 503s writes two lines. Everything here runs on the worker's event loop.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time

import psycopg
from sqlalchemy.exc import SQLAlchemyError

from promokit.serve.ledger import LedgerTimeout, gave_up
from promokit.serve.metrics import LEDGER_STATES, record_ledger_error, record_ledger_trouble

#: What a ledger that cannot be reached, read or written in time raises: SQLAlchemy's errors on the reads, the
#: drivers' own on the write path, which speaks to them directly (:meth:`promokit.serve.ledger.Ledger.apply`), and
#: the deadline's. Each is answered 503 "ledger unavailable".
UNAVAILABLE = (SQLAlchemyError, psycopg.OperationalError, sqlite3.OperationalError, LedgerTimeout)
UP, DEGRADED, DOWN = LEDGER_STATES
#: How long ``degraded`` lasts after its last trouble.
SETTLE_SECONDS = 2.0
#: What each state means for the requests, after its log line.
_MEANS = {DOWN: ": decisions and outcomes answer 503, status reads answer the last figures read, until it is back",
          DEGRADED: ": a request it cannot commit within the deadline answers 503", UP: ""}

log = logging.getLogger("promokit.serve")


class LedgerHealth:
    """Up, degraded or down, since when and why; the worker's writer and status reads report to it.

    ``slow_seconds``: a commit taking longer is a slow commit.
    """

    def __init__(self, slow_seconds: float):
        self.slow_seconds = slow_seconds
        self.state, self.since = UP, time.time()
        self.error: str | None = None  # what made the state other than up
        self.counts = {"timeouts": 0, "lock_waits": 0, "slow_commits": 0}  # this worker's
        self._trouble_at = self._success_at = 0.0

    def failed(self, exc: BaseException) -> None:
        """A ledger transaction or read raised: counted; a wait cut short degrades the ledger, a failure for want
        of it makes it down."""
        record_ledger_error()
        kind = trouble(exc)
        if kind is not None:
            self._trouble(kind, describe(exc))
        elif isinstance(exc, UNAVAILABLE):
            self._become(DOWN, describe(exc))

    def succeeded(self, seconds: float | None = None) -> None:
        """A ledger read, or a transaction that committed in ``seconds``, succeeded."""
        self._success_at = time.monotonic()
        if seconds is not None and seconds > self.slow_seconds:
            self._trouble("slow_commits", f"a commit took {seconds * 1e3:.0f} ms")
        if self.state == DOWN:
            self._become(DEGRADED if self._recent() else UP, self.error if self._recent() else None)
        self.current()

    def current(self) -> str:
        """The state now: ``degraded`` ends here once it has settled."""
        if self.state == DEGRADED and not self._recent() and self._success_at > self._trouble_at:
            self._become(UP, None)
        return self.state

    def _trouble(self, kind: str, why: str) -> None:
        self.counts[kind] += 1
        record_ledger_trouble(kind)
        self._trouble_at = time.monotonic()
        if self.state == UP:
            self._become(DEGRADED, why)

    def _recent(self) -> bool:
        return time.monotonic() - self._trouble_at < SETTLE_SECONDS

    def _become(self, state: str, why: str | None) -> None:
        if state == self.state:
            return
        now = time.time()
        log.warning("worker %d: ledger %s%s after %.1f s %s%s", os.getpid(), state, f" ({why})" if why else "",
                    now - self.since, self.state, _MEANS[state])
        self.state, self.since, self.error = state, now, why


def trouble(exc: BaseException) -> str | None:
    """``"lock_waits"`` or ``"timeouts"`` for a wait cut short (:func:`~promokit.serve.ledger.gave_up`, also as
    the cause of a SQLAlchemy error), else None."""
    cause = getattr(exc, "orig", None) or exc
    if not gave_up(cause):
        return None
    lock = isinstance(cause, psycopg.errors.LockNotAvailable) or isinstance(cause, sqlite3.OperationalError)
    return "lock_waits" if lock else "timeouts"


def describe(exc: BaseException) -> str:
    """``Type: first line of the driver's message`` (SQLAlchemy's own text adds the SQL and a link)."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:200]}" if lines else type(cause).__name__

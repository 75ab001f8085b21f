"""The ledger's health as one worker sees it: each outage is logged once when it starts and once when it ends.

An outage starts at the first ledger transaction or read that fails for want of the ledger (:data:`UNAVAILABLE`,
the errors answered 503 "ledger unavailable") and ends at the next one that succeeds. During it every decision
and outcome still tries the ledger (and gets its 503), and status reads answer the last figures read; only the
transitions are logged, so a worker answering thousands of 503s writes two lines.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time

import psycopg
from sqlalchemy.exc import SQLAlchemyError

from promokit.serve.metrics import record_ledger_error

#: What a ledger that cannot be reached (or read) raises: SQLAlchemy's errors on the reads, the drivers' own on the
#: write path, which speaks to them directly (:meth:`promokit.serve.ledger.Ledger.apply`).
UNAVAILABLE = (SQLAlchemyError, psycopg.OperationalError, sqlite3.OperationalError)

log = logging.getLogger("promokit.serve")


class LedgerHealth:
    """Up or down, and since when; the event loop (writes) and the read threads report to it."""

    def __init__(self):
        self.down_since: float | None = None  # time.time() of this outage's first failure
        self._lock = threading.Lock()

    def failed(self, exc: BaseException) -> None:
        """A ledger transaction or read raised: counted; the start of an outage when the ledger is unavailable."""
        record_ledger_error()
        if self.down_since is None and isinstance(exc, UNAVAILABLE):
            with self._lock:
                if self.down_since is None:
                    self.down_since = time.time()
                    log.warning("worker %d: ledger unavailable (%s): decisions and outcomes answer 503, status "
                                "reads answer the last figures read, until it is back", os.getpid(), describe(exc))

    def succeeded(self) -> None:
        """A ledger transaction or read succeeded: the end of the outage, if one is under way."""
        if self.down_since is not None:
            with self._lock:
                if self.down_since is not None:
                    log.warning("worker %d: ledger back after %.1f s unavailable", os.getpid(),
                                time.time() - self.down_since)
                    self.down_since = None


def describe(exc: BaseException) -> str:
    """``Type: first line of the driver's message`` (SQLAlchemy's own text adds the SQL and a link)."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0][:200]}" if lines else type(cause).__name__

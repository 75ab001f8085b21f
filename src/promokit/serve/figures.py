"""The ledger's figures as the status endpoints show them: read off the event loop, one read at a time, and
answered from the last read whatever the ledger does.

``/v1/status``, ``/metrics``, ``/`` and the readiness probe ask for them (:meth:`Figures.refresh`): a request waits
at most :data:`READ_WAIT` seconds for a read that started after it arrived (so that it sees every decision
acknowledged before it), then answers with the figures of the last read that succeeded and their age. Reads run one
at a time: a read still running at the deadline counts as a timeout in the ledger's health and the next one starts
when it ends, so a stalled ledger holds one thread, not one per request.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from promokit.serve.health import LedgerHealth, describe
from promokit.serve.ledger import Ledger, LedgerTimeout

#: The longest a status request waits for a fresh read before it answers with the last one.
READ_WAIT = 0.05


class Figures:
    """The budget totals, per-level counts and timeline as last read from ``ledger`` (None, [], [] before a first
    read), when and how fast, and why the last read failed."""

    def __init__(self, ledger: Ledger, health: LedgerHealth, deadline: float):
        self.ledger, self.health, self.deadline = ledger, health, deadline
        self.totals: dict | None = None
        self.levels: list[dict] = []
        self.timeline: list[dict] = []
        self.read_at: float | None = None  # time.time() of the last read that succeeded
        self.read_ms: float | None = None  # its duration; None while the last read failed
        self.error: str | None = None  # why the last read failed
        self._reading: asyncio.Future | None = None
        self._reading_since = 0.0  # loop time the read in flight started
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="ledger-reads")

    async def refresh(self, wait: float = READ_WAIT) -> Figures:
        """Wait at most ``wait`` seconds for a read that started now or later (after the read in flight, if it
        started before)."""
        loop = asyncio.get_running_loop()
        asked, give_up = loop.time(), loop.time() + wait
        while loop.time() < give_up:
            if self._reading is None or self._reading.done():
                self._reading, self._reading_since = asyncio.ensure_future(self._read()), loop.time()
            fresh = self._reading_since >= asked
            await asyncio.wait({self._reading}, timeout=give_up - loop.time())
            if fresh:
                break
        return self

    async def _read(self) -> None:
        started = time.perf_counter()
        read = asyncio.get_running_loop().run_in_executor(self._thread, self._query)
        done, _ = await asyncio.wait({read}, timeout=self.deadline)
        if not done:
            self.health.failed(LedgerTimeout(f"a status read still waiting after the {self.deadline:g} s deadline"))
            await asyncio.wait({read})
        try:
            figures = read.result()
        except Exception as exc:  # noqa: BLE001 - the status answers whatever the ledger raised, and says what
            self.health.failed(exc)
            self.read_ms, self.error = None, describe(exc)
            return
        self.totals, self.levels, self.timeline = figures
        self.read_at, self.read_ms, self.error = time.time(), (time.perf_counter() - started) * 1e3, None
        self.health.succeeded()

    def _query(self) -> tuple[dict, list, list]:
        return self.ledger.totals(), self.ledger.per_level(), self.ledger.timeline()

    def close(self) -> None:
        self._thread.shutdown(wait=False)  # a read stalled on the ledger must not hold the worker's exit

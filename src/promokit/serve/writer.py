"""The worker's ledger writer: requests queued from the event loop, written in batches, each answered within the
deadline.

Each request waits at most ``deadline`` seconds from its arrival (:meth:`BatchWriter.submit`): past it the request
raises :class:`~promokit.serve.ledger.LedgerTimeout` (answered 503 with ``Retry-After``) and, if it is still queued,
is never written. A batch gets what is left of its oldest request's deadline: the ledger bounds its own waits by
:data:`LEDGER_SHARE` of that (PostgreSQL's ``statement_timeout`` and ``lock_timeout``, SQLite's busy timeout) and
rolls back a transaction that passed it before its commit (:meth:`~promokit.serve.ledger.Ledger.apply`), so a slow
or locked ledger answers in time with nothing half-written. A batch that outlives the whole of it is a stall: on
PostgreSQL its connection is given up (the next batch connects afresh); on SQLite the batch is in the writer's
thread, whose connection it holds, so the next batch waits for the thread to finish it.

No batch waits on the event loop, so reads and health probes never wait behind a write. On PostgreSQL a batch is
awaited on the loop (:meth:`~promokit.serve.ledger.Ledger.apply_async`: while it waits on the network, the loop
parses the requests that form the next one). On SQLite a batch first runs on the loop without waiting for the
write lock (SQLite's busy timeout 0: a one-decision batch costs ≈ 0.1 ms of local I/O, less than handing it to a
thread and back; handing every batch over cost about a quarter of the throughput at 8 clients); only when another
connection holds the lock does the batch go to a thread of its own, which waits for the lock within the limit
while the loop goes on. Every outcome is reported to the ledger's health with the batch's duration.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from promokit.serve.health import LedgerHealth
from promokit.serve.ledger import Ledger, LedgerTimeout, busy

MAX_BATCH = 512
#: The share of a batch's time left that the ledger's own limits get; the rest carries the commit and the answer.
LEDGER_SHARE = 0.8
#: A queued request with less than this share of its deadline left is answered 503 rather than batched.
LEAST_LEFT = 0.25


class BatchWriter:
    """Queues ledger items from the event loop and applies them in batches, in arrival order (module docstring).

    Each item's caller gets the ledger's answer for it (a row, or the :class:`LedgerConflict` that refused it), the
    exception that failed its batch, or :class:`LedgerTimeout` at its deadline.
    """

    def __init__(self, ledger: Ledger, health: LedgerHealth, deadline: float, max_batch: int = MAX_BATCH):
        self.ledger, self.health, self.deadline, self.max_batch = ledger, health, deadline, max_batch
        self.pending: list[tuple[object, asyncio.Future, float]] = []  # (item, its answer, its deadline)
        self._waiting: deque[tuple[float, asyncio.Future]] = deque()  # (deadline, answer) by arrival: see _expire
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # the deadline the timer is set for
        self.last_commit: float | None = None  # time.time() of this worker's last commit
        self._in_flight = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="ledger-writer") if ledger.dialect == "sqlite" \
            else None

    async def start(self) -> None:
        """Start writing; on PostgreSQL connect first, waiting at most the deadline, so that the first batch need
        not."""
        self._task = asyncio.get_running_loop().create_task(self._run())
        if self._thread is None:
            connecting = asyncio.ensure_future(self.ledger.connect_async())
            connecting.add_done_callback(_retrieve)
            await asyncio.wait({connecting}, timeout=self.deadline)

    async def submit(self, item):
        """The ledger's answer for ``item``, or :class:`LedgerTimeout` once the deadline has passed."""
        loop = asyncio.get_running_loop()
        future, expires = loop.create_future(), loop.time() + self.deadline
        self.pending.append((item, future, expires))
        self._waiting.append((expires, future))
        if self._timer is None:
            self._due, self._timer = expires, loop.call_at(expires, self._expire)
        self._wake.set()
        return await future

    def _expire(self) -> None:
        """Answer :class:`LedgerTimeout` to every request whose deadline has passed (a queued one is then dropped
        unwritten: :meth:`_take` skips answered items), then wait for the next deadline.

        One timer for all the requests waiting, not one each (``asyncio.timeout_at`` cost ≈ 8 µs of every
        decision): every request gets the same deadline from its arrival, so they expire in the order they came,
        and the timer only ever needs the oldest one still waiting. Those answered meanwhile are dropped as it
        passes them. The deadline the timer was set for has come when it fires, as ``asyncio.timeout_at`` takes it
        (uvloop's timers count whole milliseconds and may fire a fraction of one early)."""
        loop = asyncio.get_running_loop()
        due, waiting = max(loop.time(), self._due), self._waiting
        while waiting and (waiting[0][1].done() or waiting[0][0] <= due):
            future = waiting.popleft()[1]
            if not future.done():
                future.set_exception(self._late())
        if waiting:
            self._due, self._timer = waiting[0][0], loop.call_at(waiting[0][0], self._expire)
        else:
            self._timer = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while batch := self._take():
                self._in_flight = True
                try:
                    await self._write(batch)
                finally:
                    self._in_flight = False

    def _take(self) -> list:
        """The next batch, without the items whose callers stopped waiting and those with less than
        :data:`LEAST_LEFT` of the deadline left (answered :class:`LedgerTimeout` now, unwritten), whose little time
        would cut the whole batch's short."""
        floor = asyncio.get_running_loop().time() + self.deadline * LEAST_LEFT
        waiting = []
        for entry in self.pending:
            if entry[1].done():
                continue
            if entry[2] < floor:
                entry[1].set_exception(self._late())
            else:
                waiting.append(entry)
        batch, self.pending = waiting[:self.max_batch], waiting[self.max_batch:]
        return batch

    def _late(self) -> LedgerTimeout:
        return LedgerTimeout(f"no commit within the {self.deadline * 1e3:.0f} ms deadline")

    async def _write(self, batch: list) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        budget = min(expires for _, _, expires in batch) - started
        items = [item for item, _, _ in batch]
        if self._thread is None:
            work = asyncio.ensure_future(self.ledger.apply_async(items, None, budget * LEDGER_SHARE))
        else:
            work = loop.create_future()
            try:
                work.set_result(self.ledger.apply(items, None, budget * LEDGER_SHARE, wait=False))
            except Exception as exc:  # noqa: BLE001 - delivered below, as a thread's would be
                if busy(exc):  # another connection holds the write lock: wait for it off the loop
                    left = budget - (loop.time() - started)
                    work = loop.run_in_executor(self._thread, self.ledger.apply, items, None, left * LEDGER_SHARE)
                else:
                    work.set_exception(exc)
        if not work.done() and not (await asyncio.wait({work}, timeout=max(0.0, started + budget - loop.time())))[0]:
            # a stall: the ledger's own limits did not end it; every item of it has timed out
            self.health.failed(LedgerTimeout(f"a batch still waiting after the {self.deadline * 1e3:.0f} ms "
                                             f"deadline"))
            if self._thread is None:
                self.ledger.abandon()
                work.cancel()
            else:  # the thread finishes it (the sqlite3 connection is its); nothing else may write meanwhile
                await asyncio.wait({work})
            work.add_done_callback(_retrieve)
            return
        try:
            results = work.result()
        except Exception as exc:  # noqa: BLE001 - the database failed the batch: every waiting request learns why
            self.health.failed(exc)
            results = exc
        else:
            self.last_commit = time.time()
            self.health.succeeded(loop.time() - started)
        for k, (_, future, _) in enumerate(batch):
            if not future.done():
                if isinstance(results, Exception):
                    future.set_exception(results)
                else:
                    future.set_result(results[k])

    async def stop(self) -> None:
        """Let the queued items be written or time out, then close the ledger's asynchronous session."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline + 1.0
        while (self.pending or self._in_flight) and loop.time() < give_up:
            await asyncio.sleep(0.01)
        if self._task is not None:
            self._task.cancel()
        if self._thread is not None:
            self._thread.shutdown(wait=True)
        await self.ledger.close_async()


def _retrieve(work: asyncio.Future) -> None:
    """Take the result of a batch given up on, so that its exception is not reported as never retrieved."""
    if not work.cancelled():
        work.exception()

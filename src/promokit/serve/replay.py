"""A bounded load generator for the decision service, and a context manager that runs the service.

:func:`replay` POSTs each body once, with at most ``concurrency`` requests in flight: each worker coroutine holds
one keep-alive HTTP/1.1 connection and takes the next body when its answer is in. The client is a minimal
HTTP/1.1 client on :func:`asyncio.open_connection` (Content-Length bodies only) rather than httpx, because the
load generator shares the machine's cores with the server and httpx costs about 0.5 ms of CPU per request, as
much as the service itself. Latencies are measured client side, from writing the request to reading the whole
answer. :func:`running_service` starts ``promokit serve`` in a subprocess for the tests, the demo and the
benchmarks.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

#: Status recorded for a request that was not sent (``max_seconds`` passed) and for one that failed in transport.
NOT_SENT, FAILED = 0, -1


@dataclass
class ReplayResult:
    """Per request, in the order of the bodies: HTTP status (0 not sent, −1 timeout or connection error), the
    parsed JSON answer (None when there is none), the client-side latency (NaN when not answered) and when it was
    sent (``time.perf_counter()``; NaN when not sent)."""

    statuses: np.ndarray
    answers: list[dict | None]
    latency_ms: np.ndarray
    seconds: float
    sent_at: np.ndarray | None = None

    @property
    def throughput(self) -> float:
        """Answered requests per second of wall time."""
        return float((self.statuses > 0).sum()) / self.seconds if self.seconds > 0 else 0.0

    def percentiles(self) -> dict:
        answered = self.latency_ms[self.statuses > 0]
        if not len(answered):
            return {"p50": None, "p90": None, "p99": None, "max": None}
        p50, p90, p99 = np.percentile(answered, [50, 90, 99])
        return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(answered.max())}


class _Connection:
    """One keep-alive HTTP/1.1 connection, reopened when the server closes it."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, data: bytes) -> tuple[int, bytes]:
        reused = self.writer is not None
        if not reused:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        try:
            self.writer.write(data)
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            self.close()
            if not reused:
                raise
            return await self.request(data)  # the server closed an idle connection: once more on a fresh one
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {name.strip().lower(): value.strip() for name, _, value in
                   (line.partition(":") for line in lines[1:] if line)}
        if "content-length" not in headers:
            self.close()
            raise ConnectionError(f"answer without Content-Length (headers {sorted(headers)})")
        body = await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def replay(base_url: str, token: str, bodies: list[dict], concurrency: int, path: str = "/v1/decisions",
                 timeout: float = 10.0, max_seconds: float | None = None, interval: float = 0.0) -> ReplayResult:
    """POST every body once as JSON with the bearer token, ``concurrency`` at a time, each of the ``concurrency``
    clients starting a request at most every ``interval`` seconds (0: at once; a steady load rather than the most
    the server takes); stop sending after ``max_seconds`` (the bodies not sent keep status 0). A request that times
    out after ``timeout`` seconds or fails in transport gets status −1 and its connection is reopened."""
    url = urlsplit(base_url)
    host, port = url.hostname, url.port or 80
    head = (f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: ").encode()
    n = len(bodies)
    statuses = np.zeros(n, dtype=np.int64)
    latency, sent_at = np.full(n, np.nan), np.full(n, np.nan)
    answers: list[dict | None] = [None] * n
    order = iter(range(n))
    started = time.perf_counter()
    deadline = started + max_seconds if max_seconds is not None else float("inf")

    async def worker() -> None:
        connection = _Connection(host, port)
        try:
            for i in order:
                if time.perf_counter() >= deadline:
                    return
                payload = json.dumps(bodies[i], separators=(",", ":")).encode()
                sent = sent_at[i] = time.perf_counter()
                try:
                    async with asyncio.timeout(timeout):
                        status, body = await connection.request(head + b"%d\r\n\r\n" % len(payload) + payload)
                except (OSError, asyncio.IncompleteReadError, TimeoutError):
                    connection.close()
                    statuses[i] = FAILED
                    continue
                latency[i] = (time.perf_counter() - sent) * 1e3
                statuses[i] = status
                try:
                    answers[i] = json.loads(body)
                except ValueError:
                    pass
                if interval:
                    await asyncio.sleep(sent + interval - time.perf_counter())
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, n)))))
    return ReplayResult(statuses, answers, latency, time.perf_counter() - started, sent_at)


def run_replay(*args, **kwargs) -> ReplayResult:
    """:func:`replay` from synchronous code (its own event loop)."""
    return asyncio.run(replay(*args, **kwargs))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_service(campaign_dir, token: str, ledger: str | None = None, workers: int = 1,
                    port: int | None = None, startup_seconds: float = 30.0,
                    deadline: float | None = None) -> Iterator[str]:
    """Run ``promokit serve`` on 127.0.0.1 (a free port unless ``port``; ``deadline`` seconds unless None, the
    default) in a subprocess and yield its base URL once ``GET /v1/status`` answers 200; on exit send SIGTERM,
    then SIGKILL after 10 s. Raises RuntimeError with the tail of the service's stderr if it exits or does not
    answer within ``startup_seconds``."""
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "promokit.cli", "serve", "--campaign", str(campaign_dir), "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(workers)] + (["--ledger", ledger] if ledger else []) \
        + (["--deadline", repr(deadline)] if deadline is not None else [])
    with tempfile.TemporaryFile() as stderr:
        process = subprocess.Popen(command, env={**os.environ, "PROMOKIT_API_TOKEN": token},
                                   stdout=subprocess.DEVNULL, stderr=stderr)

        def failure(reason: str) -> RuntimeError:
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace")[-4000:]
            return RuntimeError(f"promokit serve {reason}; its stderr ends with:\n{tail}")

        try:
            give_up = time.monotonic() + startup_seconds
            while True:
                if process.poll() is not None:
                    raise failure(f"exited with code {process.returncode} before answering")
                try:
                    with urllib.request.urlopen(f"{base}/v1/status", timeout=2) as answer:
                        if answer.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                if time.monotonic() > give_up:
                    raise failure(f"did not answer GET /v1/status within {startup_seconds:g} s")
                time.sleep(0.1)
            yield base
            if process.poll() is not None:
                raise failure(f"exited with code {process.returncode} while in use")
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

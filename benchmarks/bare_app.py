"""The floor ``serve_throughput.py`` compares the decision service against: a bare FastAPI app, one INSERT per request.

``POST /v1/decisions`` parses a tiny pydantic body (``request_id``, ``customer_id``), writes ONE row and answers a
small JSON object. Nothing else: no auth, no score lookup, no budget, no batching. The ledger is chosen by
``$BARE_LEDGER``:

- ``sqlite:///FILE``: the stdlib ``sqlite3`` module, one autocommit connection per worker process, WAL with
  ``synchronous=NORMAL`` and ``busy_timeout`` (the decision service's pragmas); the INSERT runs on the event
  loop (an ``async def`` handler: no thread hop), so each request is its own transaction;
- ``postgresql://USER@HOST/DB``: psycopg 3 ``AsyncConnection``\\ s in autocommit, a pool of ``$BARE_PG_POOL``
  (default 4, the decision service's ``pool_size``) per worker, so concurrent requests commit concurrently and
  PostgreSQL can group their WAL flushes.

The table (``bare_decisions``) is created if missing; the benchmark drops it (PostgreSQL) or deletes the file
(SQLite) before each cell. Run it under the same uvicorn settings as ``promokit serve``::

    BARE_LEDGER=sqlite:////tmp/bare.sqlite .venv/bin/python -m uvicorn bare_app:create_app --factory \\
        --app-dir benchmarks --workers 1 --loop uvloop --http httptools --log-level warning --no-access-log
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

SCHEMA = ("CREATE TABLE IF NOT EXISTS bare_decisions (request_id VARCHAR(128) PRIMARY KEY, "
          "customer_id VARCHAR(128) NOT NULL, level DOUBLE PRECISION, created_at DOUBLE PRECISION NOT NULL)")


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str
    customer_id: str


def create_app() -> FastAPI:
    url = os.environ.get("BARE_LEDGER", "sqlite:///bare.sqlite")
    return _postgresql_app(url) if url.startswith(("postgresql://", "postgres://")) else _sqlite_app(url)


def _sqlite_app(url: str) -> FastAPI:
    path = url.removeprefix("sqlite:///")
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=60000")
    db.execute(SCHEMA)
    app = FastAPI()

    @app.post("/v1/decisions")
    async def decisions(body: DecisionIn) -> dict:
        db.execute("INSERT INTO bare_decisions VALUES (?, ?, ?, ?)", (body.request_id, body.customer_id, 1.0,
                                                                       time.time()))
        return {"request_id": body.request_id, "customer_id": body.customer_id, "level": 1.0}

    return app


def _postgresql_app(url: str) -> FastAPI:
    import psycopg

    size = int(os.environ.get("BARE_PG_POOL", "4"))
    pool: asyncio.Queue = asyncio.Queue()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        connections = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(size)]
        await connections[0].execute(SCHEMA)
        for connection in connections:
            pool.put_nowait(connection)
        yield
        for connection in connections:
            await connection.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/decisions")
    async def decisions(body: DecisionIn) -> dict:
        connection = await pool.get()
        try:
            await connection.execute("INSERT INTO bare_decisions VALUES (%s, %s, %s, %s)",
                                     (body.request_id, body.customer_id, 1.0, time.time()))
        finally:
            pool.put_nowait(connection)
        return {"request_id": body.request_id, "customer_id": body.customer_id, "level": 1.0}

    return app

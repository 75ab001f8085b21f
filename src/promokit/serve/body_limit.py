"""Request bodies above a size are answered 413, after the rest of the body is read, or at once when the client
waits for ``100 Continue`` before sending it (ASGI middleware)."""

from __future__ import annotations

import json

#: Request bodies above this many bytes are refused with 413 before they are parsed.
MAX_BODY_BYTES = 16 * 1024
#: Bytes of an oversized body read and discarded before its 413 is sent; past this the connection is closed.
DRAIN_BYTES = 1024 * 1024


class BodyLimit:
    """ASGI middleware: 413 for a body above ``limit`` bytes, by Content-Length or while it streams in (chunked).

    The rest of the body is read and discarded, up to ``drain`` bytes, before the 413 is sent: a client still
    writing when the answer comes would otherwise see a reset connection instead of the answer. Past ``drain``
    the 413 closes the connection. A client that sent ``Expect: 100-continue`` has sent no body yet and waits to be
    told to: its oversized Content-Length is answered 413 at once, without reading (uvicorn sends ``100 Continue``
    when the app first reads the body), and the connection is closed, since the body may follow or may not.
    Not Starlette's ``RequestBodyLimitMiddleware``: it answers before the rest of
    the body is read, and in plain text where the schema documents JSON.
    """

    def __init__(self, app, limit: int = MAX_BODY_BYTES, drain: int = DRAIN_BYTES):
        self.app, self.limit, self.drain = app, limit, drain

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            waiting = headers.get(b"expect", b"").lower() == b"100-continue"
            return await self._refuse(receive, send, more=True, read=not waiting)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge(message.get("more_body", False))
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge as exc:
            await self._refuse(receive, send, more=exc.more)

    async def _refuse(self, receive, send, more: bool, read: bool = True) -> None:
        drained = 0
        while read and more and drained <= self.drain:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            drained += len(message.get("body", b""))
            more = message.get("more_body", False)
        body = json.dumps({"detail": f"request body above {self.limit} bytes"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if more:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    def __init__(self, more: bool):
        self.more = more

"""The service's hot endpoints (``POST /v1/decisions`` and ``/v1/outcomes``) without FastAPI's per-request layers.

Both are FastAPI routes like the others: they have their OpenAPI entries and the router would answer them. But
what a request passes through on its way there costs about as much as the decision's own work in Python: the
router's matching, FastAPI's exception middleware and its ``AsyncExitStack``\\ s (≈ 25 µs per request, measured
in-process, of the ≈ 250 µs of CPU a decision cost at 8 clients). So:

- :class:`RequestRoute`: a route whose endpoint takes the :class:`~starlette.requests.Request` and returns a
  :class:`~starlette.responses.Response` itself, and
- :class:`HotRoutes`: ASGI middleware, the innermost of the app's own, that calls those endpoints directly for
  their exact method and path, and answers what they raise with the app's exception handlers, as FastAPI's
  exception middleware does. Everything else goes on to FastAPI. What it does not handle (a 413 from
  :class:`~promokit.serve.body_limit.BodyLimit`, an unexpected error: 500) goes up to the same middleware as
  before, and it sets the ``route`` of the request's scope as the router does, so
  :class:`~promokit.serve.metrics.RequestMetrics` counts it under its route.
"""

from __future__ import annotations

import inspect

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request


class RequestRoute(APIRoute):
    """A route whose endpoint takes the :class:`Request` and returns a :class:`Response` itself.

    FastAPI's documented extension point (a custom ``APIRoute.get_route_handler``): the operation keeps its
    OpenAPI entry, but a request skips FastAPI's dependency solving and body handling, ≈ 34 µs of the
    service's hot path; the endpoint parses its body with :func:`~promokit.serve.schema.parse_body`.
    """

    def get_route_handler(self):
        return self.endpoint


class HotRoutes:
    """ASGI middleware: requests for the routes of ``router`` (each a :class:`RequestRoute`) go to their endpoints
    directly; an exception they raise is answered by the handler ``handlers`` (the app's ``exception_handlers``,
    read when it is raised) has for it, as FastAPI's exception middleware would, or else raised to the middleware
    outside. Requests under a ``root_path`` go through the router, which knows how to match them."""

    def __init__(self, app, router: APIRouter, handlers: dict):
        self.app, self.handlers = app, handlers
        self.routes = {(method, route.path): route for route in router.routes for method in route.methods}

    async def __call__(self, scope, receive, send):
        route = self.routes.get((scope.get("method"), scope.get("path"))) if scope["type"] == "http" else None
        if route is None or scope.get("root_path"):
            return await self.app(scope, receive, send)
        scope["route"] = route
        request = Request(scope, receive, send)
        try:
            response = await route.endpoint(request)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            if inspect.iscoroutinefunction(handler):
                response = await handler(request, exc)
            else:
                response = await run_in_threadpool(handler, request, exc)
            exc.__traceback__ = None  # as Starlette does: a reused exception would pile up tracebacks
            if response is None:
                return
        await response(scope, receive, send)

    def _handler(self, exc: Exception):
        """The handler FastAPI's exception middleware would pick: by status code for an ``HTTPException``, else
        by the exception's class and its bases (500 and ``Exception`` are the server-error middleware's)."""
        handler = None
        if isinstance(exc, HTTPException) and exc.status_code != 500:
            handler = self.handlers.get(exc.status_code)
        if handler is None:
            handler = next((self.handlers[cls] for cls in type(exc).__mro__
                            if cls is not Exception and cls in self.handlers), None)
        return handler

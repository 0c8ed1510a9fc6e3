"""Prometheus metrics and the two pure-ASGI middlewares (cheap on the blob hot path).

With several workers, prometheus_client's multiprocess mode aggregates across them
(`cubinforge serve` sets PROMETHEUS_MULTIPROC_DIR before forking).
"""

from __future__ import annotations

import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess

from starlette.exceptions import HTTPException as StarletteHTTPException

from .errors import error_body

REQUESTS = Counter("cubinforge_http_requests_total", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram("cubinforge_http_request_duration_seconds", "HTTP request latency", ["route"],
                    buckets=(.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5))
BLOB_BYTES = Counter("cubinforge_blob_bytes_served_total", "Blob bytes sent")
BLOBS_CORRUPT_FOUND = Counter("cubinforge_blob_corrupt_found_total",
                              "Times a stored blob was found not to hash to its name")
PUBLISHES = Counter("cubinforge_publish_total", "Publish requests by outcome", ["outcome"])

_ROUTES = (("/v1/blobs/", "/v1/blobs/{sha256}"), ("/v1/variants/", "/v1/variants/{name}"))


def route_label(path: str) -> str:
    # Bounded label set: parametrised paths collapse to their template, unknown ones to "other".
    for prefix, label in _ROUTES:
        if path.startswith(prefix):
            for action in ("/yank", "/unyank"):
                if path.endswith(action):
                    return label + action
            return label
    if path in ("/v1/variants", "/v1/select", "/v1/artifacts", "/healthz", "/metrics", "/docs",
                "/openapi.json"):
        return path
    return "other"


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)
        return generate_latest(reg), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    def __init__(self, app):
        self.app = app
        # Label children looked up once: the label set is bounded (route_label), labels() is not free.
        self._children: dict[tuple, tuple] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]

        async def send_wrapper(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            key = (scope["method"], scope["path"], status[0])
            children = self._children.get(key)
            if children is None:
                route = route_label(scope["path"])
                children = (REQUESTS.labels(scope["method"], route, str(status[0])), LATENCY.labels(route))
                if len(self._children) < 4096:  # paths are unbounded (names, shas); the labels are not
                    self._children[key] = children
            children[0].inc()
            children[1].observe(time.perf_counter() - t0)


class _TooLarge(StarletteHTTPException):
    # An HTTPException, so the app's own handler turns it into the JSON 413 while it reads the body.
    def __init__(self, limit: int):
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


class BodyLimitMiddleware:
    """Refuse request bodies over the limit with a JSON 413, before they are buffered whole."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    return await self._reply(send, 400, "bad_request", "Content-Length is not a number")
                if n > self.max_bytes:
                    return await self._reply(send, 413, "too_large",
                                             f"request body is {n} bytes; the limit is {self.max_bytes}")
        seen = 0
        started = False

        async def counted():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return msg

        async def track(msg):
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, counted, track)
        except _TooLarge:
            if not started:
                await self._reply(send, 413, "too_large", f"request body exceeds the limit of {self.max_bytes} bytes")

    @staticmethod
    async def _reply(send, status: int, error: str, message: str):
        import json
        body = json.dumps(error_body(error, message)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

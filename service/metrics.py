"""Prometheus metrics and the two pure-ASGI middlewares (cheap on the blob hot path).

With several workers, prometheus_client's multiprocess mode aggregates across them
(`cubinforge serve` sets PROMETHEUS_MULTIPROC_DIR before forking).
"""

from __future__ import annotations

import asyncio
import os
import time
from bisect import bisect_left

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


FLUSH_S = 0.5  # request metrics reach the (multiprocess) counters at most this late


class _Tally:
    """Request counts and latencies summed in plain Python and added to the Prometheus children
    in one go, at most FLUSH_S later. In multiprocess mode each inc/observe is a locked mmap
    write (and observe a Python loop over the buckets): ~10 us a request, a tenth of a cached
    answer's cost. The same totals reach /metrics; only the moment differs."""

    def __init__(self, counter, histogram):
        self.counter, self.histogram = counter, histogram
        # Histogram internals (prometheus_client >= 0.20); without them, observe() each value.
        self.bounds = getattr(histogram, "_upper_bounds", None)
        self.exact = self.bounds is not None and hasattr(histogram, "_buckets") and hasattr(histogram, "_sum")
        self.n, self.total, self.buckets, self.values = 0, 0.0, [0] * len(self.bounds or ()), []

    def add(self, seconds: float) -> None:
        self.n += 1
        if self.exact:
            self.total += seconds
            self.buckets[bisect_left(self.bounds, seconds)] += 1  # observe's rule: first bound >= value
        else:
            self.values.append(seconds)

    def flush(self) -> None:
        n, self.n = self.n, 0
        if not n:
            return
        self.counter.inc(n)
        if self.exact:
            self.histogram._sum.inc(self.total)
            for i, c in enumerate(self.buckets):
                if c:
                    self.histogram._buckets[i].inc(c)
            self.total, self.buckets = 0.0, [0] * len(self.bounds)
        else:
            values, self.values = self.values, []
            for v in values:
                self.histogram.observe(v)


class _Timer:
    """One pending call_later per event loop: a loop that ended with its timer unfired (a test
    client's) must not keep a later loop from scheduling its own."""

    def __init__(self):
        self._loop = self._handle = None

    def arm(self, fn) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._handle = loop, loop.call_later(FLUSH_S, fn)

    def disarm(self) -> None:
        if self._handle is not None and self._loop is not None and not self._loop.is_closed():
            self._handle.cancel()
        self._loop = self._handle = None


class DeferredCounter:
    """A counter's increments summed here and added at most FLUSH_S later (see _Tally); for the
    event loop's hot paths only (it schedules its flush on the running loop)."""

    def __init__(self, counter):
        self.counter, self.pending, self._timer = counter, 0, _Timer()
        _DEFERRED.append(self)

    def inc(self, amount: float) -> None:
        self.pending += amount
        self._timer.arm(self.flush)

    def flush(self) -> None:
        self._timer.disarm()
        n, self.pending = self.pending, 0
        if n:
            self.counter.inc(n)


_DEFERRED: list[DeferredCounter] = []
BLOB_BYTES_FAST = DeferredCounter(BLOB_BYTES)


class MetricsMiddleware:
    def __init__(self, app):
        self.app = app
        # Label children looked up once: the label set is bounded (route_label), labels() is not free.
        self._tallies: dict[tuple, _Tally] = {}
        self._timer = _Timer()

    def flush(self) -> None:
        self._timer.disarm()
        for t in list(self._tallies.values()):
            t.flush()
        for d in _DEFERRED:
            d.flush()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]
        if scope["path"] == "/metrics":
            self.flush()  # this worker's own counts, up to now

        async def send_wrapper(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            key = (scope["method"], scope["path"], status[0])
            tally = self._tallies.get(key)
            if tally is None:
                route = route_label(scope["path"])
                tally = _Tally(REQUESTS.labels(scope["method"], route, str(status[0])), LATENCY.labels(route))
                if len(self._tallies) < 4096:  # paths are unbounded (names, shas); the labels are not
                    self._tallies[key] = tally
            tally.add(time.perf_counter() - t0)
            if key not in self._tallies:
                tally.flush()
            else:
                self._timer.arm(self.flush)


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

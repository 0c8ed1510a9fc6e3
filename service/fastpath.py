"""The read paths without the framework: the service's hot paths, as a pure-ASGI shortcut.

- GET/HEAD /v1/blobs/<sha256> answers from the per-worker blob cache (verified bytes only).
- GET /v1/variants[?...], GET /v1/variants/<name> and POST /v1/select answer from the read
  cache (readcache.py) when an answer for the same request was computed under the current
  registry generation; otherwise the request goes to FastAPI and its answer (200 or 404) is
  kept for the next one. The generation is read before the answer is computed, so an answer
  racing a publish is filed under the older generation and never served after the bump.

Every answer is first produced by the regular routes (routers/), which stay the documented
and authoritative behaviour: this layer only replays them.
"""

from __future__ import annotations

import asyncio
import re

from .metrics import BLOB_BYTES_FAST

_BLOB = re.compile(r"^/v1/blobs/([0-9a-f]{64})$")
_DETAIL = re.compile(r"^/v1/variants/[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
IMMUTABLE = b"public, max-age=31536000, immutable"
MAX_SELECT_BODY = 16 << 10
_KEEP = (b"content-type", b"etag", b"cache-control")
_CACHED_STATUS = (200, 404)


def _header(scope, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


def _etag_matches(inm: bytes, etag: bytes) -> bool:
    tags = [t.strip() for t in inm.split(b",")]
    bare = etag[2:] if etag.startswith(b"W/") else etag
    return any(t in (etag, bare, b"W/" + bare, b"*") for t in tags)


class FastPath:
    def __init__(self, app, state):
        self.app, self.state = app, state
        self._inflight: dict[tuple, asyncio.Event] = {}  # (key, generation) being computed now

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            if method in ("GET", "HEAD"):
                m = _BLOB.match(path)
                if m:
                    if await self._blob(m.group(1), scope, send):
                        return
                elif method == "GET" and (path == "/v1/variants" or _DETAIL.match(path)):
                    return await self._cached(("GET", path, scope["query_string"]), scope, receive, send)
            elif method == "POST" and path == "/v1/select":
                body, receive = await _buffer(receive)
                if body is not None:
                    return await self._cached(("select", body), scope, receive, send)
        await self.app(scope, receive, send)

    async def _blob(self, sha: str, scope, send) -> bool:
        if _header(scope, b"if-none-match") is not None or _header(scope, b"range") is not None:
            return False
        data = self.state.blob_cache.get(sha)
        if data is None:
            return False
        head = scope["method"] == "HEAD"
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/octet-stream"),
            (b"content-length", str(len(data)).encode()),
            (b"etag", b'"' + sha.encode() + b'"'),
            (b"cache-control", IMMUTABLE)]})
        await send({"type": "http.response.body", "body": b"" if head else data})
        if not head:
            BLOB_BYTES_FAST.inc(len(data))
        return True

    async def _cached(self, key: tuple, scope, receive, send):
        cache, gen = self.state.read_cache, self.state.generation.read()
        hit = cache.get(key, gen)
        pending = self._inflight.get((key, gen)) if hit is None else None
        if pending is not None:
            # The same answer is being computed: wait for it rather than ask the database again
            # (100 clients starting together would otherwise all miss at once).
            await pending.wait()
            hit = cache.get(key, gen)
        if hit is not None:
            _, status, headers, body = hit
            etag = dict(headers).get(b"etag")
            inm = _header(scope, b"if-none-match")
            if status == 200 and etag and inm and _etag_matches(inm, etag):
                keep = [(k, v) for k, v in headers if k in (b"etag", b"cache-control")]
                await send({"type": "http.response.start", "status": 304, "headers": keep})
                await send({"type": "http.response.body", "body": b""})
                return
            await send({"type": "http.response.start", "status": status,
                        "headers": headers + [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        got = {"status": 0, "headers": [], "body": [], "done": False}

        async def capture(msg):
            if msg["type"] == "http.response.start":
                got["status"], got["headers"] = msg["status"], list(msg.get("headers", []))
            elif msg["type"] == "http.response.body":
                got["body"].append(msg.get("body", b""))
                got["done"] = not msg.get("more_body", False)
            await send(msg)

        flight = self._inflight.setdefault((key, gen), asyncio.Event()) if pending is None else None
        try:
            await self.app(scope, receive, capture)
            if got["done"] and got["status"] in _CACHED_STATUS:
                headers = [(k.lower(), v) for k, v in got["headers"] if k.lower() in _KEEP]
                cache.put(key, gen, got["status"], headers, b"".join(got["body"]))
        finally:
            if flight is not None and self._inflight.get((key, gen)) is flight:
                del self._inflight[(key, gen)]
                flight.set()


async def _buffer(receive):
    """Read a small request body whole; returns (body or None if too big, a receive replaying it)."""
    chunks, total = [], 0
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return None, _replay([msg], receive)
        chunks.append(msg.get("body", b""))
        total += len(chunks[-1])
        if not msg.get("more_body", False):
            body = b"".join(chunks)
            return body, _replay([{"type": "http.request", "body": body, "more_body": False}], receive)
        if total > MAX_SELECT_BODY:
            return None, _replay([{"type": "http.request", "body": c, "more_body": True} for c in chunks], receive)


def _replay(msgs: list, receive):
    pending = list(msgs)

    async def replay():
        return pending.pop(0) if pending else await receive()
    return replay

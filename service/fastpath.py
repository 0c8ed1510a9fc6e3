"""Blob downloads without the framework: the service's hot path, as a pure-ASGI shortcut.

Every runtime start downloads cubins, so GET/HEAD /v1/blobs/<sha256> answers from the
per-worker memory cache here, before FastAPI's routing, validation and exception layers
(which cost more than the copy itself). Anything unusual (a cache miss, a bad name, a
conditional request, a big blob) falls through to the regular route in routers/blobs.py,
which stays the documented and authoritative behaviour.
"""

from __future__ import annotations

import re

from .metrics import BLOB_BYTES

_PATH = re.compile(r"^/v1/blobs/([0-9a-f]{64})$")
IMMUTABLE = b"public, max-age=31536000, immutable"


class BlobFastPath:
    def __init__(self, app, state):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            m = _PATH.match(scope["path"])
            if m and not any(k == b"if-none-match" or k == b"range" for k, _ in scope["headers"]):
                data = self.state.blob_cache.get(m.group(1))
                if data is not None:
                    head = scope["method"] == "HEAD"
                    await send({"type": "http.response.start", "status": 200, "headers": [
                        (b"content-type", b"application/octet-stream"),
                        (b"content-length", str(len(data)).encode()),
                        (b"etag", b'"' + m.group(1).encode() + b'"'),
                        (b"cache-control", IMMUTABLE)]})
                    await send({"type": "http.response.body", "body": b"" if head else data})
                    if not head:
                        BLOB_BYTES.inc(len(data))
                    return
        await self.app(scope, receive, send)

"""Request bodies of publish: read only after authentication, spooled to disk, a few at a time.

A publish body is up to ~90 MB of base64. Reading it into memory before the token is checked
let anyone make a worker hold gigabytes; here the route authenticates first (a dependency that
needs no body), then streams the body to a temporary file under <home>/spool (named
`.incoming-*`, so a crash leaves nothing that start-up does not remove), and at most
`max_uploads` bodies per worker are read and parsed at once; the rest wait their turn.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.requests import ClientDisconnect, Request

from cubinforge.registry.blobstore import TEMP_PREFIX
from .errors import APIError


class UploadGate:
    def __init__(self, slots: int, wait_s: float):
        self.slots, self.wait_s = slots, wait_s
        self._sem: asyncio.Semaphore | None = None  # made on the worker's own event loop

    @asynccontextmanager
    async def slot(self):
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        try:
            await asyncio.wait_for(self._sem.acquire(), self.wait_s)
        except asyncio.TimeoutError:
            raise APIError(503, "busy", f"{self.slots} uploads are already in progress on this worker; "
                           "retry shortly", headers={"Retry-After": "2"}) from None
        try:
            yield
        finally:
            self._sem.release()


async def spool(request: Request, folder: Path, max_bytes: int) -> Path:
    """Stream the request body into a new file under `folder`; the caller removes it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
    path, seen = Path(name), 0
    try:
        with os.fdopen(fd, "wb") as f:
            async for chunk in request.stream():
                seen += len(chunk)
                if seen > max_bytes:
                    raise APIError(413, "too_large", f"request body exceeds the limit of {max_bytes} bytes")
                f.write(chunk)
    except ClientDisconnect:
        path.unlink(missing_ok=True)
        raise APIError(400, "client_disconnect", "the client went away before sending the whole body") from None
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path

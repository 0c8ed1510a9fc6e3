"""GET|HEAD /v1/blobs/{sha256}: immutable, content-addressed, revalidated by ETag.

The hot path of the service (every runtime start downloads cubins): it is async (no
thread hop), touches no database, and serves small blobs from a per-worker memory cache.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from cubinforge.registry.blobstore import CorruptBlob

from ..errors import APIError
from ..metrics import BLOB_BYTES
from ..schemas import SHA256_PATTERN, ErrorResponse

router = APIRouter(prefix="/v1/blobs", tags=["blobs"])
log = logging.getLogger("cubinforge.service")
IMMUTABLE = "public, max-age=31536000, immutable"


def _matches(inm: str, etag: str) -> bool:
    return any(t.strip() in (etag, "W/" + etag, "*") for t in inm.split(","))


RESPONSES = {200: {"content": {"application/octet-stream": {}}},
             304: {"description": "not modified (If-None-Match matched)"},
             404: {"model": ErrorResponse},
             503: {"model": ErrorResponse, "description": "the stored copy is corrupt (not served)"}}
SHA = Path(pattern=SHA256_PATTERN, description="the cubin's sha256 (cubin.sha256 in its manifest)")


@router.get("/{sha256}", summary="Download a cubin by its sha256", response_class=Response, responses=RESPONSES)
async def get_blob(request: Request, sha256: str = SHA):
    return await _blob(request, sha256)


@router.head("/{sha256}", summary="A cubin's size and ETag, without the bytes", response_class=Response,
             responses=RESPONSES)
async def head_blob(request: Request, sha256: str = SHA):
    return await _blob(request, sha256)


async def _blob(request: Request, sha256: str):
    etag = f'"{sha256}"'
    headers = {"ETag": etag, "Cache-Control": IMMUTABLE}
    inm = request.headers.get("if-none-match")
    if inm and _matches(inm, etag):
        return Response(status_code=304, headers=headers)
    state = request.app.state
    data = state.blob_cache.get(sha256)
    if data is None:
        path = state.blobs.path(sha256)
        try:
            size = path.stat().st_size
        except OSError:
            raise _missing(sha256) from None
        if size > state.blob_cache.max_item_bytes:
            # Too big for the memory cache: hashed once per file version, then streamed.
            status = await run_in_threadpool(state.blobs.check, sha256)
            if status != "ok":
                raise _corrupt(sha256) if status == "corrupt" else _missing(sha256)
            if request.method == "HEAD":
                return Response(headers={**headers, "Content-Length": str(size)},
                                media_type="application/octet-stream")
            BLOB_BYTES.inc(size)
            return FileResponse(path, headers=headers, media_type="application/octet-stream")
        try:
            data = await run_in_threadpool(state.blobs.read_verified, sha256)
        except CorruptBlob:
            raise _corrupt(sha256) from None
        if data is None:
            raise _missing(sha256)
        state.blob_cache.put(sha256, data)  # only verified bytes enter the cache
    if request.method == "HEAD":
        return Response(headers={**headers, "Content-Length": str(len(data))}, media_type="application/octet-stream")
    BLOB_BYTES.inc(len(data))
    return Response(data, headers=headers, media_type="application/octet-stream")


def _missing(sha256: str) -> APIError:
    return APIError(404, "blob_not_found", f"no blob {sha256}; blob names come from a variant's "
                    "manifest (cubin.sha256)")


def _corrupt(sha256: str) -> APIError:
    log.error("blob %s is corrupt on disk; not serving it", sha256)
    return APIError(503, "blob_corrupt", f"the server's copy of blob {sha256} is corrupt and is not served; "
                    "the operator repairs it by re-publishing the artifact or with `cubinforge db repair`")

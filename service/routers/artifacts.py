"""POST /v1/artifacts: publish a cubin with its manifest (bearer token required).

The body is not a FastAPI body parameter on purpose: FastAPI reads and parses a declared
body before it runs any dependency, so the token would be checked only after the whole
upload sat in memory. Here authentication runs first, then the body is spooled to disk
(service/uploads.py) and parsed strictly (service/jsonsafe.py). The schema in /openapi.json
is still PublishRequest's (see app.py).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from .. import jsonsafe
from ..auth import Writer, require_writer
from ..metrics import PUBLISHES
from ..publish import bad, check_artifact, check_signatures, decode_cubin
from ..schemas import ErrorResponse, PublishRequest, PublishResponse
from ..uploads import spool

router = APIRouter(prefix="/v1", tags=["artifacts"])
BODY_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}}}}}


@router.post("/artifacts", response_model=PublishResponse, status_code=201, openapi_extra=BODY_SCHEMA,
             summary="Publish an artifact (idempotent; a published variant is never overwritten)",
             responses={200: {"model": PublishResponse, "description": "identical artifact already published"},
                        401: {"model": ErrorResponse}, 403: {"model": ErrorResponse},
                        409: {"model": ErrorResponse, "description": "same name, different content"},
                        413: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
                        503: {"model": ErrorResponse, "description": "too many uploads at once; retry"}})
async def publish(request: Request, response: Response, who: Writer = Depends(require_writer)):
    st = request.app.state
    try:
        async with st.uploads.slot():
            path = await spool(request, st.blobs.spool_dir, st.settings.max_body_bytes)
            try:
                created, rec = await run_in_threadpool(_publish_file, st, path, who)
            finally:
                path.unlink(missing_ok=True)
    except Exception:
        PUBLISHES.labels("refused").inc()
        raise
    PUBLISHES.labels("created" if created else "unchanged").inc()
    if not created:
        response.status_code = 200
    return {"variant": rec["name"], "sha256": rec["cubin"]["sha256"], "created": created, "yanked": rec["yanked"]}


def _publish_file(st, path, who: Writer):
    try:
        doc = jsonsafe.loads(path.read_bytes())
    except jsonsafe.UnsafeJSON as e:
        raise bad("invalid_request", f"invalid request: {e}") from None
    try:
        req = PublishRequest.model_validate(doc)
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False, include_context=False)) from None
    del doc
    # exclude_unset: keep the manifest exactly as sent, since its signature covers those bytes.
    manifest = req.manifest.model_dump(mode="json", exclude_unset=True)
    cubin = decode_cubin(req.cubin_b64, st.settings.max_cubin_bytes)
    del req
    check_artifact(manifest, cubin)
    who.require(manifest["family"], manifest["variant"], "publish")
    signed_by = check_signatures(manifest, st.settings.require_signature, st.publisher_keys)
    with st.db.sessions() as s:
        return st.store.publish(s, manifest, cubin, signed_by, who.name)

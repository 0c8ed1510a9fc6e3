"""POST /v1/artifacts: publish a cubin with its manifest (bearer token required)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from sqlalchemy.orm import Session

from ..auth import require_writer, session_dep
from ..metrics import PUBLISHES
from ..publish import check_artifact, check_signatures, decode_cubin
from ..schemas import ErrorResponse, PublishRequest, PublishResponse

router = APIRouter(prefix="/v1", tags=["artifacts"])


@router.post("/artifacts", response_model=PublishResponse, status_code=201,
             summary="Publish an artifact (idempotent; a published variant is never overwritten)",
             responses={200: {"model": PublishResponse, "description": "identical artifact already published"},
                        401: {"model": ErrorResponse}, 403: {"model": ErrorResponse},
                        409: {"model": ErrorResponse, "description": "same name, different content"},
                        413: {"model": ErrorResponse}, 422: {"model": ErrorResponse}})
def publish(req: PublishRequest, request: Request, response: Response, who: str = Depends(require_writer),
            s: Session = Depends(session_dep)):
    st = request.app.state
    # exclude_unset: keep the manifest exactly as sent, since its signature covers those bytes.
    manifest = req.manifest.model_dump(mode="json", exclude_unset=True)
    try:
        cubin = decode_cubin(req.cubin_b64, st.settings.max_cubin_bytes)
        check_artifact(manifest, cubin)
        signed_by = check_signatures(manifest, st.settings.require_signature, st.publisher_keys)
        created, rec = st.store.publish(s, manifest, cubin, signed_by, who)
    except Exception:
        PUBLISHES.labels("refused").inc()
        raise
    PUBLISHES.labels("created" if created else "unchanged").inc()
    if not created:
        response.status_code = 200
    return {"variant": rec.name, "sha256": rec.sha256, "created": created, "yanked": rec.yanked}

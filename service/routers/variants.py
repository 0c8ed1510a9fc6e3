"""GET /v1/variants (filtered, paged) and GET /v1/variants/{name}; yank."""

from __future__ import annotations

import hashlib
import inspect
import json

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response

from ..auth import Writer, require_writer
from ..errors import APIError
from ..schemas import (FAMILY_PATTERN, NAME_PATTERN, ErrorResponse, VariantDetail, VariantPage, YankRequest,
                       YankResponse, axis_query_params)
from ..store import summary

router = APIRouter(prefix="/v1/variants", tags=["variants"])
NameParam = Path(pattern=NAME_PATTERN, max_length=128, description="the variant's canonical name")


def _not_found(name: str) -> APIError:
    return APIError(404, "variant_not_found", f"no variant named {name!r}; list them with GET /v1/variants")


def _axis_filters():
    """A dependency whose query parameters are the axes of runtime/axes.py, one each (so a new
    axis is a filter, in the OpenAPI schema too, with no edit here)."""
    def collect(**given):
        return {k: v for k, v in given.items() if v is not None}
    params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind | None,
                                default=Query(None, **limits))
              for name, (kind, limits) in axis_query_params().items()]
    collect.__signature__ = inspect.Signature(params)
    return collect


@router.get("", response_model=VariantPage, summary="List variants, filtered by axes, paged")
def list_variants(
    request: Request,
    axes: dict = Depends(_axis_filters()),
    family: str | None = Query(None, pattern=FAMILY_PATTERN),
    verified: bool | None = Query(None, description="true: only variants whose cubin passed a GPU check; "
                                  "false: only unverified ones (provenance.verification.status)"),
    include_yanked: bool = Query(False, description="also list yanked variants"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=2**31 - 1),
):
    filters = {**axes, "family": family, "verified": verified}
    st = request.app.state
    with st.db.sessions() as s:
        recs, total = st.store.list(s, filters, include_yanked, limit, offset)
    nxt = offset + len(recs) if offset + len(recs) < total else None
    return {"items": [summary(r) for r in recs], "total": total, "limit": limit, "offset": offset,
            "next_offset": nxt}


@router.get("/{name}", response_model=VariantDetail, summary="One variant: manifest, launch contract, status",
            responses={404: {"model": ErrorResponse}, 304: {"description": "unchanged since the ETag given"}})
def get_variant(request: Request, response: Response, name: str = NameParam):
    st = request.app.state
    with st.db.sessions() as s:
        rec = st.store.get(s, name)
    if rec is None:
        raise _not_found(name)
    body = {"variant": rec["name"], "yanked": rec["yanked"], "yank_reason": rec["yank_reason"],
            "published_at": rec["created_at"], "blob_url": f"/v1/blobs/{rec['cubin']['sha256']}",
            "manifest": rec["manifest"]}
    raw = json.dumps(body, sort_keys=True).encode()
    # Weak validator over the whole answer: it changes when the variant is yanked or re-signed.
    etag = f'W/"{hashlib.sha256(raw).hexdigest()[:32]}"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    inm = request.headers.get("if-none-match")
    if inm and any(t.strip() in (etag, etag[2:], "*") for t in inm.split(",")):
        return Response(status_code=304, headers=headers)
    return Response(raw, media_type="application/json", headers=headers)


@router.post("/{name}/yank", response_model=YankResponse, summary="Hide a variant from select (kept, downloadable)",
             responses={401: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}})
def yank_variant(request: Request, name: str = NameParam, body: YankRequest | None = Body(None),
                 who: Writer = Depends(require_writer)):
    rec = _set_yanked(request, name, who, True, body.reason if body else None)
    return {"variant": rec["name"], "yanked": True, "reason": rec["yank_reason"]}


@router.post("/{name}/unyank", response_model=YankResponse, summary="Make a yanked variant selectable again",
             responses={401: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}})
def unyank_variant(request: Request, name: str = NameParam, who: Writer = Depends(require_writer)):
    rec = _set_yanked(request, name, who, False, None)
    return {"variant": rec["name"], "yanked": False, "reason": None}


def _set_yanked(request: Request, name: str, who: Writer, yanked: bool, reason: str | None):
    st = request.app.state
    with st.db.sessions() as s:
        rec = st.store.get(s, name)
        if rec is None:
            raise _not_found(name)
        who.require(rec["family"], rec["name"], "yank" if yanked else "unyank")
        return st.store.yank(s, name, reason, who.name) if yanked else st.store.unyank(s, name, who.name)

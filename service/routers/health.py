"""GET /healthz (database and blob store reachable) and GET /metrics (Prometheus)."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request, Response
from sqlalchemy import text

from ..metrics import render
from ..schemas import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
def healthz(request: Request, response: Response):
    st = request.app.state
    db, blobs, n = "ok", "ok", 0
    try:
        with st.db.sessions() as s:
            s.execute(text("SELECT 1"))
            n = st.store.count(s)
    except Exception as e:  # health must report, not raise
        db = f"error: {type(e).__name__}"
    root = st.blobs.root
    corrupt = st.blobs.corrupt()
    if not (root.is_dir() and os.access(root, os.W_OK)):
        blobs = f"error: {root} is not a writable folder"
    elif corrupt:
        blobs = (f"error: {len(corrupt)} stored blob(s) found corrupt or missing "
                 f"({', '.join(c[:12] for c in corrupt[:5])}); "
                 "re-publish them or run `cubinforge db repair`")
    ok = db == "ok" and blobs == "ok"
    if not ok:
        response.status_code = 503
    return {"status": "ok" if ok else "degraded", "database": db, "blobs": blobs, "variants": n,
            "corrupt_blobs": corrupt}


@router.get("/metrics", response_class=Response, summary="Prometheus metrics (text exposition format)")
def metrics(request: Request):
    body, ctype = render()
    # A gauge over the shared marker folder, so every worker reports what any worker found.
    n = len(request.app.state.blobs.corrupt())
    body += (b"# HELP cubinforge_blobs_corrupt Stored blobs found corrupt and not yet repaired\n"
             b"# TYPE cubinforge_blobs_corrupt gauge\n" + f"cubinforge_blobs_corrupt {n}\n".encode())
    return Response(body, media_type=ctype)

"""POST /v1/select: which variant to run for a problem, and why."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import APIError
from ..schemas import ErrorResponse, NoVariantError, SelectRequest, SelectResponse
from ..selection import choose, explain_missing
from ..store import summary
from .jobs import JobAccepted, build_on_miss

router = APIRouter(prefix="/v1", tags=["select"])


@router.post("/select", response_model=SelectResponse, summary="Choose the variant for a problem",
             responses={202: {"model": JobAccepted, "description": "no variant fits yet; a build backend is "
                                                                   "building it (poll the job, then select again)"},
                        404: {"model": NoVariantError, "description": "no variant fits; says which axis values "
                                                                      "are missing and what is nearest"},
                        422: {"model": ErrorResponse}})
def select_variant(req: SelectRequest, request: Request):
    problem = req.model_dump()
    problem["seqlen_k"] = problem["seqlen_k"] or problem["seqlen_q"]
    problem["heads_kv"] = problem["heads_kv"] or problem["heads_q"]
    if problem["heads_q"] % problem["heads_kv"]:
        raise APIError(422, "invalid_request", f"heads_q ({problem['heads_q']}) must be a multiple of heads_kv "
                       f"({problem['heads_kv']}) for grouped-query attention")
    st = request.app.state
    with st.db.sessions() as s:
        records = st.store.candidates(s)
    best, reasons, n = choose(problem, records)
    if best is None:
        body = explain_missing(problem, records)
        started = build_on_miss(request, problem, body)  # 202 and a job, with a build backend configured
        if started is not None:
            return started
        raise APIError(404, body.pop("error"), body.pop("message"), **body)
    return {"variant": best["name"], "reasons": reasons, "candidates": n, "summary": summary(best)}

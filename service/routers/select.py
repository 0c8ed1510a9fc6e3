"""POST /v1/select: which variant to run for a problem, with what launch parameters, and why."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import APIError
from ..schemas import ErrorResponse, NoVariantError, SelectRequest, SelectResponse
from ..selection import answer, choose, explain_missing, problem_of
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
    body = req.model_dump()
    problem = problem_of(body)
    st = request.app.state
    with st.db.sessions() as s:
        records = st.store.candidates(s)
    choice = choose(problem, records)
    if choice is None:
        missing = explain_missing(problem, records)
        # The build backend gets the problem as asked, with the sizes filled in (service/build_jobs.py).
        asked = {**body, "seqlen_k": problem.seqlen_k, "heads_kv": problem.heads_kv}
        started = build_on_miss(request, asked, missing)  # 202 and a job, with a build backend configured
        if started is not None:
            return started
        raise APIError(404, missing.pop("error"), missing.pop("message"), **missing)
    return {**answer(problem, choice), "summary": summary(choice.best)}

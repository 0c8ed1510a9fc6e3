"""GET /v1/jobs/{id}: an on-demand build started by a select miss (service/build_jobs.py)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..errors import APIError
from ..schemas import ErrorResponse

router = APIRouter(prefix="/v1", tags=["jobs"])


class Job(BaseModel):
    id: str
    variant: str = Field(description="the variant being built: exactly the select's axis values")
    status: Literal["queued", "building", "published", "failed"]
    backend: str = Field(description="where it builds: a Dask scheduler address or local:N")
    created_at: str
    updated_at: str
    error: str | None = Field(None, description="why it failed (the build's own report)")
    log: str | None = Field(None, description="the build summary, once published")
    url: str


class JobAccepted(BaseModel):
    """The answer to a select miss when a build backend is configured."""
    status: Literal["queued", "building", "published", "failed"]
    job: str
    url: str = Field(description="poll this; when `published`, send the select again")
    variant: str
    message: str


def job_body(job: dict) -> dict:
    return {k: job.get(k) for k in Job.model_fields if k != "url"} | {"url": f"/v1/jobs/{job['id']}"}


@router.get("/jobs/{job_id}", response_model=Job, summary="An on-demand build started by a select miss",
            responses={404: {"model": ErrorResponse}})
def get_job(job_id: str, request: Request):
    builds = getattr(request.app.state, "builds", None)
    job = builds.files.read(job_id) if builds else None
    if job is None:
        raise APIError(404, "not_found", f"no build job {job_id!r}" + ("" if builds else
                       " (this server has no build backend: set CUBINFORGE_BUILD_BACKEND)"))
    return job_body(job)


def build_on_miss(request: Request, problem: dict, missing: dict) -> JSONResponse | None:
    """For a select miss: 202 with the job building exactly the asked variant, when a build
    backend is configured and the spec allows it; else None (and `missing["message"]` says why
    the backend cannot, for the 404)."""
    builds = getattr(request.app.state, "builds", None)
    if builds is None:
        return None
    job, refused = builds.on_miss(problem)
    if job is None:
        missing["message"] += f"; the build backend cannot build it: {refused}"
        return None
    url = f"/v1/jobs/{job['id']}"
    body = {"status": job["status"], "job": job["id"], "url": url, "variant": job["variant"],
            "message": f"{missing['message']}; building {job['variant']} on {builds.backend}: poll {url}, "
                       f"then select again"}
    return JSONResponse(body, status_code=202, headers={"Location": url})

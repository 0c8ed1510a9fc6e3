"""One JSON error shape for every failure: {"error": code, "message": text, ...details}.

Bad input must be a 4xx with a message a person can act on, never a 500; the handlers
below turn validation errors and HTTP errors into that shape, and a last-resort handler
makes sure even a bug answers JSON (and is logged) rather than a bare traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("cubinforge.service")


class APIError(Exception):
    def __init__(self, status: int, error: str, message: str, headers: dict | None = None, **detail):
        super().__init__(message)
        self.status, self.error, self.message, self.detail, self.headers = status, error, message, detail, headers


def error_body(error: str, message: str, **detail) -> dict:
    return {"error": error, "message": message, **detail}


def _loc(loc) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return JSONResponse(error_body(exc.error, exc.message, **exc.detail), status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        problems = []
        for e in exc.errors():
            msg, field = e.get("msg", "invalid"), _loc(e.get("loc", ()))
            if e.get("type") == "json_invalid":
                ctx = e.get("ctx") or {}
                msg = f"request body is not valid JSON: {ctx.get('error', msg)} (at character {field})"
                field = "body"
            problems.append({"field": field, "problem": msg})
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems[:5])
        return JSONResponse(error_body("invalid_request", f"invalid request: {summary}", problems=problems),
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status_code, "http_error")
        msg = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and msg == "Not Found":
            msg = f"no route {request.method} {request.url.path}; see /docs for the API"
        return JSONResponse(error_body(code, msg), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal_error", "internal server error; the server log has details"),
                            status_code=500)

"""The FastAPI application: `create_app()` for uvicorn (a factory, so each worker builds its own)."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from cubinforge import __version__
from cubinforge.registry.blobstore import BlobStore
from cubinforge.registry.db import Database
from cubinforge.runtime import signing

from . import errors
from .blobcache import BlobCache
from .config import Settings
from .fastpath import FastPath
from .metrics import BLOBS_CORRUPT_FOUND, BodyLimitMiddleware, MetricsMiddleware
from .readcache import ReadCache
from .routers import artifacts, blobs, health, jobs, select, variants
from .store import Store
from .uploads import UploadGate

log = logging.getLogger("cubinforge.service")
TEMP_MAX_AGE_S = 3600

DESCRIPTION = """Serves ahead-of-time compiled attention cubins with their manifests and launch contracts.

Reads need no authentication. Writes (publish, yank) need `Authorization: Bearer <token>`.
Every error is JSON: `{"error": code, "message": what to do}`.
"""


class RegistryApp(FastAPI):
    """FastAPI with the metrics and the read fast path (fastpath.py) in front of Starlette's own
    middleware stack: a cached answer or blob then costs no ServerErrorMiddleware, telemetry or
    body-limit layers (each a coroutine per request and a wrapper per sent message). Anything the
    fast path does not answer goes through the whole FastAPI app, as before."""

    _front = None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":  # lifespan, websocket
            return await super().__call__(scope, receive, send)
        if self._front is None:
            self._front = MetricsMiddleware(FastPath(super().__call__, state=self.state))
        await self._front(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if settings.migrate_on_start:
            from cubinforge.registry.migrate import upgrade
            upgrade(settings.database_url)
        (app.state.blobs.root / "sha256").mkdir(parents=True, exist_ok=True)
        # At most pool_size threads use the database at once, so the pool never runs dry (db.py).
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.db_pool_size
        app.state.db_threads = settings.db_pool_size
        # Other workers may be mid-publish: only temp files too old to be anyone's are removed.
        n = app.state.blobs.clean_temp(older_than_s=TEMP_MAX_AGE_S)
        if n:
            log.warning("removed %d stale temp file(s) left by interrupted publishes", n)
        yield
        if app.state.builds:
            app.state.builds.close()
        app.state.db.dispose()

    # FastAPI's own OpenTelemetry hooks cost a provider lookup per request on the hot path; the
    # service has Prometheus metrics, so they are on only when asked for (CUBINFORGE_OTEL=1).
    otel = settings.otel
    app = RegistryApp(title="cubinforge registry", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  telemetry={"tracing": otel, "metrics": otel, "logs": otel})
    app.state.settings = settings
    app.state.db = Database(settings.database_url, settings.db_pool_size)
    app.state.blobs = BlobStore(settings.home / "blobs", on_corrupt=lambda _sha: BLOBS_CORRUPT_FOUND.inc())
    app.state.store = Store(app.state.blobs)
    app.state.generation = app.state.store.generation
    app.state.read_cache = ReadCache()
    app.state.blob_cache = BlobCache(settings.blob_cache_bytes, settings.blob_cache_item_bytes)
    app.state.publisher_keys = (signing.load_trusted_keys(settings.publisher_keys)
                                if settings.publisher_keys else None)
    app.state.uploads = UploadGate(settings.max_uploads, settings.upload_wait_s)
    app.openapi = lambda: _openapi(app)
    app.state.builds = None
    if settings.build_backend:
        from .build_jobs import BuildJobs
        app.state.builds = BuildJobs(settings)
    errors.install(app)
    for r in (variants, blobs, select, artifacts, health, jobs):
        app.include_router(r.router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    return app


def _openapi(app: FastAPI) -> dict:
    """FastAPI's schema, plus PublishRequest: publish reads its body itself (after auth), so
    FastAPI does not see the model; the route's requestBody refers to it by name."""
    if app.openapi_schema is None:
        from fastapi.openapi.utils import get_openapi
        from pydantic.json_schema import models_json_schema

        from .schemas import PublishRequest
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        _, defs = models_json_schema([(PublishRequest, "validation")], ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs["$defs"])
        app.openapi_schema = schema
    return app.openapi_schema

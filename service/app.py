"""The FastAPI application: `create_app()` for uvicorn (a factory, so each worker builds its own)."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from cubinforge import __version__
from cubinforge.runtime import signing

from . import errors
from .blobcache import BlobCache
from .blobs import BlobStore
from .config import Settings
from .db import Database
from .fastpath import BlobFastPath
from .metrics import BodyLimitMiddleware, MetricsMiddleware
from .routers import artifacts, blobs, health, jobs, select, variants
from .store import Store

log = logging.getLogger("cubinforge.service")

DESCRIPTION = """Serves ahead-of-time compiled attention cubins with their manifests and launch contracts.

Reads need no authentication. Writes (publish, yank) need `Authorization: Bearer <token>`.
Every error is JSON: `{"error": code, "message": what to do}`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if settings.migrate_on_start:
            from .migrate import upgrade
            upgrade(settings.database_url)
        app.state.blobs.root.mkdir(parents=True, exist_ok=True)
        yield
        if app.state.builds:
            app.state.builds.close()
        app.state.db.dispose()

    app = FastAPI(title="cubinforge registry", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.db = Database(settings.database_url)
    app.state.blobs = BlobStore(settings.home)
    app.state.store = Store(app.state.blobs)
    app.state.blob_cache = BlobCache(settings.blob_cache_bytes, settings.blob_cache_item_bytes)
    app.state.publisher_keys = (signing.load_trusted_keys(settings.publisher_keys)
                                if settings.publisher_keys else None)
    app.state.builds = None
    if settings.build_backend:
        from .build_jobs import BuildJobs
        app.state.builds = BuildJobs(settings)
    errors.install(app)
    for r in (variants, blobs, select, artifacts, health, jobs):
        app.include_router(r.router)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(BlobFastPath, state=app.state)
    app.add_middleware(MetricsMiddleware)
    return app

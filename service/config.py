"""Service settings, read once from the environment (the operator's interface)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cubinforge.registry import settings as registry_settings


def _int(name: str, default: int) -> int:
    v = os.environ.get(name)
    return int(v) if v else default


def _bool(name: str, default: bool = False) -> bool:
    v = os.environ.get(name)
    return default if v is None or v == "" else v.lower() in ("1", "true", "yes", "on")


def default_home() -> Path:
    return registry_settings.home()


def default_database_url(home: Path | None = None) -> str:
    # The local registry's rule, so `serve` and `build` share one database by default.
    return registry_settings.database_url(Path(home).absolute() if home else None)


def redact_db_url(url: str) -> str:
    """A database URL fit to print or log: its password replaced by ***."""
    from sqlalchemy.engine import make_url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not parseable: show only the scheme
        return url.split("://", 1)[0] + "://***"


@dataclass
class Settings:
    home: Path = field(default_factory=default_home)
    database_url: str = ""
    # Largest cubin accepted by publish; the request body may be 4/3 of it (base64) plus JSON.
    max_cubin_bytes: int = 64 << 20
    # Refuse unsigned artifacts at publish (the runtime checks signatures regardless).
    require_signature: bool = False
    # If set: a pathsep list of .pub files/folders; publish accepts only signatures by these keys.
    publisher_keys: str | None = None
    # Immutable blobs under this size are kept in each worker's memory after the first read.
    blob_cache_bytes: int = 256 << 20
    blob_cache_item_bytes: int = 8 << 20
    migrate_on_start: bool = True
    # Publish bodies read and parsed at once per worker (each may take ~3x its size in memory).
    max_uploads: int = 2
    # Database connections per worker, and so the threads that may use them (db.py). With
    # PostgreSQL, workers x (pool + 4 overflow) must stay under its max_connections.
    db_pool_size: int = 32
    # FastAPI's native OpenTelemetry instrumentation (traces, metrics, logs), off by default.
    otel: bool = False
    upload_wait_s: float = 60.0
    # Build on a select miss (service/build_jobs.py): a Dask scheduler (tcp://host:8786) or local:N.
    build_backend: str | None = None

    def __post_init__(self):
        self.home = Path(self.home)
        if not self.database_url:
            self.database_url = default_database_url(self.home)

    @property
    def max_body_bytes(self) -> int:
        return self.max_cubin_bytes * 4 // 3 + (4 << 20)

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            home=default_home(),
            database_url=default_database_url(),
            max_cubin_bytes=_int("CUBINFORGE_MAX_CUBIN_BYTES", 64 << 20),
            require_signature=_bool("CUBINFORGE_REQUIRE_SIGNATURE"),
            publisher_keys=os.environ.get("CUBINFORGE_PUBLISHER_KEYS") or None,
            blob_cache_bytes=_int("CUBINFORGE_BLOB_CACHE_BYTES", 256 << 20),
            migrate_on_start=_bool("CUBINFORGE_MIGRATE_ON_START", True),
            max_uploads=_int("CUBINFORGE_MAX_UPLOADS", 2),
            db_pool_size=_int("CUBINFORGE_DB_POOL_SIZE", 32),
            otel=_bool("CUBINFORGE_OTEL"),
            build_backend=os.environ.get("CUBINFORGE_BUILD_BACKEND") or None,
        )

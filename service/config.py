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
            build_backend=os.environ.get("CUBINFORGE_BUILD_BACKEND") or None,
        )

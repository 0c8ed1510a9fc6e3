"""SQLAlchemy 2 models: the one database schema of a registry, local or served.

One current artifact per variant name (built here or published to the service), the history
of every build, and the service's write tokens and audit log. Schema changes go through
Alembic (registry/migrations); `registry.migrate` applies them.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Artifact(Base):
    """The current build of one variant. Axis columns are for querying; `axes` holds them all."""

    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True, index=True)
    family: Mapped[str] = mapped_column(String(64), index=True)
    # axes (null where the family has no such axis)
    arch: Mapped[str | None] = mapped_column(String(16), index=True)
    dtype: Mapped[str | None] = mapped_column(String(16), index=True)
    head_dim: Mapped[int | None] = mapped_column(Integer, index=True)
    causal: Mapped[bool | None] = mapped_column(Boolean)
    varlen: Mapped[bool | None] = mapped_column(Boolean)
    paged_kv: Mapped[bool | None] = mapped_column(Boolean)
    pack_gqa: Mapped[bool | None] = mapped_column(Boolean)
    split_kv: Mapped[bool | None] = mapped_column(Boolean)
    scheduler: Mapped[str | None] = mapped_column(String(64))
    tile_m: Mapped[int | None] = mapped_column(Integer)
    tile_n: Mapped[int | None] = mapped_column(Integer)
    axes: Mapped[dict] = mapped_column(JSON)
    # the artifact
    cubin_sha256: Mapped[str] = mapped_column(String(64), index=True)
    cubin_size: Mapped[int] = mapped_column(BigInteger)
    entry: Mapped[str] = mapped_column(String(512))
    registers: Mapped[int | None] = mapped_column(Integer)
    meta: Mapped[dict] = mapped_column("metadata", JSON)
    contract: Mapped[dict] = mapped_column(JSON)
    # provenance
    source_sha256: Mapped[str] = mapped_column(String(64))
    template: Mapped[str] = mapped_column(String(256))
    dsl_version: Mapped[str] = mapped_column(String(32))
    ptxas_version: Mapped[str | None] = mapped_column(String(64))
    compile_options: Mapped[str] = mapped_column(Text)
    content_key: Mapped[str] = mapped_column(String(64), index=True)
    built_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    build_seconds: Mapped[float] = mapped_column(Float)
    provenance: Mapped[dict] = mapped_column(JSON)
    yanked: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    yank_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # Published through the service: the manifest exactly as uploaded (Text, not JSON: the bytes
    # a signature covers must come back as they were), null for a local build (its manifest is
    # made from the columns); the key ids whose signatures the service verified, comma-separated
    # (the service caps their number); and the token that published it.
    manifest_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    signed_by: Mapped[str] = mapped_column(Text, default="", server_default="")
    publisher: Mapped[str | None] = mapped_column(String(128), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, onupdate=utcnow)


class ArtifactBuild(Base):
    """Every artifact ever stored for a variant (the current one included)."""

    __tablename__ = "artifact_builds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    cubin_sha256: Mapped[str] = mapped_column(String(64))
    source_sha256: Mapped[str] = mapped_column(String(64))
    content_key: Mapped[str] = mapped_column(String(64))
    manifest: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


AXIS_COLUMNS = (
    "arch", "dtype", "head_dim", "causal", "varlen", "paged_kv", "pack_gqa", "split_kv", "scheduler", "tile_m", "tile_n",
)


class ApiToken(Base):
    """A write-API bearer token, stored as its sha256 (tokens are 256-bit random, so no KDF)."""
    __tablename__ = "service_api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Comma-separated (service/auth.parse_scopes): "admin", "family:<family>", "prefix:<name prefix>".
    # Tokens made before scopes existed could write anything, so they migrate as admin.
    scopes: Mapped[str] = mapped_column(Text, default="admin", server_default="admin")


class AuditEntry(Base):
    """One write through the API or an import: who (token name), what, to which variant, when."""
    __tablename__ = "service_audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(32))   # publish | sign | yank | unyank
    variant: Mapped[str] = mapped_column(String(128), index=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)

"""SQLAlchemy 2 models: one current artifact per variant name, plus the history of every build."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text
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
    scheduler: Mapped[str | None] = mapped_column(String(32))
    tile_m: Mapped[int | None] = mapped_column(Integer)
    tile_n: Mapped[int | None] = mapped_column(Integer)
    axes: Mapped[dict] = mapped_column(JSON)
    # the artifact
    cubin_sha256: Mapped[str] = mapped_column(String(64), index=True)
    cubin_size: Mapped[int] = mapped_column(Integer)
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

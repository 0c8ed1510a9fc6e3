"""Tables the service owns. Schema changes go through Alembic (service/migrations)."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class PublishedVariant(Base):
    """One published artifact: the manifest as uploaded plus indexed copies of its axes."""
    __tablename__ = "service_variants"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    family: Mapped[str] = mapped_column(String(64), index=True)
    arch: Mapped[str] = mapped_column(String(16), index=True)
    dtype: Mapped[str] = mapped_column(String(16))
    head_dim: Mapped[int] = mapped_column(Integer)
    causal: Mapped[bool] = mapped_column(Boolean)
    axes: Mapped[dict] = mapped_column(JSON)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    # Text, not JSON: the bytes a signature covers must come back exactly as published.
    manifest_json: Mapped[str] = mapped_column(Text)
    # Comma-separated key ids; Text, as a fixed width would only move the limit (store.MAX_SIGNATURES is it).
    signed_by: Mapped[str] = mapped_column(Text, default="")
    yanked: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    yank_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
    published_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    publisher: Mapped[str | None] = mapped_column(String(128), nullable=True)


class ApiToken(Base):
    """A write-API bearer token, stored as its sha256 (tokens are 256-bit random, so no KDF)."""
    __tablename__ = "service_api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Comma-separated (auth.parse_scopes): "admin", "family:<family>", "prefix:<name prefix>".
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

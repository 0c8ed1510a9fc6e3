"""Pydantic models: the request/response schema of the HTTP API (and so its OpenAPI)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$"
FAMILY_PATTERN = r"^[a-z0-9][a-z0-9_]{0,63}$"
ARCH_PATTERN = r"^sm_[0-9]{2,3}[af]?$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
KEY_ID_PATTERN = r"^[0-9a-f]{16}$"
# Archs the launch contract defines (docs/launch-contract.md); publish refuses others.
PUBLISHABLE_ARCHES = ("sm_90a", "sm_100a")
DTYPES = ("bf16", "fp16", "e4m3", "e5m2", "f32")
MAX_INT = 2**31 - 1


class Axes(BaseModel):
    """The variant's axes; the names are the ones `POST /v1/select` takes."""
    model_config = ConfigDict(extra="allow", strict=True)
    arch: str = Field(pattern=ARCH_PATTERN, examples=["sm_90a"])
    dtype: Literal["bf16", "fp16", "e4m3", "e5m2", "f32"]
    head_dim: int = Field(ge=8, le=1024)
    causal: bool
    varlen: bool = False
    paged_kv: bool = False
    pack_gqa: bool = False
    split_kv: bool = False
    scheduler: str | None = Field(default=None, max_length=64)
    tile_m: int | None = Field(default=None, ge=1, le=4096)
    tile_n: int | None = Field(default=None, ge=1, le=4096)


class CubinRef(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sha256: str = Field(pattern=SHA256_PATTERN)
    size: int = Field(ge=1, le=2**40)


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    alg: Literal["ed25519"] = "ed25519"
    key_id: str = Field(pattern=KEY_ID_PATTERN, description="first 16 hex digits of sha256(public key)")
    sig: str = Field(max_length=200, description="base64 of the 64-byte signature of the manifest")
    public_key: str | None = Field(default=None, max_length=200,
                                   description="'cubinforge-ed25519 <base64>', lets the server check the signature")


class Manifest(BaseModel):
    """What `cubinforge build` writes beside each cubin, and what the runtime reads."""
    model_config = ConfigDict(extra="allow", strict=True)
    manifest_version: Literal[1]
    variant: str = Field(pattern=NAME_PATTERN)
    family: str = Field(pattern=FAMILY_PATTERN)
    axes: Axes
    cubin: CubinRef
    contract: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    signatures: list[Signature] = Field(default_factory=list, max_length=8)


class PublishRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    manifest: Manifest
    cubin_b64: str = Field(description="the cubin, base64-encoded")


class PublishResponse(BaseModel):
    variant: str
    sha256: str
    created: bool = Field(description="false when the identical artifact was already published (a no-op)")
    yanked: bool = False


class VariantSummary(BaseModel):
    variant: str
    family: str
    axes: dict[str, Any]
    sha256: str
    size: int
    yanked: bool = False
    signed_by: list[str] = Field(default_factory=list)
    published_at: datetime | None = None


class VariantPage(BaseModel):
    items: list[VariantSummary]
    total: int
    limit: int
    offset: int
    next_offset: int | None = Field(description="offset of the next page; null on the last one")


class VariantDetail(BaseModel):
    variant: str
    yanked: bool
    yank_reason: str | None = None
    published_at: datetime | None = None
    blob_url: str
    manifest: dict[str, Any] = Field(description="the manifest as published, signatures included")


class YankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=500, pattern=r"^[^\x00]*$",
                               description="free text (no NUL characters)")


class YankResponse(BaseModel):
    variant: str
    yanked: bool
    reason: str | None = None


class SelectRequest(BaseModel):
    """A problem to run; axis names are the manifests' (`arch`, `dtype`, `head_dim`, `causal`...)."""
    model_config = ConfigDict(extra="forbid", strict=True)
    arch: str = Field(pattern=ARCH_PATTERN, examples=["sm_90a"])
    dtype: str = Field(pattern=r"^[a-z0-9]{1,16}$", examples=["bf16"])
    head_dim: int = Field(ge=1, le=4096, examples=[128])
    causal: bool = False
    family: str = Field(default="fa3_fwd", pattern=FAMILY_PATTERN)
    batch: int = Field(default=1, ge=1, le=MAX_INT)
    seqlen_q: int = Field(ge=1, le=MAX_INT, examples=[4096])
    seqlen_k: int | None = Field(default=None, ge=1, le=MAX_INT, description="defaults to seqlen_q")
    heads_q: int = Field(ge=1, le=65536, examples=[32])
    heads_kv: int | None = Field(default=None, ge=1, le=65536, description="defaults to heads_q")
    varlen: bool = False
    paged_kv: bool = False
    # The model variants (docs/kernels.md): exact axes like causal.
    head_dim_v: int | None = Field(default=None, ge=1, le=4096, description="defaults to head_dim")
    softcap: bool = False
    local: bool = False
    learnable_sink: bool = False


class SelectResponse(BaseModel):
    variant: str
    reasons: list[str] = Field(description="why this variant: which axes matched and how ties were broken")
    candidates: int = Field(description="how many published, unyanked variants fit the problem")
    summary: VariantSummary


class NearestVariant(BaseModel):
    variant: str
    differs: dict[str, Any] = Field(description="axis -> the value this variant has instead")


class NoVariantError(BaseModel):
    error: Literal["no_variant"]
    message: str
    missing: dict[str, Any] = Field(description="requested axis values no published variant has")
    available: dict[str, list[Any]] = Field(description="for each missing axis, the values that exist")
    nearest: list[NearestVariant]


class ErrorResponse(BaseModel):
    error: str
    message: str


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    database: str
    blobs: str
    variants: int
    corrupt_blobs: list[str] = Field(default_factory=list, description="sha256s found corrupt, not yet repaired")

"""Pydantic models: the request/response schema of the HTTP API (and so its OpenAPI)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from cubinforge.runtime.axes import AXES, Axis

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$"
FAMILY_PATTERN = r"^[a-z0-9][a-z0-9_]{0,63}$"
ARCH_PATTERN = r"^sm_[0-9]{2,3}[af]?$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"
KEY_ID_PATTERN = r"^[0-9a-f]{16}$"
# Archs the launch contract defines (docs/launch-contract.md); publish refuses others.
PUBLISHABLE_ARCHES = ("sm_90a", "sm_100a")
AXIS_TEXT_PATTERN = r"^[a-z0-9_]{1,32}$"  # a text axis value (dtype, scheduler, v_layout, ...)
MAX_INT = 2**31 - 1


def _axis_type(axis: Axis):
    """The JSON type of an axis's values (the table's values are of one kind: bool, int or str)."""
    kinds = {type(v) for v in axis.values}
    if kinds == {bool}:
        return bool, {}
    if kinds == {int}:
        return int, {"ge": 1, "le": 4096}
    return str, {"pattern": AXIS_TEXT_PATTERN}


def _axis_field(axis: Axis, *, required: bool, default: Any = None, what: str = "", nullable: bool = False):
    kind, limits = _axis_type(axis)
    known = ", ".join(repr(v) for v in axis.values)
    desc = f"{what}known values: {known}" + (f"; left out: {axis.default!r}" if axis.default is not None else "") + (
        f"; left out: as {axis.default_from}" if axis.default_from else "")
    ann = kind | None if nullable else kind
    return ann, Field(... if required else default, description=desc, examples=[axis.values[-1]], **limits)


def axis_query_params() -> dict[str, tuple[type, dict]]:
    """GET /v1/variants's axis filters: every axis of the table, its type and limits."""
    return {name: _axis_type(a) for name, a in AXES.items()}


def _is_required(axis: Axis) -> bool:
    # An exact axis with no default of its own must be named by every manifest.
    return axis.exact and axis.default is None and axis.default_from is None


def _manifest_axes_model() -> type[BaseModel]:
    """The manifest's axes, one field per axis of runtime/axes.py (extra axes are kept as sent)."""
    fields = {name: _axis_field(a, required=_is_required(a)) for name, a in AXES.items()}
    fields["arch"] = (str, Field(pattern=ARCH_PATTERN, examples=["sm_90a"]))
    return create_model("Axes", __config__=ConfigDict(extra="allow", strict=True),
                        __doc__="The variant's axes (runtime/axes.py); the names are the ones `POST /v1/select` "
                                "takes.", **fields)


Axes = _manifest_axes_model()


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


def _select_request_model() -> type[BaseModel]:
    """A problem to run: the exact axes of runtime/axes.py (the dispatcher's), and the sizes
    its rules read. An exact axis left out (null) is the plain kernel's value (the dispatcher's
    defaults); a flag the table gives no default is off when left out."""
    fields: dict[str, Any] = {"family": (str, Field(default="fa3_fwd", pattern=FAMILY_PATTERN))}
    for name, a in AXES.items():
        if not a.exact:
            continue  # free axes (scheduler, tiles) are the dispatcher's to choose
        if _axis_type(a)[0] is bool and a.default is None and a.default_from is None:
            fields[name] = _axis_field(a, required=False, default=False, what="left out: False; ")
        else:
            fields[name] = _axis_field(a, required=_is_required(a), what="exact: must match; ", nullable=True)
    fields["arch"] = (str, Field(pattern=ARCH_PATTERN, examples=["sm_90a"]))
    fields.update(
        batch=(int, Field(default=1, ge=1, le=MAX_INT)),
        seqlen_q=(int, Field(ge=1, le=MAX_INT, examples=[4096])),
        seqlen_k=(int | None, Field(default=None, ge=1, le=MAX_INT, description="defaults to seqlen_q")),
        heads_q=(int, Field(ge=1, le=65536, examples=[32])),
        heads_kv=(int | None, Field(default=None, ge=1, le=65536, description="defaults to heads_q")),
        sm_count=(int | None, Field(default=None, ge=1, le=4096, description="the device's SM count, for the rules "
                                    "that judge whether a grid fills the GPU (e.g. split-KV for decode)")),
    )
    return create_model("SelectRequest", __config__=ConfigDict(extra="forbid", strict=True),
                        __doc__="A problem to run; axis names are the manifests' (runtime/axes.py).", **fields)


SelectRequest = _select_request_model()


class SelectResponse(BaseModel):
    variant: str
    reasons: list[str] = Field(description="why this variant and these launch parameters: which axes matched, "
                                           "which dispatcher rules (runtime/dispatch.py PREFERENCES) applied")
    candidates: int = Field(description="how many published, unyanked variants fit the problem")
    launch: dict[str, Any] = Field(default_factory=dict, description="launch parameters of the choice: its "
                                   "scheduler, tiles, pack_gqa, split_kv, and any a rule sets (num_splits)")
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

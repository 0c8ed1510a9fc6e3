"""The registry store: database rows (SQLAlchemy 2) + content-addressed blobs + manifests.

    reg = Registry()                       # $CUBINFORGE_HOME, or ./.cubinforge
    reg.put_artifact(ArtifactInput(...))   # blobs, row, history, manifest
    reg.get("fa3-fwd-sm_90a-bf16-hd128-causal"); reg.list({"dtype": "bf16"}, limit=50)
    reg.blob_path(sha); reg.open_blob(sha); reg.yank(name)

The local registry and the service are one store: the service publishes with `published_row`
and reads with `find`, `page` and `record`, in its own sessions, over the same tables, blobs
(registry/blobstore.py) and manifests. A record is a plain dict (JSON-ready), `record(row)`:
the one record type of both.
"""

from __future__ import annotations

import json
import math
import platform
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from cubinforge.runtime.axes import axis_value

from . import settings, verification
from .blobstore import BlobStore
from .db import Database
from .generation import Generation
from .manifest import make_manifest, read_manifest, remove_manifest, write_manifest
from .models import AXIS_COLUMNS, Artifact, ArtifactBuild

FILTERABLE = ("name", "family", *AXIS_COLUMNS, "cubin_sha256", "content_key", "yanked")
# Filters answered from a record rather than a column: `verified` (its cubin passed a GPU
# check), and any axis without a column of its own (read with the axis table's default).
def _computed(rec: dict, key: str):
    if key == "verified":
        return ((rec["provenance"] or {}).get("verification") or {}).get("status") == "verified"
    return axis_value(rec["axes"], key)


@dataclass
class ArtifactInput:
    """One build to store."""

    name: str
    family: str
    axes: dict
    cubin: bytes
    metadata: dict
    contract: dict
    source: str  # the rendered module (kept as a blob for provenance)
    template: str
    dsl_version: str
    ptxas_version: str | None
    compile_options: str
    content_key: str
    build_seconds: float
    built_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    python: str = field(default_factory=platform.python_version)


def _iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    if dt.tzinfo is None:  # SQLite returns naive datetimes; they were stored as UTC
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.isoformat()


class Registry:
    def __init__(self, home: str | Path | None = None, database_url: str | None = None, echo: bool = False,
                 pool_size: int = 5):
        from .migrate import ensure_schema  # alembic: only when a registry is opened

        self.home = Path(home).absolute() if home is not None else settings.home()
        self.home.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(self.home / "blobs")
        self.manifests_dir = self.home / "manifests"
        self.generation = Generation(self.home)
        url = database_url or settings.database_url(self.home)
        self.db = Database(url, pool_size)
        self.engine = self.db.engine
        self.engine.echo = echo
        ensure_schema(self.engine, url)
        self.session_factory = self.db.sessions

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.session_factory() as s, s.begin():
            yield s

    # ------------------------------------------------------------ writing

    def put_artifact(self, a: ArtifactInput) -> dict:
        """Store blobs first, then the row (replacing the variant's current one), then the manifest."""
        cubin_sha = self.blobs.put(a.cubin)
        source_sha = self.blobs.put(a.source.encode())
        provenance = {
            "dsl_version": a.dsl_version,
            "ptxas_version": a.ptxas_version,
            "compile_options": a.compile_options,
            "content_key": a.content_key,
            "built_at": _iso(a.built_at),
            "build_seconds": round(a.build_seconds, 3),
            "rendered_source_sha256": source_sha,
            "template": a.template,
            "python": a.python,
            # Where this exact cubin was checked numerically, or why it is unverified.
            "verification": verification.stamp(a.family, a.axes.get("arch"), cubin_sha,
                                               verification.all_records(self.home)),
        }
        manifest = make_manifest(
            variant=a.name, family=a.family, axes=a.axes, cubin_sha256=cubin_sha, cubin_size=len(a.cubin),
            contract=a.contract, metadata=a.metadata, provenance=provenance,
        )
        with self.session() as s:
            row = s.scalar(select(Artifact).where(Artifact.name == a.name))
            if row is None:
                row = Artifact(name=a.name)
                s.add(row)
            row.family = a.family
            for col in AXIS_COLUMNS:
                setattr(row, col, a.axes.get(col))
            row.axes = a.axes
            row.cubin_sha256, row.cubin_size = cubin_sha, len(a.cubin)
            row.entry = a.metadata.get("entry") or a.contract.get("entry")
            row.registers = a.metadata.get("registers")
            row.meta, row.contract, row.provenance = a.metadata, a.contract, provenance
            row.source_sha256, row.template = source_sha, a.template
            row.dsl_version, row.ptxas_version = a.dsl_version, a.ptxas_version
            row.compile_options, row.content_key = a.compile_options, a.content_key
            row.built_at, row.build_seconds = a.built_at, a.build_seconds
            row.yanked, row.yank_reason = False, None
            row.manifest_json, row.signed_by, row.publisher = None, "", None  # a local build, not a publish
            s.flush()
            s.add(ArtifactBuild(artifact_id=row.id, name=a.name, cubin_sha256=cubin_sha, source_sha256=source_sha,
                                content_key=a.content_key, manifest=manifest))
            record = _record(row)
        write_manifest(self.manifests_dir, manifest)
        self.generation.bump()
        return record

    def yank(self, name: str, yanked: bool = True) -> dict:
        """Mark (or unmark) a variant as withdrawn; a yanked variant has no manifest."""
        with self.session() as s:
            row = self._row(s, name)
            row.yanked = yanked
            record = _record(row)
        sync_manifest(self.manifests_dir, record)
        self.generation.bump()
        return record

    def import_verification(self, path: str | Path) -> list[dict]:
        """Keep a verification record file in `verified/` and restamp every current variant
        from all records: those whose cubin sha256 a record names change status."""
        import shutil

        records = verification.load_records(path)  # checked before it is kept
        (self.home / "verified").mkdir(exist_ok=True)
        kept = self.home / "verified" / Path(path).name
        if Path(path).resolve() != kept.resolve():
            shutil.copyfile(path, kept)
        every = verification.all_records(self.home)
        changed = []
        with self.session() as s:
            for row in s.scalars(select(Artifact).where(Artifact.yanked.is_(False))):
                arch = (row.axes or {}).get("arch")
                new = verification.stamp(row.family, arch, row.cubin_sha256, every)
                if (row.provenance or {}).get("verification") != new:
                    row.provenance = {**(row.provenance or {}), "verification": new}
                    changed.append(_record(row))
        for record in changed:
            write_manifest(self.manifests_dir, record_manifest(record))
        if changed:
            self.generation.bump()
        return [{"variant": r["name"], **r["provenance"]["verification"]} for r in changed]

    # ------------------------------------------------------------ reading

    def get(self, name: str) -> dict | None:
        with self.session() as s:
            row = find(s, name)
            return _record(row) if row is not None else None

    def list(self, filters: Mapping[str, Any] | None = None, limit: int | None = None, offset: int = 0,
             include_yanked: bool = False) -> list[dict]:
        with self.session() as s:
            q = self._filtered(select(Artifact), filters, include_yanked).order_by(Artifact.name)
            q = q.offset(offset) if offset else q
            q = q.limit(limit) if limit is not None else q
            return [_record(r) for r in s.scalars(q)]

    def count(self, filters: Mapping[str, Any] | None = None, include_yanked: bool = False) -> int:
        with self.session() as s:
            q = self._filtered(select(func.count(Artifact.id)), filters, include_yanked)
            return s.scalar(q) or 0

    def content_keys(self) -> dict[str, tuple[str, str]]:
        """name -> (content_key, cubin_sha256) of every current artifact: the build's skip check."""
        with self.session() as s:
            rows = s.execute(select(Artifact.name, Artifact.content_key, Artifact.cubin_sha256))
            return {n: (k, c) for n, k, c in rows}

    def history(self, name: str) -> list[dict]:
        with self.session() as s:
            rows = s.scalars(select(ArtifactBuild).where(ArtifactBuild.name == name).order_by(ArtifactBuild.id))
            return [{"cubin_sha256": r.cubin_sha256, "content_key": r.content_key, "source_sha256": r.source_sha256,
                     "created_at": _iso(r.created_at), "manifest": r.manifest} for r in rows]

    def manifest(self, name: str) -> dict:
        return read_manifest(self.manifests_dir, name)

    def blob_path(self, sha: str) -> Path:
        return self.blobs.path(sha)

    def open_blob(self, sha: str) -> BinaryIO:
        return self.blobs.open(sha)

    def read_blob(self, sha: str) -> bytes:
        return self.blobs.read(sha)

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _row(s: Session, name: str) -> Artifact:
        row = find(s, name)
        if row is None:
            raise KeyError(f"no variant {name!r} in the registry")
        return row

    @staticmethod
    def _filtered(q, filters: Mapping[str, Any] | None, include_yanked: bool):
        for key, value in (filters or {}).items():
            if key not in FILTERABLE:
                raise ValueError(f"cannot filter on {key!r} (filters: {', '.join(FILTERABLE)})")
            if value is None:
                continue
            col = getattr(Artifact, key)
            values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
            q = q.where(col.in_(values))
        if not include_yanked and not (filters and "yanked" in filters):
            q = q.where(Artifact.yanked.is_(False))
        return q


def find(s: Session, name: str) -> Artifact | None:
    return s.scalar(select(Artifact).where(Artifact.name == name))


def page(s: Session, filters: Mapping[str, Any], include_yanked: bool, limit: int, offset: int
         ) -> tuple[list[dict], int]:
    """One page of records, ordered by name, and how many match in all. Filters on a column run
    in SQL; the others (`verified`, axes without a column) on the records."""
    sql = {k: v for k, v in filters.items() if v is not None and k in FILTERABLE}
    rest = {k: v for k, v in filters.items() if v is not None and k not in FILTERABLE}
    q = Registry._filtered(select(Artifact), sql, include_yanked)
    if not rest:
        total = s.scalar(select(func.count()).select_from(q.subquery()))
        rows = s.scalars(q.order_by(Artifact.name).limit(limit).offset(offset)).all()
        return [_record(r) for r in rows], int(total or 0)
    recs = [_record(r) for r in s.scalars(q.order_by(Artifact.name)).all()]
    recs = [r for r in recs if all(_computed(r, k) == v for k, v in rest.items())]
    return recs[offset:offset + limit], len(recs)


def _text(v, n: int, default=""):
    """A manifest value as a bounded string column (the manifest itself keeps the value)."""
    return v if isinstance(v, str) and len(v) <= n else default


def published_row(manifest: dict, manifest_json: str, signed_by: list[str], publisher: str | None) -> Artifact:
    """The row of a manifest published through the service: its columns are index copies of
    the manifest (out-of-range provenance values are left out of them, kept in the manifest)."""
    axes, meta, prov = manifest["axes"], manifest.get("metadata") or {}, manifest.get("provenance") or {}
    now = datetime.now(timezone.utc)
    try:
        built = datetime.fromisoformat(prov.get("built_at"))
        built = built if built.tzinfo else built.replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        built = now
    secs, regs = prov.get("build_seconds"), meta.get("registers")
    row = Artifact(
        name=manifest["variant"], family=manifest["family"], axes=axes,
        cubin_sha256=manifest["cubin"]["sha256"], cubin_size=manifest["cubin"]["size"],
        entry=str(meta.get("entry") or manifest["contract"].get("entry") or "")[:512],
        registers=regs if isinstance(regs, int) and 0 <= regs < 2**31 else None,
        meta=meta, contract=manifest["contract"], provenance=prov,
        source_sha256=_text(prov.get("rendered_source_sha256"), 64), template=_text(prov.get("template"), 256),
        dsl_version=_text(prov.get("dsl_version"), 32), ptxas_version=_text(prov.get("ptxas_version"), 64, None),
        compile_options=_text(prov.get("compile_options"), 1 << 20), content_key=_text(prov.get("content_key"), 64),
        built_at=built, build_seconds=float(secs) if isinstance(secs, (int, float)) and math.isfinite(secs) else 0.0,
        yanked=False, manifest_json=manifest_json, signed_by=",".join(signed_by), publisher=publisher,
        created_at=now, updated_at=now)
    for col in AXIS_COLUMNS:
        setattr(row, col, axes.get(col))
    return row


def build_entry(row: Artifact, manifest: dict) -> ArtifactBuild:
    """The history entry of a row just stored (flushed, so it has its id)."""
    return ArtifactBuild(artifact_id=row.id, name=row.name, cubin_sha256=row.cubin_sha256,
                         source_sha256=row.source_sha256, content_key=row.content_key, manifest=manifest)


def sync_manifest(manifests_dir: Path, record: dict) -> None:
    """`manifests/<name>.json` follows the record: written while selectable, removed once yanked."""
    if record["yanked"]:
        remove_manifest(manifests_dir, record["name"])
    else:
        write_manifest(manifests_dir, record["manifest"])


def record(row: Artifact) -> dict:
    """The one record type: a registry row as a JSON-ready dict."""
    return _record(row)


def _record(row: Artifact) -> dict:
    rec = {
        "name": row.name,
        "family": row.family,
        "axes": row.axes,
        "cubin": {"sha256": row.cubin_sha256, "size": row.cubin_size},
        "entry": row.entry,
        "registers": row.registers,
        "metadata": row.meta,
        "contract": row.contract,
        "provenance": row.provenance,
        "content_key": row.content_key,
        "yanked": bool(row.yanked),
        "yank_reason": row.yank_reason,
        # Verified signer key ids (publish through the service); empty for a local build.
        "signed_by": [k for k in (row.signed_by or "").split(",") if k],
        "publisher": row.publisher,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
    }
    # The manifest: as published (the bytes its signatures cover), or made from the columns.
    rec["manifest"] = json.loads(row.manifest_json) if row.manifest_json else record_manifest(rec)
    return rec


def record_manifest(record: dict) -> dict:
    """The manifest of a registry record (what put_artifact wrote)."""
    return make_manifest(
        variant=record["name"], family=record["family"], axes=record["axes"],
        cubin_sha256=record["cubin"]["sha256"], cubin_size=record["cubin"]["size"],
        contract=record["contract"], metadata=record["metadata"], provenance=record["provenance"],
    )


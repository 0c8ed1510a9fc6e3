"""The local registry: SQLite rows (SQLAlchemy 2) + content-addressed blobs + manifests.

    reg = Registry()                       # $CUBINFORGE_HOME, or ./.cubinforge
    reg.put_artifact(ArtifactInput(...))   # blobs, row, history, manifest
    reg.get("fa3-fwd-sm_90a-bf16-hd128-causal"); reg.list({"dtype": "bf16"}, limit=50)
    reg.blob_path(sha); reg.open_blob(sha); reg.yank(name)

Records are plain dicts (JSON-ready), so a FastAPI service can return them as they are.
"""

from __future__ import annotations

import platform
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Mapping

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from . import settings, verification
from .blobstore import BlobStore
from .manifest import make_manifest, read_manifest, remove_manifest, write_manifest
from .models import AXIS_COLUMNS, Artifact, ArtifactBuild, Base

FILTERABLE = ("name", "family", *AXIS_COLUMNS, "cubin_sha256", "content_key", "yanked")


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
    def __init__(self, home: str | Path | None = None, database_url: str | None = None, echo: bool = False):
        self.home = Path(home).absolute() if home is not None else settings.home()
        self.home.mkdir(parents=True, exist_ok=True)
        self.blobs = BlobStore(self.home / "blobs")
        self.manifests_dir = self.home / "manifests"
        url = database_url or settings.database_url(self.home)
        kwargs: dict[str, Any] = {"echo": echo}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        Base.metadata.create_all(self.engine)
        self.session_factory = sessionmaker(self.engine, expire_on_commit=False)

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
            row.yanked = False
            s.flush()
            s.add(ArtifactBuild(artifact_id=row.id, name=a.name, cubin_sha256=cubin_sha, source_sha256=source_sha,
                                content_key=a.content_key, manifest=manifest))
            record = _record(row)
        write_manifest(self.manifests_dir, manifest)
        return record

    def yank(self, name: str, yanked: bool = True) -> dict:
        """Mark (or unmark) a variant as withdrawn; a yanked variant has no manifest."""
        with self.session() as s:
            row = self._row(s, name)
            row.yanked = yanked
            record = _record(row)
        if yanked:
            remove_manifest(self.manifests_dir, name)
        else:
            write_manifest(self.manifests_dir, record_manifest(record))
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
        return [{"variant": r["name"], **r["provenance"]["verification"]} for r in changed]

    # ------------------------------------------------------------ reading

    def get(self, name: str) -> dict | None:
        with self.session() as s:
            row = s.scalar(select(Artifact).where(Artifact.name == name))
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
        row = s.scalar(select(Artifact).where(Artifact.name == name))
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


def _record(row: Artifact) -> dict:
    return {
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
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.updated_at),
    }


def record_manifest(record: dict) -> dict:
    """The manifest of a registry record (what put_artifact wrote)."""
    return make_manifest(
        variant=record["name"], family=record["family"], axes=record["axes"],
        cubin_sha256=record["cubin"]["sha256"], cubin_size=record["cubin"]["size"],
        contract=record["contract"], metadata=record["metadata"], provenance=record["provenance"],
    )


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.close()

"""Publish, list, get and yank over the database and the blob store.

Publish writes the blob and the row as one unit: the blob is staged (fsync'ed temp file),
the row is flushed, the blob moved into place, then the row committed; if the commit
fails the blob this call created is removed again. A crash between the move and the
commit can leave an unreferenced blob (harmless: content-addressed, never served by name)
but never a row without its blob.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cubinforge.runtime import signing

from .blobs import BlobStore
from .errors import APIError
from .models import AuditEntry, PublishedVariant
from .publish import MAX_SIGNATURES, dedupe_signatures
from .readcache import Generation

log = logging.getLogger("cubinforge.service")

# Axes that list/select filter on; the indexed ones are columns, the rest live in `axes`.
COLUMN_AXES = ("family", "arch", "dtype", "head_dim", "causal")


@dataclass
class Record:
    name: str
    family: str
    axes: dict
    sha256: str
    size: int
    manifest: dict
    signed_by: list[str]
    yanked: bool
    yank_reason: str | None
    published_at: datetime | None

    @classmethod
    def of(cls, row: PublishedVariant) -> "Record":
        return cls(row.name, row.family, dict(row.axes), row.sha256, row.size, json.loads(row.manifest_json),
                   [k for k in (row.signed_by or "").split(",") if k], row.yanked, row.yank_reason,
                   _utc(row.published_at))

    def summary(self) -> dict:
        return {"variant": self.name, "family": self.family, "axes": self.axes, "sha256": self.sha256,
                "size": self.size, "yanked": self.yanked, "signed_by": self.signed_by,
                "published_at": self.published_at}


def _field(r: Record, key: str):
    """An axis of the record, or `verified`: whether its manifest says its cubin passed a GPU check."""
    if key == "verified":
        return ((r.manifest.get("provenance") or {}).get("verification") or {}).get("status") == "verified"
    return r.axes.get(key)


def _utc(dt: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; they were stored as UTC.
    return dt.replace(tzinfo=timezone.utc) if dt is not None and dt.tzinfo is None else dt


def _same_content(a: dict, b: dict) -> bool:
    return signing.signed_payload(a) == signing.signed_payload(b)


def _too_many(name: str) -> APIError:
    return APIError(422, "too_many_signatures", f"{name}: a variant keeps at most {MAX_SIGNATURES} signatures "
                    "(one per key); this publish would exceed that. Sign with a key that has already signed, "
                    "or ask the operator which signatures are needed")


class Store:
    def __init__(self, blobs: BlobStore):
        self.blobs = blobs
        self.generation = Generation(blobs.home)  # bumped after each commit that changes a read answer

    # ------------------------------------------------------------------ reads
    def get(self, s: Session, name: str) -> Record | None:
        row = s.get(PublishedVariant, name)
        return Record.of(row) if row else None

    def list(self, s: Session, filters: dict, include_yanked: bool, limit: int, offset: int
             ) -> tuple[list[Record], int]:
        q = select(PublishedVariant)
        for k, v in filters.items():
            if v is None:
                continue
            if k in COLUMN_AXES:
                q = q.where(getattr(PublishedVariant, k) == v)
        if not include_yanked:
            q = q.where(PublishedVariant.yanked.is_(False))
        extra = {k: v for k, v in filters.items() if v is not None and k not in COLUMN_AXES}
        if not extra:
            total = s.scalar(select(func.count()).select_from(q.subquery()))
            rows = s.scalars(q.order_by(PublishedVariant.name).limit(limit).offset(offset)).all()
            return [Record.of(r) for r in rows], int(total or 0)
        # Non-indexed axes (varlen, pack_gqa, tile_m...) are few per variant: filter in Python.
        recs = [Record.of(r) for r in s.scalars(q.order_by(PublishedVariant.name)).all()]
        recs = [r for r in recs if all(_field(r, k) == v for k, v in extra.items())]
        return recs[offset:offset + limit], len(recs)

    def candidates(self, s: Session) -> list[Record]:
        """Every unyanked variant (select's search space)."""
        q = select(PublishedVariant).where(PublishedVariant.yanked.is_(False)).order_by(PublishedVariant.name)
        return [Record.of(r) for r in s.scalars(q).all()]

    def count(self, s: Session) -> int:
        return int(s.scalar(select(func.count()).select_from(PublishedVariant)) or 0)

    # ------------------------------------------------------------------ writes
    def publish(self, s: Session, manifest: dict, cubin: bytes, signed_by: list[str],
                publisher: str | None) -> tuple[bool, Record]:
        name = manifest["variant"]
        if manifest.get("signatures"):
            manifest = {**manifest, "signatures": dedupe_signatures(manifest["signatures"])}
            if len(manifest["signatures"]) > MAX_SIGNATURES:
                raise _too_many(name)
        existing = s.get(PublishedVariant, name)
        if existing is not None:
            return False, self._republish(s, existing, manifest, cubin, signed_by, publisher)
        axes = manifest["axes"]
        row = PublishedVariant(
            name=name, family=manifest["family"], arch=axes["arch"], dtype=axes["dtype"],
            head_dim=axes["head_dim"], causal=axes["causal"], axes=axes, sha256=manifest["cubin"]["sha256"],
            size=manifest["cubin"]["size"], manifest_json=json.dumps(manifest, sort_keys=True),
            signed_by=",".join(signed_by), yanked=False, publisher=publisher)
        audit(s, publisher, "publish", name, f"sha256 {row.sha256}, signed by {signed_by or 'nobody'}")
        sha, tmp = self.blobs.stage(cubin)
        blob = "exists"
        try:
            s.add(row)
            s.flush()
            # A good copy of the same content is reused; a corrupt one is replaced by this upload.
            blob = self.blobs.install(sha, tmp)
            if blob == "repaired":
                log.warning("blob %s was corrupt on disk; replaced by the upload of %s", sha, name)
            s.commit()
        except IntegrityError:
            # A concurrent publish of the same name won the race: judge against what it stored.
            s.rollback()
            self._undo_blob(sha, tmp, blob)
            existing = s.get(PublishedVariant, name)
            if existing is None:
                raise
            return False, self._republish(s, existing, manifest, cubin, signed_by, publisher)
        except BaseException:
            s.rollback()
            self._undo_blob(sha, tmp, blob)
            raise
        self.generation.bump()
        return True, Record.of(row)

    def _undo_blob(self, sha: str, tmp, blob: str) -> None:
        tmp.unlink(missing_ok=True)
        if blob == "created":  # a repaired copy stays: it is good bytes either way
            self.blobs.remove(sha)

    def _republish(self, s: Session, row: PublishedVariant, manifest: dict, cubin: bytes,
                   signed_by: list[str], actor: str | None) -> Record:
        stored = json.loads(row.manifest_json)
        if not _same_content(stored, manifest):
            differs = sorted(k for k in set(stored) | set(manifest)
                             if k not in signing.UNSIGNED_KEYS and stored.get(k) != manifest.get(k))
            raise APIError(409, "variant_exists",
                           f"variant {row.name} is already published with different content (differs in "
                           f"{differs}); published variants are immutable: publish under a new name, and "
                           "yank the old one if it is wrong", differs=differs)
        # Same artifact: the upload is verified, so it repairs a stored copy gone corrupt or missing.
        if self.blobs.ensure(row.sha256, cubin) != "exists":
            log.warning("blob %s of %s was corrupt or missing on disk; restored from the re-publish",
                        row.sha256, row.name)
        # Otherwise a no-op, except that signatures by new keys are added.
        have = {x["key_id"] for x in stored.get("signatures", [])}
        new = [x for x in manifest.get("signatures", []) if x["key_id"] not in have]
        if len(have) + len(new) > MAX_SIGNATURES:
            raise _too_many(row.name)
        if new:
            stored["signatures"] = stored.get("signatures", []) + new
            row.manifest_json = json.dumps(stored, sort_keys=True)
            row.signed_by = ",".join([k for k in (row.signed_by or "").split(",") if k] +
                                     [x["key_id"] for x in new if x["key_id"] in signed_by])
            audit(s, actor, "sign", row.name, f"added signatures by {[x['key_id'] for x in new]}")
            s.commit()
            self.generation.bump()
        return Record.of(row)

    def yank(self, s: Session, name: str, reason: str | None, actor: str | None = None) -> Record | None:
        return self._set_yanked(s, name, True, reason, actor)

    def unyank(self, s: Session, name: str, actor: str | None = None) -> Record | None:
        return self._set_yanked(s, name, False, None, actor)

    def _set_yanked(self, s: Session, name: str, yanked: bool, reason: str | None, actor: str | None):
        row = s.get(PublishedVariant, name)
        if row is None:
            return None
        if row.yanked != yanked:
            row.yanked, row.yank_reason = yanked, reason
            audit(s, actor, "yank" if yanked else "unyank", name, reason)
            s.commit()
            self.generation.bump()
        return Record.of(row)


def audit(s: Session, actor: str | None, action: str, variant: str, detail: str | None = None) -> None:
    """Record a write in the same transaction as the write itself."""
    s.add(AuditEntry(actor=actor or "?", action=action, variant=variant, detail=detail))


def audit_log(s: Session, limit: int = 100, variant: str | None = None) -> list[AuditEntry]:
    q = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if variant:
        q = q.where(AuditEntry.variant == variant)
    return list(s.scalars(q))

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
from .models import PublishedVariant

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


class Store:
    def __init__(self, blobs: BlobStore):
        self.blobs = blobs

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
        existing = s.get(PublishedVariant, name)
        if existing is not None:
            return False, self._republish(s, existing, manifest, signed_by)
        axes = manifest["axes"]
        row = PublishedVariant(
            name=name, family=manifest["family"], arch=axes["arch"], dtype=axes["dtype"],
            head_dim=axes["head_dim"], causal=axes["causal"], axes=axes, sha256=manifest["cubin"]["sha256"],
            size=manifest["cubin"]["size"], manifest_json=json.dumps(manifest, sort_keys=True),
            signed_by=",".join(signed_by), yanked=False, publisher=publisher)
        sha, tmp = self.blobs.stage(cubin)
        created_blob = False
        try:
            s.add(row)
            s.flush()
            created_blob = self.blobs.install(sha, tmp)
            s.commit()
        except IntegrityError:
            # A concurrent publish of the same name won the race: judge against what it stored.
            s.rollback()
            self._undo_blob(sha, tmp, created_blob)
            existing = s.get(PublishedVariant, name)
            if existing is None:
                raise
            return False, self._republish(s, existing, manifest, signed_by)
        except BaseException:
            s.rollback()
            self._undo_blob(sha, tmp, created_blob)
            raise
        return True, Record.of(row)

    def _undo_blob(self, sha: str, tmp, created: bool) -> None:
        tmp.unlink(missing_ok=True)
        if created:
            self.blobs.remove(sha)

    def _republish(self, s: Session, row: PublishedVariant, manifest: dict, signed_by: list[str]) -> Record:
        stored = json.loads(row.manifest_json)
        if not _same_content(stored, manifest):
            differs = sorted(k for k in set(stored) | set(manifest)
                             if k not in signing.UNSIGNED_KEYS and stored.get(k) != manifest.get(k))
            raise APIError(409, "variant_exists",
                           f"variant {row.name} is already published with different content (differs in "
                           f"{differs}); published variants are immutable: publish under a new name, and "
                           "yank the old one if it is wrong", differs=differs)
        # Same artifact: a no-op, except that new signatures (another key) are added.
        have = {x["key_id"] for x in stored.get("signatures", [])}
        new = [x for x in manifest.get("signatures", []) if x["key_id"] not in have]
        if new:
            stored["signatures"] = stored.get("signatures", []) + new
            row.manifest_json = json.dumps(stored, sort_keys=True)
            row.signed_by = ",".join([k for k in (row.signed_by or "").split(",") if k] +
                                     [x["key_id"] for x in new if x["key_id"] in signed_by])
            s.commit()
        return Record.of(row)

    def yank(self, s: Session, name: str, reason: str | None) -> Record | None:
        row = s.get(PublishedVariant, name)
        if row is None:
            return None
        if not row.yanked:
            row.yanked, row.yank_reason = True, reason
            s.commit()
        return Record.of(row)

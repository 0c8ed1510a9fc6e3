"""Publish, list, get and yank: the service's writes and reads, through the registry's store.

The rows, records, blobs and manifests are the registry's (registry/store.py, blobstore.py,
manifest.py); what this module adds is the service's rules: a published variant is
immutable (409 on different content), re-publishing is a no-op that may add signatures by
new keys, every write is audited, and the generation counter moves after each commit.

Publish writes the blob and the row as one unit: the blob is staged (fsync'ed temp file),
the row is flushed, the blob moved into place, then the row committed; if the commit
fails the blob this call created is removed again. A crash between the move and the
commit can leave an unreferenced blob (harmless: content-addressed, never served by name)
but never a row without its blob.
"""

from __future__ import annotations

import json
import logging

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cubinforge.registry import store as registry
from cubinforge.registry.blobstore import BlobStore
from cubinforge.registry.generation import Generation
from cubinforge.registry.models import Artifact, AuditEntry
from cubinforge.runtime import signing

from .errors import APIError
from .publish import MAX_SIGNATURES, dedupe_signatures

log = logging.getLogger("cubinforge.service")


def summary(rec: dict) -> dict:
    """A record as GET /v1/variants lists it (schemas.VariantSummary)."""
    return {"variant": rec["name"], "family": rec["family"], "axes": rec["axes"], "sha256": rec["cubin"]["sha256"],
            "size": rec["cubin"]["size"], "yanked": rec["yanked"], "signed_by": rec["signed_by"],
            "published_at": rec["created_at"]}


def _same_content(a: dict, b: dict) -> bool:
    return signing.signed_payload(a) == signing.signed_payload(b)


def _too_many(name: str) -> APIError:
    return APIError(422, "too_many_signatures", f"{name}: a variant keeps at most {MAX_SIGNATURES} signatures "
                    "(one per key); this publish would exceed that. Sign with a key that has already signed, "
                    "or ask the operator which signatures are needed")


class Store:
    def __init__(self, blobs: BlobStore):
        self.blobs = blobs
        home = blobs.root.parent
        self.manifests_dir = home / "manifests"
        self.generation = Generation(home)  # bumped after each commit that changes a read answer

    # ------------------------------------------------------------------ reads
    def get(self, s: Session, name: str) -> dict | None:
        row = registry.find(s, name)
        return registry.record(row) if row is not None else None

    def list(self, s: Session, filters: dict, include_yanked: bool, limit: int, offset: int
             ) -> tuple[list[dict], int]:
        return registry.page(s, filters, include_yanked, limit, offset)

    def candidates(self, s: Session) -> list[dict]:
        """Every unyanked variant (select's search space)."""
        return registry.page(s, {}, False, 2**31 - 1, 0)[0]

    def count(self, s: Session) -> int:
        return int(s.scalar(select(func.count()).select_from(Artifact)) or 0)

    # ------------------------------------------------------------------ writes
    def publish(self, s: Session, manifest: dict, cubin: bytes, signed_by: list[str],
                publisher: str | None) -> tuple[bool, dict]:
        name = manifest["variant"]
        if manifest.get("signatures"):
            manifest = {**manifest, "signatures": dedupe_signatures(manifest["signatures"])}
            if len(manifest["signatures"]) > MAX_SIGNATURES:
                raise _too_many(name)
        existing = registry.find(s, name)
        if existing is not None:
            return False, self._republish(s, existing, manifest, cubin, signed_by, publisher)
        row = registry.published_row(manifest, json.dumps(manifest, sort_keys=True), signed_by, publisher)
        audit(s, publisher, "publish", name, f"sha256 {row.cubin_sha256}, signed by {signed_by or 'nobody'}")
        sha, tmp = self.blobs.stage(cubin)
        blob = "exists"
        try:
            s.add(row)
            s.flush()
            s.add(registry.build_entry(row, manifest))
            # A good copy of the same content is reused; a corrupt one is replaced by this upload.
            blob = self.blobs.install(sha, tmp)
            if blob == "repaired":
                log.warning("blob %s was corrupt on disk; replaced by the upload of %s", sha, name)
            s.commit()
        except IntegrityError:
            # A concurrent publish of the same name won the race: judge against what it stored.
            s.rollback()
            self._undo_blob(sha, tmp, blob)
            existing = registry.find(s, name)
            if existing is None:
                raise
            return False, self._republish(s, existing, manifest, cubin, signed_by, publisher)
        except BaseException:
            s.rollback()
            self._undo_blob(sha, tmp, blob)
            raise
        return True, self._written(row)

    def _written(self, row: Artifact) -> dict:
        """After a commit: the manifest file follows the row, and readers see a new generation."""
        rec = registry.record(row)
        registry.sync_manifest(self.manifests_dir, rec)
        self.generation.bump()
        return rec

    def _undo_blob(self, sha: str, tmp, blob: str) -> None:
        tmp.unlink(missing_ok=True)
        if blob == "created":  # a repaired copy stays: it is good bytes either way
            self.blobs.remove(sha)

    def _republish(self, s: Session, row: Artifact, manifest: dict, cubin: bytes,
                   signed_by: list[str], actor: str | None) -> dict:
        stored = registry.record(row)["manifest"]
        if not _same_content(stored, manifest):
            differs = sorted(k for k in set(stored) | set(manifest)
                             if k not in signing.UNSIGNED_KEYS and stored.get(k) != manifest.get(k))
            raise APIError(409, "variant_exists",
                           f"variant {row.name} is already published with different content (differs in "
                           f"{differs}); published variants are immutable: publish under a new name, and "
                           "yank the old one if it is wrong", differs=differs)
        # Same artifact: the upload is verified, so it repairs a stored copy gone corrupt or missing.
        if self.blobs.ensure(row.cubin_sha256, cubin) != "exists":
            log.warning("blob %s of %s was corrupt or missing on disk; restored from the re-publish",
                        row.cubin_sha256, row.name)
        # Otherwise a no-op, except that signatures by new keys are added.
        have = {x["key_id"] for x in stored.get("signatures", [])}
        new = [x for x in manifest.get("signatures", []) if x["key_id"] not in have]
        if len(have) + len(new) > MAX_SIGNATURES:
            raise _too_many(row.name)
        if not new:
            return registry.record(row)
        stored["signatures"] = stored.get("signatures", []) + new
        row.manifest_json = json.dumps(stored, sort_keys=True)
        row.signed_by = ",".join([k for k in (row.signed_by or "").split(",") if k] +
                                 [x["key_id"] for x in new if x["key_id"] in signed_by])
        audit(s, actor, "sign", row.name, f"added signatures by {[x['key_id'] for x in new]}")
        s.commit()
        return self._written(row)

    def yank(self, s: Session, name: str, reason: str | None, actor: str | None = None) -> dict | None:
        return self._set_yanked(s, name, True, reason, actor)

    def unyank(self, s: Session, name: str, actor: str | None = None) -> dict | None:
        return self._set_yanked(s, name, False, None, actor)

    def _set_yanked(self, s: Session, name: str, yanked: bool, reason: str | None, actor: str | None):
        row = registry.find(s, name)
        if row is None:
            return None
        if row.yanked == yanked:
            return registry.record(row)
        row.yanked, row.yank_reason = yanked, reason
        audit(s, actor, "yank" if yanked else "unyank", name, reason)
        s.commit()
        return self._written(row)


def audit(s: Session, actor: str | None, action: str, variant: str, detail: str | None = None) -> None:
    """Record a write in the same transaction as the write itself."""
    s.add(AuditEntry(actor=actor or "?", action=action, variant=variant, detail=detail))


def audit_log(s: Session, limit: int = 100, variant: str | None = None) -> list[AuditEntry]:
    q = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
    if variant:
        q = q.where(AuditEntry.variant == variant)
    return list(s.scalars(q))


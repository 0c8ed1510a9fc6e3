"""`cubinforge db check` / `db repair`: every published variant's blob, hashed against its name.

check: reports each blob that is missing or does not hash to its name (and marks it, so
/healthz and /metrics show it). repair: restores each from a good copy found under the
folders given (registry homes or bundles: the same blobs/sha256 layout), verified before
it is installed; what has no good copy is left reported, to be fixed by re-publishing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from cubinforge.registry.blobstore import BlobStore
from cubinforge.registry.db import Database
from cubinforge.registry.models import Artifact

from .config import Settings


@dataclass
class Problem:
    sha256: str
    state: str                 # "missing" | "corrupt"
    variants: list[str]
    fixed_from: str | None = None


def _blobs_in_use(db: Database) -> dict[str, list[str]]:
    with db.sessions() as s:
        rows = s.execute(select(Artifact.cubin_sha256, Artifact.name)).all()
    used: dict[str, list[str]] = {}
    for sha, name in rows:
        used.setdefault(sha, []).append(name)
    return used


def check(settings: Settings) -> list[Problem]:
    blobs, db = BlobStore(settings.home / "blobs"), Database(settings.database_url)
    try:
        used = _blobs_in_use(db)
    finally:
        db.dispose()
    problems = []
    for sha, names in sorted(used.items()):
        state = blobs.check(sha)
        if state != "ok":
            if state == "missing":
                blobs.mark_corrupt(sha)  # missing is reported the same way: the variant cannot be served
            problems.append(Problem(sha, state, sorted(names)))
    # Markers of blobs no variant uses any more, or that were fixed meanwhile, are stale.
    for sha in blobs.corrupt():
        if sha not in used or sha not in {p.sha256 for p in problems}:
            blobs.clear_corrupt(sha)
    return problems


def repair(settings: Settings, sources: list[Path]) -> list[Problem]:
    """Fix what check() finds from good copies under `sources`; returns every problem, each with
    `fixed_from` set where it was fixed."""
    blobs = BlobStore(settings.home / "blobs")
    problems = check(settings)
    for p in problems:
        for src in sources:
            cand = Path(src) / "blobs" / "sha256" / p.sha256[:2] / p.sha256
            try:
                data = cand.read_bytes()
            except OSError:
                continue
            if hashlib.sha256(data).hexdigest() == p.sha256:
                blobs.ensure(p.sha256, data)
                p.fixed_from = str(cand)
                break
    return problems

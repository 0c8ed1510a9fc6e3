"""The content-addressed blob store the service writes: <home>/blobs/sha256/<first2>/<sha256>.

The same layout as the local registry's, so `cubinforge serve` on a registry home serves
its cubins. Writes go to a temporary file in the target folder, are fsync'ed, then moved
into place, so a reader never sees a partial blob.

A blob's name is its sha256, so its integrity is checkable at any time: the service checks
a file the first time it reads it (before caching or serving it), and publish checks the
copy it would reuse, replacing a corrupt or missing one with the verified upload. A corrupt
blob found by either is marked under <home>/blobs/corrupt/<sha256> (what /healthz and
/metrics report, whichever worker found it) until it is repaired.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

TEMP_PREFIX = ".incoming-"
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class BlobStore:
    def __init__(self, home: Path):
        self.home = Path(home)
        self.root = Path(home) / "blobs" / "sha256"
        self.corrupt_dir = self.root.parent / "corrupt"
        self.spool_dir = Path(home) / "spool"
        # Files this worker has hashed and found good: (inode, mtime, size) per sha256.
        self._verified: dict[str, tuple[int, int, int]] = {}

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    # ------------------------------------------------------------------ integrity
    def check(self, sha256: str) -> str:
        """"ok", "missing" or "corrupt" (hashes to something else); marks/unmarks the result."""
        path = self.path(sha256)
        try:
            st = path.stat()
        except FileNotFoundError:
            return "missing"
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._verified.get(sha256) == stamp:
            return "ok"
        if file_sha256(path) != sha256:
            self._verified.pop(sha256, None)
            self.mark_corrupt(sha256)
            return "corrupt"
        self._verified[sha256] = stamp
        self.clear_corrupt(sha256)
        return "ok"

    def read_verified(self, sha256: str) -> bytes | None:
        """The blob's bytes if they hash to its name; None if missing; raises CorruptBlob."""
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != sha256:
            self.mark_corrupt(sha256)
            raise CorruptBlob(sha256)
        self.clear_corrupt(sha256)
        return data

    def mark_corrupt(self, sha256: str) -> None:
        from .metrics import BLOBS_CORRUPT_FOUND
        BLOBS_CORRUPT_FOUND.inc()
        self.corrupt_dir.mkdir(parents=True, exist_ok=True)
        (self.corrupt_dir / sha256).touch()

    def clear_corrupt(self, sha256: str) -> None:
        try:
            (self.corrupt_dir / sha256).unlink()
        except FileNotFoundError:
            pass

    def corrupt(self) -> list[str]:
        """sha256s found corrupt and not yet repaired (by any worker)."""
        try:
            return sorted(p.name for p in self.corrupt_dir.iterdir() if len(p.name) == 64)
        except FileNotFoundError:
            return []

    # ------------------------------------------------------------------ writes
    def stage(self, data: bytes) -> tuple[str, Path]:
        """Write `data` to a temporary file beside its final place; returns (sha256, temp path)."""
        sha = hashlib.sha256(data).hexdigest()
        d = self.path(sha).parent
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return sha, Path(tmp)

    def install(self, sha256: str, tmp: Path) -> str:
        """Move a staged (verified) blob into place: "created", "exists" (a good copy was there,
        the staged one is dropped) or "repaired" (the copy there was corrupt: replaced)."""
        state = self.check(sha256)
        if state == "ok":
            tmp.unlink(missing_ok=True)
            return "exists"
        os.replace(tmp, self.path(sha256))
        self.clear_corrupt(sha256)
        return "created" if state == "missing" else "repaired"

    def ensure(self, sha256: str, data: bytes) -> str:
        """Make sure the stored copy of `data` (already checked against sha256) is intact."""
        if self.check(sha256) == "ok":
            return "exists"
        _, tmp = self.stage(data)
        return self.install(sha256, tmp)

    def remove(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    # ------------------------------------------------------------------ temp files
    def clean_temp(self, older_than_s: float = 0.0) -> int:
        """Remove leftover `.incoming-*` files (a publish killed mid-write); returns how many."""
        cutoff, n = time.time() - older_than_s, 0
        for d in (self.root, self.spool_dir):
            if not d.is_dir():
                continue
            for p in d.rglob(TEMP_PREFIX + "*"):
                try:
                    if p.is_file() and p.stat().st_mtime <= cutoff:
                        p.unlink()
                        n += 1
                except FileNotFoundError:
                    pass
        return n


class CorruptBlob(OSError):
    def __init__(self, sha256: str):
        super().__init__(f"the stored blob {sha256} does not hash to its name (corrupt on disk)")
        self.sha256 = sha256

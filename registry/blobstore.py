"""Content-addressed blobs: `<root>/sha256/<first2>/<sha256>`, the one blob store.

The local registry and the service write through it (root = `$CUBINFORGE_HOME/blobs`); the
runtime reads this layout with the standard library alone. Writes go to an fsync'ed
temporary file beside the target, then are moved into place, so a reader never sees a
partial blob.

A blob's name is its sha256, so its integrity is checkable at any time: the service checks a
file the first time it reads it (before caching or serving it), and a write checks the copy
it would reuse, replacing a corrupt or missing one with the verified new bytes. A corrupt
blob found either way is marked under `<root>/corrupt/<sha256>` (what the service's /healthz
and /metrics report, whichever process found it) until it is repaired.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Callable

# One atomic writer for manifests, the runtime's (the bottom layer, stdlib only).
from cubinforge.runtime.cache import atomic_write  # noqa: F401  (re-exported)

TEMP_PREFIX = ".incoming-"
_CHUNK = 1 << 20
_HEX = frozenset("0123456789abcdef")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class CorruptBlob(OSError):
    def __init__(self, sha256: str):
        super().__init__(f"the stored blob {sha256} does not hash to its name (corrupt on disk)")
        self.sha256 = sha256


class BlobStore:
    def __init__(self, root: Path, on_corrupt: Callable[[str], None] | None = None):
        self.root = Path(root)  # $CUBINFORGE_HOME/blobs
        self.corrupt_dir = self.root / "corrupt"
        self.spool_dir = self.root.parent / "spool"  # upload bodies on their way in (the service's)
        self.on_corrupt = on_corrupt  # e.g. the service's metric
        # Files this process has hashed and found good: (inode, mtime, size) per sha256.
        self._verified: dict[str, tuple[int, int, int]] = {}

    def path(self, sha: str) -> Path:
        if len(sha) != 64 or not _HEX.issuperset(sha):
            raise ValueError(f"not a sha256 (64 lowercase hex digits): {sha!r}")
        return self.root / "sha256" / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return self.path(sha).is_file()

    exists = has

    def open(self, sha: str) -> BinaryIO:
        return self.path(sha).open("rb")

    # ------------------------------------------------------------ integrity
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
        if sha256_hex(data) != sha256:
            self.mark_corrupt(sha256)
            raise CorruptBlob(sha256)
        self.clear_corrupt(sha256)
        return data

    def read(self, sha: str, verify: bool = True) -> bytes:
        if not verify:
            return self.path(sha).read_bytes()
        data = self.read_verified(sha)
        if data is None:
            raise FileNotFoundError(f"no blob {sha} in {self.root}")
        return data

    def mark_corrupt(self, sha256: str) -> None:
        if self.on_corrupt is not None:
            self.on_corrupt(sha256)
        self.corrupt_dir.mkdir(parents=True, exist_ok=True)
        (self.corrupt_dir / sha256).touch()

    def clear_corrupt(self, sha256: str) -> None:
        try:
            (self.corrupt_dir / sha256).unlink()
        except FileNotFoundError:
            pass

    def corrupt(self) -> list[str]:
        """sha256s found corrupt and not yet repaired (by any process)."""
        try:
            return sorted(p.name for p in self.corrupt_dir.iterdir() if len(p.name) == 64)
        except FileNotFoundError:
            return []

    # ------------------------------------------------------------ writes
    def put(self, data: bytes) -> str:
        """Store `data` (a good copy already there is kept, a corrupt one replaced); its sha256."""
        sha = sha256_hex(data)
        self.ensure(sha, data)
        return sha

    def stage(self, data: bytes) -> tuple[str, Path]:
        """Write `data` to a temporary file beside its final place; returns (sha256, temp path)."""
        sha = sha256_hex(data)
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

    # ------------------------------------------------------------ temp files
    def clean_temp(self, older_than_s: float = 0.0) -> int:
        """Remove leftover `.incoming-*` files (a write killed mid-way); returns how many."""
        cutoff, n = time.time() - older_than_s, 0
        for d in (self.root / "sha256", self.spool_dir):
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

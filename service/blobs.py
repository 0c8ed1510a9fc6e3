"""The content-addressed blob store the service writes: <home>/blobs/sha256/<first2>/<sha256>.

The same layout as the local registry's, so `cubinforge serve` on a registry home serves
its cubins. Writes go to a temporary file in the target folder, are fsync'ed, then moved
into place, so a reader never sees a partial blob.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


class BlobStore:
    def __init__(self, home: Path):
        self.root = Path(home) / "blobs" / "sha256"

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def stage(self, data: bytes) -> tuple[str, Path]:
        """Write `data` to a temporary file beside its final place; returns (sha256, temp path)."""
        sha = hashlib.sha256(data).hexdigest()
        d = self.path(sha).parent
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".incoming-", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            os.unlink(tmp)
            raise
        return sha, Path(tmp)

    def install(self, sha256: str, tmp: Path) -> bool:
        """Move a staged blob into place; True if this call created it (False: it existed)."""
        final = self.path(sha256)
        if final.exists():
            tmp.unlink(missing_ok=True)
            return False
        os.replace(tmp, final)
        return True

    def remove(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

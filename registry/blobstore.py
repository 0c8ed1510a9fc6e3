"""Content-addressed blobs: `<root>/sha256/<first2>/<sha256>`, written atomically.

The runtime reads this layout with the standard library alone.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import BinaryIO

# One atomic writer for blobs and manifests, the runtime's (the bottom layer, stdlib only).
from cubinforge.runtime.cache import atomic_write  # noqa: F401  (re-exported)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    def __init__(self, root: Path):
        self.root = Path(root)  # $CUBINFORGE_HOME/blobs

    def path(self, sha: str) -> Path:
        sha = sha.lower()
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise ValueError(f"not a sha256: {sha!r}")
        return self.root / "sha256" / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return self.path(sha).is_file()

    def put(self, data: bytes) -> str:
        sha = sha256_hex(data)
        path = self.path(sha)
        if not path.is_file() or path.stat().st_size != len(data):
            atomic_write(path, data)
        return sha

    def open(self, sha: str) -> BinaryIO:
        return self.path(sha).open("rb")

    def read(self, sha: str, verify: bool = True) -> bytes:
        data = self.path(sha).read_bytes()
        if verify and sha256_hex(data) != sha.lower():
            raise IOError(f"blob {sha} is corrupt (its content hashes differently)")
        return data

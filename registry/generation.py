"""The registry's generation counter, `<home>/generation`: a new value after every write that
changes what a read returns (a build stored, a publish, a new signature, a yank or unyank).

Readers that cache answers (the service's workers, on any host sharing the home folder) key
them on it: one small file read tells whether anything changed.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path


class Generation:
    def __init__(self, home: Path):
        self.path = Path(home) / "generation"

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read(64)
        except FileNotFoundError:
            return b"0"

    def bump(self) -> None:
        """A new, unique value, written atomically (readers see the old value or the new one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".generation-", dir=self.path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_hex(16).encode())
        os.replace(tmp, self.path)

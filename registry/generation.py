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
        # Raw os calls, not open(): every cached read answer pays for this, and a Python file
        # object costs ~2.5x the three syscalls. Still opened afresh each time, so a bump by
        # rename (and NFS's close-to-open consistency) is seen on the very next read.
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return b"0"
        try:
            return os.read(fd, 64)
        finally:
            os.close(fd)

    def bump(self) -> None:
        """A new, unique value, written atomically (readers see the old value or the new one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".generation-", dir=self.path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_hex(16).encode())
        os.replace(tmp, self.path)

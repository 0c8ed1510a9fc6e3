"""The runtime's download cache: cubins and variant metadata fetched from a registry server.

Layout under ``$CUBINFORGE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/cubinforge``, else
``~/.cache/cubinforge``)::

    blobs/sha256/<first 2 hex>/<sha256>          cubins, named by content
    servers/<host-port-hash>/variants/<name>.json  {"etag": ..., "body": <GET /v1/variants/name>}
    servers/<host-port-hash>/index.json            the last variant list, for offline use

Several processes often start at once (one per rank) and fill the same cache: every write
goes to a temporary file that is renamed into place (readers never see half a file), and
each entry is filled under an exclusive ``flock`` so only one process downloads it while
the others wait and then read it. A blob is re-hashed on every read; a corrupt one is
deleted and reported as missing, so the caller fetches it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock, atomic renames still hold
    fcntl = None

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}$")


def default_cache_dir() -> Path:
    d = os.environ.get("CUBINFORGE_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cubinforge"


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class Cache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else default_cache_dir()

    # ------------------------------------------------------------ locking
    @contextlib.contextmanager
    def lock(self, path: Path):
        """Exclusive lock on ``path`` (via ``<path>.lock``) across processes and threads."""
        lockfile = path.with_name(path.name + ".lock")
        lockfile.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    # ------------------------------------------------------------ blobs
    def blob_path(self, sha256: str) -> Path:
        if not _SHA_RE.match(sha256):
            raise ValueError(f"{sha256!r} is not a sha256 hex digest")
        return self.root / "blobs" / "sha256" / sha256[:2] / sha256

    def read_blob(self, sha256: str) -> bytes | None:
        """The cached blob if present and intact; a corrupt entry is removed (returns None)."""
        path = self.blob_path(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != sha256:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return None
        return data

    def write_blob(self, sha256: str, data: bytes) -> None:
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"refusing to cache data under {sha256}: it hashes differently")
        atomic_write(self.blob_path(sha256), data)

    # ------------------------------------------------------------ metadata
    def server_dir(self, base_url: str) -> Path:
        clean = re.sub(r"[^A-Za-z0-9.-]+", "_", base_url.split("://", 1)[-1]).strip("_")[:60]
        return self.root / "servers" / f"{clean}-{hashlib.sha256(base_url.encode()).hexdigest()[:8]}"

    def meta_path(self, base_url: str, name: str) -> Path:
        if not _NAME_RE.match(name):
            raise ValueError(f"{name!r} is not a variant name")
        return self.server_dir(base_url) / "variants" / f"{name}.json"

    def index_path(self, base_url: str) -> Path:
        return self.server_dir(base_url) / "index.json"

    @staticmethod
    def read_json(path: Path) -> dict | None:
        """A cached JSON document, or None if absent or unreadable (then it is fetched again)."""
        try:
            doc = json.loads(path.read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return doc if isinstance(doc, dict) and "body" in doc else None

    @staticmethod
    def write_json(path: Path, etag: str | None, body) -> None:
        atomic_write(path, json.dumps({"etag": etag, "body": body}, sort_keys=True).encode())

"""A ``Source`` backed by a cubinforge registry server (stdlib HTTP only), through the cache.

    src = RemoteSource("http://registry:8000")      # or $CUBINFORGE_REGISTRY_URL
    m = src.get("fa3-fwd-sm_90a-bf16-hd128-causal")  # manifest dict, signature verified
    cubin = src.blob(m["cubin"]["sha256"])           # bytes, sha256 verified, cached

Trust: when trusted keys are configured ($CUBINFORGE_TRUSTED_KEYS, or .pub files in
~/.config/cubinforge/trusted_keys), or CUBINFORGE_REQUIRE_SIGNATURE=1, every manifest must
carry a signature by one of them; the signature covers the cubin's sha256 and size, and
every blob is checked against that sha256 before it is returned, so nothing unverified
reaches cuModuleLoadData. With no trusted keys, only sha256 is checked (and a warning says so).

Network: retries with exponential backoff and jitter on connection errors, 429 and 5xx;
metadata is revalidated with ETag (304 reuses the cache); blobs are immutable and never
revalidated. CUBINFORGE_OFFLINE=1 never touches the network and uses only the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any

from . import signing
from .cache import Cache, atomic_write
from .errors import CubinforgeError, IntegrityError, VariantNotFound

USER_AGENT = "cubinforge-runtime/1"


class RemoteError(CubinforgeError, OSError):
    """The registry server could not be reached, or answered with an error."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def redact_url(url: str) -> str:
    """`url` with any password (or user:password) in it replaced by ***, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None and "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username
    netloc = f"{user}:***@{host}" if user and parts.password is not None else f"***@{host}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


class RemoteSource:
    def __init__(self, url: str | None = None, *, cache: Cache | None = None,
                 trusted_keys: dict[str, signing.PublicKey] | None = None,
                 require_signature: bool | None = None, offline: bool | None = None,
                 retries: int = 4, backoff: float = 0.25, timeout: float = 30.0):
        url = url or os.environ.get("CUBINFORGE_REGISTRY_URL")
        if not url:
            raise RemoteError("no registry URL: pass one or set CUBINFORGE_REGISTRY_URL")
        self.url = url.rstrip("/")
        self.shown = redact_url(self.url)  # what messages and the cache's folder name use
        self.cache = cache or Cache()
        self.trusted = signing.load_trusted_keys() if trusted_keys is None else trusted_keys
        self.require_signature = (bool(self.trusted) or _env_flag("CUBINFORGE_REQUIRE_SIGNATURE")
                                  if require_signature is None else require_signature)
        self.offline = _env_flag("CUBINFORGE_OFFLINE") if offline is None else offline
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self._warned = False

    def __repr__(self) -> str:
        return f"RemoteSource({self.shown!r}{', offline' if self.offline else ''})"

    # ------------------------------------------------------------ HTTP
    def _request(self, path: str, headers: dict | None = None, method: str = "GET"
                 ) -> tuple[int, dict, bytes]:
        """(status, headers, body) for 2xx and 304; retries transient failures; raises RemoteError."""
        if self.offline:
            raise RemoteError(f"CUBINFORGE_OFFLINE=1: not fetching {path} from {self.shown}")
        req_headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
            req = urllib.request.Request(self.url + path, headers=req_headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
            except urllib.error.HTTPError as e:
                if e.code == 304:
                    return 304, {k.lower(): v for k, v in e.headers.items()}, b""
                body = e.read()
                try:
                    msg = json.loads(body).get("message") or body.decode(errors="replace")
                except (ValueError, AttributeError):
                    msg = body.decode(errors="replace")[:300]
                last = f"HTTP {e.code} from {self.shown}{path}: {msg}"
                if e.code == 429 or e.code >= 500:
                    retry_after = e.headers.get("Retry-After")
                    if retry_after and retry_after.isdigit():
                        time.sleep(min(float(retry_after), 30.0))
                    continue
                if e.code == 404:
                    raise VariantNotFound(last) from None
                raise RemoteError(last, e.code) from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as e:
                last = f"cannot reach {self.shown}{path}: {getattr(e, 'reason', e)}"
        raise RemoteError(f"{last} (after {self.retries + 1} attempts)")

    # ------------------------------------------------------------ Source protocol
    def list(self) -> list[str]:
        """Names of the server's published, unyanked variants (the cached list when offline).

        With trusted keys required, only variants the server reports as signed by one of them
        are listed (get() still verifies each signature itself), so one unsigned upload does
        not make every selection fail.
        """
        index = self.cache.index_path(self.shown)
        if self.offline:
            doc = self._read_cached(index)
            items = doc["body"] if doc else [{"variant": n, "signed_by": None} for n in self._cached_names()]
        else:
            items, offset = [], 0
            while offset is not None:
                _, _, body = self._request(f"/v1/variants?limit=1000&offset={offset}")
                page = json.loads(body)
                items += [{"variant": i["variant"], "signed_by": i.get("signed_by", [])} for i in page["items"]]
                offset = page.get("next_offset")
            with self.cache.lock(index):
                self._write_cached(index, None, items)
        if self.require_signature:
            items = [i for i in items if i["signed_by"] is None or set(i["signed_by"]) & set(self.trusted)]
        return sorted(i["variant"] for i in items)

    def _cached_names(self) -> list[str]:
        d = self.cache.server_dir(self.shown) / "variants"
        return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []

    def detail(self, name: str) -> dict:
        """GET /v1/variants/{name}, revalidated against the cache by ETag."""
        try:
            path = self.cache.meta_path(self.shown, name)
        except ValueError:
            raise VariantNotFound(f"{name!r} is not a variant name") from None
        with self.cache.lock(path):
            cached = self._read_cached(path)
            if self.offline:
                if cached is None:
                    if path.exists():
                        raise IntegrityError(f"{name}: the cached manifest {path} does not match the digest "
                                             "stored with it (edited or damaged on disk); with CUBINFORGE_OFFLINE=1 "
                                             f"it cannot be fetched again: run `cubinforge pull {name}` while online")
                    raise VariantNotFound(f"{name}: not in the cache and CUBINFORGE_OFFLINE=1; "
                                          f"run `cubinforge pull {name}` while online")
                return cached["body"]
            headers = {"If-None-Match": cached["etag"]} if cached and cached.get("etag") else {}
            status, h, body = self._request(f"/v1/variants/{urllib.parse.quote(name, safe='')}", headers)
            if status == 304 and cached is not None:
                return cached["body"]
            doc = json.loads(body)
            self._write_cached(path, h.get("etag"), doc)
            return doc

    # A cached document is stored with the sha256 of its canonical JSON. One that no longer
    # matches (edited or damaged on disk) is a cache miss: fetched again without If-None-Match,
    # rather than reused by a 304 (and failing every call) or used unverified.
    @staticmethod
    def _digest(body) -> str | None:
        try:
            return hashlib.sha256(signing.canonical_json(body)).hexdigest()
        except (TypeError, ValueError):
            return None

    def _read_cached(self, path) -> dict | None:
        doc = self.cache.read_json(path)
        if doc is None:
            return None
        if doc.get("sha256") is None or doc.get("sha256") != self._digest(doc["body"]):
            warnings.warn(f"cubinforge: cached {path} does not match its digest; fetching it again", stacklevel=4)
            return None
        return doc

    def _write_cached(self, path, etag: str | None, body) -> None:
        atomic_write(path, json.dumps({"etag": etag, "body": body, "sha256": self._digest(body)},
                                      sort_keys=True).encode())

    def get(self, name: str) -> dict:
        """The variant's manifest, its signature checked against the trusted keys."""
        doc = self.detail(name)
        if doc.get("yanked"):
            reason = f" ({doc['yank_reason']})" if doc.get("yank_reason") else ""
            raise VariantNotFound(f"{name} was yanked from {self.shown}{reason}; choose another variant")
        manifest = doc["manifest"]
        self.verify(manifest)
        return manifest

    def verify(self, manifest: dict) -> str | None:
        if self.require_signature:
            return signing.verify_manifest(manifest, self.trusted)
        if not self._warned:
            self._warned = True
            warnings.warn("cubinforge: no trusted keys configured (CUBINFORGE_TRUSTED_KEYS); cubins from "
                          f"{self.shown} are checked by sha256 only", stacklevel=3)
        return None

    def blob(self, sha256: str) -> bytes:
        """The blob's bytes, from the cache or the server; always hash-checked."""
        try:
            path = self.cache.blob_path(sha256)
        except ValueError:
            raise IntegrityError(f"{sha256!r} is not a sha256 hex digest") from None
        data = self.cache.read_blob(sha256)
        if data is not None:
            return data
        with self.cache.lock(path):
            data = self.cache.read_blob(sha256)  # another process may have fetched it meanwhile
            if data is not None:
                return data
            if self.offline:
                raise IntegrityError(f"cubin {sha256} is not in the cache {self.cache.root} and "
                                     "CUBINFORGE_OFFLINE=1; run `cubinforge pull` while online")
            for attempt in range(2):  # a corrupted transfer is fetched once more
                _, _, data = self._request(f"/v1/blobs/{sha256}", {"Accept": "application/octet-stream"})
                if hashlib.sha256(data).hexdigest() == sha256:
                    self.cache.write_blob(sha256, data)
                    return data
            raise IntegrityError(f"cubin {sha256} from {self.shown} hashes to "
                                 f"{hashlib.sha256(data).hexdigest()}: the server's copy is corrupt")

    # ------------------------------------------------------------ helpers
    def fetch(self, name: str) -> tuple[dict, bytes]:
        """Manifest and verified cubin of one variant (what `cubinforge pull` does per name)."""
        manifest = self.get(name)
        data = self.blob(manifest["cubin"]["sha256"])
        if len(data) != manifest["cubin"].get("size", len(data)):
            raise IntegrityError(f"{name}: cubin is {len(data)} bytes, the manifest says {manifest['cubin']['size']}")
        return manifest, data

    def select(self, problem: dict[str, Any]) -> dict:
        """POST /v1/select: the server's choice for a problem (name, reasons)."""
        body = json.dumps(problem).encode()
        req = urllib.request.Request(self.url + "/v1/select", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": USER_AGENT})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            doc = json.loads(e.read() or b"{}")
            if e.code == 404:
                raise VariantNotFound(doc.get("message", "no variant fits")) from None
            raise RemoteError(f"select failed: HTTP {e.code}: {doc.get('message')}", e.code) from None


def source_from_env():
    """A RemoteSource if CUBINFORGE_REGISTRY_URL is set, else None (callers fall back to local)."""
    return RemoteSource() if os.environ.get("CUBINFORGE_REGISTRY_URL") else None

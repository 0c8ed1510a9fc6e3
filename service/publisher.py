"""The publisher's side: keys, signing, push over HTTP, bundles. Uses `cryptography` to sign
(the runtime only verifies, in pure Python)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from cubinforge.runtime import signing
from cubinforge.runtime.cache import atomic_write
from cubinforge.runtime.remote import redact_url

BUNDLE_VERSION = 1


# ------------------------------------------------------------------ keys and signatures
def keygen(out: Path) -> tuple[Path, Path, str]:
    """Write <out>.key (PKCS#8 PEM, mode 0600) and <out>.pub; returns (key, pub, key_id)."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key_path, pub_path = out.with_suffix(".key"), out.with_suffix(".pub")
    for p in (key_path, pub_path):
        if p.exists():
            raise ValueError(f"{p} exists; refusing to overwrite a key")
    out.parent.mkdir(parents=True, exist_ok=True)
    priv = Ed25519PrivateKey.generate()
    pem = priv.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub = signing.PublicKey(priv.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw))
    pub_path.write_text(pub.to_text())
    return key_path, pub_path, pub.key_id


class Signer:
    def __init__(self, key_file: Path):
        from cryptography.hazmat.primitives import serialization as ser
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = ser.load_pem_private_key(Path(key_file).read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{key_file} is not an ed25519 private key (make one with `cubinforge keygen`)")
        self._key = key
        self.public = signing.PublicKey(key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw))

    def sign(self, manifest: dict) -> dict:
        """A copy of `manifest` carrying this key's signature (replacing an older one by the same key)."""
        sig = self._key.sign(signing.signed_payload(manifest))
        others = [s for s in manifest.get("signatures", []) if s.get("key_id") != self.public.key_id]
        entry = {"alg": "ed25519", "key_id": self.public.key_id, "sig": base64.b64encode(sig).decode(),
                 "public_key": self.public.to_text().strip()}
        return {**manifest, "signatures": others + [entry]}


# ------------------------------------------------------------------ HTTP publish
class PublishError(RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status; None when the server was not reached


def publish(server: str, token: str, manifest: dict, cubin: bytes, timeout: float = 60) -> dict:
    body = json.dumps({"manifest": manifest, "cubin_b64": base64.b64encode(cubin).decode()}).encode()
    req = urllib.request.Request(server.rstrip("/") + "/v1/artifacts", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read()).get("message")
        except ValueError:
            msg = e.reason
        raise PublishError(f"{manifest.get('variant')}: HTTP {e.code}: {msg}", e.code) from None
    except urllib.error.URLError as e:
        raise PublishError(f"cannot reach {redact_url(server)}: {e.reason}") from None


# ------------------------------------------------------------------ a registry home on disk
def read_local(home: Path, name: str) -> tuple[dict, bytes]:
    """Manifest and cubin from a registry home (or a bundle: the same layout)."""
    mpath = home / "manifests" / f"{name}.json"
    if not mpath.is_file():
        raise ValueError(f"no manifest for {name!r} under {home}/manifests")
    manifest = json.loads(mpath.read_text())
    sha = manifest["cubin"]["sha256"]
    data = (home / "blobs" / "sha256" / sha[:2] / sha).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha:
        raise ValueError(f"{name}: blob {sha} under {home} is corrupt")
    return manifest, data


def local_names(home: Path) -> list[str]:
    d = home / "manifests"
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


# ------------------------------------------------------------------ bundles
def write_bundle(out: Path, items: list[tuple[dict, bytes]], keys: list[signing.PublicKey] = ()) -> Path:
    """A self-contained folder with the registry-home layout (so the runtime can read it with
    CUBINFORGE_HOME=<bundle>): manifests/ (metadata, contract, signatures), blobs/, keys/,
    contracts/ (the contracts alone, for people and C++ tools), bundle.json and SHA256SUMS."""
    out.mkdir(parents=True, exist_ok=True)
    sums, entries = [], []
    for manifest, data in items:
        name, sha = manifest["variant"], manifest["cubin"]["sha256"]
        blob_rel = f"blobs/sha256/{sha[:2]}/{sha}"
        atomic_write(out / blob_rel, data)
        mtext = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        atomic_write(out / "manifests" / f"{name}.json", mtext)
        atomic_write(out / "contracts" / f"{name}.json",
                     (json.dumps(manifest["contract"], indent=2, sort_keys=True) + "\n").encode())
        sums += [f"{sha}  {blob_rel}", f"{hashlib.sha256(mtext).hexdigest()}  manifests/{name}.json"]
        entries.append({"variant": name, "sha256": sha, "size": len(data),
                        "signed_by": [s.get("key_id") for s in manifest.get("signatures", [])]})
    for k in keys:
        atomic_write(out / "keys" / f"{k.key_id}.pub", k.to_text().encode())
    atomic_write(out / "bundle.json", json.dumps({
        "bundle_version": BUNDLE_VERSION, "created": datetime.now(timezone.utc).isoformat(),
        "variants": entries}, indent=2).encode())
    atomic_write(out / "SHA256SUMS", ("\n".join(sums) + "\n").encode())
    return out


def read_bundle(path: Path) -> list[tuple[dict, bytes]]:
    meta = json.loads((path / "bundle.json").read_text())
    if meta.get("bundle_version") != BUNDLE_VERSION:
        raise ValueError(f"{path}: bundle_version {meta.get('bundle_version')} is not {BUNDLE_VERSION}")
    return [read_local(path, e["variant"]) for e in meta["variants"]]

"""The checks publish makes before anything is written, each failing with an actionable 4xx."""

from __future__ import annotations

import base64
import binascii
import hashlib

from cubinforge.runtime import signing

from .elfcheck import CubinError, inspect_cubin
from .errors import APIError
from .schemas import PUBLISHABLE_ARCHES


def bad(error: str, message: str, **detail) -> APIError:
    return APIError(422, error, message, **detail)


def decode_cubin(b64: str, max_bytes: int) -> bytes:
    if len(b64) > max_bytes * 4 // 3 + 8:
        raise APIError(413, "too_large", f"cubin exceeds the server's limit of {max_bytes} bytes")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise bad("bad_cubin_encoding", "cubin_b64 is not valid base64 (standard alphabet, with padding)") from None
    if len(data) > max_bytes:
        raise APIError(413, "too_large", f"cubin is {len(data)} bytes; the server's limit is {max_bytes}")
    return data


def entry_of(manifest: dict) -> str | None:
    return (manifest.get("contract") or {}).get("entry") or (manifest.get("metadata") or {}).get("entry")


def check_artifact(manifest: dict, cubin: bytes) -> None:
    name = manifest["variant"]
    arch = manifest["axes"]["arch"]
    if arch not in PUBLISHABLE_ARCHES:
        raise bad("unknown_arch", f"{name}: arch {arch!r} is not one the launch contract supports; "
                  f"use one of {list(PUBLISHABLE_ARCHES)}")
    want = manifest["cubin"]
    sha = hashlib.sha256(cubin).hexdigest()
    if sha != want["sha256"]:
        raise bad("sha256_mismatch", f"{name}: the uploaded cubin hashes to {sha}, but the manifest says "
                  f"{want['sha256']}; rebuild the manifest from this cubin", actual_sha256=sha)
    if len(cubin) != want["size"]:
        raise bad("size_mismatch", f"{name}: the cubin is {len(cubin)} bytes, the manifest says {want['size']}")
    try:
        info = inspect_cubin(cubin)
    except CubinError as e:
        raise bad("bad_cubin", f"{name}: {e}") from None
    if info.arch != arch:
        raise bad("arch_mismatch", f"{name}: the cubin is compiled for {info.arch} but the manifest says {arch}")
    contract = manifest["contract"]
    for key, value in (("arch", arch), ("variant", name)):
        if contract.get(key, value) != value:
            raise bad("contract_mismatch", f"{name}: contract.{key} is {contract[key]!r} but the manifest "
                      f"says {value!r}")
    entry = entry_of(manifest)
    if not entry or not isinstance(entry, str):
        raise bad("missing_entry", f"{name}: neither contract.entry nor metadata.entry names the kernel symbol")
    if not info.has_entry(entry):
        found = sorted(info.functions)[:10]
        raise bad("entry_mismatch", f"{name}: the cubin has no kernel symbol {entry!r}; it defines {found}")


MAX_SIGNATURES = 8  # per variant, in total: one per publishing key is plenty


def dedupe_signatures(sigs: list[dict]) -> list[dict]:
    """One signature per key id (the first); ed25519 is deterministic, so repeats add nothing."""
    seen, out = set(), []
    for s in sigs:
        if s["key_id"] not in seen:
            seen.add(s["key_id"])
            out.append(s)
    return out


def check_signatures(manifest: dict, require: bool, accepted: dict[str, signing.PublicKey] | None) -> list[str]:
    """Verify every signature; return the key ids that signed. A signature the server cannot
    verify (no key it knows: not in `accepted`, and no public key whose id is the key_id) is
    refused, never stored: a stored one would be listed in signed_by as if it were genuine."""
    name = manifest["variant"]
    sigs = manifest.get("signatures") or []
    if require and not sigs:
        raise bad("unsigned", f"{name}: this server accepts only signed artifacts; "
                  "publish with `cubinforge push --sign-key KEY`")
    payload = signing.signed_payload(manifest)
    ids = []
    for s in dedupe_signatures(sigs):
        kid = s["key_id"]
        key = accepted.get(kid) if accepted is not None else None
        if accepted is not None and key is None:
            raise APIError(403, "untrusted_key", f"{name}: signed by key {kid}, which this server does not "
                           "accept; ask the operator to add it to CUBINFORGE_PUBLISHER_KEYS")
        if key is None:
            if not s.get("public_key"):
                raise bad("unverifiable_signature", f"{name}: the signature by key {kid} carries no public_key "
                          "and this server has no key with that id, so it cannot be verified; sign with "
                          "`cubinforge push --sign-key KEY` (which embeds the public key)")
            try:
                key = signing.parse_public_key(s["public_key"])
            except signing.SignatureError as e:
                raise bad("bad_signature", f"{name}: {e}") from None
            if key.key_id != kid:
                raise bad("bad_signature", f"{name}: key_id {kid} is not the id of the public key given "
                          f"({key.key_id})")
        try:
            raw = base64.b64decode(s["sig"], validate=True)
        except (binascii.Error, ValueError):
            raise bad("bad_signature", f"{name}: signature by {kid} is not valid base64") from None
        if len(raw) != 64:
            raise bad("bad_signature", f"{name}: signature by {kid} is {len(raw)} bytes, not 64")
        if not signing.ed25519_verify(key.raw, payload, raw):
            raise bad("bad_signature", f"{name}: the signature by key {kid} does not verify over this "
                      "manifest; it was signed over different content (re-sign after any change)")
        ids.append(kid)
    return ids

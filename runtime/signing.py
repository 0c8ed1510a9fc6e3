"""Manifest signatures: what is signed, and ed25519 verification in pure Python.

The runtime must stay stdlib-only, so verification follows the RFC 8032 reference
arithmetic (section 5.1.7) rather than a C library. Verification handles only public
data, so the timing side channels of Python integers do not matter here; signing (which
handles a secret) lives on the publisher side and uses `cryptography`.

A signature covers the manifest's canonical JSON, less `signatures` and `provenance`
(provenance is informational and may be amended by a server). That includes the cubin's
sha256 and size, the axes, the launch contract and the metadata: a tampered contract could
make a launcher write out of bounds, so it is covered as much as the cubin is.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import IntegrityError

SIGNATURE_DOMAIN = b"cubinforge-manifest-v1\n"
UNSIGNED_KEYS = ("signatures", "provenance")
PUBLIC_KEY_PREFIX = "cubinforge-ed25519"


class SignatureError(IntegrityError):
    """A signature is missing, malformed, from an untrusted key, or does not verify."""


# --------------------------------------------------------------------------- payload

def canonical_json(obj) -> bytes:
    """One byte string per JSON value: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def signed_payload(manifest: dict) -> bytes:
    """The exact bytes a publisher signs for `manifest`."""
    body = {k: v for k, v in manifest.items() if k not in UNSIGNED_KEYS}
    return SIGNATURE_DOMAIN + canonical_json(body)


def key_id(public_key: bytes) -> str:
    """A short, stable name for a public key: the first 16 hex digits of its sha256."""
    return hashlib.sha256(public_key).hexdigest()[:16]


# --------------------------------------------------------------------------- ed25519 (RFC 8032)

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(p, q):
    # Extended homogeneous coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z.
    a = (p[1] - p[0]) * (q[1] - q[0]) % _P
    b = (p[1] + p[0]) * (q[1] + q[0]) % _P
    c = 2 * p[3] * q[3] * _D % _P
    d = 2 * p[2] * q[2] % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s: int, p):
    q = (0, 1, 1, 0)  # the neutral element
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _equal(p, q) -> bool:
    return (p[0] * q[2] - q[0] * p[2]) % _P == 0 and (p[1] * q[2] - q[1] * p[2]) % _P == 0


def _recover_x(y: int, sign: int):
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P)
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P != 0:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P != 0:
        return None
    if (x & 1) != sign:
        x = _P - x
    return x


def _decompress(s: bytes):
    if len(s) != 32:
        return None
    y = int.from_bytes(s, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % _P)


_G = (lambda y: (_recover_x(y, 0), y, 1, _recover_x(y, 0) * y % _P))(4 * pow(5, _P - 2, _P) % _P)


def ed25519_verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """RFC 8032 Ed25519 verification (cofactorless, as the reference code does)."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decompress(public_key)
    if a is None:
        return False
    r = _decompress(signature[:32])
    if r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % _L
    return _equal(_mul(s, _G), _add(r, _mul(h, a)))


# --------------------------------------------------------------------------- keys

@dataclass(frozen=True)
class PublicKey:
    raw: bytes

    @property
    def key_id(self) -> str:
        return key_id(self.raw)

    def to_text(self) -> str:
        return f"{PUBLIC_KEY_PREFIX} {base64.b64encode(self.raw).decode()}\n"


def parse_public_key(text: str) -> PublicKey:
    """Read `cubinforge-ed25519 <base64 of the 32 raw bytes>` (what `cubinforge keygen` writes)."""
    parts = text.split()
    if len(parts) < 2 or parts[0] != PUBLIC_KEY_PREFIX:
        raise SignatureError(f"not a cubinforge public key (expected '{PUBLIC_KEY_PREFIX} <base64>')")
    try:
        raw = base64.b64decode(parts[1], validate=True)
    except ValueError as e:
        raise SignatureError(f"public key is not valid base64: {e}") from None
    if len(raw) != 32 or _decompress(raw) is None:
        raise SignatureError("public key is not a valid ed25519 point (32 bytes)")
    return PublicKey(raw)


def default_trusted_keys_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "cubinforge" / "trusted_keys"


def load_trusted_keys(spec: str | None = None) -> dict[str, PublicKey]:
    """Trusted publisher keys, by key id.

    `spec` (default: $CUBINFORGE_TRUSTED_KEYS, else ~/.config/cubinforge/trusted_keys) is an
    os.pathsep-separated list of `.pub` files or folders holding them.
    """
    if spec is None:
        spec = os.environ.get("CUBINFORGE_TRUSTED_KEYS") or str(default_trusted_keys_dir())
    keys: dict[str, PublicKey] = {}
    for item in filter(None, spec.split(os.pathsep)):
        p = Path(item).expanduser()
        files = sorted(p.glob("*.pub")) if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            k = parse_public_key(f.read_text())
            keys[k.key_id] = k
    return keys


def verify_manifest(manifest: dict, trusted: dict[str, PublicKey]) -> str:
    """Check that some signature on `manifest` is by a trusted key; return that key id.

    Raises SignatureError saying what is wrong (no signatures, only unknown keys, bad bytes).
    """
    sigs = manifest.get("signatures") or []
    name = manifest.get("variant", "?")
    if not sigs:
        raise SignatureError(f"{name}: the manifest is not signed, and trusted keys are configured")
    payload = signed_payload(manifest)
    seen = []
    for sig in sigs:
        if not isinstance(sig, dict) or sig.get("alg", "ed25519") != "ed25519":
            continue
        kid = sig.get("key_id")
        seen.append(str(kid))
        key = trusted.get(kid)
        if key is None:
            continue
        try:
            raw = base64.b64decode(sig.get("sig", ""), validate=True)
        except ValueError:
            raise SignatureError(f"{name}: signature by key {kid} is not valid base64") from None
        if ed25519_verify(key.raw, payload, raw):
            return kid
        raise SignatureError(f"{name}: signature by trusted key {kid} does not verify: "
                             "the manifest or cubin was altered after signing")
    raise SignatureError(f"{name}: signed only by untrusted keys {seen}; trusted: {sorted(trusted)}. "
                         "Add the publisher's .pub to CUBINFORGE_TRUSTED_KEYS")

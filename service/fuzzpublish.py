"""Mutation fuzzing of publish that gets past the sha256 check.

Random fuzzers of POST /v1/artifacts stop at the first check: a mutated manifest no longer
matches its cubin's digest. Here every case starts from a valid artifact (sometimes signed),
mutates the manifest (values of every type and size at existing and new keys, deletions,
names, signatures) and/or the cubin's bytes, then writes the *correct* sha256 and size of
the cubin into the manifest, so each case reaches the ELF checks, the contract checks,
signature verification and the database. Every answer must be < 500, and JSON.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random

from .testing import make_cubin, make_manifest

_SECTIONS = ("axes", "contract", "metadata", "provenance", None)


def _values(rng: random.Random):
    deep = 1
    for _ in range(rng.choice((5, 31, 40, 300))):
        deep = [deep]
    return [None, True, False, 0, -1, 1, 2**31, 2**63, 2**70, -2**70, 1.5, -0.0, 1e308, "", "x" * rng.choice((1, 300, 70000)),
            "\x00", "a\x00b", "\u00fc", "\ud800", "\udfff\ud800", "\U0001f600", "sm_90a", "bf16", "../../etc", [], {},
            [1] * 1000, {"k": {"k": {"k": 1}}}, deep, {"\x00": 1}, {"\ud800": 1}, "%00", "NaN"]


def mutate(rng: random.Random, manifest: dict, cubin: bytes, signer=None) -> tuple[dict, bytes]:
    m = json.loads(json.dumps(manifest))
    values = _values(rng)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        section = rng.choice(_SECTIONS)
        target = m if section is None else m.get(section)
        if not isinstance(target, dict):
            target = m
        if op < 0.45:
            key = rng.choice(list(target) + ["new", "entry", "arch", "variant", "head_dim", "grid", "params", "\x00"])
            if key not in ("cubin",):
                target[key] = rng.choice(values)
        elif op < 0.6 and target:
            target.pop(rng.choice([k for k in target if k != "cubin"] or ["x"]), None)
        elif op < 0.7:
            name = rng.choice(["a" * 128, "a" * 129, "x/y", "ok-name", "\u00fc", "a\x00", "-x", "fa3_fwd-sm_90a"])
            m["variant"] = name
            if isinstance(m.get("contract"), dict) and rng.random() < 0.7:
                m["contract"]["variant"] = name
        elif op < 0.85:
            b = bytearray(cubin)
            for _ in range(rng.randint(1, 12)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            if rng.random() < 0.2:
                b = b[: rng.randrange(1, len(b))]
            cubin = bytes(b)
        else:
            sig = {"alg": rng.choice(["ed25519", "rsa", None]), "key_id": rng.choice(["0" * 16, "zz", "a" * 16, None]),
                   "sig": rng.choice([base64.b64encode(bytes(64)).decode(), "%%%", "", "A" * 300]),
                   "public_key": rng.choice([None, "cubinforge-ed25519 AAAA", "cubinforge-ed25519 " +
                                             base64.b64encode(bytes(32)).decode(), "x" * 300])}
            m["signatures"] = rng.choice([[sig], [sig] * 9, "notalist", [1, 2], []])
    if signer is not None and rng.random() < 0.3 and isinstance(m.get("signatures", []), list):
        try:
            m = signer.sign(m)
        except (TypeError, ValueError, AttributeError):
            pass
    if isinstance(m.get("cubin"), dict):
        m["cubin"]["sha256"] = hashlib.sha256(cubin).hexdigest()
        m["cubin"]["size"] = len(cubin)
    return m, cubin


def cases(n: int, seed: int = 0, signer=None):
    """(manifest, cubin) pairs: n mutations of a few valid artifacts."""
    rng = random.Random(seed)
    bases = []
    for i in range(4):
        cubin = make_cubin("kernel_test", rng.choice(["sm_90a", "sm_100a"]), payload=f"fuzz{seed}-{i}".encode())
        arch = "sm_100a" if cubin[7] == 0x41 else "sm_90a"
        bases.append((make_manifest(f"fuzzpub{seed}-{i}-{arch}", cubin, arch=arch), cubin))
    for _ in range(n):
        m, c = rng.choice(bases)
        yield mutate(rng, m, c, signer)


def body(manifest: dict, cubin: bytes) -> bytes:
    # ensure_ascii: lone surrogates travel as \\ud800 escapes, as a hostile client would send them.
    return json.dumps({"manifest": manifest, "cubin_b64": base64.b64encode(cubin).decode()}).encode()


def publish_all(backend: str, tmp, n: int, seed: int):
    """Publish `n` fuzzed cases to an in-process app (over ASGI) on a fresh `backend` database
    under `tmp`, yielding (manifest, response) for each. One harness for the load bench's
    `fuzz` and the CI fuzz test, so both exercise the same server set-up."""
    from pathlib import Path

    from fastapi.testclient import TestClient

    from .app import create_app
    from .config import Settings
    from .publisher import Signer, keygen
    from .testing import backend_url, seed_token
    tmp = Path(tmp)
    url = backend_url(backend, tmp)
    token = seed_token(url)
    signer = Signer(keygen(tmp / "k")[0])
    app = create_app(Settings(home=tmp / "home", database_url=url, max_cubin_bytes=256 * 1024))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with TestClient(app, raise_server_exceptions=False) as c:
        for m, cubin in cases(n, seed=seed, signer=signer):
            yield m, c.post("/v1/artifacts", content=body(m, cubin), headers=headers)

"""Unit tests of the service's parts: cubin inspection, ed25519, selection, migrations, the
publish transaction."""

# No `from __future__ import annotations`: the CuTe DSL evaluates the kernel's annotations.
import base64
import hashlib
import json
import os

import pytest

from cubinforge.runtime import signing
from cubinforge.service.elfcheck import CubinError, arch_from_flags, inspect_cubin
from cubinforge.service.testing import backend_url, backends, make_cubin, make_manifest, seed_token


# ------------------------------------------------------------------ cubins
@pytest.mark.parametrize("flags,osabi,abiver,arch", [
    (0x5A0D5A, 0x33, 7, "sm_90a"),     # real sm_90a cubin from the CuTe DSL (CUDA 12.x ABI 7)
    (0x5A055A, 0x33, 7, "sm_90"),
    (0x500550, 0x33, 7, "sm_80"),
    (0x0600640A, 0x41, 8, "sm_100a"),  # real sm_100a cubin (ABI 8 moved the SM to bits 8-15)
    (0x06006402, 0x41, 8, "sm_100"),
    (0x0600780A, 0x41, 8, "sm_120a"),
])
def test_arch_from_real_eflags(flags, osabi, abiver, arch):
    assert arch_from_flags(flags, osabi, abiver) == arch


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_90"])
def test_made_cubins_parse(arch):
    info = inspect_cubin(make_cubin("my_kernel", arch))
    assert info.arch == arch and info.has_entry("my_kernel") and not info.has_entry("other")


def test_real_cubin_from_the_cute_dsl(tmp_path, monkeypatch):
    cute = pytest.importorskip("cutlass.cute")
    monkeypatch.chdir(tmp_path)
    import cutlass
    import numpy as np
    from cutlass.cute.runtime import from_dlpack

    @cute.kernel
    def scale_kernel(a: cute.Tensor, s: cutlass.Float32):
        tidx, _, _ = cute.arch.thread_idx()
        a[tidx] = a[tidx] * s

    @cute.jit
    def host(a: cute.Tensor, s: cutlass.Float32):
        scale_kernel(a, s).launch(grid=[1, 1, 1], block=[32, 1, 1])

    a = from_dlpack(np.zeros(32, dtype=np.float32))
    cubin = cute.compile(host, a, cutlass.Float32(1.0), options=f"--gpu-arch sm_90a --keep-cubin --dump-dir {tmp_path}").__cubin__
    info = inspect_cubin(cubin)
    assert info.arch == "sm_90a"
    assert any("scale_kernel" in f for f in info.functions)


@pytest.mark.parametrize("mutate", [
    lambda b: b[:40],                                    # truncated header
    lambda b: b"\x7fELF" + b"\1" + b[5:],                # 32-bit
    lambda b: b[:18] + b"\x3e\x00" + b[20:],             # x86-64, not EM_CUDA
    lambda b: b[:40] + (10**9).to_bytes(8, "little") + b[48:],  # section table off the end
    lambda b: b[:len(b) - 100],                          # truncated sections
])
def test_malformed_cubins_are_cubin_errors(mutate):
    with pytest.raises(CubinError):
        inspect_cubin(mutate(make_cubin()))


def test_random_bytes_never_crash_the_parser():
    good = bytearray(make_cubin())
    rng = __import__("random").Random(0)
    for _ in range(2000):
        b = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        try:
            inspect_cubin(bytes(b))
        except CubinError:
            pass


# ------------------------------------------------------------------ ed25519
RFC8032 = [  # (public key, message, signature): RFC 8032 section 7.1, tests 1-3
    ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]


@pytest.mark.parametrize("pk,msg,sig", RFC8032)
def test_ed25519_rfc8032_vectors(pk, msg, sig):
    pk, msg, sig = bytes.fromhex(pk), bytes.fromhex(msg), bytes.fromhex(sig)
    assert signing.ed25519_verify(pk, msg, sig)
    assert not signing.ed25519_verify(pk, msg + b"x", sig)
    bad = bytearray(sig)
    bad[40] ^= 1
    assert not signing.ed25519_verify(pk, msg, bytes(bad))
    # s >= L (malleability) is refused
    s = int.from_bytes(sig[32:], "little") + signing._L
    if s < 2**256:
        assert not signing.ed25519_verify(pk, msg, sig[:32] + s.to_bytes(32, "little"))


def test_pure_python_verify_agrees_with_cryptography(tmp_path):
    from cubinforge.service.publisher import Signer, keygen
    key, pub, kid = keygen(tmp_path / "k")
    signer = Signer(key)
    m = make_manifest("v", make_cubin())
    signed = signer.sign(m)
    trusted = signing.load_trusted_keys(str(pub))
    assert signing.verify_manifest(signed, trusted) == kid
    # provenance is not covered; everything else is
    assert signing.verify_manifest({**signed, "provenance": {"x": 1}}, trusted) == kid
    for path in (("cubin", "sha256"), ("contract", "entry"), ("axes", "head_dim")):
        t = json.loads(json.dumps(signed))
        t[path[0]][path[1]] = "0" * 64 if path[1] == "sha256" else 7
        with pytest.raises(signing.SignatureError, match="does not verify"):
            signing.verify_manifest(t, trusted)
    with pytest.raises(signing.SignatureError, match="parse|not a cubinforge"):
        signing.parse_public_key("ssh-ed25519 AAAA")


# ------------------------------------------------------------------ selection
def _rec(name, **axes):
    ax = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "varlen": False, "paged_kv": False,
          "pack_gqa": False, "split_kv": False, "tile_m": 128, "tile_n": 128, **axes}
    return {"name": name, "family": "fa3_fwd", "axes": ax, "cubin": {"sha256": "0" * 64, "size": 1}}


SIZE_PROBLEMS = [
    # (exact axes, sizes): the dispatcher's size-dependent rules pick different variants here.
    ({"head_dim": 128, "causal": True}, {"seqlen_q": 512, "heads_q": 16, "batch": 4}),     # hd128-causal-short
    ({"head_dim": 128, "causal": True}, {"seqlen_q": 8192, "heads_q": 16, "batch": 1}),    # hd128-causal
    ({"head_dim": 64, "causal": True}, {"seqlen_q": 1024, "heads_q": 16, "batch": 2}),     # hd64-causal-short
    ({"head_dim": 64, "causal": True}, {"seqlen_q": 4096, "heads_q": 16, "batch": 2}),     # hd64-causal
    ({"head_dim": 128, "causal": False}, {"seqlen_q": 2048, "heads_q": 32, "heads_kv": 8}),  # no rule: by name
    ({"head_dim": 128, "causal": True, "pack_gqa": True}, {"seqlen_q": 2048, "heads_q": 32, "heads_kv": 8}),
    ({"head_dim": 128, "causal": True, "head_dim_v": 64}, {"seqlen_q": 2048, "heads_q": 8}),  # a derived axis
]


def test_http_select_is_the_runtime_dispatcher(tmp_path, monkeypatch):
    """POST /v1/select and registry_source.select choose the same variant for the same problem,
    through the same rules, and the answer says why (reasons) and with what (launch)."""
    from fastapi.testclient import TestClient

    from cubinforge.runtime.registry_source import select
    from cubinforge.service.app import create_app
    from cubinforge.service.config import Settings

    catalogue = [dict(head_dim=128, causal=True, scheduler=s) for s in ("single", "persistent", "lpt")]
    catalogue += [dict(head_dim=64, causal=True, tile_m=t) for t in (128, 192)]
    catalogue += [dict(head_dim=128, causal=False, scheduler=s) for s in ("lpt", "single")]
    catalogue += [dict(head_dim=128, causal=True, pack_gqa=True), dict(head_dim=128, causal=True, head_dim_v=64)]
    manifests = {}
    for i, ax in enumerate(catalogue):
        name = f"fa3_fwd-v{i}"
        cubin = make_cubin(payload=name.encode())
        manifests[name] = (make_manifest(name, cubin, **ax), cubin)

    class Src:
        def list(self):
            return list(manifests)

        def get(self, name):
            return manifests[name][0]

        def blob(self, sha):
            raise AssertionError

    url = f"sqlite:///{tmp_path / 'r.db'}"
    token = seed_token(url)
    app = create_app(Settings(home=tmp_path, database_url=url))
    with TestClient(app) as c:
        for m, cubin in manifests.values():
            body = {"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()}
            assert c.post("/v1/artifacts", json=body, headers={"Authorization": f"Bearer {token}"}).status_code == 201
        chosen = set()
        for axes, sizes in SIZE_PROBLEMS:
            want = {"arch": "sm_90a", "dtype": "bf16", **axes}
            runtime = select("fa3_fwd", want, source=Src(), sizes={"seqlen_k": sizes["seqlen_q"], **sizes})
            r = c.post("/v1/select", json={**want, **sizes})
            assert r.status_code == 200, r.text
            d = r.json()
            assert d["variant"] == runtime.variant, (axes, sizes, d["reasons"])
            assert d["launch"]["scheduler"] == runtime.axes["scheduler"]
            assert d["launch"]["tile_m"] == runtime.axes["tile_m"]
            assert d["reasons"][0].startswith("matches ") and any("launch parameters" in x for x in d["reasons"])
            chosen.add(d["variant"])
        # The size rules are what chose: each names itself in the reasons where it applied.
        d = c.post("/v1/select", json={"arch": "sm_90a", "dtype": "bf16", **SIZE_PROBLEMS[0][0],
                                       **SIZE_PROBLEMS[0][1]}).json()
        assert d["launch"]["scheduler"] == "persistent" and any(x.startswith("hd128-causal-short:")
                                                                 for x in d["reasons"])
        d = c.post("/v1/select", json={"arch": "sm_90a", "dtype": "bf16", **SIZE_PROBLEMS[3][0],
                                       **SIZE_PROBLEMS[3][1]}).json()
        assert d["launch"]["tile_m"] == 192 and any(x.startswith("hd64-causal:") for x in d["reasons"])
    assert len(chosen) == len(SIZE_PROBLEMS)  # every problem chose a different variant


# ------------------------------------------------------------------ migrations and the publish transaction
@pytest.mark.parametrize("kind", backends())
def test_migrations_match_the_models(kind, tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from cubinforge.registry.migrate import current, upgrade
    from cubinforge.registry.models import Base
    url = backend_url(kind, tmp_path)
    upgrade(url)
    upgrade(url)  # idempotent
    assert current(url) is not None
    eng = create_engine(url)
    with eng.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), Base.metadata)
    diff = [d for d in diff if not (d[0] == "remove_table" and d[1].name == "alembic_version")]
    eng.dispose()
    assert diff == [], f"models changed without a migration: {diff}"


def test_failed_commit_leaves_no_blob(tmp_path, monkeypatch):
    from cubinforge.registry.blobstore import BlobStore
    from cubinforge.registry.db import Database
    from cubinforge.registry.migrate import upgrade
    from cubinforge.service.store import Store
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    db, blobs = Database(url), BlobStore(tmp_path / "blobs")
    store = Store(blobs)
    cubin = make_cubin(payload=b"atomic")
    m = make_manifest("atomic", cubin)
    sha = m["cubin"]["sha256"]
    with db.sessions() as s:
        monkeypatch.setattr(s, "commit", lambda: (_ for _ in ()).throw(OSError("disk full")))
        with pytest.raises(OSError):
            store.publish(s, m, cubin, [], "t")
    assert not blobs.exists(sha)
    assert not list((tmp_path / "blobs" / "sha256" / sha[:2]).iterdir())  # no temp files either
    with db.sessions() as s:
        assert store.get(s, "atomic") is None
        created, rec = store.publish(s, m, cubin, [], "t")
    assert created and blobs.path(sha).read_bytes() == cubin
    db.dispose()

"""Issue 14: forged signatures, integrity of stored blobs, hostile input, uploads before auth,
temp files, scopes and the audit trail; over HTTP against a real server (SQLite, and
PostgreSQL when CUBINFORGE_TEST_PG_URL is set)."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import httpx
import pytest

from cubinforge.service.publisher import Signer, keygen
from cubinforge.service.testing import backend_url, backends, live_server, make_cubin, make_manifest, seed_token

MAX_CUBIN = 64 * 1024


@pytest.fixture(scope="module", params=backends())
def server(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"hard-{request.param}")
    url = backend_url(request.param, tmp)
    token = seed_token(url)
    env = {"CUBINFORGE_HOME": str(tmp / "home"), "CUBINFORGE_DATABASE_URL": url,
           "CUBINFORGE_MAX_CUBIN_BYTES": str(MAX_CUBIN)}
    with live_server(env, log=tmp / "server.log") as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            client.auth_headers = {"Authorization": f"Bearer {token}"}
            client.home, client.db_url, client.tmp = tmp / "home", url, tmp
            yield client


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    key, _, _ = keygen(tmp_path_factory.mktemp("keys") / "ci")
    return Signer(key)


def artifact(name, payload=b"", family="misc", **axes):
    cubin = make_cubin("kernel_test", "sm_90a", payload or name.encode())
    return make_manifest(name, cubin, family=family, **axes), cubin


def publish(client, manifest, cubin, headers=None):
    body = {"manifest": manifest, "cubin_b64": base64.b64encode(cubin).decode()}
    return client.post("/v1/artifacts", json=body, headers=client.auth_headers if headers is None else headers)


def assert_error(r, status, code=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body.get("message"), str) and body["message"], body
    if code:
        assert body["error"] == code, body
    return body


def blob_path(client, sha):
    return client.home / "blobs" / "sha256" / sha[:2] / sha


# ------------------------------------------------------------------ 1. signatures are verified at publish
def test_forged_signature_is_refused_and_the_real_one_still_lands(server, signer):
    m, c = artifact("forged-sm_90a-bf16-hd128")
    kid = signer.public.key_id
    forged = {**m, "signatures": [{"alg": "ed25519", "key_id": kid, "sig": base64.b64encode(os.urandom(64)).decode()}]}
    body = assert_error(publish(server, forged, c), 422, "unverifiable_signature")
    assert kid in body["message"] and "public_key" in body["message"]
    assert server.get(f"/v1/variants/{m['variant']}").status_code == 404
    # The genuine push afterwards is a real publish, and its signature is the one stored.
    r = publish(server, signer.sign(m), c)
    assert r.status_code == 201, r.text
    sigs = server.get(f"/v1/variants/{m['variant']}").json()["manifest"]["signatures"]
    assert [s["key_id"] for s in sigs] == [kid] and sigs[0]["sig"] != forged["signatures"][0]["sig"]


def test_runtime_select_skips_an_artifact_that_fails_verification(caplog):
    from cubinforge.runtime import signing
    from cubinforge.runtime.registry_source import select

    good, _ = artifact("fa3_fwd-sm_90a-bf16-hd128-a", family="fa3_fwd")
    bad, _ = artifact("fa3_fwd-sm_90a-bf16-hd128-b", family="fa3_fwd")

    class Src:
        def list(self):
            return [bad["variant"], good["variant"]]

        def get(self, name):
            if name == bad["variant"]:
                raise signing.SignatureError(f"{name}: signature by trusted key 0123 does not verify")
            return good

        def blob(self, sha):
            raise AssertionError

    with caplog.at_level("WARNING", logger="cubinforge.runtime"):
        m = select("fa3_fwd", {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True}, source=Src())
    assert m.variant == good["variant"]
    assert any(bad["variant"] in r.getMessage() and "does not verify" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ 6. the server checks the blobs it stores
def _flip(path):
    b = bytearray(path.read_bytes())
    b[len(b) // 2] ^= 0xFF
    path.write_bytes(bytes(b))


def test_corrupt_blob_is_not_served_is_reported_and_republish_repairs_it(server):
    m, c = artifact("corrupt-sm_90a-bf16-hd128", payload=b"to be corrupted")
    assert publish(server, m, c).status_code == 201
    sha = m["cubin"]["sha256"]
    _flip(blob_path(server, sha))
    assert_error(server.get(f"/v1/blobs/{sha}"), 503, "blob_corrupt")
    h = server.get("/healthz")
    assert h.status_code == 503 and h.json()["status"] == "degraded" and h.json()["corrupt_blobs"] == [sha]
    assert "cubinforge_blobs_corrupt 1" in server.get("/metrics").text
    # The identical upload is verified, so it replaces the corrupt copy; nothing stale stays cached.
    assert publish(server, m, c).status_code == 200
    assert blob_path(server, sha).read_bytes() == c
    r = server.get(f"/v1/blobs/{sha}")
    assert r.status_code == 200 and r.content == c
    assert server.get("/healthz").json()["status"] == "ok"
    assert "cubinforge_blobs_corrupt 0" in server.get("/metrics").text
    # Deleted outright: re-publishing restores it too.
    blob_path(server, sha).unlink()
    assert publish(server, m, c).status_code == 200 and blob_path(server, sha).read_bytes() == c


def test_new_variant_with_the_same_content_does_not_adopt_a_corrupt_file(server):
    m, c = artifact("adopt-a-sm_90a-bf16-hd128", payload=b"shared content")
    assert publish(server, m, c).status_code == 201
    sha = m["cubin"]["sha256"]
    _flip(blob_path(server, sha))
    m2 = {**m, "variant": "adopt-b-sm_90a-bf16-hd128", "contract": {**m["contract"], "variant": "adopt-b-sm_90a-bf16-hd128"}}
    assert publish(server, m2, c).status_code == 201
    assert blob_path(server, sha).read_bytes() == c
    assert server.get(f"/v1/blobs/{sha}").content == c


def test_db_check_and_repair(tmp_path, monkeypatch, capsys):
    from cubinforge.service.config import Settings
    from cubinforge.service.importer import import_artifacts
    from test_client_remote import run_cli

    home = tmp_path / "home"
    monkeypatch.delenv("CUBINFORGE_HOME", raising=False)
    monkeypatch.setenv("CUBINFORGE_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    settings = Settings(home=home, database_url=f"sqlite:///{tmp_path / 'r.db'}")
    items = [artifact(f"chk{i}-sm_90a-bf16-hd128") for i in range(3)]
    assert [s for _, s in import_artifacts(settings, items)] == ["created"] * 3
    assert run_cli("--home", str(home), "db", "check") == 0
    (m0, c0), (m1, c1) = items[0], items[1]
    _flip(home / "blobs" / "sha256" / m0["cubin"]["sha256"][:2] / m0["cubin"]["sha256"])
    (home / "blobs" / "sha256" / m1["cubin"]["sha256"][:2] / m1["cubin"]["sha256"]).unlink()
    capsys.readouterr()
    assert run_cli("--home", str(home), "db", "check") == 1
    out = capsys.readouterr().out
    assert f"{m0['cubin']['sha256']} ({m0['variant']}): corrupt" in out and f"({m1['variant']}): missing" in out
    # A good copy of one of them (a bundle, say) repairs that one; the other stays reported.
    good = tmp_path / "bundle" / "blobs" / "sha256" / m0["cubin"]["sha256"][:2]
    good.mkdir(parents=True)
    (good / m0["cubin"]["sha256"]).write_bytes(c0)
    assert run_cli("--home", str(home), "db", "repair", str(tmp_path / "bundle")) == 1
    out = capsys.readouterr().out
    assert "restored from" in out and "no good copy" in out
    assert (home / "blobs" / "sha256" / m0["cubin"]["sha256"][:2] / m0["cubin"]["sha256"]).read_bytes() == c0

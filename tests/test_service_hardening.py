"""Issue 14: forged signatures, integrity of stored blobs, hostile input, uploads before auth,
temp files, scopes and the audit trail; over HTTP against a real server (SQLite, and
PostgreSQL when CUBINFORGE_TEST_PG_URL is set)."""

from __future__ import annotations

import base64
import json
import os

import httpx
import pytest

from cubinforge.service.publisher import Signer, keygen
from cubinforge.service.testing import (artifact, assert_error, backend_url, live_server, publish, seed_token,
                                        server_fixture)

server = server_fixture("hard")


@pytest.fixture(scope="module")
def signer(tmp_path_factory):
    key, _, _ = keygen(tmp_path_factory.mktemp("keys") / "ci")
    return Signer(key)


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


# ------------------------------------------------------------------ 5. hostile input is a 4xx
def _raw_publish(server, manifest_text: str, cubin: bytes):
    body = '{"manifest": %s, "cubin_b64": "%s"}' % (manifest_text, base64.b64encode(cubin).decode())
    return server.post("/v1/artifacts", content=body.encode(),
                       headers={**server.auth_headers, "Content-Type": "application/json"})


@pytest.mark.parametrize("field,value,what", [
    ("contract.note", '"\\ud800"', "surrogate"),
    ("metadata.note", '"x\\udfffy"', "surrogate"),
    ("provenance.note", '"a\\u0000b"', "NUL"),
    ("contract.deep", "[" * 300 + "]" * 300, "nested"),
    ("contract.deep", '{"a":' * 300 + "1" + "}" * 300, "nested"),
    ("metadata.x", "NaN", "finite"),
    ("metadata.x", "-Infinity", "finite"),
    ("contract.x", "1e999", "finite"),
])
def test_unencodable_or_hostile_manifest_values_are_422(server, field, value, what):
    m, c = artifact(f"hostile-{abs(hash((field, value))) % 10**8}-sm_90a")
    text = json.dumps(m)
    section, key = field.split(".")
    text = text.replace(f'"{section}": {{', f'"{section}": {{"{key}": {value}, ', 1)
    body = assert_error(_raw_publish(server, text, c), 422)
    assert what in body["message"], body
    assert server.get(f"/v1/variants/{m['variant']}").status_code == 404


def test_nul_in_queries_and_yank_reason_is_422(server):
    assert_error(server.get("/v1/variants", params={"dtype": "\x00"}), 422)
    assert_error(server.get("/v1/variants", params={"dtype": "bf16\x00"}), 422)
    m, c = artifact("nulreason-sm_90a-bf16-hd128")
    assert publish(server, m, c).status_code == 201
    assert_error(server.post(f"/v1/variants/{m['variant']}/yank", json={"reason": "bad\x00"},
                             headers=server.auth_headers), 422)
    assert server.get(f"/v1/variants/{m['variant']}").json()["yanked"] is False


# ------------------------------------------------------------------ 3. no upload is read before its token is checked
def _raw_request(base, head: bytes, timeout=5.0) -> bytes:
    import socket
    from urllib.parse import urlsplit
    u = urlsplit(base)
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as s:
        s.sendall(head)
        return s.recv(4096)


def test_unauthenticated_upload_is_refused_before_its_body(server):
    # Announce a large body and send none of it: the answer must come from the headers alone.
    for auth in (b"", b"Authorization: Bearer cf_wrong\r\n"):
        head = (b"POST /v1/artifacts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
                b"Content-Length: 4000000\r\n\r\n")
        reply = _raw_request(str(server.base_url), head)
        assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    # Chunked, with no length at all: the same.
    reply = _raw_request(str(server.base_url), b"POST /v1/artifacts HTTP/1.1\r\nHost: x\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n10000\r\n" + b"x" * 1000)
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]


def test_publish_leaves_no_spool_files(server):
    m, c = artifact("spool-sm_90a-bf16-hd128")
    assert publish(server, m, c).status_code == 201
    bad = json.loads(json.dumps(m))
    bad["cubin"]["size"] += 1
    assert_error(publish(server, bad, c), 422, "size_mismatch")
    assert_error(server.post("/v1/artifacts", content=b"{not json", headers=server.auth_headers), 422)
    spool = server.home / "spool"
    assert not spool.exists() or list(spool.iterdir()) == []


def test_upload_gate_bounds_concurrent_uploads():
    import asyncio

    from cubinforge.service.errors import APIError
    from cubinforge.service.uploads import UploadGate

    async def main():
        gate = UploadGate(1, wait_s=0.05)
        async with gate.slot():
            with pytest.raises(APIError) as e:
                async with gate.slot():
                    pass
            assert e.value.status == 503 and e.value.headers == {"Retry-After": "2"}
        async with gate.slot():  # released again
            pass
    asyncio.run(main())


# ------------------------------------------------------------------ 2. signatures: one per key, capped in total
def test_signatures_are_deduped_by_key_and_capped(server, signer, tmp_path):
    m, c = artifact("sigcap-sm_90a-bf16-hd128")
    one = signer.sign(m)
    repeated = {**one, "signatures": one["signatures"] * 8}
    assert publish(server, repeated, c).status_code == 201
    for _ in range(3):
        assert publish(server, repeated, c).status_code == 200
    d = server.get(f"/v1/variants/{m['variant']}").json()
    assert [s["key_id"] for s in d["manifest"]["signatures"]] == [signer.public.key_id]
    listed = server.get("/v1/variants", params={"limit": 1000}).json()["items"]
    assert [i["signed_by"] for i in listed if i["variant"] == m["variant"]] == [[signer.public.key_id]]
    # Seven more keys fill the cap of 8; a ninth is refused, and the stored set is unchanged.
    others = [Signer(keygen(tmp_path / f"k{i}")[0]) for i in range(8)]
    for s in others[:7]:
        assert publish(server, s.sign(m), c).status_code == 200
    body = assert_error(publish(server, others[7].sign(m), c), 422, "too_many_signatures")
    assert "8" in body["message"]
    d = server.get(f"/v1/variants/{m['variant']}").json()
    assert len(d["manifest"]["signatures"]) == 8
    assert len({s["key_id"] for s in d["manifest"]["signatures"]}) == 8


# ------------------------------------------------------------------ 8. no temp file outlives its publish
def test_temp_files_are_removed_at_start_and_on_disconnect(tmp_path):
    url = backend_url("sqlite", tmp_path)
    token = seed_token(url)
    home = tmp_path / "home"
    left = [home / "blobs" / "sha256" / "ab" / ".incoming-k1ll3d", home / "spool" / ".incoming-x9"]
    keep = home / "blobs" / "sha256" / "ab" / ("ab" + "0" * 62)
    for p in left + [keep]:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 1000)
    env = {"CUBINFORGE_HOME": str(home), "CUBINFORGE_DATABASE_URL": url}
    with live_server(env, log=tmp_path / "server.log") as base:
        assert not any(p.exists() for p in left) and keep.exists()
        # A publish whose client goes away mid-body leaves no spool file behind.
        import socket
        import time
        from urllib.parse import urlsplit
        u = urlsplit(base)
        with socket.create_connection((u.hostname, u.port)) as s:
            s.sendall(f"POST /v1/artifacts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
                      + b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
            deadline = time.monotonic() + 10
            while not list((home / "spool").glob(".incoming-*")) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert list((home / "spool").glob(".incoming-*")), "the body is spooled to disk while it arrives"
        deadline = time.monotonic() + 10
        while list((home / "spool").glob(".incoming-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list((home / "spool").glob(".incoming-*")) == []
        assert httpx.get(base + "/healthz").status_code == 200


# ------------------------------------------------------------------ 9. scopes, unyank, the audit table
def test_token_scopes_limit_publish_and_yank(server):
    fam = {"Authorization": f"Bearer {seed_token(server.db_url, 'fam-ci', ['family:scoped_fam'])}"}
    pre = {"Authorization": f"Bearer {seed_token(server.db_url, 'pre-ci', ['prefix:team-a-'])}"}
    mine, c1 = artifact("mine-sm_90a-bf16-hd128", family="scoped_fam")
    squat, c2 = artifact("squat-sm_90a-bf16-hd128", family="fa3_fwd")
    assert publish(server, mine, c1, headers=fam).status_code == 201
    body = assert_error(publish(server, squat, c2, headers=fam), 403, "forbidden")
    assert "family:fa3_fwd" in body["message"]
    assert server.get(f"/v1/variants/{squat['variant']}").status_code == 404  # nothing squatted
    team, c3 = artifact("team-a-kernel-sm_90a", family="misc")
    assert publish(server, team, c3, headers=pre).status_code == 201
    assert_error(publish(server, *artifact("team-b-kernel-sm_90a"), headers=pre), 403, "forbidden")
    # Yank and unyank only what the scope covers; admin covers everything.
    assert_error(server.post(f"/v1/variants/{mine['variant']}/yank", headers=pre), 403, "forbidden")
    r = server.post(f"/v1/variants/{mine['variant']}/yank", json={"reason": "oops"}, headers=fam)
    assert r.status_code == 200 and r.json()["yanked"] is True
    assert_error(server.post(f"/v1/variants/{mine['variant']}/unyank", headers=pre), 403, "forbidden")
    r = server.post(f"/v1/variants/{mine['variant']}/unyank", headers=fam)
    assert r.status_code == 200 and r.json()["yanked"] is False
    d = server.get(f"/v1/variants/{mine['variant']}").json()
    assert d["yanked"] is False and d["yank_reason"] is None
    assert mine["variant"] in [i["variant"] for i in server.get("/v1/variants", params={"limit": 1000}).json()["items"]]
    assert server.post(f"/v1/variants/{team['variant']}/yank", headers=server.auth_headers).status_code == 200
    assert_error(server.post("/v1/variants/no-such/unyank", headers=fam), 404)
    assert_error(server.post(f"/v1/variants/{mine['variant']}/unyank"), 401)

    from sqlalchemy import create_engine, text
    eng = create_engine(server.db_url)
    with eng.connect() as conn:
        rows = conn.execute(text("SELECT actor, action, variant, detail FROM service_audit "
                                 "WHERE variant IN (:a, :b) ORDER BY id"), {"a": mine["variant"], "b": team["variant"]}).all()
    eng.dispose()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("fam-ci", "publish", mine["variant"]), ("pre-ci", "publish", team["variant"]),
        ("fam-ci", "yank", mine["variant"]), ("fam-ci", "unyank", mine["variant"]), ("ci", "yank", team["variant"])]
    assert rows[2][3] == "oops"


def test_token_cli_needs_scopes_and_lists_them(tmp_path, monkeypatch, capsys):
    from test_client_remote import run_cli
    monkeypatch.setenv("CUBINFORGE_DATABASE_URL", f"sqlite:///{tmp_path / 'r.db'}")
    with pytest.raises(ValueError, match="--scope"):
        run_cli("--home", str(tmp_path), "token", "add", "ci")
    with pytest.raises(ValueError, match="not a scope"):
        run_cli("--home", str(tmp_path), "token", "add", "ci", "--scope", "everything")
    assert run_cli("--home", str(tmp_path), "token", "add", "ci", "--scope", "family:fa3_fwd",
                   "--scope", "prefix:exp-") == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("cf_")
    assert run_cli("--home", str(tmp_path), "token", "list") == 0
    out = capsys.readouterr().out
    assert "ci\tfamily:fa3_fwd,prefix:exp-\tactive" in out and token not in out
    assert run_cli("--home", str(tmp_path), "db", "audit") == 0

"""The registry service over HTTP: a real uvicorn server on a loopback port, on SQLite and
(when CUBINFORGE_TEST_PG_URL is set, as .ci/run does) on PostgreSQL."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import hashlib
import json

import pytest

from cubinforge.service.testing import (TEST_MAX_CUBIN as MAX_CUBIN, artifact, assert_error, make_cubin, make_manifest,
                                        publish, server_fixture)

server = server_fixture("svc")


@pytest.fixture(scope="module")
def seeded(server):
    """A small catalogue: hd64/hd128, causal or not, one GQA-packed."""
    names = {}
    for hd in (64, 128):
        for causal in (False, True):
            n = f"fa3_fwd-sm_90a-bf16-hd{hd}{'-causal' if causal else ''}"
            m, c = artifact(n, head_dim=hd, causal=causal, family="fa3_fwd")
            assert publish(server, m, c).status_code == 201
            names[(hd, causal)] = (m, c)
    m, c = artifact("fa3_fwd-sm_90a-bf16-hd128-causal-packgqa", head_dim=128, causal=True, pack_gqa=True,
                    family="fa3_fwd")
    assert publish(server, m, c).status_code == 201
    names["gqa"] = (m, c)
    return names


# ------------------------------------------------------------------ operations
def test_health_metrics_docs(server):
    r = server.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert server.get("/docs").status_code == 200
    spec = server.get("/openapi.json").json()
    for path in ("/v1/variants", "/v1/variants/{name}", "/v1/blobs/{sha256}", "/v1/select", "/v1/artifacts",
                 "/v1/variants/{name}/yank", "/healthz", "/metrics"):
        assert path in spec["paths"], path
    m = server.get("/metrics")
    assert m.status_code == 200 and "cubinforge_http_requests_total" in m.text


# ------------------------------------------------------------------ publish
def test_publish_is_idempotent_and_immutable(server):
    m, c = artifact("idem-sm_90a-bf16-hd128")
    r = publish(server, m, c)
    assert r.status_code == 201 and r.json()["created"] is True
    r = publish(server, m, c)
    assert r.status_code == 200 and r.json()["created"] is False
    # Same name, different cubin: refused, the stored one kept.
    m2, c2 = artifact("idem-sm_90a-bf16-hd128", payload=b"other bytes")
    body = assert_error(publish(server, m2, c2), 409, "variant_exists")
    assert "cubin" in body["differs"]
    got = server.get("/v1/variants/idem-sm_90a-bf16-hd128").json()
    assert got["manifest"]["cubin"]["sha256"] == m["cubin"]["sha256"]


def test_concurrent_identical_publishes(server):
    m, c = artifact("race-sm_90a-bf16-hd128")
    with cf.ThreadPoolExecutor(6) as ex:
        codes = sorted(ex.map(lambda _: publish(server, m, c).status_code, range(6)))
    assert codes.count(201) == 1 and codes.count(200) == 5, codes


def test_blob_and_row_land_together(server):
    m, c = artifact("atomic-sm_90a-bf16-hd128")
    publish(server, m, c)
    sha = m["cubin"]["sha256"]
    assert (server.home / "blobs" / "sha256" / sha[:2] / sha).read_bytes() == c
    # A refused publish leaves no blob behind.
    m2, c2 = artifact("atomic-refused", payload=b"never stored")
    m2["cubin"]["sha256"] = "0" * 64
    publish(server, m2, c2)
    real = hashlib.sha256(c2).hexdigest()
    assert not (server.home / "blobs" / "sha256" / real[:2] / real).exists()


# ------------------------------------------------------------------ read API
def test_list_filters_and_paging(server, seeded):
    r = server.get("/v1/variants", params={"head_dim": 64, "arch": "sm_90a"}).json()
    assert {i["variant"] for i in r["items"]} == {"fa3_fwd-sm_90a-bf16-hd64", "fa3_fwd-sm_90a-bf16-hd64-causal"}
    r = server.get("/v1/variants", params={"causal": True, "head_dim": 128, "pack_gqa": True}).json()
    assert [i["variant"] for i in r["items"]] == ["fa3_fwd-sm_90a-bf16-hd128-causal-packgqa"]
    assert server.get("/v1/variants", params={"dtype": "fp16"}).json()["total"] == 0
    everything = server.get("/v1/variants", params={"limit": 1000}).json()
    seen, offset = [], 0
    while offset is not None:
        page = server.get("/v1/variants", params={"limit": 2, "offset": offset}).json()
        assert len(page["items"]) <= 2
        seen += [i["variant"] for i in page["items"]]
        offset = page["next_offset"]
    assert seen == [i["variant"] for i in everything["items"]] and len(seen) == everything["total"]


def test_variant_detail_and_etag(server, seeded):
    m, _ = seeded[(128, True)]
    r = server.get(f"/v1/variants/{m['variant']}")
    assert r.status_code == 200
    d = r.json()
    assert d["manifest"] == m and d["yanked"] is False
    assert d["manifest"]["contract"]["entry"] == "kernel_test"
    assert d["blob_url"] == f"/v1/blobs/{m['cubin']['sha256']}"
    etag = r.headers["etag"]
    r2 = server.get(f"/v1/variants/{m['variant']}", headers={"If-None-Match": etag})
    assert r2.status_code == 304 and r2.headers["etag"] == etag
    assert_error(server.get("/v1/variants/no-such-variant"), 404, "variant_not_found")


def test_blob_download_head_and_revalidation(server, seeded):
    m, c = seeded[(64, False)]
    sha = m["cubin"]["sha256"]
    r = server.get(f"/v1/blobs/{sha}")
    assert r.status_code == 200 and r.content == c
    assert r.headers["etag"] == f'"{sha}"'
    assert "immutable" in r.headers["cache-control"]
    h = server.head(f"/v1/blobs/{sha}")
    assert h.status_code == 200 and h.content == b"" and int(h.headers["content-length"]) == len(c)
    r = server.get(f"/v1/blobs/{sha}", headers={"If-None-Match": f'"{sha}"'})
    assert r.status_code == 304 and r.content == b""
    assert_error(server.get(f"/v1/blobs/{'0' * 64}"), 404, "blob_not_found")
    assert_error(server.get("/v1/blobs/not-a-sha"), 422)
    assert server.head(f"/v1/blobs/{'0' * 64}").status_code == 404


# ------------------------------------------------------------------ select
PROBLEM = {"arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": True, "seqlen_q": 4096,
           "heads_q": 32, "batch": 2}


def test_select_picks_and_explains(server, seeded):
    r = server.post("/v1/select", json=PROBLEM)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["variant"] == "fa3_fwd-sm_90a-bf16-hd128-causal" and d["candidates"] == 1  # packgqa is not asked
    assert any("head_dim=128" in x for x in d["reasons"])
    assert d["launch"]["tile_m"] == 128 and d["launch"]["scheduler"] == "single"
    assert any("launch parameters" in x for x in d["reasons"])
    # pack_gqa is an exact axis of the dispatcher (runtime/dispatch.py): asked for, it is chosen;
    # left out, the plain kernel is, grouped heads or not (as the runtime's select does).
    gqa = server.post("/v1/select", json={**PROBLEM, "heads_kv": 8, "pack_gqa": True}).json()
    assert gqa["variant"] == "fa3_fwd-sm_90a-bf16-hd128-causal-packgqa" and gqa["launch"]["pack_gqa"] is True
    assert server.post("/v1/select", json={**PROBLEM, "heads_kv": 8}).json()["variant"] == d["variant"]


def test_select_none_fits_names_missing_axes(server, seeded):
    body = assert_error(server.post("/v1/select", json={**PROBLEM, "head_dim": 96}), 404, "no_variant")
    assert body["missing"] == {"head_dim": 96}
    assert 128 in body["available"]["head_dim"] and 64 in body["available"]["head_dim"]
    assert body["nearest"] and set(body["nearest"][0]["differs"]) == {"head_dim"}
    assert "head_dim=96" in body["message"]
    body = assert_error(server.post("/v1/select", json={**PROBLEM, "arch": "sm_75"}), 404, "no_variant")
    assert body["missing"] == {"arch": "sm_75"}
    assert_error(server.post("/v1/select", json={**PROBLEM, "heads_q": 30, "heads_kv": 8}), 422)


# ------------------------------------------------------------------ yank
def test_yank_hides_from_select_keeps_download(server):
    m, c = artifact("yankme-sm_90a-fp16-hd256", dtype="fp16", head_dim=256, causal=False, family="fa3_fwd")
    publish(server, m, c)
    problem = {**PROBLEM, "dtype": "fp16", "head_dim": 256, "causal": False}
    assert server.post("/v1/select", json=problem).json()["variant"] == m["variant"]
    assert_error(server.post(f"/v1/variants/{m['variant']}/yank", json={"reason": "wrong"}), 401, "unauthorized")
    r = server.post(f"/v1/variants/{m['variant']}/yank", json={"reason": "miscompiled"}, headers=server.auth_headers)
    assert r.status_code == 200 and r.json()["yanked"] is True
    assert_error(server.post("/v1/select", json=problem), 404, "no_variant")
    assert m["variant"] not in [i["variant"] for i in server.get("/v1/variants", params={"dtype": "fp16"}).json()["items"]]
    listed = server.get("/v1/variants", params={"dtype": "fp16", "include_yanked": True}).json()["items"]
    assert [i["yanked"] for i in listed if i["variant"] == m["variant"]] == [True]
    d = server.get(f"/v1/variants/{m['variant']}").json()
    assert d["yanked"] is True and d["yank_reason"] == "miscompiled"
    assert server.get(f"/v1/blobs/{m['cubin']['sha256']}").content == c
    # Not overwritten, not revived: identical republish is a no-op that stays yanked.
    r = publish(server, m, c)
    assert r.status_code == 200 and r.json()["yanked"] is True
    assert_error(server.post("/v1/variants/nope/yank", headers=server.auth_headers), 404)


# ------------------------------------------------------------------ auth
def test_auth_failures(server):
    m, c = artifact("auth-sm_90a-bf16-hd128")
    r = publish(server, m, c, headers={})
    assert_error(r, 401, "unauthorized")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert_error(publish(server, m, c, headers={"Authorization": "Bearer cf_wrong"}), 401, "unauthorized")
    assert_error(publish(server, m, c, headers={"Authorization": "Basic Zm9vOmJhcg=="}), 401)
    assert server.get("/v1/variants/auth-sm_90a-bf16-hd128").status_code == 404


# ------------------------------------------------------------------ bad input: 4xx with a message, never 5xx
def test_malformed_json_and_wrong_types(server):
    h = {**server.auth_headers, "Content-Type": "application/json"}
    assert_error(server.post("/v1/artifacts", content=b'{"manifest": ', headers=h), 422, "invalid_request")
    assert_error(server.post("/v1/select", content=b"\xff\xfe", headers={"Content-Type": "application/json"}), 422)
    assert_error(server.post("/v1/select", content=b"[]", headers={"Content-Type": "application/json"}), 422)
    assert_error(server.post("/v1/select", json={**PROBLEM, "head_dim": "128"}), 422)
    assert_error(server.post("/v1/select", json={**PROBLEM, "seqlen_q": -1}), 422)
    assert_error(server.post("/v1/artifacts", content=b"not json", headers=server.auth_headers), 422)
    assert_error(server.get("/v1/variants", params={"limit": 0}), 422)
    assert_error(server.get("/v1/variants", params={"causal": "maybe"}), 422)


def test_publish_content_checks(server):
    m, c = artifact("checks-sm_90a-bf16-hd128")
    bad_sha = json.loads(json.dumps(m))
    bad_sha["cubin"]["sha256"] = "f" * 64
    body = assert_error(publish(server, bad_sha, c), 422, "sha256_mismatch")
    assert hashlib.sha256(c).hexdigest() in body["message"]
    bad_size = json.loads(json.dumps(m))
    bad_size["cubin"]["size"] += 1
    assert_error(publish(server, bad_size, c), 422, "size_mismatch")
    not_elf = b"hello, not a cubin" * 4
    assert_error(publish(server, make_manifest("checks-x", not_elf), not_elf), 422, "bad_cubin")
    other_arch = make_cubin("kernel_test", "sm_100a")
    assert_error(publish(server, make_manifest("checks-y", other_arch), other_arch), 422, "arch_mismatch")
    wrong_entry = make_cubin("some_other_kernel")
    assert_error(publish(server, make_manifest("checks-z", wrong_entry), wrong_entry), 422, "entry_mismatch")
    unknown = make_cubin("kernel_test", "sm_80")
    body = assert_error(publish(server, make_manifest("checks-w", unknown, arch="sm_80"), unknown), 422, "unknown_arch")
    assert "sm_90a" in body["message"]
    assert_error(publish(server, make_manifest("checks-v", c, arch="sm_xx"), c), 422, "invalid_request")
    r = server.post("/v1/artifacts", json={"manifest": m, "cubin_b64": "!!!not base64!!!"}, headers=server.auth_headers)
    assert_error(r, 422, "bad_cubin_encoding")


def test_oversized_body(server):
    big = make_cubin("kernel_test", payload=b"\0" * (MAX_CUBIN + 1024))
    assert_error(publish(server, make_manifest("big-sm_90a", big), big), 413, "too_large")
    # Announced size alone is enough to refuse, before reading the body.
    r = server.post("/v1/artifacts", content=b"x" * (MAX_CUBIN * 2 + (5 << 20)), headers=server.auth_headers)
    assert_error(r, 413, "too_large")


@pytest.mark.parametrize("name", ["../etc/passwd", "a b", "x" * 300, "ümlaut", ".hidden", "a/b", "-dash", "%00"])
def test_odd_names(server, name):
    m, c = artifact("oddname-placeholder")
    m["variant"] = m["contract"]["variant"] = name
    r = publish(server, m, c)
    assert r.status_code == 422, r.text
    r = server.get(f"/v1/variants/{name}")
    assert 400 <= r.status_code < 500
    r = server.post(f"/v1/variants/{name}/yank", headers=server.auth_headers)
    assert 400 <= r.status_code < 500


# ------------------------------------------------------------------ signatures
def test_signed_publish_and_bad_signatures(server, tmp_path):
    from cubinforge.service.publisher import Signer, keygen
    key, pub, kid = keygen(tmp_path / "k")
    signer = Signer(key)
    m, c = artifact("signed-sm_90a-bf16-hd128")
    signed = signer.sign(m)
    r = publish(server, signed, c)
    assert r.status_code == 201, r.text
    d = server.get("/v1/variants/signed-sm_90a-bf16-hd128").json()
    assert d["manifest"]["signatures"][0]["key_id"] == kid
    listed = server.get("/v1/variants", params={"head_dim": 128, "limit": 1000}).json()["items"]
    assert [i["signed_by"] for i in listed if i["variant"] == m["variant"]] == [[kid]]

    m2, c2 = artifact("signed-tampered")
    s2 = signer.sign(m2)
    s2["axes"]["tile_m"] = 64  # changed after signing
    assert_error(publish(server, s2, c2), 422, "bad_signature")
    s3 = signer.sign(m2)
    s3["signatures"][0]["key_id"] = "0" * 16
    assert_error(publish(server, s3, c2), 422, "bad_signature")
    s4 = signer.sign(m2)
    s4["signatures"][0]["sig"] = base64.b64encode(b"x" * 64).decode()
    assert_error(publish(server, s4, c2), 422, "bad_signature")
    s5 = signer.sign(m2)
    s5["signatures"][0]["sig"] = "%%%"
    assert_error(publish(server, s5, c2), 422, "bad_signature")


def test_list_filters_on_verification(server, seeded):
    """`verified` filters on provenance.verification.status (issue 16)."""
    m, c = artifact("misc-verified-sm_100a", arch="sm_100a", head_dim=64)
    m["provenance"] = {"verification": {"status": "verified", "device": "NVIDIA B200", "driver": "x",
                                        "commit": "abc", "date": "2026-12-01", "result": "passed"}}
    assert publish(server, m, c).status_code == 201
    u, cu = artifact("misc-unverified-sm_100a", arch="sm_100a", head_dim=64)
    u["provenance"] = {"verification": {"status": "unverified", "reason": "never run", "arch_verified": False}}
    assert publish(server, u, cu).status_code == 201
    yes = server.get("/v1/variants", params={"verified": True, "arch": "sm_100a"}).json()
    no = server.get("/v1/variants", params={"verified": False, "arch": "sm_100a"}).json()
    assert [i["variant"] for i in yes["items"]] == ["misc-verified-sm_100a"] and yes["total"] == 1
    assert [i["variant"] for i in no["items"]] == ["misc-unverified-sm_100a"]
    everything = server.get("/v1/variants", params={"limit": 1000}).json()["total"]
    both = sum(server.get("/v1/variants", params={"verified": v, "limit": 1000}).json()["total"] for v in (True, False))
    assert both == everything

"""A bounded load test on loopback: 64 concurrent clients x 200 blob downloads, 2 workers.

A benchmark, not a timed assertion: it must finish with 0 errors; the throughput and p99
it reports (target >= 2,000 downloads/s, p99 < 20 ms on a 2-core machine) go to the test
output, and to the file CUBINFORGE_LOAD_RESULTS names when it is set (the recorded run is
bench/results/2026-11-29-cpu/registry-load.json); a plain test run leaves the tree clean.
"""

from __future__ import annotations

import base64
import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from cubinforge.service.loadtest import run
from cubinforge.service.testing import backend_url, backends, live_server, make_cubin, make_manifest, seed_token

RESULTS = os.environ.get("CUBINFORGE_LOAD_RESULTS")
CLIENTS, REQUESTS = 64, 200


def test_blob_download_load(tmp_path):
    url = backend_url("sqlite", tmp_path)
    token = seed_token(url)
    # A cubin-sized blob: FA3 forward cubins are 100-400 KB; 128 KiB is typical.
    cubin = make_cubin("kernel_test", payload=os.urandom(128 * 1024))
    m = make_manifest("load-sm_90a-bf16-hd128", cubin)
    env = {"CUBINFORGE_HOME": str(tmp_path / "home"), "CUBINFORGE_DATABASE_URL": url}
    with live_server(env, workers=2, log=tmp_path / "server.log") as base:
        r = httpx.post(base + "/v1/artifacts", headers={"Authorization": f"Bearer {token}"},
                       json={"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()})
        assert r.status_code == 201, r.text
        sha = m["cubin"]["sha256"]
        run(base, sha, clients=8, requests=20, expect_len=len(cubin))  # warm both workers' caches
        result = run(base, sha, clients=CLIENTS, requests=REQUESTS, expect_len=len(cubin))
    result.update({"workers": 2, "cpus": os.cpu_count(), "python": platform.python_version(),
                   "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   "target": {"requests_per_s": 2000, "p99_ms": 20}})
    print("\nregistry blob download load test: " + json.dumps(result))
    if RESULTS:
        Path(RESULTS).parent.mkdir(parents=True, exist_ok=True)
        Path(RESULTS).write_text(json.dumps(result, indent=2) + "\n")
    assert result["errors"] == 0, result["error_samples"]
    assert result["completed"] == CLIENTS * REQUESTS


# ------------------------------------------------------------------ issue 14.4: mixed load, the read cache, the pool
MIX_CLIENTS, MIX_REQUESTS = 32, 30  # CI size; the recorded 100 x 1000 run: bench/results/2026-12-01-cpu/


def _seed_catalogue(base, token, n=6):
    """n fa3_fwd variants (one fits loadtest.SELECT) plus their blobs; returns (sha, size) of one."""
    h = {"Authorization": f"Bearer {token}"}
    first = None
    for i in range(n):
        cubin = make_cubin("kernel_test", payload=os.urandom(64 * 1024) + bytes([i]))
        m = make_manifest(f"fa3_fwd-sm_90a-bf16-hd128-causal-t{i}", cubin, head_dim=128 if i == 0 else 64 + i)
        r = httpx.post(base + "/v1/artifacts", headers=h, timeout=30,
                       json={"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()})
        assert r.status_code == 201, r.text
        first = first or (m["cubin"]["sha256"], len(cubin))
    return first


def _call(base, method, path, body=None, headers=None):
    """One request on a new connection (so successive calls spread over the workers)."""
    import http.client
    from urllib.parse import urlsplit
    u = urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def _writes_reach_every_worker_cache(base, token):
    """Publish and yank are seen by both workers' read caches on their next request."""
    h = {"Authorization": f"Bearer {token}"}
    problem = {"arch": "sm_90a", "dtype": "fp16", "head_dim": 256, "causal": False, "seqlen_q": 64, "heads_q": 4}
    query = "/v1/variants?dtype=fp16"

    def each_worker(fn, n=16):  # every answer over n new connections must agree
        return {fn() for _ in range(n)}
    names = lambda: tuple(i["variant"] for i in json.loads(_call(base, "GET", query)[1])["items"])  # noqa: E731
    chosen = lambda: _call(base, "POST", "/v1/select", problem)[0]  # noqa: E731
    assert each_worker(names) == {()} and each_worker(chosen) == {404}  # both caches warm
    cubin = make_cubin("kernel_test", payload=b"generation")
    m = make_manifest("gen-sm_90a-fp16-hd256", cubin, dtype="fp16", head_dim=256, causal=False)
    assert _call(base, "POST", "/v1/artifacts", {"manifest": m, "cubin_b64": base64.b64encode(cubin).decode()},
                 h)[0] == 201
    assert each_worker(names) == {(m["variant"],)} and each_worker(chosen) == {200}
    assert _call(base, "POST", f"/v1/variants/{m['variant']}/yank", {}, h)[0] == 200
    assert each_worker(names) == {()} and each_worker(chosen) == {404}


@pytest.mark.parametrize("kind", backends())
def test_mixed_load_two_workers(kind, tmp_path):
    url = backend_url(kind, tmp_path)
    token = seed_token(url)
    env = {"CUBINFORGE_HOME": str(tmp_path / "home"), "CUBINFORGE_DATABASE_URL": url}
    with live_server(env, workers=2, log=tmp_path / "server.log") as base:
        sha, size = _seed_catalogue(base, token)
        result = run(base, sha, clients=MIX_CLIENTS, requests=MIX_REQUESTS, expect_len=size, mix=True)
        _writes_reach_every_worker_cache(base, token)
    print(f"\nregistry mixed load test ({kind}): " + json.dumps(result))
    assert result["errors"] == 0, result["error_samples"]
    assert result["completed"] == MIX_CLIENTS * MIX_REQUESTS


def test_read_answers_are_cached_until_the_generation_moves(tmp_path):
    from fastapi.testclient import TestClient

    from cubinforge.service.app import create_app
    from cubinforge.service.config import Settings
    from cubinforge.service.importer import import_artifacts
    url = f"sqlite:///{tmp_path / 'r.db'}"
    settings = Settings(home=tmp_path / "home", database_url=url, db_pool_size=4)
    cubin = make_cubin("kernel_test")
    import_artifacts(settings, [(make_manifest("cached-sm_90a-bf16-hd128", cubin), cubin)])
    app = create_app(settings)
    with TestClient(app) as c:
        calls = []
        real = app.state.store.list
        app.state.store.list = lambda *a: calls.append(1) or real(*a)
        assert [i["variant"] for i in c.get("/v1/variants").json()["items"]] == ["cached-sm_90a-bf16-hd128"]
        for _ in range(5):
            assert c.get("/v1/variants").status_code == 200
        assert len(calls) == 1  # the database was asked once
        other = make_cubin("kernel_test", payload=b"second")
        import_artifacts(settings, [(make_manifest("cached2-sm_90a-bf16-hd128", other), other)])
        assert len(c.get("/v1/variants").json()["items"]) == 2 and len(calls) == 2
        # The pool holds a connection for every thread that may ask for one (db.py).
        assert app.state.db_threads <= app.state.db.engine.pool.size() == 4

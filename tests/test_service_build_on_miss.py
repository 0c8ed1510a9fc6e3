"""The service builds on a select miss: 202 and a job, the job compiles on a Dask LocalCluster
and publishes, the next select succeeds. Without a backend a miss stays a 404."""

from __future__ import annotations

import importlib.util

import pytest
from fastapi.testclient import TestClient

from cubinforge.service.app import create_app
from cubinforge.service.config import Settings

SMOKE = {"family": "fa3_fwd", "arch": "sm_90a", "dtype": "bf16", "head_dim": 128, "causal": False,
         "seqlen_q": 4096, "heads_q": 16}


def _app(tmp_path, backend=None):
    return create_app(Settings(home=tmp_path / "home", database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
                               build_backend=backend))


def test_without_a_backend_a_miss_is_a_404(tmp_path):
    with TestClient(_app(tmp_path)) as c:
        r = c.post("/v1/select", json=SMOKE)
        assert r.status_code == 404 and r.json()["error"] == "no_variant"
        r = c.get("/v1/jobs/" + "0" * 32)
        assert r.status_code == 404 and "no build backend" in r.json()["message"]


def test_a_bad_backend_address_fails_at_start(tmp_path):
    with pytest.raises(ValueError, match="expected tcp://HOST:PORT"):
        _app(tmp_path, backend="scheduler:8786")


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="needs the cluster extra")
def test_a_miss_builds_on_the_cluster_publishes_and_the_next_select_succeeds(tmp_path):
    with TestClient(_app(tmp_path, backend="local:1")) as c:
        # what the spec refuses is a 404 that says so, and starts nothing
        r = c.post("/v1/select", json={**SMOKE, "varlen": True, "split_kv": True})
        assert r.status_code == 404, r.text
        assert "the build backend cannot build it" in r.json()["message"] and "varlen" in r.json()["message"]

        r = c.post("/v1/select", json=SMOKE)
        assert r.status_code == 202, r.text
        body = r.json()
        assert body["variant"] == "fa3-fwd-sm_90a-bf16-hd128-noncausal-persistent"  # the default set's choice
        assert r.headers["location"] == body["url"] == f"/v1/jobs/{body['job']}"
        assert c.post("/v1/select", json={**SMOKE, "heads_q": 32}).json()["job"] == body["job"]  # one build

        job = c.app.state.builds.wait(body["job"], timeout=240)
        assert job["status"] == "published", job
        got = c.get(body["url"]).json()
        assert got["status"] == "published" and "1 built" in got["log"] and got["error"] is None

        r = c.post("/v1/select", json=SMOKE)
        assert r.status_code == 200, r.text
        assert r.json()["variant"] == body["variant"]
        manifest = c.get(f"/v1/variants/{body['variant']}").json()["manifest"]
        blob = c.get(f"/v1/blobs/{manifest['cubin']['sha256']}")
        assert blob.status_code == 200 and len(blob.content) == manifest["cubin"]["size"]

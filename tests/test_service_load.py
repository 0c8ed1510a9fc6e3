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

from cubinforge.service.loadtest import run
from cubinforge.service.testing import backend_url, live_server, make_cubin, make_manifest, seed_token

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

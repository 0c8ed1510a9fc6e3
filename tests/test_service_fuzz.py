"""Property-based fuzzing of the OpenAPI schema (schemathesis): no input may produce a 5xx.

In-process over ASGI (the same app uvicorn runs) to stay well under a minute; a valid
bearer token is sent so the write routes are fuzzed past authentication.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402

from cubinforge.service.app import create_app  # noqa: E402
from cubinforge.service.config import Settings  # noqa: E402
from cubinforge.service.testing import backend_url, make_cubin, make_manifest, seed_token  # noqa: E402

_TMP = Path(tempfile.mkdtemp(prefix="cubinforge-fuzz-"))
# CUBINFORGE_FUZZ_BACKEND=postgresql fuzzes against the test PostgreSQL (.ci/postgres.sh) instead.
_URL = backend_url(os.environ.get("CUBINFORGE_FUZZ_BACKEND", "sqlite"), _TMP)
TOKEN = seed_token(_URL)
APP = create_app(Settings(home=_TMP / "home", database_url=_URL, max_cubin_bytes=256 * 1024,
                          migrate_on_start=False))
(_TMP / "home" / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
MAX_EXAMPLES = int(os.environ.get("CUBINFORGE_FUZZ_EXAMPLES", "60"))
# Both inputs that fit the schema and inputs that break it (wrong types, missing fields...).
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@pytest.fixture(scope="module", autouse=True)
def seeded():
    # One real variant, so the read routes also answer 200 and 304, not only 404.
    from cubinforge.service.importer import import_artifacts
    cubin = make_cubin("kernel_test")
    m = make_manifest("fuzz-sm_90a-bf16-hd128", cubin)
    assert import_artifacts(APP.state.settings, [(m, cubin)]) == [(m["variant"], "created")]


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400 and response.status_code != 405 and case.method != "HEAD":
        body = response.json()
        assert body.get("error") and body.get("message"), body

"""Build on a select miss: with a build backend configured (CUBINFORGE_BUILD_BACKEND=local:N or
tcp://scheduler:8786), a select that no published variant fits, for a problem the spec
allows, starts a job that compiles exactly that variant on the Dask cluster, publishes it
into this server's registry, and is polled at GET /v1/jobs/{id}; the next select finds it.

Jobs run one at a time in a thread of this process (the cluster does the parallel work).
Their state is a JSON file per job under $CUBINFORGE_HOME/jobs/, so any server worker can
answer GET /v1/jobs/{id}. A select for a variant whose job is still running, or failed in
the last FAILED_HOLD_S seconds, gets that job again rather than a second build. Without a
backend a miss stays a 404 naming the nearest variants; nothing is ever substituted.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path

from cubinforge.runtime.cache import atomic_write

from .config import Settings

log = logging.getLogger("cubinforge.service")

EXACT = ("arch", "dtype", "head_dim", "causal", "varlen", "paged_kv")  # what a select fixes (selection.py)
FAILED_HOLD_S = 300
_ID = re.compile(r"^[0-9a-f]{32}$")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


class JobFiles:
    """jobs/<id>.json, written atomically."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def read(self, job_id: str) -> dict | None:
        if not _ID.match(job_id):
            return None
        try:
            return json.loads((self.root / f"{job_id}.json").read_text())
        except FileNotFoundError:
            return None

    def write(self, job: dict) -> dict:
        job["updated_at"] = _now()
        atomic_write(self.root / f"{job['id']}.json", (json.dumps(job, indent=2) + "\n").encode())
        return job


class BuildJobs:
    def __init__(self, settings: Settings):
        self.settings = settings
        from cubinforge.generator.cluster import check_address

        check_address(settings.build_backend)  # a typo fails at start, not at the first miss
        self.backend = settings.build_backend
        self.files = JobFiles(Path(settings.home) / "jobs")
        self._by_variant: dict[str, str] = {}  # variant -> its latest job id (this process)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cubinforge-build")
        self._exit = ExitStack()
        self._client = None

    # ------------------------------------------------------------ on a miss
    def on_miss(self, problem: dict) -> tuple[dict | None, str | None]:
        """(the job building the variant this problem needs, None), or (None, why the spec cannot)."""
        from cubinforge.generator.on_demand import variant_for
        from cubinforge.generator.spec import SpecError

        try:
            variant = variant_for(problem["family"], {a: problem[a] for a in EXACT})
        except (SpecError, ValueError) as e:
            return None, str(e)
        with self._lock:
            latest = self._by_variant.get(variant.name)
            job = self.files.read(latest) if latest else None
            if job and (job["status"] in ("queued", "building") or
                        (job["status"] == "failed" and time.time() - job["finished"] < FAILED_HOLD_S)):
                return job, None
            job = self.files.write({"id": uuid.uuid4().hex, "variant": variant.name, "status": "queued",
                                    "backend": self.backend, "created_at": _now(), "finished": None,
                                    "error": None, "log": None})
            self._by_variant[variant.name] = job["id"]
        self._pool.submit(self._run, job, variant)
        return job, None

    # ------------------------------------------------------------ the job
    def _cluster(self):
        if self._client is None:  # started on the first miss, kept until the server stops
            from cubinforge.generator.cluster import open_client

            self._client, close = open_client(self.backend)
            self._exit.callback(close)
        return self._client

    def _run(self, job: dict, variant) -> None:
        from cubinforge.generator import build
        from cubinforge.registry import Registry

        from .importer import import_artifacts
        from .publisher import read_local

        self.files.write({**job, "status": "building"})
        try:
            registry = Registry(home=Path(self.settings.home) / "on-demand")  # the builder's own, client-side
            (outcome,) = build.build([variant], registry, client=self._cluster(), progress=False)
            summary = build.summary([outcome])
            if outcome.status == "failed":
                raise RuntimeError(f"the build failed:\n{summary}")
            (name, status), = import_artifacts(self.settings, [read_local(registry.home, variant.name)],
                                               require_signature=self.settings.require_signature,
                                               publisher="build-on-miss")
            if status.startswith("refused"):
                raise RuntimeError(f"built, but this server refused to publish it: {status}")
            self.files.write({**job, "status": "published", "finished": time.time(), "log": summary})
        except Exception as exc:  # noqa: BLE001 - the job reports it; the server goes on
            log.warning("on-demand build of %s failed: %s", variant.name, exc)
            error = str(exc) if isinstance(exc, RuntimeError) else traceback.format_exc()
            self.files.write({**job, "status": "failed", "finished": time.time(), "error": error})

    def wait(self, job_id: str, timeout: float) -> dict | None:
        """For tests and tools: poll a job until it is published or failed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.files.read(job_id)
            if job and job["status"] in ("published", "failed"):
                return job
            time.sleep(0.2)
        return self.files.read(job_id)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)  # a running build fails and says so
        self._exit.close()

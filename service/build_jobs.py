"""Build on a select miss: with a build backend configured (CUBINFORGE_BUILD_BACKEND=local:N or
tcp://scheduler:8786), a select that no published variant fits, for a problem the spec
allows, starts a job that compiles exactly that variant on the Dask cluster, publishes it
into this server's registry, and is polled at GET /v1/jobs/{id}; the next select finds it.

The service does not import the generator (the layers: service builds on registry and
runtime): it runs the `cubinforge build --exact` command the runtime's compile-on-miss runs
(runtime/compile_on_miss.py), first with --list to learn the variant's name or the spec's
refusal, then with --cluster to build it into a registry of its own, from which the job
publishes through the importer. Jobs run one at a time in a thread of this process (the
cluster does the parallel work). Their state is a JSON file per job under
$CUBINFORGE_HOME/jobs/, so any server worker can answer GET /v1/jobs/{id}. A select for a
variant whose job is still running, or failed in the last FAILED_HOLD_S seconds, gets that
job again rather than a second build. Without a backend a miss stays a 404 naming the
nearest variants; nothing is ever substituted.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import threading
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from cubinforge.runtime.axes import AXES
from cubinforge.runtime.cache import atomic_write
from cubinforge.runtime.compile_on_miss import command

from .config import Settings

log = logging.getLogger("cubinforge.service")

FAILED_HOLD_S = 300
BUILD_TIMEOUT_S = 3600
_ID = re.compile(r"^[0-9a-f]{32}$")
_ADDRESS = re.compile(r"^(local:[1-9][0-9]*|(tcp|tls|ucx|ws|wss)://.+)$")


def _exact(problem: dict) -> dict:
    """The exact axes a select asked for (runtime/axes.py): what the build must fix."""
    return {a: v for a, v in problem.items() if a in AXES and AXES[a].exact and v is not None}


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
        if not _ADDRESS.match(settings.build_backend or ""):  # a typo fails at start, not at the first miss
            raise ValueError(f"CUBINFORGE_BUILD_BACKEND={settings.build_backend!r}: expected tcp://HOST:PORT "
                             f"(a running Dask scheduler) or local:N (a LocalCluster of N workers)")
        self.settings = settings
        self.backend = settings.build_backend
        self.files = JobFiles(Path(settings.home) / "jobs")
        self.build_home = Path(settings.home) / "on-demand"  # the builder's registry (the build's client side)
        self._by_variant: dict[str, str] = {}  # variant -> its latest job id (this process)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cubinforge-build")

    def _build(self, problem: dict, *extra: str, timeout: float) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "CUBINFORGE_DATABASE_URL"}  # never the server's DB
        cmd = command(self.build_home, problem["family"], _exact(problem)) + list(extra)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)

    # ------------------------------------------------------------ on a miss
    def on_miss(self, problem: dict) -> tuple[dict | None, str | None]:
        """(the job building the variant this problem needs, None), or (None, why the spec cannot)."""
        named = self._build(problem, "--list", timeout=120)
        if named.returncode != 0:
            return None, (named.stderr.strip() or named.stdout.strip()).removeprefix("cubinforge build: error: ")
        name = named.stdout.split()[-1]
        with self._lock:
            latest = self._by_variant.get(name)
            job = self.files.read(latest) if latest else None
            if job and (job["status"] in ("queued", "building") or
                        (job["status"] == "failed" and time.time() - job["finished"] < FAILED_HOLD_S)):
                return job, None
            job = self.files.write({"id": uuid.uuid4().hex, "variant": name, "status": "queued",
                                    "backend": self.backend, "created_at": _now(), "finished": None,
                                    "error": None, "log": None})
            self._by_variant[name] = job["id"]
        self._pool.submit(self._run, job, problem)
        return job, None

    # ------------------------------------------------------------ the job
    def _run(self, job: dict, problem: dict) -> None:
        from .importer import import_artifacts
        from .publisher import read_local

        name = job["variant"]
        self.files.write({**job, "status": "building"})
        try:
            built = self._build(problem, "--cluster", self.backend, timeout=BUILD_TIMEOUT_S)
            said = (built.stdout + built.stderr).strip()[-6000:]
            if built.returncode != 0:
                raise RuntimeError(f"the build failed:\n{said}")
            (_, status), = import_artifacts(self.settings, [read_local(self.build_home, name)],
                                            require_signature=self.settings.require_signature,
                                            publisher="build-on-miss")
            if status.startswith("refused"):
                raise RuntimeError(f"built, but this server refused to publish it: {status}")
            self.files.write({**job, "status": "published", "finished": time.time(), "log": built.stdout.strip()})
        except Exception as exc:  # noqa: BLE001 - the job reports it; the server goes on
            log.warning("on-demand build of %s failed: %s", name, exc)
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
        self._pool.shutdown(wait=False, cancel_futures=True)  # a running build finishes in its subprocess

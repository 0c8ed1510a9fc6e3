"""Publish variants to a registry server as a build stores them (`cubinforge build --publish`).

Each artifact is read from the local registry home the moment the build has written it and
sent with `publisher.publish` (the `cubinforge push` client) in a background thread, so the
compiles never wait on the network. Transient failures (server unreachable, 429, 5xx) are
retried with exponential backoff; a refusal (401, 409, 422...) is final. `wait()` returns
the variants that did not publish, and why.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .publisher import PublishError, Signer, publish, read_local


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, PublishError):
        return exc.status is None or exc.status == 429 or exc.status >= 500
    return isinstance(exc, OSError)  # a timeout or reset mid-request


class StreamingPublisher:
    def __init__(self, server: str, token: str, home: Path, sign_key: Path | None = None, attempts: int = 5,
                 backoff: float = 0.5, threads: int = 2):
        self.server, self.token, self.home = server, token, Path(home)
        self.signer = Signer(Path(sign_key)) if sign_key else None
        self.attempts, self.backoff = max(1, attempts), backoff
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cubinforge-publish")
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.results: dict[str, dict] = {}  # name -> the server's answer ({"created": ..., "sha256": ...})

    def submit(self, name: str) -> None:
        """Queue one variant; its manifest and cubin are read now, while they are current."""
        try:
            manifest, cubin = read_local(self.home, name)
            if self.signer:
                manifest = self.signer.sign(manifest)
        except Exception as exc:  # noqa: BLE001 - reported by wait() like any other failure
            fut: Future = Future()
            fut.set_exception(exc)
        else:
            fut = self._pool.submit(self._send, manifest, cubin)
        with self._lock:
            self._futures[name] = fut

    def _send(self, manifest: dict, cubin: bytes) -> dict:
        for attempt in range(self.attempts):
            try:
                return publish(self.server, self.token, manifest, cubin)
            except Exception as exc:  # noqa: BLE001
                if not _transient(exc) or attempt + 1 == self.attempts:
                    raise
                delay = min(10.0, self.backoff * 2 ** attempt) * (0.5 + random.random())
                time.sleep(delay)
        raise AssertionError("unreachable")

    def wait(self) -> dict[str, str]:
        """Block until every queued variant is sent; {name: why} for those that were not."""
        failed: dict[str, str] = {}
        with self._lock:
            futures = dict(self._futures)
        for name, fut in futures.items():
            try:
                self.results[name] = fut.result()
            except Exception as exc:  # noqa: BLE001
                tries = f" (after {self.attempts} tries)" if _transient(exc) else ""
                failed[name] = f"{exc}{tries}"
        self._pool.shutdown(wait=True)
        return failed

    def report(self) -> str:
        created = sum(bool(r.get("created")) for r in self.results.values())
        return (f"published to {self.server}: {len(self.results)} variants "
                f"({created} new, {len(self.results) - created} already there)")

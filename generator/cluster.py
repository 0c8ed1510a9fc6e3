"""Compile on a Dask distributed cluster: connect, send each variant's rendered text, collect.

    with connect("local:4") as client:          # or "tcp://scheduler:8786"
        build.build(variants, registry, client=client)

A task carries everything a worker needs: the variant's name, arch and rendered module
text, plus the client's toolchain and kernel-package digests, which the worker checks
against its own (the content key promises them). Workers need the cubinforge package and
the DSL, nothing else: no shared filesystem, no registry. The CompileResult (cubin,
metadata, contract) comes back to the client, which writes the registry. Dask retries a task
whose worker died (`distributed.scheduler.allowed-failures`); a task that kept killing its
workers comes back as a failure that says so.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import socket
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from .compile_worker import CompileResult
from .content_key import library_digest, toolchain

ADDRESS_HELP = "tcp://HOST:PORT (a running Dask scheduler) or local:N (a LocalCluster of N workers here)"
_SCHEME = re.compile(r"^(tcp|tls|ucx|ws|wss|inproc)://.+")


@dataclass(frozen=True)
class RemoteJob:
    variant: str
    arch: str
    module_name: str
    source: str  # the rendered module itself: the worker reads no file of the client's
    package: str = ""  # the family's kernel package, which the rendered module imports
    toolchain: str = ""  # the client's, as in the content key; empty: not checked
    library: str = ""  # sha256 of the kernel package on the client; empty: not checked

    @classmethod
    def of(cls, variant: str, arch: str, module_name: str, source: str, package: str) -> "RemoteJob":
        return cls(variant, arch, module_name, source, package, toolchain(), library_digest(package))


def _mismatch(job: RemoteJob) -> str | None:
    """Why this worker cannot build what the client's content key describes, or None."""
    where = socket.gethostname()
    if job.toolchain and toolchain() != job.toolchain:
        return (f"worker {where} has the DSL toolchain {toolchain() or '(none installed)'}, the client has "
                f"{job.toolchain}: install the same versions on every worker (pip install 'cubinforge[build]')")
    if job.library:
        try:
            mine = library_digest(job.package)
        except ModuleNotFoundError as exc:
            return f"worker {where} cannot build {job.variant}: {exc}"
        if mine != job.library:
            return (f"worker {where} has a different {job.package} (sha256 {mine[:12]}, the client's is "
                    f"{job.library[:12]}): install the client's version of cubinforge on every worker")
    return None


def compile_remote(job: RemoteJob) -> CompileResult:
    """The task a worker runs: check the toolchain, then compile in this worker's child for the arch."""
    try:
        why = _mismatch(job)
        if why:
            return CompileResult(job.variant, ok=False, error=why)
        from .compile_server import compile_source

        return compile_source(job.variant, job.arch, job.module_name, job.source)
    except Exception:  # noqa: BLE001 - reported as the variant's failure, never lost
        return CompileResult(job.variant, ok=False, error=traceback.format_exc())


def _failure(job: RemoteJob, exc: BaseException) -> CompileResult:
    try:
        from distributed.scheduler import KilledWorker
    except ImportError:  # a plain Executor (tests)
        KilledWorker = ()  # noqa: N806
    if KilledWorker and isinstance(exc, KilledWorker):
        last = getattr(getattr(exc, "last_worker", None), "address", "?")
        tries = getattr(exc, "allowed_failures", 0) + 1
        return CompileResult(job.variant, ok=False, error=(
            f"KilledWorker: every Dask worker that ran {job.variant} died while running it ({tries} tries, "
            f"the last on {last}); Dask stops after distributed.scheduler.allowed-failures. The worker "
            f"process itself crashed or hit its memory limit: see that worker's log"))
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return CompileResult(job.variant, ok=False, error=f"the cluster did not return a result:\n{text}")


def run_jobs(client, jobs: list[RemoteJob], on_result: Callable[[CompileResult], None]) -> None:
    """Submit every job, and hand each result to `on_result` as it completes (any order).
    `client`: a distributed.Client, or any concurrent.futures.Executor."""
    if not jobs:
        return
    executor = client.get_executor(pure=False) if hasattr(client, "get_executor") else client
    futures = {executor.submit(compile_remote, job): job for job in jobs}
    for fut in concurrent.futures.as_completed(futures):
        job = futures[fut]
        try:
            result = fut.result()
        except BaseException as exc:  # noqa: BLE001 - KilledWorker, a lost scheduler: the variant failed
            if isinstance(exc, KeyboardInterrupt):
                raise
            result = _failure(job, exc)
        on_result(result)


def check_address(address: str) -> int | None:
    """N for local:N, None for a scheduler URL; a ValueError naming what would work otherwise."""
    local = re.fullmatch(r"local:(\d+)", address.strip())
    if local:
        if int(local.group(1)) < 1:
            raise ValueError(f"cluster address {address!r}: a LocalCluster needs at least 1 worker")
        return int(local.group(1))
    if not _SCHEME.match(address.strip()):
        raise ValueError(f"cluster address {address!r}: expected {ADDRESS_HELP}")
    return None


def open_client(address: str, wait_s: float = 60.0) -> tuple:
    """(a distributed.Client for `address`, a function that closes it and any LocalCluster).
    The client is not made the process default, so it can be opened and closed on any thread."""
    n = check_address(address)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ModuleNotFoundError("--cluster needs Dask distributed: pip install 'cubinforge[cluster]'") from None
    if n is not None:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                               silence_logs=logging.ERROR)
        client = Client(cluster, set_as_default=False)

        def close() -> None:
            client.close()
            cluster.close()

        return client, close
    client = Client(address.strip(), timeout=f"{wait_s}s", set_as_default=False)
    try:
        client.wait_for_workers(1, timeout=wait_s)
    except TimeoutError:
        client.close()
        raise ValueError(f"the Dask scheduler at {address} has no workers after {wait_s:.0f} s: start some "
                         f"(`dask worker {address}`)") from None
    return client, client.close


@contextmanager
def connect(address: str, wait_s: float = 60.0) -> Iterator:
    """A distributed.Client for `address`: tcp://HOST:PORT, or local:N for a LocalCluster of N
    single-threaded worker processes (closed again on exit)."""
    client, close = open_client(address, wait_s)
    try:
        yield client
    finally:
        close()


def describe(client) -> str:
    """'N workers, M threads' of a client's cluster (for the build's first line)."""
    try:
        threads = client.nthreads()
    except AttributeError:
        return "an executor"
    return f"{len(threads)} workers, {sum(threads.values())} threads at {client.scheduler.address}"

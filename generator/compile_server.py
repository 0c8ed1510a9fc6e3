"""A long-lived compile process per arch on a cluster worker, fed over a pipe.

Dask workers are daemonic processes, so they cannot own a multiprocessing pool; and the DSL
fixes its target arch when cutlass is imported. So each worker starts, with `subprocess`, one
child per arch (`python -m cubinforge.generator.compile_server ARCH DUMP_DIR`) that imports
cutlass once and then compiles one job at a time: a pickled CompileJob in on stdin, a pickled
CompileResult out on stdout (the child's own prints go to stderr). Everything the child
touches (the rendered module, the DSL's dump folder) lives in a temporary folder of the
worker: nothing is read from the client's filesystem. A child that dies takes only the job it
was running with it, and that job's result says how it died.
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .compile_worker import CompileJob, CompileResult, compile_job, init_worker


def _died(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class CompileServer:
    """One compile child for one arch, in a private temporary folder (removed on close)."""

    def __init__(self, arch: str):
        self.arch = arch
        self.dir = Path(tempfile.mkdtemp(prefix=f"cubinforge-{arch}-"))
        self.dump_dir = self.dir / "dump"
        (self.dir / "src").mkdir()
        self._stderr = open(self.dir / "stderr.log", "w+b")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cubinforge.generator.compile_server", arch, str(self.dump_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=self.dir)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def compile(self, variant: str, module_name: str, source: str) -> CompileResult:
        path = self.dir / "src" / f"{module_name}.py"
        path.write_text(source)
        try:
            pickle.dump(CompileJob(variant, self.arch, str(path), module_name), self.proc.stdin)
            self.proc.stdin.flush()
            return pickle.load(self.proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = None
            return CompileResult(variant, ok=False, error=(
                f"the {self.arch} compile process on {socket.gethostname()} (pid {self.proc.pid}) {_died(code)} "
                f"while compiling {variant} (a crash in the DSL or out of memory); its stderr ends:\n"
                f"{self.stderr_tail()}"))
        finally:
            path.unlink(missing_ok=True)
            for leftover in self.dump_dir.glob("*/*"):  # the DSL's --keep-cubin copies; the result has the cubin
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)

    def stderr_tail(self, limit: int = 4000) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")
        return text[-limit:] or "(nothing)"

    def close(self) -> None:
        if self.alive:
            self.proc.stdin.close()  # EOF: the child's loop ends
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# Idle servers of this process, by arch. A worker running several tasks at once (threads)
# takes one server per task, so no two jobs ever share a child.
_idle: dict[str, list[CompileServer]] = {}
_lock = threading.Lock()


def compile_source(variant: str, arch: str, module_name: str, source: str) -> CompileResult:
    with _lock:
        pool = _idle.setdefault(arch, [])
        server = pool.pop() if pool else None
    if server is None or not server.alive:
        if server is not None:
            server.close()
        server = CompileServer(arch)
    try:
        return server.compile(variant, module_name, source)
    finally:
        if server.alive:
            with _lock:
                _idle[arch].append(server)
        else:
            server.close()


def shutdown() -> None:
    """Stop every idle compile child of this process (they also stop when this process exits)."""
    with _lock:
        servers = [s for pool in _idle.values() for s in pool]
        _idle.clear()
    for s in servers:
        s.close()


atexit.register(shutdown)


def _serve(arch: str, dump_dir: str) -> None:
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the DSL's and the kernels' prints must not corrupt the result stream
    init_worker(arch, dump_dir)
    jobs = sys.stdin.buffer
    while True:
        try:
            job = pickle.load(jobs)
        except EOFError:
            return
        pickle.dump(compile_job(job), channel)
        channel.flush()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])

"""Runs in a spawned worker process: import one rendered module, call build(), check and describe it.

The worker sets CUTE_DSL_ARCH before cutlass is imported (one pool per arch) and points the
DSL's dump folder into the build folder. It returns
plain data (bytes, dicts, strings), and on failure the traceback as text, never raising.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
import time
import traceback
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CompileJob:
    variant: str
    arch: str
    source_path: str
    module_name: str
    sass: bool = True  # False: the caller disassembles its cubins in batches (metadata.with_sass)


@dataclass
class CompileResult:
    variant: str
    ok: bool
    seconds: float = 0.0
    error: str | None = None
    cubin: bytes = b""
    contract: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    compile_options: str = ""
    ptxas_version: str | None = None
    sass_pending: bool = False  # the metadata still lacks its SASS counts (CompileJob.sass False)
    cpu_seconds: float = 0.0  # the worker's CPU (user+sys) for this job: what a build's cost is made of


def init_worker(arch: str, dump_dir: str) -> None:
    """Pool initializer: fix the DSL's target arch and where `--keep-cubin` writes its copies
    (by default the working directory), then import cutlass once (not timed per variant)."""
    own = os.path.join(dump_dir, f"worker-{os.getpid()}")  # variants can share a dump file name
    os.environ["CUTE_DSL_ARCH"] = arch
    os.environ["CUTE_DSL_DUMP_DIR"] = own
    os.makedirs(own, exist_ok=True)
    try:
        import cutlass  # noqa: F401
    except Exception:  # reported by the first job that needs it, with its traceback
        pass
    # The DSL's modules live as long as the worker: keep the collector from walking their
    # ~150k objects again in every full collection a trace sets off (~2 CPU-s a default build).
    gc.collect()
    gc.freeze()


def _load(job: CompileJob):
    spec = importlib.util.spec_from_file_location(job.module_name, job.source_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[job.module_name] = module
    spec.loader.exec_module(module)
    return module


def _ptxas_version(cubin_toolkit: str | None) -> str | None:
    if cubin_toolkit:
        return cubin_toolkit
    try:
        from cutlass.base_dsl.version_info import CUDA_VERSION

        return f"{CUDA_VERSION.major}.{CUDA_VERSION.minor}"
    except Exception:
        return None


def describe_build(variant: str, arch: str, build, seconds: float = 0.0, sass: bool = True) -> CompileResult:
    """Check a KernelBuild and describe it: the contract assembled and verified against the
    cubin's own parameter table, metadata from the ELF and SASS (with `sass` False, without the
    SASS counts: the result says sass_pending). Raises when a check fails."""
    from .contract import assemble, verify
    from .cubin_elf import read_cubin
    from .metadata import kernel_metadata
    from .sass import sass_counts

    for attr in ("cubin", "entry", "block", "cluster", "dynamic_smem_bytes", "contract", "compile_options"):
        if not hasattr(build, attr):
            raise TypeError(f"build() returned {type(build).__name__} without {attr!r}; expected a KernelBuild")
    info = read_cubin(build.cubin)
    kernel = info.kernel(build.entry)
    contract = assemble(variant, arch, build, kernel)
    verify(contract, kernel, info.arch)
    return CompileResult(
        variant=variant,
        ok=True,
        seconds=seconds,
        cubin=bytes(build.cubin),
        contract=contract,
        metadata=kernel_metadata(info, kernel, build, sass_counts(build.cubin) if sass else None),
        compile_options=build.compile_options,
        ptxas_version=info.ptxas_version or _ptxas_version(info.toolkit),
        sass_pending=not sass,
    )


def compile_job(job: CompileJob) -> CompileResult:
    os.environ.setdefault("CUTE_DSL_ARCH", job.arch)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        build = _load(job).build()
        result = describe_build(job.variant, job.arch, build, time.perf_counter() - start, sass=job.sass)
    except BaseException as exc:  # noqa: BLE001 - everything is reported, the pool goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        result = CompileResult(variant=job.variant, ok=False, seconds=time.perf_counter() - start,
                               error=traceback.format_exc())
    result.cpu_seconds = time.process_time() - cpu
    return result

"""Build variants into the registry: render, skip what is current, compile in parallel, store.

Each variant's rendered module is written to the build folder and compiled in a spawned
worker (one pool per arch, CUTE_DSL_ARCH set before cutlass is imported), or, given a Dask
client, on a cluster (generator/cluster.py): the plan, the skip check, the progress bar and
the registry writes are the same either way, and only this process writes the registry. A
variant whose content key is already in the registry is skipped without importing cutlass.
A failing variant is reported with its traceback and the others still build.
"""

from __future__ import annotations

import multiprocessing
import resource
import shutil
import time
import traceback
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable

from cubinforge.registry import ArtifactInput

from .compile_worker import CompileJob, CompileResult, compile_job, init_worker
from .content_key import content_key, dsl_version, package_dir
from .families import get_family
from .metadata import with_sass
from .render import RenderedSource, render
from .sass import sass_counts_many
from .spec import Variant

# Cubins disassembled per nvdisasm run (sass.py: its start-up is most of the cost of one).
SASS_BATCH = 16


@dataclass
class Outcome:
    variant: str
    status: str  # built | skipped | failed
    seconds: float = 0.0
    registers: int | None = None
    smem_bytes: int | None = None  # dynamic + static
    error: str | None = None
    cpu_seconds: float = 0.0  # the compile worker's user+sys for this variant
    warning: str | None = None  # built, but something in its SASS needs a look


@dataclass
class _Pending:
    variant: Variant
    rendered: RenderedSource
    key: str
    job: CompileJob


def _outcome_from_record(name: str, status: str, seconds: float, metadata: dict) -> Outcome:
    smem = (metadata.get("dynamic_smem_bytes") or 0) + (metadata.get("static_smem_bytes") or 0)
    warning = None
    if metadata.get("wgmma_serialized"):
        sass = metadata.get("sass") or {}
        warning = (f"ptxas serialized its wgmma ({sass.get('warpgroup')} WARPGROUP arrives/waits for "
                   f"{sass.get('hgmma', 0) + sass.get('qgmma', 0)} MMAs): every GEMM waits for the one before. "
                   f"Compile it with CUTE_DSL_COMPILER_OPT='remarks{{ptx}}' for ptxas's reason (C7510-C7520)")
    return Outcome(name, status, seconds, metadata.get("registers"), smem, warning=warning)


def plan(variants: Iterable[Variant], registry, build_dir: Path, force: bool = False, write_sources: bool = True):
    """Split variants into (pending compile jobs, outcomes already known: skipped or failed).
    A cluster build sends the rendered text itself, so it writes no sources here."""
    current = registry.content_keys()
    pending: list[_Pending] = []
    done: list[Outcome] = []
    for v in variants:
        fam = get_family(v.family)
        try:
            rendered = render(v)
            key = content_key(rendered.text, fam.package, fam.options_for(v.arch), v.arch)
        except Exception as exc:  # e.g. the kernel package is not written yet
            done.append(Outcome(v.name, "failed", error=f"{type(exc).__name__}: {exc}"))
            continue
        have = current.get(v.name)
        if not force and have and have[0] == key and registry.blobs.has(have[1]):
            done.append(Outcome(v.name, "skipped"))
            continue
        path = build_dir / f"{rendered.module_name}.py"
        if write_sources and (not path.is_file() or path.read_text() != rendered.text):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rendered.text)
        job = CompileJob(v.name, v.arch, str(path), rendered.module_name, sass=False)  # _SassBatch counts them
        pending.append(_Pending(v, rendered, key, job))
    return pending, done


class _SassBatch:
    """Results whose metadata still lacks its SASS counts (CompileJob.sass False), held until
    enough are here to be worth one nvdisasm run, then completed and passed on; others pass at once."""

    def __init__(self, on_result: Callable):
        self.on_result = on_result
        self.held: list[CompileResult] = []

    def add(self, result: CompileResult) -> None:
        if result.ok and result.sass_pending:
            self.held.append(result)
        else:
            self.on_result(result)

    def flush(self) -> None:
        held, self.held = self.held, []
        if not held:
            return
        for result, counts in zip(held, sass_counts_many([r.cubin for r in held])):
            result.metadata, result.sass_pending = with_sass(result.metadata, counts), False
            self.on_result(result)


def _run_pool(arch: str, jobs: list[CompileJob], workers: int, isolate: bool, on_result: Callable,
              dump_dir: Path) -> list[CompileJob]:
    """Compile jobs in a spawn pool; return the jobs lost to a crashed worker."""
    ctx = multiprocessing.get_context("spawn")
    extra = {"max_tasks_per_child": 1} if isolate else {}
    lost: list[CompileJob] = []
    workers = max(1, min(workers, len(jobs)))
    batch = _SassBatch(on_result)
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                             initializer=init_worker, initargs=(arch, str(dump_dir)), **extra) as pool:
        futures = {pool.submit(compile_job, j): j for j in jobs}
        running = len(futures)
        for fut in as_completed(futures):
            job = futures[fut]
            running -= 1
            try:
                batch.add(fut.result())
            except BrokenProcessPool:
                lost.append(job)
            except Exception:  # e.g. a result that could not be sent back
                batch.add(CompileResult(job.variant, ok=False, error=traceback.format_exc()))
            # Once a worker has nothing left to start, disassemble on its core rather than after the pool.
            if len(batch.held) >= SASS_BATCH or running < workers:
                batch.flush()
    batch.flush()
    return lost


def build(variants: list[Variant], registry, jobs: int = 1, force: bool = False,
          build_dir: Path | None = None, progress: bool | None = None, client=None,
          on_stored: Callable[[str], None] | None = None) -> list[Outcome]:
    """Build every variant not current in the registry; return one Outcome per variant, in order.

    `client`: a Dask `distributed.Client` (or any concurrent.futures Executor) to compile on
    instead of local processes. `on_stored(name)` is called for each variant whose artifact is
    current in the registry: as it is written, and at once for those skipped as current.
    """
    from tqdm import tqdm

    build_dir = Path(build_dir) if build_dir else registry.home / "build"
    pending, done = plan(variants, registry, build_dir, force, write_sources=client is None)
    by_name = {p.variant.name: p for p in pending}
    outcomes = {o.variant: o for o in done}
    bar = tqdm(total=len(pending), unit="variant", desc="compile", disable=(None if progress is None else not progress))

    def store(result: CompileResult) -> None:
        p = by_name[result.variant]
        if result.ok:
            try:
                registry.put_artifact(ArtifactInput(
                    name=p.variant.name, family=p.variant.family, axes=p.variant.axes, cubin=result.cubin,
                    metadata=result.metadata, contract=result.contract, source=p.rendered.text,
                    template=p.rendered.template, dsl_version=dsl_version(), ptxas_version=result.ptxas_version,
                    compile_options=result.compile_options, content_key=p.key, build_seconds=result.seconds,
                ))
                outcomes[result.variant] = _outcome_from_record(result.variant, "built", result.seconds, result.metadata)
                outcomes[result.variant].cpu_seconds = result.cpu_seconds
                if on_stored is not None:
                    on_stored(result.variant)
            except Exception as exc:
                outcomes[result.variant] = Outcome(result.variant, "failed", result.seconds,
                                                   error=f"storing failed: {type(exc).__name__}: {exc}")
        else:
            outcomes[result.variant] = Outcome(result.variant, "failed", result.seconds, error=result.error)
        bar.set_postfix_str(result.variant[-40:], refresh=False)
        bar.update(1)

    if on_stored is not None:
        for o in done:
            if o.status == "skipped":
                on_stored(o.variant)
    try:
        if client is not None:
            from .cluster import RemoteJob, run_jobs

            run_jobs(client, [RemoteJob.of(p.variant.name, p.variant.arch, p.rendered.module_name, p.rendered.text,
                                           get_family(p.variant.family).package) for p in pending], on_result=store)
        else:
            _run_local(pending, jobs, build_dir, store)
    finally:
        bar.close()
    return [outcomes[v.name] for v in variants]


@lru_cache(maxsize=None)
def _package_bytes(package: str) -> int:
    return sum(f.stat().st_size for f in package_dir(package).rglob("*.py"))


def _longest_first(pending: list[_Pending]) -> list[_Pending]:
    """The variants of the biggest kernel packages first (an FA3 variant takes ~10x the CPU of
    a combine or KV-append one), in set order within a package: the pool then ends on short
    jobs instead of one long compile running alone on a core."""
    return sorted(pending, key=lambda p: -_package_bytes(get_family(p.variant.family).package))


def _run_local(pending: list[_Pending], jobs: int, build_dir: Path, store: Callable) -> None:
    by_arch: dict[str, list[CompileJob]] = defaultdict(list)
    for p in _longest_first(pending):
        by_arch[p.variant.arch].append(p.job)
    for arch, arch_jobs in by_arch.items():
        dump_dir = build_dir / "dsl-dump"
        lost = _run_pool(arch, arch_jobs, jobs, isolate=False, on_result=store, dump_dir=dump_dir)
        if lost:  # a worker died (not an exception): retry each alone to find the culprit
            lost = _run_pool(arch, lost, jobs, isolate=True, on_result=store, dump_dir=dump_dir)
        for job in lost:
            store(CompileResult(job.variant, ok=False, error="the compile worker process died (crash or out of memory)"))
    shutil.rmtree(build_dir / "dsl-dump", ignore_errors=True)  # the DSL's --keep-cubin copies; the registry has them


# ---------------------------------------------------------------- reporting


def _error_tail(error: str | None, lines: int = 40) -> str:
    """The end of a traceback: the exception and its message, whole if it is not too long."""
    text = (error or "").rstrip().splitlines()
    start = max((i for i, line in enumerate(text) if line and not line[0].isspace() and i > 0), default=0)
    keep = text[max(0, min(start - 4, len(text) - lines)):]  # the exception plus the frame that raised it
    return "\n".join(keep[-lines:] if len(keep) > lines else keep)


def summary(outcomes: list[Outcome], elapsed: float | None = None, cpu: float | None = None) -> str:
    """A table (variant, status, seconds, registers, smem), then each failure's traceback tail.
    `cpu`: the build's user+sys in this process and its children (compile workers, nvdisasm)."""
    width = max([len("variant")] + [len(o.variant) for o in outcomes])
    head = f"{'variant':<{width}}  {'status':<7}  {'seconds':>7}  {'regs':>4}  {'smem':>7}"
    rows = [head, "-" * len(head)]
    for o in outcomes:
        secs = f"{o.seconds:.1f}" if o.status != "skipped" else "-"
        regs = "-" if o.registers is None else str(o.registers)
        smem = "-" if o.smem_bytes is None else str(o.smem_bytes)
        rows.append(f"{o.variant:<{width}}  {o.status:<7}  {secs:>7}  {regs:>4}  {smem:>7}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("built", "skipped", "failed")}
    tail = ", ".join(f"{n} {s}" for s, n in counts.items())
    compiled = sum(o.cpu_seconds for o in outcomes)
    cost = f" ({cpu:.1f} CPU-s, {compiled:.1f} of them in compile jobs)" if cpu is not None else ""
    rows.append(f"{tail}" + (f" in {elapsed:.1f} s{cost}" if elapsed is not None else ""))
    rows += [f"WARNING {o.variant}: {o.warning}" for o in outcomes if o.warning]
    shown: dict[str, list[str]] = {}  # one traceback per distinct error, with every variant it hit
    for o in outcomes:
        if o.status == "failed":
            shown.setdefault(_error_tail(o.error).replace(o.variant, "<variant>"), []).append(o.variant)
    for tail, names in shown.items():
        more = f" (and {len(names) - 1} more with the same error: {', '.join(names[1:])})" if len(names) > 1 else ""
        rows += ["", f"FAILED {names[0]}{more}:", tail.replace("<variant>", names[0])]
    return "\n".join(rows)


def _cpu_seconds() -> float:
    """User+sys of this process and of its children that have ended (a local build's pool
    workers and nvdisasm runs; not a cluster's workers)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def run(variants: list[Variant], registry, jobs: int = 1, force: bool = False,
        build_dir: Path | None = None, progress: bool | None = None, echo: Callable[[str], None] = print,
        client=None, publisher=None) -> int:
    """Build, print the summary, and return the exit code (1 if any variant failed).

    `publisher`: an object with `submit(name)` (called as each artifact is stored) and
    `wait() -> {name: error}`; a variant that built but did not publish counts as failed.
    """
    start, cpu = time.perf_counter(), _cpu_seconds()
    try:
        outcomes = build(variants, registry, jobs=jobs, force=force, build_dir=build_dir, progress=progress,
                         client=client, on_stored=publisher.submit if publisher else None)
    finally:
        unpublished = publisher.wait() if publisher else {}
    for o in outcomes:
        if o.variant in unpublished:
            o.status, o.error = "failed", f"in the registry, but publishing failed: {unpublished[o.variant]}"
    echo(summary(outcomes, time.perf_counter() - start, _cpu_seconds() - cpu))
    return 1 if any(o.status == "failed" for o in outcomes) else 0

"""The metadata stored beside a cubin: what its ELF says plus what the generator knows."""

from __future__ import annotations

from .cubin_elf import CubinInfo, KernelInfo, param_table
from .kernel_build import KernelBuild
from .sass import serialized_wgmma


def kernel_metadata(info: CubinInfo, kernel: KernelInfo, build: KernelBuild, sass: dict | None) -> dict:
    """Manifest `metadata`; `sass` is sass.sass_counts of the cubin (None without the tools)."""
    meta = {
        "entry": kernel.entry,
        "arch": info.arch,
        "registers": kernel.registers,
        "static_smem_bytes": kernel.static_smem_bytes,
        "reserved_smem_bytes": kernel.reserved_smem_bytes,
        "dynamic_smem_bytes": int(build.dynamic_smem_bytes),
        "max_threads": kernel.max_threads,
        "stack_frame_bytes": kernel.stack_frame_bytes,
        "min_stack_bytes": kernel.min_stack_bytes,
        "spill_store_bytes": None,
        "spill_load_bytes": None,
        "param_table": param_table(kernel),
        "param_bytes": kernel.param_bytes,
        "block": list(build.block),
        "cluster": list(build.cluster),
    }
    if build.extra:
        meta["kernel"] = build.extra
    return with_sass(meta, sass)


def with_sass(meta: dict, sass: dict | None) -> dict:
    """`meta` (kernel_metadata's) with what the SASS says: the spill bytes and the `sass` counts.
    Spill bytes come from the SASS (LDL/STL widths) when cuobjdump is installed; without it they
    are 0 when the stack frame is 0 (no local memory) and None otherwise. A build that
    disassembles its cubins in batches (build.py) fills these in after the worker's describe."""
    out = {k: v for k, v in meta.items() if k not in ("sass", "kernel", "wgmma_serialized")}
    if sass is not None:
        out["spill_store_bytes"], out["spill_load_bytes"] = sass["spill_store_bytes"], sass["spill_load_bytes"]
        keys = ("hgmma", "qgmma", "utmaldg", "utmastg", "ldl", "stl", "warpgroup", "instructions")
        sm100 = ("utchmma", "ldtm", "sttm", "tmem_alloc", "tmem_dealloc")  # recorded where present
        out["sass"] = {k: sass[k] for k in keys} | {k: sass[k] for k in sm100 if sass.get(k)}
        if serialized_wgmma(sass):
            out["wgmma_serialized"] = True  # the build's summary warns (build.summary)
    else:
        out["spill_store_bytes"] = out["spill_load_bytes"] = 0 if meta["stack_frame_bytes"] == 0 else None
    if "kernel" in meta:
        out["kernel"] = meta["kernel"]
    return out

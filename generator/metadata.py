"""The metadata stored beside a cubin: what its ELF says plus what the generator knows."""

from __future__ import annotations

from .cubin_elf import CubinInfo, KernelInfo, param_table
from .kernel_build import KernelBuild


def kernel_metadata(info: CubinInfo, kernel: KernelInfo, build: KernelBuild, sass: dict | None) -> dict:
    """Manifest `metadata`. Spill bytes come from the SASS (LDL/STL widths) when cuobjdump is
    installed; without it they are 0 when the stack frame is 0 (no local memory) and None otherwise."""
    if sass is not None:
        spill_store, spill_load = sass["spill_store_bytes"], sass["spill_load_bytes"]
    elif kernel.stack_frame_bytes == 0:
        spill_store = spill_load = 0
    else:
        spill_store = spill_load = None
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
        "spill_store_bytes": spill_store,
        "spill_load_bytes": spill_load,
        "param_table": param_table(kernel),
        "param_bytes": kernel.param_bytes,
        "block": list(build.block),
        "cluster": list(build.cluster),
    }
    if sass is not None:
        keys = ("hgmma", "qgmma", "utmaldg", "utmastg", "ldl", "stl", "instructions")
        sm100 = ("utchmma", "ldtm", "sttm", "tmem_alloc", "tmem_dealloc")  # recorded where present
        meta["sass"] = {k: sass[k] for k in keys} | {k: sass[k] for k in sm100 if sass.get(k)}
    if build.extra:
        meta["kernel"] = build.extra
    return meta

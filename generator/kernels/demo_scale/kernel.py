"""The demo_scale kernel, `a[i] *= scale`, and its launch contract."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor

from ...cubin_elf import read_cubin
from ..common import aot_compile
from ...kernel_build import KernelBuild
from .config import BLOCK, DemoConfig

_DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}
ALIGN = 16


@cute.kernel
def scale_kernel(a: cute.Tensor, scale: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * BLOCK + tidx
    if i < a.shape[0]:
        a[i] = (a[i].to(cutlass.Float32) * scale).to(a.element_type)


@cute.jit
def scale_host(a: cute.Tensor, scale: cutlass.Float32):
    scale_kernel(a, scale).launch(grid=[(a.shape[0] + BLOCK - 1) // BLOCK, 1, 1], block=[BLOCK, 1, 1])


def contract(config: DemoConfig) -> dict:
    """What a launcher must know: `a` is a CuTe tensor struct {ptr, i32 n}, then the f32 scale."""
    return {
        "grid": [["n", BLOCK, "ceil_div"], [1], [1]],
        "symbols": {"n": {"tensor": "a", "dim": 0, "min": 1}},
        "tensors": {
            "a": {"role": "output", "dtype": config.dtype, "dims": ["n"], "contiguous_dim": 0, "align_bytes": ALIGN}
        },
        "scalars": {"scale": {"type": "f32", "default": [1.0]}},
        "checks": [{"expr": ["n", 2147483647, "<="], "message": "n must fit in an i32"}],
        "params": [
            {
                "ordinal": 0, "offset": 0, "size": 16, "align": 8, "name": "a", "kind": "struct",
                "fields": [
                    {"offset": 0, "type": "ptr", "value": ["a.ptr"]},
                    {"offset": 8, "type": "i32", "value": ["a.shape.0"]},
                ],
            },
            {"ordinal": 1, "offset": 16, "size": 4, "align": 4, "name": "scale", "kind": "scalar",
             "type": "f32", "value": ["scale"]},
        ],
    }


def compile_variant(config: DemoConfig) -> KernelBuild:
    options = f"--gpu-arch {config.arch} --keep-cubin"
    n = cute.sym_int()
    a = make_fake_compact_tensor(_DTYPES[config.dtype], (n,), assumed_align=ALIGN)
    compiled = aot_compile(scale_host, a, cutlass.Float32(1.0), options=options)
    cubin = compiled.__cubin__
    (entry,) = read_cubin(cubin).entries
    return KernelBuild(
        cubin=cubin,
        entry=entry,
        block=(BLOCK, 1, 1),
        cluster=(1, 1, 1),
        dynamic_smem_bytes=0,
        contract=contract(config),
        compile_options=options,
    )

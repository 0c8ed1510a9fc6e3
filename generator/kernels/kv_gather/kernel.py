"""The gather kernel and its launch contract.

Block (j, h, b): key j of head h of sequence b. For j < seqused_k[b] it copies row
j % page_size of page page_table[b, j // page_size] to k[b, j, h] (and v); past seqused_k it
writes zeros, so the dense attention that follows reads finite rows where it masks.
"""

import time

from ..common import aot_compile, dsl_environment, lay_out, tensor_struct

dsl_environment("sm_90a")  # before cutlass is imported
import cutlass  # noqa: E402  (the package is imported only by compile workers)
import cutlass.cute as cute  # noqa: E402

from ...kernel_build import KernelBuild  # noqa: E402
from .config import WARP, GatherConfig  # noqa: E402


def _fns(dtype):
    @cute.kernel
    def gather_kernel(mKc: cute.Tensor, mVc: cute.Tensor, mTable: cute.Tensor, mUsed: cute.Tensor,
                      mK: cute.Tensor, mV: cute.Tensor):
        j, h, b = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        cols = cute.size(mK.shape[3]) // WARP
        page_size = mKc.shape[1]
        slot = j // page_size
        if j < mUsed[b] and slot < mTable.shape[1]:
            page = mTable[b, slot]
            row = j - slot * page_size
            for c in cutlass.range_constexpr(cols):
                mK[b, j, h, c * WARP + lane] = mKc[page, row, h, c * WARP + lane]
                mV[b, j, h, c * WARP + lane] = mVc[page, row, h, c * WARP + lane]
        else:
            for c in cutlass.range_constexpr(cols):
                mK[b, j, h, c * WARP + lane] = dtype(0.0)
                mV[b, j, h, c * WARP + lane] = dtype(0.0)

    @cute.jit
    def gather_host(mKc: cute.Tensor, mVc: cute.Tensor, mTable: cute.Tensor, mUsed: cute.Tensor,
                    mK: cute.Tensor, mV: cute.Tensor):
        grid = (cute.size(mK.shape[1]), cute.size(mK.shape[2]), cute.size(mK.shape[0]))
        gather_kernel(mKc, mVc, mTable, mUsed, mK, mV).launch(grid=grid, block=[WARP, 1, 1])

    return gather_host


def contract(cfg: GatherConfig) -> dict:
    params = [
        tensor_struct("k_cache", None, "k_cache", ["num_pages", "page_size", "heads_kv"], [0, 1, 2]),
        tensor_struct("v_cache", None, "v_cache", ["num_pages", "page_size", "heads_kv"], [0, 1, 2]),
        tensor_struct("page_table", None, "page_table", ["batch", "max_pages"], [0]),
        tensor_struct("seqused_k", None, "seqused_k", ["batch"], []),
        tensor_struct("k", None, "k", ["batch", "seqlen_k", "heads_kv"], [0, 1, 2]),
        tensor_struct("v", None, "v", ["batch", "seqlen_k", "heads_kv"], [0, 1, 2]),
    ]
    lay_out(params, number=True)
    cache = {"role": "input", "dtype": cfg.dtype, "dims": ["num_pages", "page_size", "heads_kv", "head_dim"],
             "contiguous_dim": 3, "align_bytes": 2}
    dense = {"role": "output", "dtype": cfg.dtype, "dims": ["batch", "seqlen_k", "heads_kv", "head_dim"],
             "contiguous_dim": 3, "align_bytes": 2}
    return {
        "grid": [["seqlen_k"], ["heads_kv"], ["batch"]],
        "symbols": {
            "num_pages": {"tensor": "k_cache", "dim": 0, "min": 1},
            "page_size": {"tensor": "k_cache", "dim": 1, "min": 1},
            "heads_kv": {"tensor": "k_cache", "dim": 2, "min": 1},
            "head_dim": {"tensor": "k_cache", "dim": 3, "fixed": cfg.head_dim},
            "batch": {"tensor": "page_table", "dim": 0, "min": 1},
            "max_pages": {"tensor": "page_table", "dim": 1, "min": 1},
            "seqlen_k": {"tensor": "k", "dim": 1, "min": 1},
        },
        "tensors": {
            "k_cache": cache, "v_cache": dict(cache),
            "page_table": {"role": "input", "dtype": "i32", "dims": ["batch", "max_pages"], "contiguous_dim": 1,
                           "align_bytes": 4},
            "seqused_k": {"role": "input", "dtype": "i32", "dims": ["batch"], "contiguous_dim": 0, "align_bytes": 4},
            "k": dense, "v": dict(dense),
        },
        "scalars": {},
        "checks": [
            {"expr": ["heads_kv", 65535, "<="], "message": "heads_kv must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
        ],
        "params": params,
    }


def compile_variant(cfg: GatherConfig) -> KernelBuild:
    from cutlass.cute.runtime import make_fake_tensor

    from ...cubin_elf import read_cubin

    dt = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}[cfg.dtype]
    d = cfg.head_dim

    def s64():
        return cute.sym_int64()

    pages, psize, heads, batch, seqlen = (cute.sym_int() for _ in range(5))
    kc = make_fake_tensor(dt, (pages, psize, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    vc = make_fake_tensor(dt, (pages, psize, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    table = make_fake_tensor(cutlass.Int32, (batch, cute.sym_int()), stride=(s64(), 1), assumed_align=4)
    used = make_fake_tensor(cutlass.Int32, (batch,), stride=(1,), assumed_align=4)
    k = make_fake_tensor(dt, (batch, seqlen, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    v = make_fake_tensor(dt, (batch, seqlen, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    options = f"--gpu-arch {cfg.arch} --keep-cubin"
    t0 = time.perf_counter()
    compiled = aot_compile(_fns(dt), kc, vc, table, used, k, v, options=options)
    seconds = time.perf_counter() - t0
    cubin = bytes(compiled.__cubin__)
    (entry,) = read_cubin(cubin).entries
    return KernelBuild(cubin=cubin, entry=entry, block=(WARP, 1, 1), cluster=(1, 1, 1), dynamic_smem_bytes=0,
                       contract=contract(cfg), compile_options=options,
                       extra={"dsl_compile_seconds": round(seconds, 3)})

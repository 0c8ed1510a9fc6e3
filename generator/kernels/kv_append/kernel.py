"""The append kernel and its launch contract.

Block (i, h, b) copies token i of head h of sequence b: position p = cache_seqlens[b] + i
of the cache (dense: row p of batch b; paged: row p % page_size of page
page_table[b, p // page_size]). A position past the cache's capacity is not written (the
runtime refuses it up front where it can see the lengths). Block (0, 0, b) also writes
seqused_k[b] = cache_seqlens[b] + seqlen_new.
"""

import time

from ..common import aot_compile, dsl_environment, lay_out, tensor_struct

dsl_environment("sm_90a")  # before cutlass is imported
import cutlass  # noqa: E402  (the package is imported only by compile workers)
import cutlass.cute as cute  # noqa: E402

from ...kernel_build import KernelBuild  # noqa: E402
from .config import WARP, AppendConfig  # noqa: E402


def _fns(paged: bool):
    @cute.kernel
    def append_kernel(mK: cute.Tensor, mV: cute.Tensor, mKc: cute.Tensor, mVc: cute.Tensor,
                      mLens: cute.Tensor, mUsed: cute.Tensor, mTable: cute.Tensor):
        i, h, b = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        base = mLens[b]
        pos = base + i
        cols = cute.size(mK.shape[3]) // WARP
        if cutlass.const_expr(paged):
            page_size = mKc.shape[1]
            slot = pos // page_size
            if pos >= 0 and slot < mTable.shape[1]:
                page = mTable[b, slot]
                row = pos - slot * page_size
                for j in cutlass.range_constexpr(cols):
                    mKc[page, row, h, j * WARP + lane] = mK[b, i, h, j * WARP + lane]
                    mVc[page, row, h, j * WARP + lane] = mV[b, i, h, j * WARP + lane]
        else:
            if pos >= 0 and pos < mKc.shape[1]:
                for j in cutlass.range_constexpr(cols):
                    mKc[b, pos, h, j * WARP + lane] = mK[b, i, h, j * WARP + lane]
                    mVc[b, pos, h, j * WARP + lane] = mV[b, i, h, j * WARP + lane]
        if i == 0 and h == 0 and lane == 0:
            mUsed[b] = base + mK.shape[1]

    @cute.jit
    def append_host(mK: cute.Tensor, mV: cute.Tensor, mKc: cute.Tensor, mVc: cute.Tensor,
                    mLens: cute.Tensor, mUsed: cute.Tensor, mTable: cute.Tensor = None):
        grid = (cute.size(mK.shape[1]), cute.size(mK.shape[2]), cute.size(mK.shape[0]))
        append_kernel(mK, mV, mKc, mVc, mLens, mUsed, mTable).launch(grid=grid, block=[WARP, 1, 1])

    return append_host


def contract(cfg: AppendConfig) -> dict:
    outer, rows = ("num_pages", "page_size") if cfg.paged_kv else ("batch", "seqlen_cache")
    params = [
        tensor_struct("k", None, "k", ["batch", "seqlen_new", "heads_kv"], [0, 1, 2]),
        tensor_struct("v", None, "v", ["batch", "seqlen_new", "heads_kv"], [0, 1, 2]),
        tensor_struct("k_cache", None, "k_cache", [outer, rows, "heads_kv"], [0, 1, 2]),
        tensor_struct("v_cache", None, "v_cache", [outer, rows, "heads_kv"], [0, 1, 2]),
        tensor_struct("cache_seqlens", None, "cache_seqlens", ["batch"], []),
        tensor_struct("seqused_k", None, "seqused_k", ["batch"], []),
    ]
    if cfg.paged_kv:
        params.append(tensor_struct("page_table", None, "page_table", ["batch", "max_pages"], [0]))
    lay_out(params, number=True)
    new = {"role": "input", "dtype": cfg.dtype, "dims": ["batch", "seqlen_new", "heads_kv", "head_dim"],
           "contiguous_dim": 3, "align_bytes": 2}
    cache = {"role": "output", "dtype": cfg.dtype, "dims": [outer, rows, "heads_kv", "head_dim"],
             "contiguous_dim": 3, "align_bytes": 2}
    i32 = {"dtype": "i32", "dims": ["batch"], "contiguous_dim": 0, "align_bytes": 4}
    tensors = {"k": new, "v": dict(new), "k_cache": cache, "v_cache": dict(cache),
               "cache_seqlens": {"role": "input", **i32}, "seqused_k": {"role": "output", **i32}}
    symbols = {
        "batch": {"tensor": "k", "dim": 0, "min": 1},
        "seqlen_new": {"tensor": "k", "dim": 1, "min": 1},
        "heads_kv": {"tensor": "k", "dim": 2, "min": 1},
        "head_dim": {"tensor": "k", "dim": 3, "fixed": cfg.head_dim},
        rows: {"tensor": "k_cache", "dim": 1, "min": 1},
    }
    if cfg.paged_kv:
        symbols["num_pages"] = {"tensor": "k_cache", "dim": 0, "min": 1}
        symbols["max_pages"] = {"tensor": "page_table", "dim": 1, "min": 1}
        tensors["page_table"] = {"role": "input", "dtype": "i32", "dims": ["batch", "max_pages"],
                                 "contiguous_dim": 1, "align_bytes": 4}
    return {
        "grid": [["seqlen_new"], ["heads_kv"], ["batch"]],
        "symbols": symbols, "tensors": tensors, "scalars": {},
        "checks": [
            {"expr": ["heads_kv", 65535, "<="], "message": "heads_kv must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
        ],
        "params": params,
    }


def compile_variant(cfg: AppendConfig) -> KernelBuild:
    from cutlass.cute.runtime import make_fake_tensor

    from ...cubin_elf import read_cubin

    dt = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}[cfg.dtype]
    d = cfg.head_dim
    batch, snew, heads = cute.sym_int(), cute.sym_int(), cute.sym_int()

    def s64():
        return cute.sym_int64()

    k = make_fake_tensor(dt, (batch, snew, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    v = make_fake_tensor(dt, (batch, snew, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    outer = cute.sym_int() if cfg.paged_kv else batch
    rows = cute.sym_int()
    kc = make_fake_tensor(dt, (outer, rows, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    vc = make_fake_tensor(dt, (outer, rows, heads, d), stride=(s64(), s64(), s64(), 1), assumed_align=2)
    lens = make_fake_tensor(cutlass.Int32, (batch,), stride=(1,), assumed_align=4)
    used = make_fake_tensor(cutlass.Int32, (batch,), stride=(1,), assumed_align=4)
    extra = []
    if cfg.paged_kv:
        extra.append(make_fake_tensor(cutlass.Int32, (batch, cute.sym_int()), stride=(s64(), 1), assumed_align=4))
    options = f"--gpu-arch {cfg.arch} --keep-cubin"
    t0 = time.perf_counter()
    compiled = aot_compile(_fns(cfg.paged_kv), k, v, kc, vc, lens, used, *extra, options=options)
    seconds = time.perf_counter() - t0
    cubin = bytes(compiled.__cubin__)
    (entry,) = read_cubin(cubin).entries
    return KernelBuild(cubin=cubin, entry=entry, block=(WARP, 1, 1), cluster=(1, 1, 1), dynamic_smem_bytes=0,
                       contract=contract(cfg), compile_options=options,
                       extra={"dsl_compile_seconds": round(seconds, 3)})

"""The combine kernel and its launch contract.

Row (token t, head h, batch b): LSE = logsumexp_s lse_partial[s, b, h, t] and
O = sum_s exp(lse_partial[s] - LSE) * o_partial[s, b, t, h, :]. A split whose LSE is -inf
(no keys) has weight 0 and its O is not read, so an empty split may leave O unwritten;
a row with every split empty gets O = 0, LSE = -inf.
"""

import math
import time

from ..common import aot_compile, dsl_environment, lay_out, tensor_struct

dsl_environment("sm_90a")  # before cutlass is imported
import cutlass  # noqa: E402  (the package is imported only by compile workers)
import cutlass.cute as cute  # noqa: E402
from cutlass import Float32  # noqa: E402

from ...kernel_build import KernelBuild
from .config import ROWS, CombineConfig

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)


def _kernel_fns(dtype_name: str):
    dtype = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}[dtype_name]

    @cute.kernel
    def combine_kernel(mOp: cute.Tensor, mLSEp: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor):
        bx, head, batch = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        token = bx * ROWS + warp
        num_splits = mOp.shape[0]
        seqlen_q = mOp.shape[2]
        cols = cute.size(mOp.shape[4]) // 32
        if token < seqlen_q:
            m = -Float32.inf
            for i in cutlass.range((num_splits + 31) // 32, unroll=1):
                s = i * 32 + lane
                if s < num_splits:
                    m = cute.arch.fmax(m, mLSEp[s, batch, head, token])
            m = cute.arch.warp_reduction_max(m, threads_in_group=32)
            m_safe = m if m != -Float32.inf else Float32(0.0)
            total = Float32(0.0)
            for i in cutlass.range((num_splits + 31) // 32, unroll=1):
                s = i * 32 + lane
                if s < num_splits:
                    total = total + cute.math.exp2((mLSEp[s, batch, head, token] - m_safe) * LOG2E)
            total = cute.arch.warp_reduction_sum(total, threads_in_group=32)
            lse = -Float32.inf if total == Float32(0.0) else m_safe + cute.math.log2(total) * LN2
            acc = cute.make_rmem_tensor(cols, Float32)
            acc.fill(0.0)
            for s in cutlass.range(num_splits, unroll=1):
                ls = mLSEp[s, batch, head, token]
                if ls != -Float32.inf:
                    w = cute.math.exp2((ls - lse) * LOG2E)
                    for j in cutlass.range_constexpr(cols):
                        acc[j] = acc[j] + w * mOp[s, batch, token, head, j * 32 + lane]
            for j in cutlass.range_constexpr(cols):
                mO[batch, token, head, j * 32 + lane] = acc[j].to(dtype)
            if lane == 0:
                mLSE[batch, head, token] = lse

    @cute.jit
    def combine_host(mOp: cute.Tensor, mLSEp: cute.Tensor, mO: cute.Tensor, mLSE: cute.Tensor):
        grid = (cute.ceil_div(cute.size(mOp.shape[2]), ROWS), cute.size(mOp.shape[3]), cute.size(mOp.shape[1]))
        combine_kernel(mOp, mLSEp, mO, mLSE).launch(grid=grid, block=[32 * ROWS, 1, 1])

    return combine_host, dtype


def contract(cfg: CombineConfig) -> dict:
    params = [
        tensor_struct("o_partial", 0, "o_partial", ["num_splits", "batch", "seqlen_q", "heads_q"], [0, 1, 2, 3]),
        tensor_struct("lse_partial", 1, "lse_partial", ["num_splits", "batch", "heads_q", "seqlen_q"], [0, 1, 2]),
        tensor_struct("o", 2, "o", ["batch", "seqlen_q", "heads_q"], [0, 1, 2]),
        tensor_struct("lse", 3, "lse", ["batch", "heads_q", "seqlen_q"], [0, 1]),
    ]
    lay_out(params)  # the parameter block packs each at its natural alignment
    return {
        "grid": [["seqlen_q", ROWS, "ceil_div"], ["heads_q"], ["batch"]],
        "symbols": {
            "num_splits": {"tensor": "o_partial", "dim": 0, "min": 1},
            "batch": {"tensor": "o_partial", "dim": 1, "min": 1},
            "seqlen_q": {"tensor": "o_partial", "dim": 2, "min": 1},
            "heads_q": {"tensor": "o_partial", "dim": 3, "min": 1},
            "head_dim": {"tensor": "o_partial", "dim": 4, "fixed": cfg.head_dim},
        },
        "tensors": {
            "o_partial": {"role": "input", "dtype": "f32",
                          "dims": ["num_splits", "batch", "seqlen_q", "heads_q", "head_dim"],
                          "contiguous_dim": 4, "align_bytes": 4},
            "lse_partial": {"role": "input", "dtype": "f32", "dims": ["num_splits", "batch", "heads_q", "seqlen_q"],
                            "contiguous_dim": 3, "align_bytes": 4},
            "o": {"role": "output", "dtype": cfg.dtype, "dims": ["batch", "seqlen_q", "heads_q", "head_dim"],
                  "contiguous_dim": 3, "align_bytes": 2},
            "lse": {"role": "output", "dtype": "f32", "dims": ["batch", "heads_q", "seqlen_q"],
                    "contiguous_dim": 2, "align_bytes": 4},
        },
        "scalars": {},
        "checks": [
            {"expr": ["heads_q", 65535, "<="], "message": "heads_q must be at most 65535 (grid y)"},
            {"expr": ["batch", 65535, "<="], "message": "batch must be at most 65535 (grid z)"},
        ],
        "params": params,
    }


def compile_variant(cfg: CombineConfig) -> KernelBuild:
    from cutlass.cute.runtime import make_fake_tensor

    from ...cubin_elf import read_cubin

    host, dt = _kernel_fns(cfg.dtype)
    splits, batch, seqlen_q, heads = (cute.sym_int() for _ in range(4))
    d = cfg.head_dim

    def sym():
        return cute.sym_int64()

    op = make_fake_tensor(cutlass.Float32, (splits, batch, seqlen_q, heads, d),
                          stride=(sym(), sym(), sym(), sym(), 1), assumed_align=4)
    lp = make_fake_tensor(cutlass.Float32, (splits, batch, heads, seqlen_q), stride=(sym(), sym(), sym(), 1),
                          assumed_align=4)
    o = make_fake_tensor(dt, (batch, seqlen_q, heads, d), stride=(sym(), sym(), sym(), 1), assumed_align=2)
    lse = make_fake_tensor(cutlass.Float32, (batch, heads, seqlen_q), stride=(sym(), sym(), 1), assumed_align=4)
    options = f"--gpu-arch {cfg.arch} --keep-cubin"
    t0 = time.perf_counter()
    compiled = aot_compile(host, op, lp, o, lse, options=options)
    seconds = time.perf_counter() - t0
    cubin = bytes(compiled.__cubin__)
    (entry,) = read_cubin(cubin).entries
    return KernelBuild(
        cubin=cubin, entry=entry, block=(cfg.threads, 1, 1), cluster=(1, 1, 1), dynamic_smem_bytes=0,
        contract=contract(cfg), compile_options=options,
        extra={"rows_per_cta": ROWS, "dsl_compile_seconds": round(seconds, 3)},
    )

"""The quantise kernel: x (batch, seqlen, heads, head_dim) bf16/fp16 -> e4m3 plus descales.

One CTA per (token block, head, batch); each warp takes one token row at a time, each lane
head_dim/32 contiguous elements. With `hadamard` != 0 a row is first multiplied by random
signs (signs.py) and by the orthonormal Sylvester-Hadamard matrix H/sqrt(head_dim): the low
index bits are butterflies inside a lane, the high bits butterflies across lanes (shfl.bfly).
Pass 1 finds the block's absolute maximum (four warps reduce through shared memory); pass 2
recomputes each row and stores e4m3(v * 448 / amax); thread 0 writes descale = amax / 448.
Recomputing instead of keeping rows keeps the kernel a plain stream for any block size.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Uint32, const_expr

from ...cubin_elf import read_cubin
from ..common import aot_compile
from ...kernel_build import KernelBuild
from .config import E4M3_MAX, THREADS, WARPS, QuantConfig
from .contract import contract
from .signs import GOLDEN, M1, M2

DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}
# The DSL's SmemAllocator hands out dynamic shared memory: the warps' maxima (4 x f32 at a
# 16-byte aligned start) must be requested at launch; 128 B leaves room for its alignment.
DYNAMIC_SMEM_BYTES = 128


class Fp8Quant:
    def __init__(self, cfg: QuantConfig):
        self.cfg = cfg
        self.d = cfg.head_dim
        self.e = cfg.per_lane

    @cute.jit
    def __call__(self, mX: cute.Tensor, mY: cute.Tensor, mD: cute.Tensor,
                 block_tokens: Int32, hadamard: Int32, seed: Int32):
        grid = (mD.shape[2], mD.shape[1], mD.shape[0])
        self.kernel(mX, mY, mD, block_tokens, hadamard, seed).launch(grid=grid, block=[THREADS, 1, 1])

    @cute.jit
    def row(self, mX, t, head, batch, lane, signs, hadamard):
        """This lane's elements of token row t, rotated when asked, in fp32."""
        g = cute.local_tile(mX[batch, t, head, None], (self.e,), (lane,))
        v = cute.make_rmem_tensor((self.e,), Float32)
        v.store(g.load().to(Float32))
        if hadamard != 0:
            for i in cutlass.range_constexpr(self.e):
                v[i] = v[i] * signs[i]
            # Strides inside the lane.
            for k in cutlass.range_constexpr(self.e.bit_length() - 1):
                for i in cutlass.range_constexpr(self.e):
                    if const_expr((i >> k) & 1 == 0):
                        a, b = v[i], v[i + (1 << k)]
                        v[i] = a + b
                        v[i + (1 << k)] = a - b
            # Strides across lanes: lane bit k pairs columns e << k apart; the upper partner
            # keeps other - mine, the lower mine + other.
            for k in cutlass.range_constexpr(5):
                sgn = Float32(1.0) - Float32(2.0) * Float32((lane >> k) & 1)
                for i in cutlass.range_constexpr(self.e):
                    other = cute.arch.shuffle_sync_bfly(v[i], offset=1 << k)
                    v[i] = other + sgn * v[i]
            inv = Float32(1.0 / math.sqrt(self.d))
            for i in cutlass.range_constexpr(self.e):
                v[i] = v[i] * inv
        return v

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mY: cute.Tensor, mD: cute.Tensor,
               block_tokens: Int32, hadamard: Int32, seed: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        blk, head, batch = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(tidx // 32)
        lane = tidx % 32
        seqlen = mX.shape[1]
        start = blk * block_tokens
        end = cutlass.min(start + block_tokens, seqlen)

        # This lane's column signs (signs.py, the same mix on 32-bit unsigned integers).
        signs = cute.make_rmem_tensor((self.e,), Float32)
        for i in cutlass.range_constexpr(self.e):
            h = Uint32(seed) ^ (Uint32(lane * self.e + i) * Uint32(GOLDEN))
            h = h ^ (h >> Uint32(16))
            h = h * Uint32(M1)
            h = h ^ (h >> Uint32(13))
            h = h * Uint32(M2)
            h = h ^ (h >> Uint32(16))
            signs[i] = Float32(1.0) - Float32(2.0) * Float32(h & Uint32(1))

        amax = Float32(0.0)
        for t in cutlass.range(start + warp, end, WARPS, unroll=1):
            v = self.row(mX, t, head, batch, lane, signs, hadamard)
            for i in cutlass.range_constexpr(self.e):
                amax = cute.arch.fmax(amax, cute.arch.fmax(v[i], -v[i]))
        amax = cute.arch.warp_reduction_max(amax)

        smem = cutlass.utils.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout(WARPS), byte_alignment=16)
        if lane == 0:
            red[warp] = amax
        cute.arch.sync_threads()
        amax = red[0]
        for w in cutlass.range_constexpr(1, WARPS):
            amax = cute.arch.fmax(amax, red[w])
        # An all-zero block keeps scale 1 (descale 1): its e4m3 values are zeros either way.
        scale = Float32(1.0)
        descale = Float32(1.0)
        if amax > Float32(0.0):
            scale = Float32(E4M3_MAX) / amax
            descale = amax / Float32(E4M3_MAX)
        if tidx == 0:
            mD[batch, head, blk] = descale

        for t in cutlass.range(start + warp, end, WARPS, unroll=1):
            v = self.row(mX, t, head, batch, lane, signs, hadamard)
            for i in cutlass.range_constexpr(self.e):
                # Rounding v * scale may step just past 448; e4m3fn has no infinity.
                x = v[i] * scale
                v[i] = cute.arch.fmax(cutlass.min(x, Float32(E4M3_MAX)), Float32(-E4M3_MAX))
            g = cute.local_tile(mY[batch, t, head, None], (self.e,), (lane,))
            g.store(v.load().to(cutlass.Float8E4M3FN))


def compile_variant(cfg: QuantConfig) -> KernelBuild:
    from cutlass.cute.runtime import make_fake_tensor

    options = f"--gpu-arch {cfg.arch} --keep-cubin"
    d = cfg.head_dim

    def sym(div=1):
        return cute.sym_int64(divisibility=div)

    batch, seqlen, heads, blocks = cute.sym_int(), cute.sym_int(), cute.sym_int(), cute.sym_int()
    # 16-byte aligned rows (8 bf16 / 16 e4m3 elements), so each lane's run loads in one go.
    x = make_fake_tensor(DTYPES[cfg.dtype], (batch, seqlen, heads, d), stride=(sym(8), sym(8), sym(8), 1),
                         assumed_align=16)
    y = make_fake_tensor(cutlass.Float8E4M3FN, (batch, seqlen, heads, d), stride=(sym(16), sym(16), sym(16), 1),
                         assumed_align=16)
    desc = make_fake_tensor(Float32, (batch, heads, blocks), stride=(sym(), sym(), 1), assumed_align=4)
    compiled = aot_compile(Fp8Quant(cfg), x, y, desc, Int32(1), Int32(0), Int32(0), options=options)
    cubin = bytes(compiled.__cubin__)
    (entry,) = read_cubin(cubin).entries
    return KernelBuild(
        cubin=cubin, entry=entry, block=(THREADS, 1, 1), cluster=(1, 1, 1), dynamic_smem_bytes=DYNAMIC_SMEM_BYTES,
        contract=contract(cfg), compile_options=options,
        extra={"per_lane": cfg.per_lane, "warps": WARPS},
    )

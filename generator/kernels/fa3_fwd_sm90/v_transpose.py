"""e4m3 with V row-major: the producer warpgroup transposes V in shared memory (FA3's way).

An 8-bit WGMMA reads its B operand K-major only, so the PV GEMM needs V as (head_dim, keys).
Warp 0 of the producer warpgroup TMA-loads V row-major (tile_n keys x head_dim) into sV as
for bf16; warps 1..3 move each stage into sVt, (head_dim x tile_n), the layout a column-major
V would have arrived in, and hand it to the consumers through a pipeline of their own
(pipe_vt), so the consumers' code is the column-major path's.

One unit is 16 keys x 32 head-dim bytes, one warp, three instructions and four PRMTs:
- ldmatrix.x4.trans on 16-bit elements: lane L gives the row address of matrix L // 8, row
  L % 8, which is key n0 + f(L % 8) + 2 ((L // 8) % 2) at head-dim bytes d0 + 16 (L // 16),
  with f(i) = 4 (i // 2) + i % 2. With .trans, lane t gets of matrix k the 16-bit element at
  column p = t // 4 of rows 2q and 2q+1 (q = t % 4): keys n0 + 4q + {0, 1} (matrices 0, 2) or
  n0 + 4q + {2, 3} (1, 3), bytes d0 + 2p + {0, 1} (+16 for matrices 2, 3);
- prmt(r0, r1, 0x6420) packs the even byte of the four keys n0 + 4q .. 4q+3 (sVt row
  d0 + 2p, bytes n0 + 4q ..), prmt(r0, r1, 0x7531) the odd one (row d0 + 2p + 1); r2, r3 the
  same 16 bytes further on;
- stmatrix.x4 (not transposed): lane t's word k is row t // 4, bytes 4 (t % 4) .. of matrix
  k; lane L gives the address of sVt row d0 + 16 ((L // 8) // 2) + 2 (L % 8) + (L // 8) % 2,
  bytes n0 .. n0 + 15.
Every address is a 16-byte run inside one swizzle chunk (checked at trace time), evaluated
through the buffers' own swizzled layouts, so the swizzle needs no arithmetic of its own.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .layouts import smem_layout

UNIT_KEYS, UNIT_DIMS = 16, 32
# Producer warps that transpose (warp 0 issues the TMA loads).
FIRST_WARP, WARPS = 1, 3


def vt_layout(dtype, head_dim_v: int, tile_n: int, stages: int):
    """sVt: (head_dim_v, tile_n keys) per stage, keys contiguous: the column-major V's layout."""
    return smem_layout(dtype, head_dim_v, tile_n, stages)


def check_units(sV_layout, sVt_layout, tile_n: int, head_dim_v: int) -> None:
    """Trace time: every 16-byte run an ldmatrix/stmatrix row address names is contiguous."""
    if tile_n % UNIT_KEYS or head_dim_v % UNIT_DIMS:
        raise ValueError(f"V transpose works in {UNIT_KEYS} x {UNIT_DIMS} units; "
                         f"tile_n {tile_n} / head_dim_v {head_dim_v} do not divide")
    step = key_step(sV_layout)
    for n in range(UNIT_KEYS):
        for d in range(0, head_dim_v, 16):
            base = sV_layout((n, d, 0))
            for nb in range(1, tile_n // UNIT_KEYS):
                if sV_layout((n + UNIT_KEYS * nb, d, 0)) != base + nb * step:
                    raise ValueError(f"V transpose: sV key {n + UNIT_KEYS * nb}, byte {d} is not {nb} key steps "
                                     f"from key {n}")
    for layout, rows, cols in ((sV_layout, tile_n, head_dim_v), (sVt_layout, head_dim_v, tile_n)):
        for r in range(min(rows, 16)):
            for c in range(0, cols, 16):
                base = layout((r, c, 0))
                if base % 16 or any(layout((r, c + j, 0)) != base + j for j in range(16)):
                    raise ValueError(f"V transpose: row {r} columns {c}..{c + 15} are not one 16-byte run")


@dsl_user_op
def _ldsm_x4_trans(addr: Int32, *, loc=None, ip=None):
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.i32(), T.i32(), T.i32(), T.i32()]),
        [Int32(addr).ir_value(loc=loc, ip=ip)],
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];",
        "=r,=r,=r,=r,r",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    )
    return [Int32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def _stsm_x4(addr: Int32, w0: Int32, w1: Int32, w2: Int32, w3: Int32, *, loc=None, ip=None):
    llvm.inline_asm(
        None,
        [Int32(x).ir_value(loc=loc, ip=ip) for x in (addr, w0, w1, w2, w3)],
        "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};",
        "r,r,r,r,r",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def _prmt(a: Int32, b: Int32, sel: int, *, loc=None, ip=None) -> Int32:
    return Int32(llvm.inline_asm(
        T.i32(),
        [Int32(a).ir_value(loc=loc, ip=ip), Int32(b).ir_value(loc=loc, ip=ip)],
        f"prmt.b32 $0, $1, $2, {sel:#x};",
        "=r,r,r",
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
    ))


@cute.jit
def transpose_stage(
    v_base: Int32, vt_base: Int32, sV_layout: cute.ComposedLayout, sVt_layout: cute.ComposedLayout,
    stage, warp, lane, tile_n: cutlass.Constexpr[int], head_dim_v: cutlass.Constexpr[int],
    local_p: cutlass.Constexpr[bool] = False,
):
    """sVt[:, :, stage] <- sV[:, :, stage]^T, this warp's share of the units. local_p: matrices
    0/2 take keys n0..n0+7 and 1/3 keys n0+8..15 in order, so lane t's word holds keys
    2q, 2q+1, 8+2q, 9+2q: sVt column c holds key fp8_p.local_key(c)."""
    units_n = tile_n // UNIT_KEYS
    k, i = lane // 8, lane % 8
    ld_n = 4 * (i // 2) + i % 2 + 2 * (k % 2)
    if const_expr(local_p):
        ld_n = i + 8 * (k % 2)
    ld_d = 16 * (k // 2)
    st_d = 16 * (k // 2) + 2 * i + k % 2
    # Warp w takes the 32-byte head-dim slices w, w + 3, ...; the key blocks of a slice are
    # unrolled. A load address moves by a constant per 16 keys (rows 16 apart share the
    # swizzle phase; check_units verifies it), so it is one evaluation per slice.
    ld_step = key_step(sV_layout)
    for db in cutlass.range(warp, head_dim_v // UNIT_DIMS, WARPS, unroll=1):
        d0 = UNIT_DIMS * db
        ld_base = v_base + sV_layout((ld_n, d0 + ld_d, stage))
        for nb in cutlass.range_constexpr(units_n):
            r = _ldsm_x4_trans(ld_base + nb * ld_step)
            _stsm_x4(
                vt_base + sVt_layout((d0 + st_d, UNIT_KEYS * nb, stage)),
                _prmt(r[0], r[1], 0x6420), _prmt(r[0], r[1], 0x7531),
                _prmt(r[2], r[3], 0x6420), _prmt(r[2], r[3], 0x7531),
            )


def key_step(sV_layout) -> int:
    """sV's offset between keys n and n + 16 (the same for every n, d: checked at trace time)."""
    return sV_layout((UNIT_KEYS, 0, 0)) - sV_layout((0, 0, 0))


@cute.jit
def transpose_block(pipe_v, pipe_vt, v_state, vt_state, v_base, vt_base, sV_layout, sVt_layout,
                    warp, lane, tile_n: cutlass.Constexpr[int], head_dim_v: cutlass.Constexpr[int],
                    local_p: cutlass.Constexpr[bool] = False):
    """One key block: wait for V's TMA, wait for sVt's slot, transpose, publish, free sV."""
    pipe_v.consumer_wait(v_state)
    pipe_vt.producer_acquire(vt_state)
    transpose_stage(v_base, vt_base, sV_layout, sVt_layout, v_state.index, warp, lane, tile_n, head_dim_v, local_p)
    # The PV WGMMA reads sVt through the async proxy: make these generic-proxy writes visible.
    cute.arch.fence_view_async_shared()
    pipe_vt.producer_commit(vt_state)
    pipe_v.consumer_release(v_state)
    v_state.advance()
    vt_state.advance()
    return v_state, vt_state


@cute.jit
def transposer(self, mQ, mK, pipe_v, pipe_vt, v_base, vt_base, sV_layout, sVt_layout,
               warp_idx, lane, cta, ctas, zigzag, num_m, num_tiles, window_left, window_right):
    """Warps 1..3 of the producer warpgroup: every key block the TMA warp loads, in its order
    (one per block, whatever the overlap), over the same tiles. A method of FlashFwdSm90
    (`transpose_v`), so `self` is the kernel."""
    from cutlass import pipeline

    warp = warp_idx - FIRST_WARP
    v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
    vt_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
    t = Int32(0)
    tile = self.sched.first(t, cta, ctas)
    while tile < num_tiles:
        m_block, _, _, _, n_block_max = self.tile_work(tile, num_m, mQ, mK, window_right)
        n_blocks = n_block_max - self.first_block(m_block, mQ, mK, window_left)
        if const_expr(self.overlap):
            # produce() loads V n_blocks - 1 times in its loop, then the last block once.
            n_blocks = cutlass.max(n_blocks - 1, 0) + 1
        for _ in cutlass.range(n_blocks, unroll=1):
            v_state, vt_state = transpose_block(
                pipe_v, pipe_vt, v_state, vt_state, v_base, vt_base, sV_layout, sVt_layout,
                warp, lane, self.tile_n, self.hdim_v, self.cfg.fp8_local_p,
            )
        t += 1
        tile = self.sched.next(t, tile, cta, ctas)

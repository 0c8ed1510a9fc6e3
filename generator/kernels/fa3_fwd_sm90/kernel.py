"""The SM90 FlashAttention-3 forward kernel (CuTe DSL).

One CTA computes one (tile_m query rows, head, batch) tile of O and LSE:
- warpgroup 0 is the producer: after setmaxnreg lowers its registers, one warp issues TMA
  loads (Q once, then K and V per block) into an mbarrier pipeline of `stages` slots;
- warpgroups 1.. are consumers, 64 query rows each, with registers raised: S = Q K^T and
  O += P V run on WGMMA, P stays in registers (RS WGMMA), the softmax of block j overlaps
  the QK^T of block j+1 inside a warpgroup, and named barriers schedule the warpgroups in
  ping-pong so one's softmax runs under the other's GEMMs;
- the epilogue normalises O, writes it through shared memory with a TMA store (the TMA
  clips rows past seqlen_q) and writes LSE directly.

Blocks of keys are visited from the last to the first so that the blocks needing a mask
(the key tail, the causal diagonal) come first; causal blocks wholly above the diagonal
are never loaded.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as hopper
from cutlass import Float32, Int32, const_expr
from cutlass import pipeline
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup

from .barriers import Barrier
from .config import FwdConfig
from .fp8_p import check_layouts, check_local_layouts, convert_p_fp8, convert_p_fp8_local, convert_p_fp8_pairs
from .layouts import (
    acc_as_operand_a,
    acc_as_rows_cols,
    convert_in_register_order,
    register_order_matches,
    smem_layout,
    smem_store_atom,
    transpose_view,
)
from . import block_range, descale, pinned, v_transpose
from .mask import apply_mask, apply_mask_bits, apply_window_mask, apply_window_mask_bits
from .schedule import TileScheduler, decode_divisors, decode_fast, section_pairs
from .softmax import BlockScaledSoftmax, OnlineSoftmax, apply_softcap, rescale_rows

DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "e4m3": cutlass.Float8E4M3FN}
# The H200's SM count: only the DSL's own (unused) host launcher sees it; launchers take the
# persistent grid from the contract, which reads the device's SM count.
PERSISTENT_CTAS = 132
# Rows of one warp's share of a WGMMA accumulator (m64: warp i of a warpgroup holds rows
# 16i..16i+15): warp_o_store's TMA box.
WARP_O_ROWS = 16


class FlashFwdSm90:
    transpose_v = v_transpose.transposer  # e4m3, V row-major: the producer's transposing warps
    def __init__(self, cfg: FwdConfig):
        self.cfg = cfg
        self.dtype = DTYPES[cfg.dtype]
        # e4m3: q/k/v in FP8, O in bf16, V column-major (the PV GEMM's B is K-major).
        self.fp8 = cfg.fp8
        # e4m3 with V row-major: the producer warpgroup transposes V in smem (v_transpose.py).
        self.v_transpose = cfg.v_transpose
        self.o_dtype = DTYPES[cfg.out_dtype]
        self.tile_m, self.tile_n, self.hdim = cfg.tile_m, cfg.tile_n, cfg.head_dim
        self.hdim_v = cfg.head_dim_v  # V and O
        self.stages = cfg.stages
        self.causal = cfg.causal
        self.local = cfg.local
        self.softcap = cfg.softcap
        self.sink = cfg.learnable_sink
        self.num_wg = cfg.consumer_warpgroups
        self.num_threads = cfg.threads
        self.consumer_threads = 128 * self.num_wg
        self.consumer_regs, self.producer_regs = cfg.register_split
        # Ping-pong needs a partner warpgroup.
        self.pingpong = cfg.pingpong and self.num_wg >= 2
        self.overlap = cfg.intra_wg_overlap
        self.rescale_early = cfg.rescale_o_early and cfg.intra_wg_overlap
        self.persistent = cfg.scheduler == "persistent"
        self.sched = TileScheduler(cfg.scheduler, cfg.causal, local=cfg.local, causal_order=cfg.causal_order)
        self.separate_o = cfg.separate_o_smem
        self.wg_epilogue = cfg.wg_epilogue
        # warp_o_store: each consumer warp stores its own 16 rows (no epilogue barrier).
        self.warp_o = cfg.warp_o_store
        # Rows of O one TMA store writes: the whole tile, one warpgroup's slab, or one warp's.
        self.o_rows = 64 if cfg.wg_epilogue else (WARP_O_ROWS if cfg.warp_o_store else cfg.tile_m)
        self.q_stages = cfg.q_stages  # 2: the next tile's Q loads while this one runs
        self.deferred_o = cfg.deferred_o_store
        # P through shared memory (SS PV GEMM) instead of registers (RS).
        self.p_smem = cfg.p_smem
        # e4m3 q/k descales per block (descale_block): the softmax scales each key block.
        self.block_descale = bool(cfg.descale_blocks[1])

    # ------------------------------------------------------------------ host side
    def _tiled_mmas(self, warpgroups=None):
        wgs = self.num_wg if warpgroups is None else warpgroups
        qk = hopper.make_trivial_tiled_mma(
            self.dtype, self.dtype,
            OperandMajorMode.K, OperandMajorMode.K,
            Float32, atom_layout_mnk=(wgs, 1, 1), tiler_mn=(64, self.tile_n),
        )
        pv = hopper.make_trivial_tiled_mma(
            self.dtype, self.dtype,
            OperandMajorMode.K, OperandMajorMode.K if self.fp8 else OperandMajorMode.MN,
            Float32, atom_layout_mnk=(wgs, 1, 1), tiler_mn=(64, self.hdim_v),
            a_source=warpgroup.OperandSource.SMEM if self.p_smem else warpgroup.OperandSource.RMEM,
        )
        return qk, pv

    def _sp_layout(self):
        """p_smem: P's (tile_m, tile_n) buffer, keys contiguous (the K-major A operand); static,
        so the kernel rebuilds it rather than taking it as an argument."""
        return smem_layout(self.dtype, self.tile_m, self.tile_n)

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (batch, seqlen_q, heads_q, head_dim)
        mK: cute.Tensor,  # (batch, seqlen_k, heads_kv, head_dim)
        mV: cute.Tensor,
        mO: cute.Tensor,  # like mQ
        mLSE: cute.Tensor,  # (batch, heads_q, seqlen_q) float32
        softmax_scale_log2: Float32,  # softcap: softcap * log2(e)
        softcap_pre: Float32 | None = None,  # softcap: softmax_scale / softcap
        window_left: Int32 | None = None,  # local: resolved (block_range.window_bounds)
        window_right: Int32 | None = None,
        mSink: cute.Tensor | None = None,  # learnable_sink: (heads_q,) float32
        mDescale: cute.Tensor | None = None,  # e4m3: (3, batch, heads_kv) float32, q/k/v descales
        # descale_block: (batch, heads_q, q blocks) and (batch, heads_kv, k blocks) float32; then
        # mDescale's q and k rows are not read (v's is).
        mDescaleQ: cute.Tensor | None = None,
        mDescaleK: cute.Tensor | None = None,
    ):
        # Kernel view: (seqlen, head_dim, heads, batch) so a tile is a slice of modes 0 and 1.
        bshd_to_sdhb = [1, 3, 2, 0]
        mQ, mK, mO = [
            cute.make_tensor(t.iterator, cute.select(t.layout, mode=bshd_to_sdhb))
            for t in (mQ, mK, mO)
        ]
        # Column-major V (batch, heads_kv, head_dim, seqlen_k) -> (head_dim, seqlen_k, heads, batch).
        v_modes = [2, 3, 1, 0] if const_expr(self.fp8 and not self.v_transpose) else bshd_to_sdhb
        mV = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=v_modes))
        mLSE = cute.make_tensor(mLSE.iterator, cute.select(mLSE.layout, mode=[2, 1, 0]))

        tiled_mma_qk, tiled_mma_pv = self._tiled_mmas()
        sQ_layout = smem_layout(self.dtype, self.tile_m, self.hdim)
        # One Q tile: the TMA box and, through Q's buffer, O's layout.
        sQ_tile = sQ_layout
        if const_expr(self.q_stages > 1):
            sQ_layout = smem_layout(self.dtype, self.tile_m, self.hdim, self.q_stages)
        sK_layout = smem_layout(self.dtype, self.tile_n, self.hdim, self.stages)
        sV_layout = smem_layout(self.dtype, self.tile_n, self.hdim_v, self.stages)
        if const_expr(self.fp8 and not self.v_transpose):
            # Column-major V: a stage is (head_dim_v, tile_n keys), K-major for the PV GEMM.
            sV_layout = smem_layout(self.dtype, self.hdim_v, self.tile_n, self.stages)
        if const_expr(self.v_transpose):
            # Row-major V lands in sV; its transpose, K-major for the PV GEMM, in sVt.
            sVt_layout = v_transpose.vt_layout(self.dtype, self.hdim_v, self.tile_n, self.stages)
            v_transpose.check_units(sV_layout, sVt_layout, self.tile_n, self.hdim_v)
        # wg_epilogue: one 64-row slab per warpgroup, each stored on its own.
        sO_layout = smem_layout(self.dtype, 64, self.hdim_v, self.num_wg) if self.wg_epilogue else sQ_tile
        if const_expr(self.hdim_v != self.hdim and not self.wg_epilogue):
            # O's rows are dv wide; through Q's buffer it takes the first tile_m * dv of it.
            sO_layout = smem_layout(self.dtype, self.tile_m, self.hdim_v)
        if const_expr(self.fp8):
            # O in bf16 through its own buffer (separate_o_smem), never Q's e4m3 one.
            sO_layout = (smem_layout(self.o_dtype, 64, self.hdim_v, self.num_wg) if self.wg_epilogue
                         else smem_layout(self.o_dtype, self.tile_m, self.hdim_v))
        sO_box_layout = cute.select(sO_layout, mode=[0, 1]) if self.wg_epilogue else sO_layout
        if const_expr(self.warp_o):
            # The first 16 rows of the tile's buffer: per swizzle atom of columns one 2 KiB run,
            # as every warp's slice is (offset 2 KiB per warp, a multiple of the swizzle's period).
            sO_box_layout = cute.composition(sO_layout, cute.make_layout(
                (WARP_O_ROWS, self.hdim_v), stride=(1, self.tile_m)))

        fields = self._storage_fields(sQ_layout, sK_layout, sV_layout)
        if const_expr(self.separate_o):
            fields["sO"] = _smem_buffer(sO_layout, self.o_dtype)
        if const_expr(self.v_transpose):
            fields.update(self._vt_fields(sVt_layout))
        if const_expr(self.p_smem):
            fields["sP"] = _smem_buffer(self._sp_layout(), self.dtype)
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage

        load_op = cpasync.CopyBulkTensorTileG2SOp()
        store_op = cpasync.CopyBulkTensorTileS2GOp()
        tma_q, tQ = cpasync.make_tiled_tma_atom(load_op, mQ, sQ_tile, (self.tile_m, self.hdim))
        tma_k, tK, tma_v, tV = self._kv_tma_atoms(
            load_op, mK, mV, sK_layout, sV_layout,
            (self.hdim_v, self.tile_n) if const_expr(self.fp8 and not self.v_transpose) else (self.tile_n, self.hdim_v),
        )
        tma_o, tO = cpasync.make_tiled_tma_atom(store_op, mO, sO_box_layout, (self.o_rows, self.hdim_v))
        # Facts the launch contract needs and the cubin does not hold.
        self.dynamic_smem_bytes = SharedStorage.size_in_bytes()
        self.tma_boxes = {
            name: (_inner_cols(layout), rows)
            for name, layout, rows in (
                ("q", sQ_tile, self.tile_m), ("k", sK_layout, self.tile_n),
                ("v", sV_layout, self.hdim_v if self.fp8 and not self.v_transpose else self.tile_n), ("o", sO_layout, self.o_rows),
            )
        }

        num_m = cute.ceil_div(cute.size(mQ.shape[0]), self.tile_m)
        # Traced for the DSL's own launcher only; the launch contract carries the real rule
        # (persistent: one CTA per SM, at most one per tile).
        grid = self.sched.grid(num_m, cute.size(mQ.shape[2]), cute.size(mQ.shape[3]), PERSISTENT_CTAS, mn=cutlass.min)
        if const_expr(self.fp8):
            check_layouts(tiled_mma_qk, tiled_mma_pv, self.tile_m, self.tile_n)
        if const_expr(self.cfg.fp8_local_p):
            check_local_layouts(tiled_mma_qk, tiled_mma_pv, self.tile_m, self.tile_n)
        self.kernel(
            tQ, tK, tV, tO, mLSE,
            tma_q, tma_k, tma_v, tma_o,
            softmax_scale_log2,
            sQ_layout, sK_layout, sV_layout, sO_layout,
            tiled_mma_qk, tiled_mma_pv,
            softcap_pre, window_left, window_right, mSink, mDescale, mDescaleQ, mDescaleK,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], min_blocks_per_mp=1)

    # Pieces both this kernel and inference.FlashFwdSm90Inference build the same way. Plain
    # Python (no dynamic control flow): tracing them emits what inlining them would.
    def _storage_fields(self, sQ_layout, sK_layout, sV_layout) -> dict:
        """The shared-storage fields every form has: Q/K/V mbarriers and buffers."""
        return {
            "mbar_q": cute.struct.MemRange[cutlass.Int64, 2 * self.q_stages],
            "mbar_k": cute.struct.MemRange[cutlass.Int64, 2 * self.stages],
            "mbar_v": cute.struct.MemRange[cutlass.Int64, 2 * self.stages],
            "sQ": _smem_buffer(sQ_layout, self.dtype),
            "sK": _smem_buffer(sK_layout, self.dtype),
            "sV": _smem_buffer(sV_layout, self.dtype),
        }

    def _kv_tma_atoms(self, load_op, mK, mV, sK_layout, sV_layout, v_box):
        """TMA load atoms of one K stage (tile_n x head_dim) and one V stage (v_box)."""
        tma_k, tK = cpasync.make_tiled_tma_atom(
            load_op, mK, cute.select(sK_layout, mode=[0, 1]), (self.tile_n, self.hdim)
        )
        tma_v, tV = cpasync.make_tiled_tma_atom(load_op, mV, cute.select(sV_layout, mode=[0, 1]), v_box)
        return tma_k, tK, tma_v, tV

    def _tma_pipelines(self, storage, sQ_layout, sK_layout, sV_layout, v_readers=None):
        """The Q (one stage), K and V pipelines, filled by one producer thread's TMA and read by
        the consumer warps (V: by `v_readers` warps where given)."""
        producer = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
        consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads // 32)
        # The release's lane test (lane 0 arrives) from a pinned thread index: NVVM otherwise
        # re-reads %tid.x for it every block (pinned.py).
        tidx = None
        if const_expr(self.cfg.pin_loop_invariants):
            tidx = pinned.pin_i32(cute.arch.thread_idx()[0])
        q_bytes = cute.size_in_bytes(self.dtype, sQ_layout)
        if const_expr(self.q_stages > 1):
            q_bytes = cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1]))
        kv_bytes = cute.size_in_bytes(self.dtype, cute.select(sK_layout, mode=[0, 1]))
        v_bytes = cute.size_in_bytes(self.dtype, cute.select(sV_layout, mode=[0, 1]))
        pipe_q = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_q.data_ptr(), num_stages=self.q_stages,
            producer_group=producer, consumer_group=consumers, tx_count=q_bytes, defer_sync=True,
        )
        pipe_k = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_k.data_ptr(), num_stages=self.stages,
            producer_group=producer, consumer_group=consumers, tx_count=kv_bytes, defer_sync=True, tidx=tidx,
        )
        pipe_v = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar_v.data_ptr(), num_stages=self.stages,
            producer_group=producer,
            consumer_group=(pipeline.CooperativeGroup(pipeline.Agent.Thread, v_readers)
                            if v_readers is not None else consumers),
            tx_count=v_bytes, defer_sync=True, tidx=tidx,
        )
        return pipe_q, pipe_k, pipe_v

    def _vt_fields(self, sVt_layout) -> dict:
        """e4m3, V row-major: the transposed V's buffer and its pipeline's mbarriers."""
        return {"mbar_vt": cute.struct.MemRange[cutlass.Int64, 2 * self.stages],
                "sVt": _smem_buffer(sVt_layout, self.dtype)}

    def _vt_pipeline(self, storage):
        """sVt: written by the transposing warps' threads, read by every consumer thread."""
        return pipeline.PipelineAsync.create(
            barrier_storage=storage.mbar_vt.data_ptr(), num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32 * v_transpose.WARPS),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads),
            defer_sync=True,
        )

    def _smem_qkv(self, storage, sQ_layout, sK_layout, sV_layout):
        return (storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner),
                storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner),
                storage.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner))

    def _gemms(self, tiled_mma_qk, tiled_mma_pv, s_shape, tSrQ, tSrK, tOrP, tOrV, acc_O, wg=None):
        """gemm_qk(stage) -> a fresh S accumulator; gemm_pv(stage, zero_init) into acc_O.
        p_smem (`wg`: this consumer warpgroup): gemm_pv first makes the warpgroup's P writes
        visible to the async proxy and waits for its four warps."""
        q_slices = None
        if const_expr(self.cfg.pin_loop_invariants):
            # K's and V's stage-0 descriptors, pinned here (before the key-block loops) so NVVM
            # does not rebuild them every block (pinned.py).
            tSrK = pinned.pin_desc_fragment(tSrK)
            tOrV = pinned.pin_desc_fragment(tOrV)
        if const_expr(self.cfg.pin_q_desc):
            # Each k slice's Q descriptor too: 24 more registers held across the loops.
            q_slices = [pinned.pin_desc_fragment(tSrQ[None, None, k])
                        for k in range(cute.size(tSrQ.shape[2]))]

        def gemm_qk(stage):
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            self.wgmma(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, stage], zero_init=True, a_slices=q_slices)
            return acc_S

        def gemm_pv(stage, zero_init):
            if const_expr(self.p_smem):
                # As late as possible: the stmatrix stores drain under the rescale and the QK^T
                # issue. The warps of this warpgroup only: its slab is no one else's.
                cute.arch.fence_view_async_shared()
                cute.arch.barrier(barrier_id=int(Barrier.P_WG1) + wg, number_of_threads=128)
            self.wgmma(tiled_mma_pv, acc_O, tOrP, tOrV[None, None, None, stage], zero_init=zero_init)

        return gemm_qk, gemm_pv

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mV: cute.Tensor,
        mO: cute.Tensor,
        mLSE: cute.Tensor,
        tma_q: cute.CopyAtom,
        tma_k: cute.CopyAtom,
        tma_v: cute.CopyAtom,
        tma_o: cute.CopyAtom,
        softmax_scale_log2: Float32,
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        sO_layout: cute.ComposedLayout,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        softcap_pre: Float32 | None,
        window_left: Int32 | None,
        window_right: Int32 | None,
        mSink: cute.Tensor | None,
        mDescale: cute.Tensor | None = None,  # e4m3: (3, batch, heads_kv) float32
        mDescaleQ: cute.Tensor | None = None,  # descale_block: (batch, heads_q, q blocks) float32
        mDescaleK: cute.Tensor | None = None,  # descale_block: (batch, heads_kv, k blocks) float32
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()

        if warp_idx == 0:
            for atom in (tma_q, tma_k, tma_v, tma_o):
                cpasync.prefetch_descriptor(atom)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        pipe_q, pipe_k, pipe_v = self._tma_pipelines(
            storage, sQ_layout, sK_layout, sV_layout,
            # With the transpose, the producer's transposing warps read sV, not the consumers.
            v_readers=v_transpose.WARPS if const_expr(self.v_transpose) else None,
        )
        if const_expr(self.v_transpose):
            pipe_vt = self._vt_pipeline(storage)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        sQ, sK, sV = self._smem_qkv(storage, sQ_layout, sK_layout, sV_layout)
        # The V the PV GEMM reads and the pipeline that hands it over.
        sV_mma, pipe_v_mma = sV, pipe_v
        if const_expr(self.v_transpose):
            # Static, so rebuilt here rather than passed in (the plain kernels' signature stays).
            sVt_layout = v_transpose.vt_layout(self.dtype, self.hdim_v, self.tile_n, self.stages)
            sV_mma = storage.sVt.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)
            pipe_v_mma = pipe_vt
        sP = None
        if const_expr(self.p_smem):
            sP_layout = self._sp_layout()
            sP = storage.sP.get_tensor(sP_layout.outer, swizzle=sP_layout.inner)
        if const_expr(self.separate_o):
            sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        else:
            # O goes out through Q's buffer: each warpgroup overwrites only the Q rows it read.
            sO = storage.sQ.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)

        seqlen_q = mQ.shape[0]
        seqlen_k = mK.shape[0]
        num_m = (seqlen_q + self.tile_m - 1) // self.tile_m
        num_tiles = num_m * mQ.shape[2] * mQ.shape[3]
        # single: one tile per CTA (grid = (num_m, heads, batch)); persistent: CTAs stride over
        # the linearised tiles, so one tile's epilogue overlaps the next tile's loads. Causal
        # tiles differ in cost: their rounds zigzag (schedule.py).
        if const_expr(self.sched.linear):
            cta = cute.arch.block_idx()[0]
            ctas = cute.arch.grid_dim()[0]
        else:
            bm, bh, bb = cute.arch.block_idx()
            cta = bm + num_m * (bh + mQ.shape[2] * bb)
            ctas = num_tiles
        zigzag = self.sched.zigzag
        # fast_divmod: the decode's divisors made once here, multiply-high and shift per tile.
        divs = None
        if const_expr(self.cfg.fast_divmod):
            divs = decode_divisors(self.sched, num_m, mQ.shape[2], mQ.shape[3], mK.shape[2],
                                   make=cute.fast_divmod_create_divisor_v2)
        # causal_order: the pairs of one section of the causal walk, made once per CTA.
        section = None
        if const_expr(self.sched.causal_order != "all"):
            section = section_pairs(self.sched.causal_order, num_m, mQ.shape[2] * mQ.shape[3], seqlen_k,
                                    (self.hdim + self.hdim_v) * self.cfg.elem_bytes, ctas,
                                    mn=cutlass.min, mx=cutlass.max)

        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.q_stages)
                kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                k = Int32(0)
                tile = self.sched.first(k, cta, ctas)
                while tile < num_tiles:
                    m_block, head, head_kv, batch, n_block_max = self.tile_work(
                        tile, num_m, mQ, mK, window_right, divs, section)
                    n_block_min = self.first_block(m_block, mQ, mK, window_left)
                    q_state, kv_state = self.produce(
                        mQ, mK, mV, sQ, sK, sV, tma_q, tma_k, tma_v, pipe_q, pipe_k, pipe_v,
                        q_state, kv_state, m_block, head, head_kv, batch, n_block_max, n_block_min,
                    )
                    k += 1
                    tile = self.sched.next(k, tile, cta, ctas)
                # Keep the CTA alive until the consumers released every slot we filled.
                pipe_v.producer_tail(kv_state)
            if const_expr(self.v_transpose):
                if warp_idx >= v_transpose.FIRST_WARP:
                    self.transpose_v(
                        mQ, mK, pipe_v, pipe_vt, storage.sV.data_ptr().toint(),
                        storage.sVt.data_ptr().toint(), sV_layout, sVt_layout, warp_idx, tidx % 32,
                        cta, ctas, zigzag, num_m, num_tiles, window_left, window_right,
                    )
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            ctidx = tidx - 128
            if const_expr(self.pingpong):
                # Warpgroup 1 goes first: open its own schedule barrier once.
                if ctidx < 128:
                    cute.arch.barrier_arrive(barrier_id=int(Barrier.SCHEDULE_WG1), number_of_threads=2 * 128)
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.q_stages)
            kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            if const_expr(self.deferred_o):
                # The previous tile's O (converted) and LSE, stored under this tile's first QK^T;
                # pend_m < 0: nothing pending.
                o_shape = tiled_mma_pv.get_slice(0).partition_shape_C((self.tile_m, self.hdim_v))
                rO_pend = cute.make_rmem_tensor(o_shape, self.o_dtype)
                lse_pend = cute.make_rmem_tensor(cute.size(acc_as_rows_cols(rO_pend), mode=[0]), Float32)
                pend_m, pend_head, pend_batch = Int32(-1), Int32(0), Int32(0)
            k = Int32(0)
            tile = self.sched.first(k, cta, ctas)
            while tile < num_tiles:
                m_block, head, head_kv, batch, n_block_max = self.tile_work(
                    tile, num_m, mQ, mK, window_right, divs, section)
                n_block_min = self.first_block(m_block, mQ, mK, window_left)
                scale_log2 = softmax_scale_log2
                v_descale = None
                blk = None
                if const_expr(self.block_descale):
                    # q and k per block (the softmax's, BlockScaledSoftmax); v per head_kv as ever.
                    v_descale = mDescale[2, batch, head_kv]
                    blk = (mDescaleQ, mDescaleK, head_kv)
                elif const_expr(self.fp8):
                    # FA3's folding: q and k descales into the softmax scale, v's into 1/rowsum.
                    scale_log2, v_descale = descale.fold_scale(mDescale, batch, head_kv, softmax_scale_log2)
                if const_expr(self.deferred_o):
                    q_state, kv_state = self.consume(
                        mO, mLSE, sQ, sK, sV_mma, sO, tma_o, tiled_mma_qk, tiled_mma_pv,
                        pipe_q, pipe_k, pipe_v_mma, q_state, kv_state, scale_log2,
                        ctidx, m_block, head, batch, n_block_max, seqlen_q, seqlen_k,
                        n_block_min, softcap_pre, window_left, window_right, mSink, v_descale,
                        (rO_pend, lse_pend, pend_m, pend_head, pend_batch), sP, blk,
                    )
                    pend_m, pend_head, pend_batch = m_block, head, batch
                else:
                    q_state, kv_state = self.consume(
                        mO, mLSE, sQ, sK, sV_mma, sO, tma_o, tiled_mma_qk, tiled_mma_pv,
                        pipe_q, pipe_k, pipe_v_mma, q_state, kv_state, scale_log2,
                        ctidx, m_block, head, batch, n_block_max, seqlen_q, seqlen_k,
                        n_block_min, softcap_pre, window_left, window_right, mSink, v_descale, None, sP, blk,
                    )
                k += 1
                tile = self.sched.next(k, tile, cta, ctas)
            if const_expr(self.deferred_o):
                if pend_m >= 0:  # the CTA's last tile
                    self.store_o(rO_pend, lse_pend, mO, mLSE, sO, tma_o, tiled_mma_pv, ctidx,
                                 pend_m, pend_head, pend_batch, seqlen_q)
            if const_expr(self.separate_o):
                # The last O store must have read shared memory before the CTA exits.
                if ctidx % (128 if self.wg_epilogue else (32 if self.warp_o else self.consumer_threads)) == 0:
                    cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def tile_work(self, tile, num_m, mQ, mK, window_right=None, divs=None, section=None):
        """(m_block, head, head_kv, batch, n_block_max) of a linear tile index (`divs`:
        decode_divisors' made once per CTA, fast_divmod; `section`: section_pairs', causal_order)."""
        if const_expr(divs is not None):
            m_block, head, batch, head_kv = decode_fast(self.sched, tile, num_m, divs)
        else:
            # causal_order: the sectioned decode on every tile, one section of every pair
            # included. A uniform branch to the all-pairs decode there (check13/d1) cost the
            # sectioned cells 3-13% and gained nothing where it applied.
            m_block, head, batch = self.sched.decode(
                tile, num_m, mQ.shape[2], mQ.shape[3], mK.shape[0], (self.hdim + self.hdim_v) * self.cfg.elem_bytes,
                self.cfg.l2_section_mib * 1024 * 1024, mn=cutlass.min, mx=cutlass.max, pairs_per_section=section,
            )
            head_kv = head // (mQ.shape[2] // mK.shape[2])
        seqlen_q, seqlen_k = mQ.shape[0], mK.shape[0]
        n_block_max = block_range.n_block_max(
            m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n, self.causal, self.local, window_right,
            mn=cutlass.min, mx=cutlass.max,
        )
        return m_block, head, head_kv, batch, n_block_max

    def first_block(self, m_block, mQ, mK, window_left):
        """The first key block the tile visits: 0 (a Python int, so nothing is traced) unless
        local."""
        if const_expr(not self.local):
            return 0
        return block_range.n_block_min(
            m_block, mQ.shape[0], mK.shape[0], self.tile_m, self.tile_n, True, window_left, mx=cutlass.max
        )

    @cute.jit
    def produce(
        self, mQ, mK, mV, sQ, sK, sV, tma_q, tma_k, tma_v, pipe_q, pipe_k, pipe_v,
        q_state, kv_state, m_block, head, head_kv, batch, n_block_max, n_block_min,
    ):
        # Blocks n_block_max - 1 down to n_block_min (0 unless local), the consumers' order.
        n_blocks = n_block_max
        if const_expr(self.local):
            n_blocks = n_block_max - n_block_min
        gQ = cute.local_tile(mQ[None, None, head, batch], (self.tile_m, self.hdim), (m_block, 0))
        gK = cute.local_tile(mK[None, None, head_kv, batch], (self.tile_n, self.hdim), (None, 0))
        if const_expr(self.fp8 and not self.v_transpose):
            # Column-major V: a block is (head_dim_v, tile_n keys), blocks along the key mode.
            gV = cute.local_tile(mV[None, None, head_kv, batch], (self.hdim_v, self.tile_n), (0, None))
        else:
            gV = cute.local_tile(mV[None, None, head_kv, batch], (self.tile_n, self.hdim_v), (None, 0))
        one = cute.make_layout(1)
        tQsQ, tQgQ = cpasync.tma_partition(
            tma_q, 0, one, cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
        )
        tKsK, tKgK = cpasync.tma_partition(
            tma_k, 0, one, cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
        )
        tVsV, tVgV = cpasync.tma_partition(
            tma_v, 0, one, cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2)
        )
        # K of the first block goes out before Q: both are needed for the first GEMM.
        pipe_k.producer_acquire(kv_state)
        cute.copy(tma_k, tKgK[None, n_block_max - 1], tKsK[None, kv_state.index],
                  tma_bar_ptr=pipe_k.producer_get_barrier(kv_state))
        pipe_q.producer_acquire(q_state)
        if const_expr(self.q_stages > 1):
            tQsQ = tQsQ[None, q_state.index]
        cute.copy(tma_q, tQgQ, tQsQ, tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
        q_state.advance()

        if const_expr(self.overlap):
            # Consumers take K[j] then V[j+1]: load in that order.
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n_block = n_block_max - 1 - i
                v_state = kv_state.clone()
                kv_state.advance()
                pipe_k.producer_acquire(kv_state)
                cute.copy(tma_k, tKgK[None, n_block - 1], tKsK[None, kv_state.index],
                          tma_bar_ptr=pipe_k.producer_get_barrier(kv_state))
                pipe_v.producer_acquire(v_state)
                cute.copy(tma_v, tVgV[None, n_block], tVsV[None, v_state.index],
                          tma_bar_ptr=pipe_v.producer_get_barrier(v_state))
            pipe_v.producer_acquire(kv_state)
            cute.copy(tma_v, tVgV[None, n_block_min], tVsV[None, kv_state.index],
                      tma_bar_ptr=pipe_v.producer_get_barrier(kv_state))
            kv_state.advance()
        else:
            for i in cutlass.range(n_blocks, unroll=1):
                n_block = n_block_max - 1 - i
                if i > 0:
                    pipe_k.producer_acquire(kv_state)
                    cute.copy(tma_k, tKgK[None, n_block], tKsK[None, kv_state.index],
                              tma_bar_ptr=pipe_k.producer_get_barrier(kv_state))
                pipe_v.producer_acquire(kv_state)
                cute.copy(tma_v, tVgV[None, n_block], tVsV[None, kv_state.index],
                          tma_bar_ptr=pipe_v.producer_get_barrier(kv_state))
                kv_state.advance()
        return q_state, kv_state

    # ------------------------------------------------------------------ consumers
    @cute.jit
    def consume(
        self, mO, mLSE, sQ, sK, sV, sO, tma_o, tiled_mma_qk, tiled_mma_pv,
        pipe_q, pipe_k, pipe_v, q_state, kv_state, softmax_scale_log2,
        tidx, m_block, head, batch, n_block_max, seqlen_q, seqlen_k,
        n_block_min, softcap_pre, window_left, window_right, mSink, v_descale=None, pend=None, sP=None, blk=None,
    ):
        wg = cute.arch.make_warp_uniform(tidx // 128)
        wg_first_thread = cute.make_layout(self.num_wg, stride=128)
        wg_mma_qk = tiled_mma_qk.get_slice(wg_first_thread(wg))
        wg_mma_pv = tiled_mma_pv.get_slice(wg_first_thread(wg))
        thr_mma_qk = tiled_mma_qk.get_slice(tidx)

        tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(sQ))
        if const_expr(self.q_stages > 1):
            tSrQ = tSrQ[None, None, None, q_state.index]
        tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(sK))
        # e4m3: sV is already (head_dim, keys), keys contiguous: the K-major B operand.
        sVt = sV if const_expr(self.fp8) else transpose_view(sV)
        tOrV = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))
        acc_O = cute.make_rmem_tensor(wg_mma_pv.partition_shape_C((self.tile_m, self.hdim_v)), Float32)
        s_shape = wg_mma_qk.partition_shape_C((self.tile_m, self.tile_n))
        if const_expr(self.p_smem):
            # A: this warpgroup's 64 rows of sP, as descriptors. P is written through the full
            # tile's stmatrix partition, so each thread lands in its own warpgroup's rows.
            tOrP = wg_mma_pv.make_fragment_A(wg_mma_pv.partition_A(sP))
            p_store_atom = smem_store_atom(self.dtype)
            thr_store_p = cute.make_tiled_copy_C(p_store_atom, tiled_mma_qk).get_slice(tidx)
            tPsP = thr_store_p.partition_D(sP)
        else:
            tOrP = wg_mma_pv.make_fragment_A(wg_mma_pv.partition_shape_A((self.tile_m, self.tile_n)))

        coords_rc = acc_as_rows_cols(thr_mma_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
        if const_expr(self.block_descale):
            mDescaleQ, mDescaleK, head_kv = blk
            bq, bk = self.cfg.descale_blocks
            # This thread's rows (r, r + 8 of one 16-row group) share one q block.
            q_scale_log2 = descale.block_q_scale(mDescaleQ, batch, head, m_block * self.tile_m + coords_rc[0, 0][0],
                                                 bq, softmax_scale_log2)
            softmax = BlockScaledSoftmax(
                q_scale_log2, cute.size(acc_as_rows_cols(acc_O), mode=[0]), mDescaleK, batch, head_kv,
                n_block_max - 1, bk // self.tile_n, self.cfg.in_order_row_sum,
                self.cfg.exp2_emu_eighths, self.cfg.exp2_emu_degree, self.cfg.rescale_threshold, self.cfg.p_scale_log2,
            )
        else:
            softmax = OnlineSoftmax(
                softmax_scale_log2, cute.size(acc_as_rows_cols(acc_O), mode=[0]), self.cfg.in_order_row_sum,
                self.cfg.exp2_emu_eighths, self.cfg.exp2_emu_degree, self.cfg.rescale_threshold, self.cfg.p_scale_log2,
            )

        gemm_qk, gemm_pv = self._gemms(tiled_mma_qk, tiled_mma_pv, s_shape, tSrQ, tSrK, tOrP, tOrV, acc_O, wg)

        # Thread 0's coordinates: static, so the mask's column offsets are known at trace time.
        offsets_rc = acc_as_rows_cols(
            tiled_mma_qk.get_slice(0).partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))
        )

        def mask(acc_S, n_block, causal):
            if const_expr(self.local):
                # Every block masked here is masked at both window edges and the key length.
                if const_expr(self.cfg.mask_bits):
                    apply_window_mask_bits(acc_S, coords_rc, offsets_rc, m_block, n_block, seqlen_q, seqlen_k,
                                           window_left, window_right, self.tile_m, self.tile_n)
                    return
                apply_window_mask(acc_S, coords_rc, m_block, n_block, seqlen_q, seqlen_k,
                                  window_left, window_right, self.tile_m, self.tile_n)
                return
            if const_expr(self.cfg.mask_bits):
                apply_mask_bits(acc_S, coords_rc, offsets_rc, m_block, n_block, seqlen_q, seqlen_k,
                                self.tile_m, self.tile_n, causal)
                return
            apply_mask(acc_S, coords_rc, m_block, n_block, seqlen_q, seqlen_k,
                       self.tile_m, self.tile_n, causal)

        def to_p(acc_S):
            if const_expr(self.p_smem):
                # Converted in S's own register order (in pairs), then stored; P_j's slab is free
                # here: every to_p follows the wait for the PV GEMM that read P_{j-1}.
                rP = cute.make_rmem_tensor(acc_S.shape, self.dtype)
                convert_in_register_order(acc_S, rP, self.dtype)
                cute.copy(p_store_atom, thr_store_p.retile(rP), tPsP)
            elif const_expr(self.cfg.fp8_local_p):
                convert_p_fp8_local(acc_S, tOrP)  # sVt's keys are in the accumulator's order
            elif const_expr(self.cfg.fp8_p_pair_shuffle):
                convert_p_fp8_pairs(acc_S, tOrP, tidx % 32)
            elif const_expr(self.fp8):
                convert_p_fp8(acc_S, tOrP, tidx % 32)
            elif const_expr(self.cfg.chunked_p_convert):
                # Only valid when the A-operand view keeps the registers where they are.
                if const_expr(not register_order_matches(acc_as_operand_a(acc_S), tOrP)):
                    raise ValueError("chunked_p_convert: P's fragment is not S's registers in order")
                convert_in_register_order(acc_S, tOrP, self.dtype)
            else:
                tOrP.store(acc_as_operand_a(acc_S).load().to(self.dtype))

        sink = None
        if const_expr(self.sink):
            # Loaded now, used after the last block: its latency hides under the main loop.
            sink = Float32(mSink[head])
        pipe_q.consumer_wait(q_state)

        acc_O.fill(0.0)
        # Blocks needing a causal mask: those reaching past the diagonal of the first row.
        n_block_causal = n_block_max
        if const_expr(self.causal):
            n_block_causal = block_range.n_block_right_masked(
                m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n, mx=cutlass.max
            )
        elif const_expr(self.local):
            n_block_causal = 0  # plain_step masks every local block
        # First block: S, mask (key tail and diagonal or window), softmax; no PV yet.
        n_block = n_block_max - 1
        pipe_k.consumer_wait(kv_state)
        acc_S = gemm_qk(kv_state.index)
        if const_expr(self.deferred_o):
            # The previous tile's O goes out while this first QK^T runs.
            rO_pend, lse_pend, pend_m, pend_head, pend_batch = pend
            if pend_m >= 0:
                self.store_o(rO_pend, lse_pend, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx,
                             pend_m, pend_head, pend_batch, seqlen_q)
        warpgroup.wait_group(0)
        pipe_k.consumer_release(kv_state)
        if const_expr(self.softcap):
            apply_softcap(acc_S, softcap_pre)
        mask(acc_S, n_block, self.causal or self.local)
        softmax.step(acc_S, is_first=True)
        to_p(acc_S)

        if const_expr(self.overlap):
            # Row factors of the last softmax, applied to O just before the next PV GEMM.
            scale_prev = cute.make_rmem_tensor(cute.size(acc_as_rows_cols(acc_O), mode=[0]), Float32)
            scale_prev.fill(1.0)
            n_masked = 0
            if const_expr(self.causal):
                n_masked = cutlass.max(cutlass.min(n_block_max - 1 - n_block_causal, n_block_max - 1), 0)
            n_unmasked = None
            if const_expr(self.local):
                # Right edge masked, inside every row's window, left edge masked (block_range.py).
                n_masked, n_unmasked, n_masked_left = block_range.local_block_counts(
                    n_block_min, n_block_max,
                    block_range.n_block_right_masked(m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n,
                                                     True, window_right, mx=cutlass.max),
                    block_range.n_block_left_masked(m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n,
                                                    window_left, mx=cutlass.max),
                    mn=cutlass.min, mx=cutlass.max,
                )
            for i in cutlass.range(n_masked, unroll=1):
                kv_state = self.overlapped_step(
                    kv_state, n_block_max - 2 - i, gemm_qk, gemm_pv, mask, to_p, softmax,
                    acc_O, scale_prev, pipe_k, pipe_v, wg, True, softcap_pre,
                )
            if const_expr(not self.local):
                n_unmasked = n_block_max - 1 - n_masked
            for i in cutlass.range(n_unmasked, unroll=1):
                kv_state = self.overlapped_step(
                    kv_state, n_block_max - 2 - n_masked - i, gemm_qk, gemm_pv, mask, to_p,
                    softmax, acc_O, scale_prev, pipe_k, pipe_v, wg, False, softcap_pre,
                )
            if const_expr(self.local):
                for i in cutlass.range(n_masked_left, unroll=1):
                    kv_state = self.overlapped_step(
                        kv_state, n_block_max - 2 - n_masked - n_unmasked - i, gemm_qk, gemm_pv, mask,
                        to_p, softmax, acc_O, scale_prev, pipe_k, pipe_v, wg, True, softcap_pre,
                    )
            self.release_q_early(pipe_q, q_state)
            # Last PV.
            if const_expr(self.rescale_early):
                rescale_rows(acc_O, scale_prev)
            pipe_v.consumer_wait(kv_state)
            gemm_pv(kv_state.index, False)
            warpgroup.wait_group(0)
            pipe_v.consumer_release(kv_state)
            kv_state.advance()
        else:
            pipe_v.consumer_wait(kv_state)
            gemm_pv(kv_state.index, False)
            warpgroup.wait_group(0)
            pipe_v.consumer_release(kv_state)
            kv_state.advance()
            n_rest = n_block_max - 1
            if const_expr(self.local):
                n_rest = n_block_max - 1 - n_block_min
            for i in cutlass.range(n_rest, unroll=1):
                kv_state = self.plain_step(
                    kv_state, n_block_max - 2 - i, n_block_causal, gemm_qk, gemm_pv, mask,
                    to_p, softmax, acc_O, pipe_k, pipe_v, softcap_pre,
                )
            self.release_q_early(pipe_q, q_state)

        inv_sum, lse = softmax.finish(sink)
        if const_expr(self.fp8):
            descale.fold_v(inv_sum, v_descale)
        rescale_rows(acc_O, inv_sum)
        if const_expr(self.deferred_o):
            # Kept for the next tile's first QK^T (or the loop's end) to store.
            rO_pend.store(acc_O.load().to(self.o_dtype))
            lse_pend.store(lse.load())
        else:
            self.epilogue(acc_O, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)
        if const_expr(self.persistent and not self.separate_o):
            # O left through Q's buffer: hand it back for the next tile's Q only once the TMA
            # store has read it (thread 0 waited for that inside the epilogue).
            cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=self.consumer_threads)
            pipe_q.consumer_release(q_state)
        q_state.advance()
        return q_state, kv_state

    def release_q_early(self, pipe_q, q_state):
        """With O in its own buffer, Q is free once this warpgroup's last QK^T completed (every
        step waited for its S GEMM): the producer may load the next tile's Q at once."""
        if const_expr(self.persistent and self.separate_o):
            pipe_q.consumer_release(q_state)

    @cute.jit
    def plain_step(
        self, kv_state, n_block, n_block_causal, gemm_qk, gemm_pv, mask, to_p, softmax, acc_O,
        pipe_k, pipe_v, softcap_pre=None,
    ):
        """One key block with no overlap inside the warpgroup (kept to measure the overlap)."""
        pipe_k.consumer_wait(kv_state)
        acc_S = gemm_qk(kv_state.index)
        warpgroup.wait_group(0)
        pipe_k.consumer_release(kv_state)
        if const_expr(self.softcap):
            apply_softcap(acc_S, softcap_pre)
        if n_block >= n_block_causal:
            mask(acc_S, n_block, True)
        row_scale = softmax.step(acc_S, is_first=False)
        softmax.rescale_o(acc_O, row_scale)
        to_p(acc_S)
        pipe_v.consumer_wait(kv_state)
        gemm_pv(kv_state.index, False)
        warpgroup.wait_group(0)
        pipe_v.consumer_release(kv_state)
        kv_state.advance()
        return kv_state

    @cute.jit
    def overlapped_step(
        self, kv_state, n_block, gemm_qk, gemm_pv, mask, to_p, softmax, acc_O, scale_prev,
        pipe_k, pipe_v, wg, causal_mask: cutlass.Constexpr[bool], softcap_pre=None,
    ):
        """QK^T of block n_block runs while PV of the previous block and this softmax do."""
        v_state = kv_state.clone()
        kv_state.advance()
        self.wait_full(pipe_k, kv_state)
        self.schedule_wait(wg)
        acc_S = gemm_qk(kv_state.index)  # in flight
        if const_expr(self.rescale_early):
            rescale_rows(acc_O, scale_prev)  # under the QK^T GEMM, before PV accumulates
        self.wait_full(pipe_v, v_state)
        gemm_pv(v_state.index, False)  # in flight behind it
        self.schedule_pass(wg)
        warpgroup.wait_group(1)  # S is ready; PV still running
        if const_expr(not self.cfg.late_k_release):
            pipe_k.consumer_release(kv_state)
        if const_expr(self.softcap):
            apply_softcap(acc_S, softcap_pre)
        if const_expr(causal_mask):
            mask(acc_S, n_block, True)
        row_scale = softmax.step(acc_S, is_first=False)
        if const_expr(self.cfg.late_k_release):
            # ptxas keeps the PV GEMM's wait below K's release, and a release that tests the
            # rows' sums cannot rise above the exp2s that make them: every exp2 then runs under
            # the PV GEMM. The sums are never negative (NaN fails `<` too): K is always released.
            total = softmax.row_sum[0]
            for r in cutlass.range_constexpr(1, softmax.rows):
                total = total + softmax.row_sum[r]
            if not (total < Float32(0.0)):
                pipe_k.consumer_release(kv_state)
        warpgroup.wait_group(0)
        pipe_v.consumer_release(v_state)
        to_p(acc_S)
        if const_expr(self.rescale_early):
            scale_prev.store(row_scale.load())
        else:
            softmax.rescale_o(acc_O, row_scale)
        return kv_state

    def wait_full(self, pipe, state):
        """The key-block loop's wait for a loaded K or V stage (FwdConfig.try_wait_first)."""
        if const_expr(self.cfg.try_wait_first):
            pipe.consumer_wait(state, pipe.consumer_try_wait(state))
        else:
            pipe.consumer_wait(state)

    def schedule_wait(self, wg):
        if const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=int(Barrier.SCHEDULE_WG1) + wg, number_of_threads=2 * 128)

    def schedule_pass(self, wg):
        if const_expr(self.pingpong):
            nxt = wg + 1
            if const_expr(self.num_wg == 2):
                nxt = 1 - wg
            else:
                nxt = nxt % self.num_wg
            cute.arch.barrier_arrive(barrier_id=int(Barrier.SCHEDULE_WG1) + nxt, number_of_threads=2 * 128)

    @cute.jit
    def wgmma(self, tiled_mma, acc, tA, tB, zero_init: cutlass.Constexpr[bool], a_slices=None):
        """Issue one warpgroup GEMM over all K slices and commit it; the caller waits.
        `a_slices`: A's k slices ready-made (pinned descriptors) instead of tA's."""
        warpgroup.fence()
        atom = cute.make_mma_atom(tiled_mma.op)
        atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
        for k in cutlass.range_constexpr(cute.size(tA.shape[2])):
            a_k = tA[None, None, k] if const_expr(a_slices is None) else a_slices[k]
            cute.gemm(atom, acc, a_k, tB[None, None, k], acc)
            atom.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()

    @cute.jit
    def epilogue(self, acc_O, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q):
        rO = cute.make_rmem_tensor(acc_O.shape, self.o_dtype)
        rO.store(acc_O.load().to(self.o_dtype))
        self.store_o(rO, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)

    @cute.jit
    def store_o(self, rO, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q):
        """O (converted, in registers) through sO and a TMA store; LSE straight from registers."""
        if const_expr(self.wg_epilogue):
            self.wg_store_o(rO, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)
            return
        if const_expr(self.warp_o):
            self.warp_store_o(rO, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)
            return
        if const_expr(self.separate_o):
            # O's own buffer is free once the previous tile's store has read it; the barrier
            # below passes that on from the thread that issued the store.
            if tidx == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        # Every consumer warpgroup is past its last GEMM on Q (or, with its own buffer, the
        # previous O store has read it) before O overwrites the buffer.
        cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=self.consumer_threads)
        store_atom = smem_store_atom(self.o_dtype)
        thr_store = cute.make_tiled_copy_C(store_atom, tiled_mma_pv).get_slice(tidx)
        cute.copy(store_atom, thr_store.retile(rO), thr_store.partition_D(sO))

        self.store_lse(lse, mLSE, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)

        # The TMA engine reads sO: make the stmatrix writes visible to the async proxy.
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=self.consumer_threads)
        if tidx == 0:
            gO = cute.local_tile(mO[None, None, head, batch], (self.tile_m, self.hdim_v), (m_block, 0))
            tOsO, tOgO = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2), cute.group_modes(gO, 0, 2)
            )
            cute.copy(tma_o, tOsO, tOgO)
            cute.arch.cp_async_bulk_commit_group()
            if const_expr(not self.separate_o):
                # Q's buffer (or the CTA's exit) must wait for the store to read it.
                cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def store_lse(self, lse, mLSE, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q):
        """LSE: the thread holding column 0 of a row writes that row."""
        thr_mma = tiled_mma_pv.get_slice(tidx)
        cO = acc_as_rows_cols(thr_mma.partition_C(cute.make_identity_tensor((self.tile_m, self.hdim_v))))
        if cO[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(lse)):
                row = m_block * self.tile_m + cO[r, 0][0]
                if row < seqlen_q:
                    mLSE[row, head, batch] = lse[r]

    @cute.jit
    def wg_store_o(self, rO, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q):
        """This warpgroup's 64 rows of O through its own slab of sO and its own TMA store."""
        wg = cute.arch.make_warp_uniform(tidx // 128)
        wg_tidx = tidx % 128
        barrier = int(Barrier.EPILOGUE_WG1) + wg
        sO_wg = sO[None, None, wg]
        # The slab is free once this warpgroup's previous store has read it.
        if wg_tidx == 0:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.barrier(barrier_id=barrier, number_of_threads=128)
        # A one-warpgroup MMA's C layout over (64, hd) is this thread's share of the slab: the
        # same registers the full tiled MMA gives it for its warpgroup's rows.
        _, mma_pv_1wg = self._tiled_mmas(warpgroups=1)
        store_atom = smem_store_atom(self.o_dtype)
        thr_store = cute.make_tiled_copy_C(store_atom, mma_pv_1wg).get_slice(wg_tidx)
        cute.copy(store_atom, thr_store.retile(rO), thr_store.partition_D(sO_wg))
        self.store_lse(lse, mLSE, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=barrier, number_of_threads=128)
        if wg_tidx == 0:
            gO = cute.local_tile(mO[None, None, head, batch], (64, self.hdim_v), (m_block * self.num_wg + wg, 0))
            tOsO, tOgO = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO_wg, 0, 2), cute.group_modes(gO, 0, 2)
            )
            cute.copy(tma_o, tOsO, tOgO)
            cute.arch.cp_async_bulk_commit_group()

    @cute.jit
    def warp_store_o(self, rO, lse, mO, mLSE, sO, tma_o, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q):
        """This warp's 16 rows of O (its accumulator rows) through its rows of sO and its own
        TMA store; only warp syncs, so no warp waits for another. LSE after the store is issued."""
        warp = cute.arch.make_warp_uniform(tidx // 32)
        lane = tidx % 32
        # This warp's rows are free once its own previous store (issued by its lane 0) read them.
        if lane == 0:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        cute.arch.sync_warp()
        # The full tile's stmatrix partition: each thread writes only its warp's 16 rows
        # (tests/test_fa3_layouts.py checks it).
        store_atom = smem_store_atom(self.o_dtype)
        thr_store = cute.make_tiled_copy_C(store_atom, tiled_mma_pv).get_slice(tidx)
        cute.copy(store_atom, thr_store.retile(rO), thr_store.partition_D(sO))
        cute.arch.fence_view_async_shared()
        cute.arch.sync_warp()
        warps_per_tile = self.tile_m // WARP_O_ROWS
        if lane == 0:
            # A box wholly past seqlen_q would store nothing: skip it.
            if (m_block * warps_per_tile + warp) * WARP_O_ROWS < seqlen_q:
                gO = cute.local_tile(mO[None, None, head, batch], (WARP_O_ROWS, self.hdim_v),
                                     (m_block * warps_per_tile + warp, 0))
                sO_w = cute.local_tile(sO, (WARP_O_ROWS, self.hdim_v), (warp, 0))
                tOsO, tOgO = cpasync.tma_partition(
                    tma_o, 0, cute.make_layout(1), cute.group_modes(sO_w, 0, 2), cute.group_modes(gO, 0, 2)
                )
                cute.copy(tma_o, tOsO, tOgO)
                cute.arch.cp_async_bulk_commit_group()
        self.store_lse(lse, mLSE, tiled_mma_pv, tidx, m_block, head, batch, seqlen_q)


def _smem_buffer(layout, dtype):
    """A shared-memory buffer for `layout`, 1024-byte aligned (the 128B swizzle's period)."""
    return cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(layout)], 1024]


def _inner_cols(layout) -> int:
    """Columns of one swizzle atom: the TMA box's innermost extent (one copy per atom column)."""
    cols = layout.outer.shape[1]
    return cols[0] if isinstance(cols, tuple) else cols

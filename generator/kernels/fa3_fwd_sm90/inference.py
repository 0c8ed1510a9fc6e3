"""The inference form of the SM90 forward kernel: split-KV, pack-GQA and paged KV (issue 11).

A subclass of FlashFwdSm90 that keeps its producer/consumer structure, WGMMA steps and
softmax, and changes what the inference axes change:
- every sequence has its own key count (seqused_k, int32 per batch);
- split_kv: grid x is (m block, split); split s visits split_range() of the tile's key
  blocks and writes fp32 partial O and LSE (O = 0, LSE = -inf for an empty split);
- pack_gqa: a tile's rows are (token, query head of the KV head's group), head fastest;
  the consumers load Q row by row (the group size is a runtime value, so no TMA box fits);
- paged_kv: K and V come from (num_pages, page_size, heads_kv, d) through page_table: one
  TMA box per tile where a page holds whole tiles, else boxes of PAGE_CHUNK rows per page;
- varlen: q, o (and k, v unless paged) are packed (total_tokens, heads, d), lse (heads,
  total_q); sequence b's rows come from seqlens.SeqLens (cu_seqlens, seqused); a 1-D grid of
  (tile, head) over the ragged batch, mapped by varlen_tile (schedule.varlen_tile's order).
  TMA loads may read past a sequence's rows (other sequences' rows: masked in the scores or
  never stored); O and LSE stores are predicated per row. With scheduler "persistent",
  min(tiles, SMs) CTAs stride over that (tile, head) list (schedule.varlen_persistent_walk:
  zigzag rounds; non-causal tiles ordered by their sequence's key blocks, varlen_tile_by_keys),
  the pipeline states carried from tile to tile, so the producer loads the next tile's K and Q
  while the consumers finish this one's last PV and epilogue.
O and LSE leave from registers (rows map to (token, head) at run time), or for packed varlen
through Q's buffer (o_smem_store, o_tma_ragged) or O's own. Packed varlen also takes a value
head dim of its own (head_dim_v, DeepSeek MLA prefill's (192, 128)): V's tiles, the PV GEMM and
O are hdim_v wide, O staged in a (tile_m, hdim_v) view of Q's buffer (o_stage_layout). The dense
default variants never reach this module, so their cubins stay as they were.

The model variants (issue 12) through the dense kernel's own rules: softcap
(softmax.apply_softcap before the mask), a sliding window (block_range's range and counts,
mask.apply_window_mask; pack-GQA maps rows to tokens with `group`; varlen windows are per
sequence, bottom-right, as its causal), and the learnable sink (softmax.finish, one logit
per row's head). Under split-KV each split's range is cut from the windowed range, and only
split 0 adds the sink: the combine's LSE sum then counts it once (an empty split 0 writes
O = 0, LSE = sink, which the combine weighs in like any split).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr
from cutlass import pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup

from cubinforge.runtime.tensormap import ragged_coords, ragged_extent, ragged_shift

from . import descale, v_transpose
from .barriers import Barrier
from .config import PAGE_CHUNK, FwdConfig
from .fp8_p import check_layouts, check_local_layouts, convert_p_fp8, convert_p_fp8_local
from .kernel import PERSISTENT_CTAS, FlashFwdSm90, _inner_cols, _smem_buffer

# varlen_dynamic: linear tiles in flight from the producer to the consumers (the producer runs
# at most this many tiles ahead; its K/V stages hold it closer still).
TILE_STAGES = 2
from . import block_range
from .mask import apply_mask_bits, apply_window_mask, apply_window_mask_bits
from .layouts import (acc_as_operand_a, acc_as_rows_cols, convert_in_register_order, register_order_matches,
                      smem_layout, smem_store_atom, transpose_view)
from .schedule import TileScheduler, split_range, varlen_ctas
from .seqlens import SeqLens
from .softmax import OnlineSoftmax, apply_softcap, rescale_rows


class FlashFwdSm90Inference(FlashFwdSm90):
    def __init__(self, cfg: FwdConfig):
        super().__init__(cfg)
        if not cfg.inference:
            raise ValueError("FlashFwdSm90Inference builds split_kv / pack_gqa / paged_kv variants only")
        if not cfg.intra_wg_overlap:
            raise ValueError("the inference kernel has the overlapped main loop only")
        # head_dim_v != head_dim (varlen packed only: FwdConfig says which forms): V's tiles,
        # the PV GEMM and O are hdim_v wide, Q's and K's hdim.
        self.split = cfg.split_kv
        self.pack = cfg.pack_gqa
        self.paged = cfg.paged_kv
        self.varlen = cfg.varlen
        self.persistent_varlen = cfg.varlen and cfg.scheduler == "persistent"
        self.dynamic = bool(cfg.varlen_dynamic)
        # The persistent varlen walk (schedule.varlen_persistent_walk); single keeps one tile
        # per CTA and its code as it was.
        self.vsched = TileScheduler("persistent", cfg.causal, varlen=True)
        if self.paged and self.num_wg == 2:
            # The producer computes page addresses: FA3's split for a non-TMA producer
            # (24 registers spilled in the paged variants).
            self.consumer_regs, self.producer_regs = 232, 40
        if cfg.ctas_per_sm != 1:
            self.consumer_regs, self.producer_regs = cfg.register_split  # 256 a pair: two CTAs an SM
        if self.persistent_varlen and self.num_wg == 2:
            # The producer works out every tile's place in the walk (warp reductions over the
            # batch): 24 registers spill 48 B there, so the paged split.
            self.consumer_regs, self.producer_regs = 232, 40

    # ------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (batch, seqlen_q, heads_q, d)
        mK: cute.Tensor,  # (batch, seqlen_k, heads_kv, d), paged: (num_pages, page_size, heads_kv, d)
        mV: cute.Tensor,
        mO: cute.Tensor,  # (batch, seqlen_q, heads_q, d); split: (num_splits, ...) float32
        mLSE: cute.Tensor,  # (batch, heads_q, seqlen_q); split: (num_splits, ...)
        softmax_scale_log2: Float32,
        mSeqUsedK: cute.Tensor,  # (batch,) int32
        mPageTable: cute.Tensor = None,  # (batch, max_pages) int32
        # varlen: q (total_q, heads_q, d), k/v (total_k, heads_kv, d) unless paged, o like q,
        # lse (heads_q, total_q); cu_seqlens (batch + 1,) int32; seqused_q (batch,) int32 and
        # the flags saying whether seqused_q / seqused_k hold the lengths (1) or not (0).
        mCuSeqlensQ: cute.Tensor = None,
        mCuSeqlensK: cute.Tensor = None,
        mSeqUsedQ: cute.Tensor = None,
        has_seqused_q: Int32 | None = None,
        has_seqused_k: Int32 | None = None,
        mDescale: cute.Tensor = None,  # e4m3: (3, batch, heads_kv) float32, q/k/v descales (descale.py)
        # The model variants, as the dense kernel takes them (None when off): softcap's
        # softmax_scale / softcap, the resolved window, the sink logits (heads_q,) float32.
        # Not with e4m3 (FwdConfig refuses the pair), so at most one of the two groups is set.
        softcap_pre: Float32 | None = None,
        window_left: Int32 | None = None,
        window_right: Int32 | None = None,
        mSink: cute.Tensor | None = None,
        mTileCounter: cute.Tensor | None = None,  # varlen_dynamic: (2,) int32, the walk's counter
    ):
        bshd_to_sdhb = [1, 3, 2, 0]
        if const_expr(self.varlen):
            # Kernel view of a packed tensor: (total, d, heads), a tile a slice of modes 0 and 1.
            thd_to_tdh = [0, 2, 1]
            kv_modes = bshd_to_sdhb if const_expr(self.paged) else thd_to_tdh
            mQ = cute.make_tensor(mQ.iterator, cute.select(mQ.layout, mode=thd_to_tdh))
            mK, mV = [cute.make_tensor(t.iterator, cute.select(t.layout, mode=kv_modes)) for t in (mK, mV)]
        else:
            mQ, mK, mV = [
                cute.make_tensor(t.iterator, cute.select(t.layout, mode=bshd_to_sdhb)) for t in (mQ, mK, mV)
            ]
        tiled_mma_qk, tiled_mma_pv = self._tiled_mmas()
        sQ_layout = smem_layout(self.dtype, self.tile_m, self.hdim)
        sK_layout = smem_layout(self.dtype, self.tile_n, self.hdim, self.stages)
        sV_layout = smem_layout(self.dtype, self.tile_n, self.hdim_v, self.stages)

        fields = self._storage_fields(sQ_layout, sK_layout, sV_layout)
        sO_layout = self.o_stage_layout(sQ_layout)
        if const_expr(self.separate_o):
            # o_tma_ragged with O's own buffer: Q goes back after the last QK^T.
            fields["sO"] = _smem_buffer(sO_layout, self.dtype)
        if const_expr(self.dynamic):
            # The walk's tile hand-over: TILE_STAGES linear tiles, producer to consumers.
            fields["mbar_tile"] = cute.struct.MemRange[cutlass.Int64, 2 * TILE_STAGES]
            fields["s_tile"] = cute.struct.MemRange[cutlass.Int32, TILE_STAGES]
        if const_expr(self.v_transpose):
            # e4m3: V arrives row-major as a cache stores it; the producer's spare warps
            # transpose each stage into sVt (v_transpose.py), the dense kernel's way.
            sVt_layout = v_transpose.vt_layout(self.dtype, self.hdim, self.tile_n, self.stages)
            v_transpose.check_units(sV_layout, sVt_layout, self.tile_n, self.hdim)
            fields.update(self._vt_fields(sVt_layout))
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage
        if const_expr(self.fp8):
            check_layouts(tiled_mma_qk, tiled_mma_pv, self.tile_m, self.tile_n)
        if const_expr(self.cfg.fp8_local_p):
            check_local_layouts(tiled_mma_qk, tiled_mma_pv, self.tile_m, self.tile_n)

        load_op = cpasync.CopyBulkTensorTileG2SOp()
        tma_k, tK, tma_v, tV = self._kv_tma_atoms(load_op, mK, mV, sK_layout, sV_layout, (self.tile_n, self.hdim_v))
        cols = _inner_cols(sK_layout)
        self.dynamic_smem_bytes = SharedStorage.size_in_bytes()
        self.tma_boxes = {"k": (cols, self.tile_n), "v": (_inner_cols(sV_layout), self.tile_n)}
        tma_q, tQ = None, mQ
        if const_expr(not self.pack):
            tma_q, tQ = cpasync.make_tiled_tma_atom(load_op, mQ, sQ_layout, (self.tile_m, self.hdim))
            self.tma_boxes["q"] = (_inner_cols(sQ_layout), self.tile_m)
        tma_o, tOr = None, None
        if const_expr(self.cfg.o_tma_ragged):
            # O's ragged view (runtime/tensormap.py): (total, d, heads, total + 1), its base
            # `total` rows back, so that a sequence's rows end at the view's bound on mode 0.
            rows = mO.shape[0]
            mO_r = cute.make_tensor(
                mO.iterator - ragged_shift(rows, mO.stride[0]),
                cute.make_layout((rows, self.hdim_v, mO.shape[1], ragged_extent(rows)),
                                 stride=(mO.stride[0], 1, mO.stride[1], mO.stride[0])))
            tma_o, tOr = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mO_r, sO_layout,
                                                     (self.tile_m, self.hdim_v))
            self.tma_boxes["o"] = (_inner_cols(sO_layout), self.tile_m)
        tma_kc, tKc, tma_vc, tVc = None, None, None, None
        if const_expr(self.paged):
            # One swizzle atom's columns by PAGE_CHUNK rows: the chunk of a stage tile at
            # (row chunk j, column atom c) is one such compact box (2 KiB: the swizzle repeats).
            chunk_layout = smem_layout(self.dtype, PAGE_CHUNK, cols)
            tma_kc, tKc = cpasync.make_tiled_tma_atom(load_op, mK, chunk_layout, (PAGE_CHUNK, cols))
            tma_vc, tVc = cpasync.make_tiled_tma_atom(load_op, mV, chunk_layout, (PAGE_CHUNK, cols))
            self.tma_boxes["kc"] = (cols, PAGE_CHUNK)
            self.tma_boxes["vc"] = (cols, PAGE_CHUNK)

        rows_q = cute.size(mQ.shape[0])
        heads = cute.size(mQ.shape[2])
        if const_expr(self.pack):
            rows_q = rows_q * (heads // cute.size(mK.shape[2]))
            heads = cute.size(mK.shape[2])
        num_m = cute.ceil_div(rows_q, self.tile_m)
        splits = cute.size(mO.shape[0]) if const_expr(self.split) else 1
        if const_expr(self.varlen):
            # schedule.varlen_ctas, the contract's rule too (launchers take the contract's, with
            # the device's SM count; PERSISTENT_CTAS only reaches the DSL's unused launcher).
            batch = cute.size(mCuSeqlensQ.shape[0]) - 1
            grid = (varlen_ctas(rows_q, batch, self.tile_m, heads, PERSISTENT_CTAS, self.persistent_varlen,
                                mn=cutlass.min), 1, 1)
        else:
            grid = (num_m * splits, heads, cute.size(mQ.shape[3]))
        self.kernel(
            tQ, tK, tV, mO, mLSE, tma_q, tma_k, tma_v, tKc, tVc, tma_kc, tma_vc,
            softmax_scale_log2, mSeqUsedK, mPageTable,
            mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, has_seqused_q, has_seqused_k,
            sQ_layout, sK_layout, sV_layout, tiled_mma_qk, tiled_mma_pv, mDescale,
            softcap_pre, window_left, window_right, mSink, tOr, tma_o, mTileCounter,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], min_blocks_per_mp=self.cfg.ctas_per_sm,
                 # A carveout named here keeps the DSL from asking a device for its shared memory
                 # per SM when min_blocks_per_mp > 1 (the build machine has none); only the DSL's
                 # own launcher reads it, and the default forms (1) pass None as before.
                 preferred_smem_carveout=100 if self.cfg.ctas_per_sm > 1 else None)

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
        mKc: cute.Tensor,
        mVc: cute.Tensor,
        tma_kc: cute.CopyAtom,
        tma_vc: cute.CopyAtom,
        softmax_scale_log2: Float32,
        mSeqUsedK: cute.Tensor,
        mPageTable: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        mCuSeqlensK: cute.Tensor,
        mSeqUsedQ: cute.Tensor,
        has_seqused_q: Int32 | None,
        has_seqused_k: Int32 | None,
        sQ_layout: cute.ComposedLayout,
        sK_layout: cute.ComposedLayout,
        sV_layout: cute.ComposedLayout,
        tiled_mma_qk: cute.TiledMma,
        tiled_mma_pv: cute.TiledMma,
        mDescale: cute.Tensor = None,
        softcap_pre: Float32 | None = None,
        window_left: Int32 | None = None,
        window_right: Int32 | None = None,
        mSink: cute.Tensor | None = None,
        mOr: cute.Tensor | None = None,
        tma_o: cute.CopyAtom | None = None,
        mTileCounter: cute.Tensor | None = None,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        if warp_idx == 0:
            for atom in (tma_q, tma_k, tma_v, tma_kc, tma_vc, tma_o):
                if const_expr(atom is not None):
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
        tiles = None
        if const_expr(self.dynamic):
            # One producer thread writes a slot, every consumer thread reads it (_vt_pipeline's
            # kind of pipeline).
            tiles = (pipeline.PipelineAsync.create(
                barrier_storage=storage.mbar_tile.data_ptr(), num_stages=TILE_STAGES,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads),
                defer_sync=True,
            ), storage.s_tile.get_tensor(cute.make_layout(TILE_STAGES)), mTileCounter)
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        sQ, sK, sV = self._smem_qkv(storage, sQ_layout, sK_layout, sV_layout)
        # Where O is staged before its store (None: it leaves from registers). o_smem_store comes
        # first, as in the epilogues: Q's buffer, as Q or, V narrower than Q, a (tile_m,
        # head_dim_v) view of its bytes; else separate_o_smem's own buffer.
        sO = None
        sO_layout = self.o_stage_layout(sQ_layout)
        if const_expr(self.cfg.o_smem_store):
            sO = sQ if const_expr(self.hdim_v == self.hdim) else storage.sQ.get_tensor(
                sO_layout.outer, swizzle=sO_layout.inner)
        elif const_expr(self.separate_o):
            sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        # The V the PV GEMM reads and the pipeline that hands it over.
        sV_mma, pipe_v_mma = sV, pipe_v
        if const_expr(self.v_transpose):
            sVt_layout = v_transpose.vt_layout(self.dtype, self.hdim, self.tile_n, self.stages)
            sV_mma = storage.sVt.get_tensor(sVt_layout.outer, swizzle=sVt_layout.inner)
            pipe_v_mma = pipe_vt

        if const_expr(self.persistent_varlen):
            self.persistent_walk(
                warp_idx, tidx, mQ, mK, mV, mO, mLSE, mKc, mVc, sQ, sK, sV, tma_q, tma_k, tma_v, tma_kc, tma_vc,
                pipe_q, pipe_k, pipe_v, softmax_scale_log2, mSeqUsedK, mPageTable,
                mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, has_seqused_q, has_seqused_k, tiled_mma_qk, tiled_mma_pv,
                mOr=mOr, tma_o=tma_o, sO=sO, tiles=tiles,
                softcap_pre=softcap_pre, window_left=window_left, window_right=window_right, mSink=mSink,
            )
            return
        m_block, split, head, batch, group, seq, lo, hi = self.tile_work(
            mQ, mK, mO, mSeqUsedK, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, has_seqused_q, has_seqused_k,
            window_left=window_left, window_right=window_right)
        seqlen_q, seqlen_k = seq.seqlen_q, seq.seqlen_k

        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                if hi > lo:
                    self.produce_range(
                        mQ, mK, mV, mKc, mVc, sQ, sK, sV, tma_q, tma_k, tma_v, tma_kc, tma_vc,
                        pipe_q, pipe_k, pipe_v, m_block, head, batch, group, seqlen_k, lo, hi, mPageTable,
                        seq.offset_q, seq.offset_k,
                    )
            if const_expr(self.v_transpose):
                if warp_idx >= v_transpose.FIRST_WARP:
                    self.transpose_range(pipe_v, pipe_vt, storage.sV.data_ptr().toint(), storage.sVt.data_ptr().toint(),
                                         sV_layout, sVt_layout, warp_idx, tidx % 32, lo, hi)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            ctidx = tidx - 128
            if const_expr(self.pingpong):
                if ctidx < 128:
                    cute.arch.barrier_arrive(barrier_id=int(Barrier.SCHEDULE_WG1), number_of_threads=2 * 128)
            scale_log2 = softmax_scale_log2
            v_descale = None
            if const_expr(self.fp8):
                # Descales follow q's batch row (with cache_batch_idx, not the cache row it reads).
                head_kv = head if const_expr(self.pack) else head // group
                scale_log2, v_descale = descale.fold_scale(mDescale, batch, head_kv, softmax_scale_log2)
            self.consume_range(
                mQ, mO, mLSE, sQ, sK, sV_mma, tiled_mma_qk, tiled_mma_pv, pipe_q, pipe_k, pipe_v_mma,
                scale_log2, ctidx, m_block, split, head, batch, group, seqlen_q, seqlen_k, lo, hi,
                seq.offset_q, v_descale,
                softcap_pre=softcap_pre, window_left=window_left, window_right=window_right, mSink=mSink,
                mOr=mOr, tma_o=tma_o, sO=sO,
            )

    @cute.jit
    def persistent_walk(
        self, warp_idx, tidx, mQ, mK, mV, mO, mLSE, mKc, mVc, sQ, sK, sV, tma_q, tma_k, tma_v, tma_kc, tma_vc,
        pipe_q, pipe_k, pipe_v, softmax_scale_log2, mSeqUsedK, mPageTable,
        mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, has_seqused_q, has_seqused_k, tiled_mma_qk, tiled_mma_pv,
        mOr=None, tma_o=None, sO=None, tiles=None,
        softcap_pre=None, window_left=None, window_right=None, mSink=None,
    ):
        """The persistent varlen loop: CTA blockIdx.x of gridDim.x walks linear tiles
        L = tile * heads + head by self.vsched's stride while L < real tiles * heads (each warp
        counts the real tiles itself), carrying the pipeline states across tiles. A tile with
        no key blocks loads nothing (its O = 0, LSE = -inf leave from registers).
        varlen_dynamic (`tiles`: the hand-over pipeline, its slots, the counter): the first
        tile is blockIdx.x, each next one gridDim.x + the counter's old value, fetched by the
        producer once it has issued a tile's loads and passed to the consumers, who stop at
        the first L past the last tile. The model variants (softcap, window, sink) as the one-tile
        form takes them: a window narrows each tile's key blocks in tile_work."""
        cta = cute.arch.block_idx()[0]
        ctas = cute.arch.grid_dim()[0]
        heads = mQ.shape[2]
        work = (mQ, mK, mO, mSeqUsedK, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, has_seqused_q, has_seqused_k,
                window_left, window_right)
        num_lin = self.varlen_tile_count(mCuSeqlensQ, mSeqUsedQ, has_seqused_q) * heads
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                k = Int32(0)
                lin = self.vsched.first(k, cta, ctas)
                t_state = None
                if const_expr(self.dynamic):
                    lin = cta
                    t_state = self.publish_tile(tiles, pipeline.make_pipeline_state(
                        pipeline.PipelineUserType.Producer, TILE_STAGES), lin)
                while lin < num_lin:
                    m_block, split, head, batch, group, seq, lo, hi = self.tile_work(*work, lin=lin)
                    if hi > lo:
                        q_state, kv_state = self.produce_range(
                            mQ, mK, mV, mKc, mVc, sQ, sK, sV, tma_q, tma_k, tma_v, tma_kc, tma_vc,
                            pipe_q, pipe_k, pipe_v, m_block, head, batch, group, seq.seqlen_k, lo, hi,
                            mPageTable, seq.offset_q, seq.offset_k, q_state, kv_state,
                        )
                    k += 1
                    if const_expr(self.dynamic):
                        lin = self.fetch_tile(tiles, ctas)
                        t_state = self.publish_tile(tiles, t_state, lin)
                    else:
                        lin = self.vsched.next(k, lin, cta, ctas)
                if const_expr(self.dynamic):
                    self.retire_counter(tiles, ctas)
                # Keep the CTA alive until the consumers released every slot filled.
                pipe_v.producer_tail(kv_state)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            ctidx = tidx - 128
            if const_expr(self.pingpong):
                if ctidx < 128:
                    cute.arch.barrier_arrive(barrier_id=int(Barrier.SCHEDULE_WG1), number_of_threads=2 * 128)
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            k = Int32(0)
            lin = self.vsched.first(k, cta, ctas)
            t_state = None
            if const_expr(self.dynamic):
                lin, t_state = self.receive_tile(tiles, pipeline.make_pipeline_state(
                    pipeline.PipelineUserType.Consumer, TILE_STAGES))
            while lin < num_lin:
                m_block, split, head, batch, group, seq, lo, hi = self.tile_work(*work, lin=lin)
                q_state, kv_state = self.consume_range(
                    mQ, mO, mLSE, sQ, sK, sV, tiled_mma_qk, tiled_mma_pv, pipe_q, pipe_k, pipe_v,
                    softmax_scale_log2, ctidx, m_block, split, head, batch, group, seq.seqlen_q, seq.seqlen_k,
                    lo, hi, seq.offset_q, q_state=q_state, kv_state=kv_state, mOr=mOr, tma_o=tma_o, sO=sO,
                    softcap_pre=softcap_pre, window_left=window_left, window_right=window_right, mSink=mSink,
                )
                k += 1
                if const_expr(self.dynamic):
                    lin, t_state = self.receive_tile(tiles, t_state)
                else:
                    lin = self.vsched.next(k, lin, cta, ctas)
            if const_expr(self.separate_o):
                # The last tile's O store must have read its buffer before the CTA exits.
                if ctidx == 0:
                    cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def publish_tile(self, tiles, state, lin):
        """The producer warp hands linear tile `lin` to the consumers (lane 0 writes the slot);
        returns the state after."""
        pipe, slots, _ = tiles
        pipe.producer_acquire(state)
        if cute.arch.lane_idx() == 0:
            slots[state.index] = lin
            pipe.producer_commit(state)
        return self._advanced(state)

    @cute.jit
    def receive_tile(self, tiles, state):
        """(the next linear tile, the state after): every consumer thread reads the slot."""
        pipe, slots, _ = tiles
        pipe.consumer_wait(state)
        lin = slots[state.index]
        pipe.consumer_release(state)
        return lin, self._advanced(state)

    @cute.jit
    def fetch_tile(self, tiles, ctas):
        """The producer warp's next linear tile: gridDim.x + the counter's old value (the first
        gridDim.x tiles are the CTAs' own), lane 0's atomicAdd broadcast to the warp."""
        counter = tiles[2]
        taken = Int32(0)
        if cute.arch.lane_idx() == 0:
            taken = cute.arch.atomic_add(counter.iterator, Int32(1))
        return ctas + cute.arch.shuffle_sync(taken, 0)

    @cute.jit
    def retire_counter(self, tiles, ctas):
        """Counts this CTA out after its last fetch; the last CTA out zeroes the counter for the
        next launch (every CTA has stopped fetching by then: each counts out after its last)."""
        counter = tiles[2]
        if cute.arch.lane_idx() == 0:
            out = cute.arch.atomic_add(counter.iterator + 1, Int32(1))
            if out == ctas - 1:
                cute.arch.atomic_exch(counter.iterator, Int32(0))
                cute.arch.atomic_exch(counter.iterator + 1, Int32(0))

    @cute.jit
    def tile_work(self, mQ, mK, mO, mSeqUsedK, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, has_seqused_q, has_seqused_k,
                  window_left=None, window_right=None, lin=None):
        """(m_block, split, head, batch, group, seq, lo, hi): this CTA's tile, where its
        sequence's rows are (seqlens.SeqLens) and the [lo, hi) key blocks it visits. `head` is
        the KV head under pack_gqa. A varlen CTA past the last tile gets seqlen_q = 0 and no
        key blocks: it loads nothing and stores nothing. `lin`: the persistent walk's linear
        tile (else blockIdx.x is)."""
        group = mQ.shape[2] // mK.shape[2]
        split = Int32(0)
        num_splits = 1
        if const_expr(self.varlen):
            heads = mQ.shape[2]
            if const_expr(lin is None):
                t = cute.arch.block_idx()[0] // heads
                head = cute.arch.block_idx()[0] - t * heads
                batch, m_block, valid = self.varlen_tile(t, mCuSeqlensQ, mSeqUsedQ, has_seqused_q)
            else:
                t = lin // heads
                head = lin - t * heads
                if const_expr(self.causal and not self.dynamic):
                    batch, m_block, valid = self.varlen_tile(t, mCuSeqlensQ, mSeqUsedQ, has_seqused_q)
                else:
                    batch, m_block, valid = self.varlen_tile_by_keys(
                        t, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, has_seqused_q, has_seqused_k)
            seq = SeqLens.varlen(batch, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, has_seqused_q,
                                 has_seqused_k, paged_k=self.paged)
            seq = SeqLens(seq.offset_q, seq.seqlen_q * valid, seq.offset_k, seq.seqlen_k * valid)
        else:
            bx, head, batch = cute.arch.block_idx()
            m_block = bx
            if const_expr(self.split):
                num_splits = mO.shape[0]
                m_block = bx // num_splits
                split = bx - m_block * num_splits
            seq = SeqLens.from_seqused_k(batch, mQ.shape[0], mSeqUsedK)
        seqlen_q, seqlen_k = seq.seqlen_q, seq.seqlen_k
        n_block_max = (seqlen_k + self.tile_n - 1) // self.tile_n
        n_block_min = Int32(0)
        if const_expr(self.causal):
            # Keys the tile's last row sees (bottom-right aligned): that row's token + 1 +
            # seqlen_k - seqlen_q. A tile whose rows see no key visits nothing.
            last_token = ((m_block + 1) * self.tile_m - 1) // group if const_expr(self.pack) else (
                (m_block + 1) * self.tile_m - 1)
            last_key = last_token + 1 + seqlen_k - seqlen_q
            n_block_max = cutlass.max(cutlass.min(n_block_max, (last_key + self.tile_n - 1) // self.tile_n), 0)
        if const_expr(self.local):
            # The dense kernel's window range (rows are tokens under pack-GQA); a sequence with
            # no key visits nothing (block_range keeps one masked block, which here would load
            # a page-table entry that may not be set).
            n_block_min, n_block_hi = block_range.n_block_range(
                m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n, False, True, window_left, window_right,
                mn=cutlass.min, mx=cutlass.max, group=self.row_group(group))
            n_block_max = cutlass.min(n_block_max, n_block_hi)
        lo, hi = n_block_min, n_block_max
        if const_expr(self.split):
            lo, hi = split_range(n_block_min, n_block_max, split, num_splits, mn=cutlass.min)
        return m_block, split, head, batch, group, seq, lo, hi

    def row_group(self, group):
        """block_range's / mask's `group`: heads per token under pack-GQA, None (rows are
        tokens: the dense arithmetic) otherwise."""
        return group if const_expr(self.pack) else None

    @cute.jit
    def lane_tiles(self, c, num_batch, mCuSeqlensQ, mSeqUsedQ, has_seqused_q):
        """m blocks of the sequence this lane holds in chunk c of 32 sequences (0 past the batch)."""
        b = c * 32 + cute.arch.lane_idx()
        n = Int32(0)
        if b < num_batch:
            n = (SeqLens.q_len(b, mCuSeqlensQ, mSeqUsedQ, has_seqused_q) + self.tile_m - 1) // self.tile_m
        return n

    @cute.jit
    def varlen_tile_count(self, mCuSeqlensQ, mSeqUsedQ, has_seqused_q):
        """The real tiles of the batch (schedule.tiles_from(tiles, 0)): sum of its m blocks."""
        num_batch = mCuSeqlensQ.shape[0] - 1
        total = Int32(0)
        for c in cutlass.range((num_batch + 31) // 32, unroll=1):
            total += cute.arch.warp_redux_sync(self.lane_tiles(c, num_batch, mCuSeqlensQ, mSeqUsedQ, has_seqused_q),
                                               "add")
        return total

    @cute.jit
    def lane_keyed_tiles(self, c, num_batch, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, has_seqused_q,
                         has_seqused_k):
        """(m blocks, key blocks) of the sequence this lane holds in chunk c (0, 0 past the batch)."""
        b = c * 32 + cute.arch.lane_idx()
        n = Int32(0)
        kb = Int32(0)
        if b < num_batch:
            seq = SeqLens.varlen(b, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, has_seqused_q, has_seqused_k,
                                 paged_k=self.paged)
            n = (seq.seqlen_q + self.tile_m - 1) // self.tile_m
            kb = (seq.seqlen_k + self.tile_n - 1) // self.tile_n
        return n, kb

    @cute.jit
    def varlen_tile_by_keys(self, t, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, has_seqused_q, has_seqused_k):
        """(batch, m_block, valid) of linear tile t in schedule.varlen_tile_by_keys's order
        (sequences by key blocks descending, m blocks from the last), valid 0 past the last
        tile: a lane per sequence as in varlen_tile, the k-th tile of a level found by a warp
        prefix sum over the level's sequences."""
        num_batch = mCuSeqlensQ.shape[0] - 1
        chunks = (num_batch + 31) // 32
        args = (num_batch, mCuSeqlensQ, mCuSeqlensK, mSeqUsedQ, mSeqUsedK, has_seqused_q, has_seqused_k)
        n0, kb0 = self.lane_keyed_tiles(0, *args)
        total = cute.arch.warp_redux_sync(n0, "add")
        top = cute.arch.warp_redux_sync(kb0, "max")
        for c in cutlass.range(1, chunks, unroll=1):
            n, kb = self.lane_keyed_tiles(c, *args)
            total += cute.arch.warp_redux_sync(n, "add")
            top = cutlass.max(top, cute.arch.warp_redux_sync(kb, "max"))
        # The largest level x with tiles_keyed(x) > t: tiles_keyed(lo) > t >= tiles_keyed(hi) = a_hi.
        lo = Int32(0)
        hi = top + 1
        a_hi = Int32(0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            a = Int32(0)
            for c in cutlass.range(chunks, unroll=1):
                n, kb = n0, kb0
                if c > 0:
                    n, kb = self.lane_keyed_tiles(c, *args)
                sel = Int32(0)
                if kb >= mid:
                    sel = n
                a += cute.arch.warp_redux_sync(sel, "add")
            if a > t:
                lo = mid
            else:
                hi = mid
                a_hi = a
        # Tile k of level lo: in the sequence whose run [before, before + n) of the level's
        # tiles (batch order) holds k; its m blocks from the last.
        k = t - a_hi
        batch = Int32(0)
        m_block = Int32(0)
        before = Int32(0)
        lane = cute.arch.lane_idx()
        for c in cutlass.range(chunks, unroll=1):
            n, kb = n0, kb0
            if c > 0:
                n, kb = self.lane_keyed_tiles(c, *args)
            sel = Int32(0)
            if kb == lo:
                sel = n
            incl = sel
            for i in cutlass.range_constexpr(5):
                up = cute.arch.shuffle_sync_up(incl, 1 << i)
                if lane >= (1 << i):
                    incl += up
            first = before + incl - sel
            mine_b = Int32(0)
            mine_m = Int32(0)
            if sel > 0:
                if first <= k:
                    if k < first + sel:
                        mine_b = c * 32 + lane
                        mine_m = sel - 1 - (k - first)
            batch = cutlass.max(batch, cute.arch.warp_redux_sync(mine_b, "max"))
            m_block = cutlass.max(m_block, cute.arch.warp_redux_sync(mine_m, "max"))
            before += cute.arch.warp_redux_sync(sel, "add")
        valid = Int32(0)
        if t < total:
            valid = Int32(1)
        return batch, m_block, valid

    @cute.jit
    def varlen_tile(self, t, mCuSeqlensQ, mSeqUsedQ, has_seqused_q):
        """(batch, m_block, valid) of linear tile t: schedule.varlen_tile's order (rounds of
        descending m block, longest work first), valid 0 past the last tile. Each warp works
        it out on its own, a lane per sequence (warp reductions; chunks of 32 sequences, the
        first kept in a register): no shared memory, no barrier."""
        num_batch = mCuSeqlensQ.shape[0] - 1
        chunks = (num_batch + 31) // 32
        args = (num_batch, mCuSeqlensQ, mSeqUsedQ, has_seqused_q)
        n0 = self.lane_tiles(0, *args)
        total = cute.arch.warp_redux_sync(n0, "add")
        top = cute.arch.warp_redux_sync(n0, "max")
        for c in cutlass.range(1, chunks, unroll=1):
            n = self.lane_tiles(c, *args)
            total += cute.arch.warp_redux_sync(n, "add")
            top = cutlass.max(top, cute.arch.warp_redux_sync(n, "max"))
        # The largest v with tiles_from(v) > t: tiles_from(lo) > t >= tiles_from(hi) = a_hi.
        lo = Int32(0)
        hi = top
        a_hi = Int32(0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            a = cute.arch.warp_redux_sync(cutlass.max(n0 - mid, 0), "add")
            for c in cutlass.range(1, chunks, unroll=1):
                a += cute.arch.warp_redux_sync(cutlass.max(self.lane_tiles(c, *args) - mid, 0), "add")
            if a > t:
                lo = mid
            else:
                hi = mid
                a_hi = a
        # The k-th sequence (in batch order) that has an m block lo: its lane's rank among
        # the lanes whose sequence has one, plus those of the chunks before.
        k = t - a_hi
        batch = Int32(0)
        seen = Int32(0)
        below = cute.arch.lanemask_lt()
        for c in cutlass.range(chunks, unroll=1):
            n = n0
            if c > 0:
                n = self.lane_tiles(c, *args)
            has = cute.arch.vote_ballot_sync(n > lo)
            rank = Int32(cute.arch.popc(cutlass.Uint32(has) & below))
            mine = Int32(0)
            if n > lo:
                if seen + rank == k:
                    mine = c * 32 + cute.arch.lane_idx()
            batch = cutlass.max(batch, cute.arch.warp_redux_sync(mine, "max"))
            seen += Int32(cute.arch.popc(cutlass.Uint32(has)))
        valid = Int32(0)
        if t < total:
            valid = Int32(1)
        return batch, lo, valid

    # ------------------------------------------------------------------ producer
    @cute.jit
    def produce_range(
        self, mQ, mK, mV, mKc, mVc, sQ, sK, sV, tma_q, tma_k, tma_v, tma_kc, tma_vc,
        pipe_q, pipe_k, pipe_v, m_block, head, batch, group, seqlen_k, lo, hi, mPageTable,
        offset_q=0, offset_k=0, q_state=None, kv_state=None,
    ):
        """One tile's loads; the persistent walk passes its states in and takes them back
        (its CTA's tail comes after the last tile)."""
        head_kv = head if const_expr(self.pack) else head // group
        if const_expr(q_state is None):
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        one = cute.make_layout(1)
        k_args = (mK, mKc, sK, tma_k, tma_kc, pipe_k, self.hdim)
        v_args = (mV, mVc, sV, tma_v, tma_vc, pipe_v, self.hdim_v)
        where = (head_kv, batch, seqlen_k, mPageTable, offset_k)
        pipe_k.producer_acquire(kv_state)
        self.load_block(*k_args, kv_state, hi - 1, *where)
        if const_expr(not self.pack):
            if const_expr(self.varlen):
                mQ_s = cute.domain_offset((offset_q, 0), mQ[None, None, head])
            else:
                mQ_s = mQ[None, None, head, batch]
            gQ = cute.local_tile(mQ_s, (self.tile_m, self.hdim), (m_block, 0))
            tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, one, cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2))
            pipe_q.producer_acquire(q_state)
            cute.copy(tma_q, tQgQ, tQsQ, tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
            if const_expr(self.persistent_varlen):
                q_state.advance()
        # Consumers take K[j] then V[j+1]: load in that order.
        for i in cutlass.range(hi - 1 - lo, unroll=1):
            n_block = hi - 1 - i
            v_state = kv_state.clone()
            kv_state.advance()
            pipe_k.producer_acquire(kv_state)
            self.load_block(*k_args, kv_state, n_block - 1, *where)
            pipe_v.producer_acquire(v_state)
            self.load_block(*v_args, v_state, n_block, *where)
        pipe_v.producer_acquire(kv_state)
        self.load_block(*v_args, kv_state, lo, *where)
        kv_state.advance()
        if const_expr(not self.persistent_varlen):
            pipe_v.producer_tail(kv_state)
        return q_state, kv_state

    @cute.jit
    def load_block(self, mX, mXc, sX, tma_x, tma_xc, pipe, width: cutlass.Constexpr[int], state, n_block, head_kv,
                   batch, seqlen_k, mPageTable, offset_k=0):
        """The TMA loads of key block n_block of K or V (`width` columns: hdim or hdim_v) into
        the pipeline slot of `state`."""
        one = cute.make_layout(1)
        bar = pipe.producer_get_barrier(state)
        sX_stage = cute.group_modes(sX[None, None, state.index], 0, 2)
        if const_expr(not self.paged):
            if const_expr(self.varlen):
                mX_s = cute.domain_offset((offset_k, 0), mX[None, None, head_kv])
            else:
                mX_s = mX[None, None, head_kv, batch]
            gX = cute.local_tile(mX_s, (self.tile_n, width), (n_block, 0))
            tXsX, tXgX = cpasync.tma_partition(tma_x, 0, one, sX_stage, cute.group_modes(gX, 0, 2))
            cute.copy(tma_x, tXgX, tXsX, tma_bar_ptr=bar)
        else:
            page_size = mX.shape[0]
            # The last page this sequence uses: keys past seqlen_k (masked) read it again
            # rather than a page-table entry that may not be set.
            last_page = cutlass.max((seqlen_k - 1) // page_size, 0)
            key0 = n_block * self.tile_n
            if page_size % self.tile_n == 0:
                page = mPageTable[batch, cutlass.min(key0 // page_size, last_page)]
                gX = cute.local_tile(mX[None, None, head_kv, page], (self.tile_n, width),
                                     ((key0 % page_size) // self.tile_n, 0))
                tXsX, tXgX = cpasync.tma_partition(tma_x, 0, one, sX_stage, cute.group_modes(gX, 0, 2))
                cute.copy(tma_x, tXgX, tXsX, tma_bar_ptr=bar)
            else:
                cols = self.chunk_cols
                for j in cutlass.range_constexpr(self.tile_n // PAGE_CHUNK):
                    key = key0 + j * PAGE_CHUNK
                    page = mPageTable[batch, cutlass.min(key // page_size, last_page)]
                    for c in cutlass.range_constexpr(self.hdim // cols):
                        gC = cute.local_tile(mXc[None, None, head_kv, page], (PAGE_CHUNK, cols),
                                             ((key % page_size) // PAGE_CHUNK, c))
                        sC = cute.local_tile(sX[None, None, state.index], (PAGE_CHUNK, cols), (j, c))
                        tCsC, tCgC = cpasync.tma_partition(
                            tma_xc, 0, one, cute.group_modes(sC, 0, 2), cute.group_modes(gC, 0, 2)
                        )
                        cute.copy(tma_xc, tCgC, tCsC, tma_bar_ptr=bar)

    def o_stage_layout(self, sQ_layout):
        """Where O is staged in shared memory (o_smem_store, o_tma_ragged): Q's layout, or
        (tile_m, head_dim_v) where V is narrower than Q (in Q's buffer or O's own)."""
        if self.hdim_v == self.hdim:
            return sQ_layout
        return smem_layout(self.dtype, self.tile_m, self.hdim_v)

    @property
    def chunk_cols(self) -> int:
        from .layouts import swizzle_bytes
        sw = swizzle_bytes(self.cfg.elem_bytes, self.hdim)
        return sw // self.cfg.elem_bytes if sw else self.hdim

    @cute.jit
    def transpose_range(self, pipe_v, pipe_vt, v_base, vt_base, sV_layout, sVt_layout, warp_idx, lane, lo, hi):
        """Warps 1..3 of the producer warpgroup (e4m3, V row-major): each of the hi - lo V
        blocks produce_range loads, in its order, into sVt (v_transpose.transpose_block)."""
        v_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        vt_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        for _ in cutlass.range(cutlass.max(hi - lo, 0), unroll=1):
            v_state, vt_state = v_transpose.transpose_block(
                pipe_v, pipe_vt, v_state, vt_state, v_base, vt_base, sV_layout, sVt_layout,
                warp_idx - v_transpose.FIRST_WARP, lane, self.tile_n, self.hdim, self.cfg.fp8_local_p,
            )

    # ------------------------------------------------------------------ consumers
    @cute.jit
    def consume_range(
        self, mQ, mO, mLSE, sQ, sK, sV, tiled_mma_qk, tiled_mma_pv, pipe_q, pipe_k, pipe_v,
        softmax_scale_log2, tidx, m_block, split, head, batch, group, seqlen_q, seqlen_k, lo, hi,
        offset_q=0, v_descale=None, q_state=None, kv_state=None,
        softcap_pre=None, window_left=None, window_right=None, mSink=None, mOr=None, tma_o=None, sO=None,
    ):
        """One tile: main loop over [lo, hi), then O and LSE. The persistent walk passes its
        pipeline states in and takes them back; Q's slot goes back to the producer once this
        tile is done with it (after the last QK^T, or with o_smem_store after O left it)."""
        wg = cute.arch.make_warp_uniform(tidx // 128)
        wg_first_thread = cute.make_layout(self.num_wg, stride=128)
        wg_mma_qk = tiled_mma_qk.get_slice(wg_first_thread(wg))
        wg_mma_pv = tiled_mma_pv.get_slice(wg_first_thread(wg))
        thr_mma_qk = tiled_mma_qk.get_slice(tidx)

        tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(sQ))
        tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(sK))
        # e4m3: sV is sVt, (head_dim, keys) keys contiguous: the K-major B operand as it is.
        tOrV = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sV if const_expr(self.fp8) else transpose_view(sV)))
        acc_O = cute.make_rmem_tensor(wg_mma_pv.partition_shape_C((self.tile_m, self.hdim_v)), Float32)
        tOrP = wg_mma_pv.make_fragment_A(wg_mma_pv.partition_shape_A((self.tile_m, self.tile_n)))
        s_shape = wg_mma_qk.partition_shape_C((self.tile_m, self.tile_n))
        coords_rc = acc_as_rows_cols(thr_mma_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
        softmax = OnlineSoftmax(
            softmax_scale_log2, cute.size(acc_as_rows_cols(acc_O), mode=[0]), self.cfg.in_order_row_sum,
            rescale_threshold=self.cfg.rescale_threshold,
        )
        sink = None
        if const_expr(self.sink):
            # Loaded now, used after the last block: the latency hides under the main loop.
            sink = self.row_sinks(mSink, softmax.rows, tiled_mma_pv, tidx, m_block, split, head, group)
        # An empty range leaves these as they are: O = 0, LSE = -inf.
        acc_O.fill(0.0)
        softmax.row_max.fill(-Float32.inf)
        softmax.row_sum.fill(0.0)

        if const_expr(self.persistent_varlen):
            return self.consume_tile_persistent(
                mQ, mO, mLSE, sQ, tSrQ, tSrK, tOrV, tOrP, acc_O, s_shape, coords_rc, softmax, tiled_mma_qk,
                tiled_mma_pv, pipe_q, pipe_k, pipe_v, tidx, wg, m_block, head, batch, group, seqlen_q, seqlen_k,
                lo, hi, offset_q, q_state, kv_state, mOr, tma_o, sO,
                softcap_pre=softcap_pre, window_left=window_left, window_right=window_right, sink=sink,
            )
        if hi > lo:
            self.mainloop(
                mQ, sQ, tSrQ, tSrK, tOrV, tOrP, acc_O, s_shape, coords_rc, softmax, tiled_mma_qk, tiled_mma_pv,
                pipe_q, pipe_k, pipe_v, tidx, wg, m_block, head, batch, group, seqlen_q, seqlen_k, lo, hi,
                softcap_pre=softcap_pre, window_left=window_left, window_right=window_right,
            )

        inv_sum, lse = self.finish_rows(softmax, sink)
        if const_expr(self.fp8):
            descale.fold_v(inv_sum, v_descale)
        rescale_rows(acc_O, inv_sum)
        if const_expr(self.cfg.o_smem_store):
            self.store_rows_smem(acc_O, lse, mO, mLSE, sO, tiled_mma_pv, tidx, m_block, head, seqlen_q, offset_q,
                                 mOr, tma_o)
            return
        self.store_rows(acc_O, lse, mO, mLSE, tiled_mma_pv, tidx, m_block, split, head, batch, group, seqlen_q,
                        offset_q)

    def finish_rows(self, softmax, sink):
        """(1 / row sum, LSE) of the tile's rows, one tile per CTA or on the walk alike: each row's
        own sink logit in its denominator (pack-GQA rows are of several heads); a split-KV split
        may carry no sink (-inf: the combine counts it once)."""
        if const_expr(self.sink):
            return softmax.finish(sink, per_row=True, may_be_absent=self.split)
        return softmax.finish()

    @cute.jit
    def consume_tile_persistent(
        self, mQ, mO, mLSE, sQ, tSrQ, tSrK, tOrV, tOrP, acc_O, s_shape, coords_rc, softmax, tiled_mma_qk,
        tiled_mma_pv, pipe_q, pipe_k, pipe_v, tidx, wg, m_block, head, batch, group, seqlen_q, seqlen_k,
        lo, hi, offset_q, q_state, kv_state, mOr=None, tma_o=None, sO=None,
        softcap_pre=None, window_left=None, window_right=None, sink=None,
    ):
        """consume_range's tile in the persistent walk (`sink`: its rows' sink logits). An empty tile (no key blocks: no Q was
        loaded for it) writes its O = 0 from registers even with o_smem_store, since the
        producer may already be filling Q's buffer with the next tile's Q. With O's own buffer
        (o_tma_ragged + separate_o_smem) every tile's O leaves through it by TMA."""
        if hi > lo:
            q_state, kv_state = self.mainloop(
                mQ, sQ, tSrQ, tSrK, tOrV, tOrP, acc_O, s_shape, coords_rc, softmax, tiled_mma_qk, tiled_mma_pv,
                pipe_q, pipe_k, pipe_v, tidx, wg, m_block, head, batch, group, seqlen_q, seqlen_k, lo, hi,
                q_state, kv_state, softcap_pre=softcap_pre, window_left=window_left, window_right=window_right,
            )
        inv_sum, lse = self.finish_rows(softmax, sink)
        rescale_rows(acc_O, inv_sum)
        if const_expr(self.cfg.o_smem_store):
            if hi > lo:
                self.store_rows_smem(acc_O, lse, mO, mLSE, sO, tiled_mma_pv, tidx, m_block, head, seqlen_q, offset_q,
                                     mOr, tma_o)
                # This thread's reads of O in Q's buffer are done (registers loaded): order
                # them and the stmatrix writes before the next Q's TMA writes, then release.
                cute.arch.fence_view_async_shared()
                pipe_q.consumer_release(q_state)
                q_state = self._advanced(q_state)
            else:
                self.store_rows(acc_O, lse, mO, mLSE, tiled_mma_pv, tidx, m_block, 0, head, batch, group, seqlen_q,
                                offset_q)
        elif const_expr(self.separate_o):
            self.store_rows_smem(acc_O, lse, mO, mLSE, sO, tiled_mma_pv, tidx, m_block, head, seqlen_q, offset_q,
                                 mOr, tma_o)
        else:
            self.store_rows(acc_O, lse, mO, mLSE, tiled_mma_pv, tidx, m_block, 0, head, batch, group, seqlen_q,
                            offset_q)
        return q_state, kv_state

    @staticmethod
    def _advanced(state):
        """The state after `state`, as a new value: assigned inside a traced `if`, it leaves the
        branch (an in-place advance() there would not)."""
        nxt = state.clone()
        nxt.advance()
        return nxt

    @cute.jit
    def row_sinks(self, mSink, rows: cutlass.Constexpr[int], tiled_mma_pv, tidx, m_block, split, head, group):
        """The sink logit of each of this thread's rows: its query head's (pack-GQA rows are
        (token, head)); -inf (no sink) in every split but split 0."""
        thr_mma = tiled_mma_pv.get_slice(tidx)
        cO = acc_as_rows_cols(thr_mma.partition_C(cute.make_identity_tensor((self.tile_m, self.hdim_v))))
        sink = cute.make_rmem_tensor(rows, Float32)
        for r in cutlass.range_constexpr(rows):
            h = head
            if const_expr(self.pack):
                prow = m_block * self.tile_m + cO[r, 0][0]
                token = prow // group
                h = head * group + (prow - token * group)
            value = Float32(mSink[h])
            if const_expr(self.split):
                value = value if split == 0 else -Float32.inf
            sink[r] = value
        return sink

    @cute.jit
    def mainloop(
        self, mQ, sQ, tSrQ, tSrK, tOrV, tOrP, acc_O, s_shape, coords_rc, softmax, tiled_mma_qk, tiled_mma_pv,
        pipe_q, pipe_k, pipe_v, tidx, wg, m_block, head, batch, group, seqlen_q, seqlen_k, lo, hi,
        q_state=None, kv_state=None, softcap_pre=None, window_left=None, window_right=None,
    ):
        """Key blocks hi-1 down to lo: FA3's overlapped loop (kernel.consume) over [lo, hi).
        Returns the pipeline states (the persistent walk's: kv_state past this tile's last V)."""
        gemm_qk, gemm_pv = self._gemms(tiled_mma_qk, tiled_mma_pv, s_shape, tSrQ, tSrK, tOrP, tOrV, acc_O)

        def mask(acc_S, n_block, causal):
            self.apply_mask(acc_S, coords_rc, m_block, n_block, group, seqlen_q, seqlen_k, causal,
                            window_left, window_right)

        def to_p(acc_S):
            if const_expr(self.cfg.fp8_local_p):
                convert_p_fp8_local(acc_S, tOrP)  # sVt's keys are in the accumulator's order
            elif const_expr(self.fp8):
                convert_p_fp8(acc_S, tOrP, tidx % 32)
            elif const_expr(self.cfg.chunked_p_convert):
                # As the dense kernel's: S's registers converted in their own order, in runs
                # ptxas packs in pairs (valid only where P's fragment keeps that order).
                if const_expr(not register_order_matches(acc_as_operand_a(acc_S), tOrP)):
                    raise ValueError("chunked_p_convert: P's fragment is not S's registers in order")
                convert_in_register_order(acc_S, tOrP, self.dtype)
            else:
                tOrP.store(acc_as_operand_a(acc_S).load().to(self.dtype))

        if const_expr(q_state is None):
            q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        if const_expr(self.pack):
            self.load_q_packed(mQ, sQ, tidx, m_block, head, batch, group, seqlen_q)
        else:
            pipe_q.consumer_wait(q_state)
        # Blocks from n_block_causal up need the causal mask (they reach past the
        # diagonal of the tile's first row).
        n_masked = 0
        if const_expr(self.causal):
            first_token = (m_block * self.tile_m) // group if const_expr(self.pack) else m_block * self.tile_m
            n_block_causal = cutlass.max((first_token + seqlen_k - seqlen_q) // self.tile_n, 0)
            n_masked = cutlass.max(cutlass.min(hi - 1 - n_block_causal, hi - 1 - lo), 0)
        n_unmasked = None
        n_masked_left = 0
        if const_expr(self.local):
            # The dense kernel's split of [lo, hi) (a split's part of the windowed range): right
            # edge masked, inside every row's window, left edge masked.
            g = self.row_group(group)
            n_masked, n_unmasked, n_masked_left = block_range.local_block_counts(
                lo, hi,
                block_range.n_block_right_masked(m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n, True,
                                                 window_right, mx=cutlass.max, group=g),
                block_range.n_block_left_masked(m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n,
                                                window_left, mx=cutlass.max, group=g),
                mn=cutlass.min, mx=cutlass.max,
            )
        n_block = hi - 1
        pipe_k.consumer_wait(kv_state)
        acc_S = gemm_qk(kv_state.index)
        warpgroup.wait_group(0)
        pipe_k.consumer_release(kv_state)
        if const_expr(self.softcap):
            apply_softcap(acc_S, softcap_pre)
        mask(acc_S, n_block, self.causal)
        softmax.step(acc_S, is_first=True)
        to_p(acc_S)
        scale_prev = cute.make_rmem_tensor(cute.size(acc_as_rows_cols(acc_O), mode=[0]), Float32)
        scale_prev.fill(1.0)
        for i in cutlass.range(n_masked, unroll=1):
            kv_state = self.overlapped_step(
                kv_state, hi - 2 - i, gemm_qk, gemm_pv, mask, to_p, softmax,
                acc_O, scale_prev, pipe_k, pipe_v, wg, True, softcap_pre,
            )
        if const_expr(not self.local):
            n_unmasked = hi - 1 - lo - n_masked
        for i in cutlass.range(n_unmasked, unroll=1):
            kv_state = self.overlapped_step(
                kv_state, hi - 2 - n_masked - i, gemm_qk, gemm_pv, mask, to_p,
                softmax, acc_O, scale_prev, pipe_k, pipe_v, wg, False, softcap_pre,
            )
        if const_expr(self.local):
            for i in cutlass.range(n_masked_left, unroll=1):
                kv_state = self.overlapped_step(
                    kv_state, hi - 2 - n_masked - n_unmasked - i, gemm_qk, gemm_pv, mask, to_p,
                    softmax, acc_O, scale_prev, pipe_k, pipe_v, wg, True, softcap_pre,
                )
        if const_expr(self.persistent_varlen and not self.cfg.o_smem_store):
            # This warp's last QK^T has completed: the producer may load the next tile's Q
            # under the last PV and the epilogue (with o_smem_store, O needs the buffer first).
            pipe_q.consumer_release(q_state)
            q_state.advance()
        if const_expr(self.rescale_early):
            rescale_rows(acc_O, scale_prev)
        pipe_v.consumer_wait(kv_state)
        gemm_pv(kv_state.index, False)
        warpgroup.wait_group(0)
        pipe_v.consumer_release(kv_state)
        if const_expr(self.persistent_varlen):
            kv_state.advance()
        return q_state, kv_state

    @cute.jit
    def apply_mask(self, acc_S, coords_rc, m_block, n_block, group, seqlen_q, seqlen_k,
                   causal: cutlass.Constexpr[bool], window_left=None, window_right=None):
        """mask.apply_mask with the row's token taken from the packed row under pack_gqa;
        mask_bits (not under pack_gqa, whose row is a token of a packed row) takes
        mask.apply_mask_bits, the same rule as the dense kernel's. A window: mask.py's window
        masks, the dense kernel's (pack-GQA's rows mapped to tokens by `group`)."""
        if const_expr(self.local):
            if const_expr(self.cfg.mask_bits):
                offsets_rc = acc_as_rows_cols(self._tiled_mmas()[0].get_slice(0).partition_C(
                    cute.make_identity_tensor((self.tile_m, self.tile_n))))
                apply_window_mask_bits(acc_S, coords_rc, offsets_rc, m_block, n_block, seqlen_q, seqlen_k,
                                       window_left, window_right, self.tile_m, self.tile_n)
                return
            apply_window_mask(acc_S, coords_rc, m_block, n_block, seqlen_q, seqlen_k, window_left, window_right,
                              self.tile_m, self.tile_n, self.row_group(group))
            return
        if const_expr(self.cfg.mask_bits):
            offsets_rc = acc_as_rows_cols(
                self._tiled_mmas()[0].get_slice(0).partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
            apply_mask_bits(acc_S, coords_rc, offsets_rc, m_block, n_block, seqlen_q, seqlen_k,
                            self.tile_m, self.tile_n, causal)
            return
        s_rc = acc_as_rows_cols(acc_S)
        for r in cutlass.range_constexpr(cute.size(s_rc, mode=[0])):
            col_limit = seqlen_k - n_block * self.tile_n
            if const_expr(causal):
                row = m_block * self.tile_m + coords_rc[r, 0][0]
                if const_expr(self.pack):
                    row = row // group
                col_limit = cutlass.min(col_limit, row + seqlen_k - seqlen_q + 1 - n_block * self.tile_n)
            for c in cutlass.range_constexpr(cute.size(s_rc, mode=[1])):
                s_rc[r, c] = -Float32.inf if coords_rc[0, c][1] >= col_limit else s_rc[r, c]

    @cute.jit
    def load_q_packed(self, mQ, sQ, tidx, m_block, head_kv, batch, group, seqlen_q):
        """Q rows (token, head) of the packed tile into sQ, zeros past the last token; then
        make them visible to WGMMA (the async proxy) and wait for every consumer thread."""
        per_row = self.hdim // 8
        for i in cutlass.range_constexpr(self.tile_m * per_row // self.consumer_threads):
            idx = tidx + i * self.consumer_threads
            r = idx // per_row
            c = (idx - r * per_row) * 8
            prow = m_block * self.tile_m + r
            token = prow // group
            h = head_kv * group + (prow - token * group)
            if token < seqlen_q:
                for e in cutlass.range_constexpr(8):
                    sQ[r, c + e] = mQ[token, c + e, h, batch]
            else:
                for e in cutlass.range_constexpr(8):
                    sQ[r, c + e] = self.dtype(0.0)
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=self.consumer_threads)

    @cute.jit
    def store_rows(self, acc_O, lse, mO, mLSE, tiled_mma_pv, tidx, m_block, split, head, batch, group, seqlen_q,
                   offset_q=0):
        """O and LSE of each valid row straight from registers to its (token, head); varlen:
        the token's row is offset_q + token of the packed o (total_q, heads, d) and lse
        (heads, total_q), and rows past the sequence (another sequence's) are never written."""
        thr_mma = tiled_mma_pv.get_slice(tidx)
        cO = acc_as_rows_cols(thr_mma.partition_C(cute.make_identity_tensor((self.tile_m, self.hdim_v))))
        o_rc = acc_as_rows_cols(acc_O)
        for r in cutlass.range_constexpr(cute.size(o_rc, mode=[0])):
            prow = m_block * self.tile_m + cO[r, 0][0]
            token = prow
            h = head
            if const_expr(self.pack):
                token = prow // group
                h = head * group + (prow - token * group)
            if token < seqlen_q:
                for c in cutlass.range_constexpr(cute.size(o_rc, mode=[1])):
                    col = cO[r, c][1]
                    if const_expr(self.split):
                        mO[split, batch, token, h, col] = o_rc[r, c]
                    elif const_expr(self.varlen):
                        mO[offset_q + token, h, col] = o_rc[r, c].to(self.o_dtype)
                    else:
                        mO[batch, token, h, col] = o_rc[r, c].to(self.o_dtype)
                if cO[0, 0][1] == 0:
                    if const_expr(self.split):
                        mLSE[split, batch, h, token] = lse[r]
                    elif const_expr(self.varlen):
                        mLSE[h, offset_q + token] = lse[r]
                    else:
                        mLSE[batch, h, token] = lse[r]

    @cute.jit
    def store_rows_smem(self, acc_O, lse, mO, mLSE, sQ, tiled_mma_pv, tidx, m_block, head, seqlen_q, offset_q,
                        mOr=None, tma_o=None):
        """varlen O through Q's buffer: stmatrix as the dense epilogue writes sO, then each
        thread copies 16-byte pieces of rows to the packed o, rows past the sequence skipped;
        LSE as store_rows writes it. With o_tma_ragged (tma_o over the ragged view mOr), one
        thread stores the tile by TMA instead, the map clipping the rows past the sequence.
        `sQ` is the staging buffer (the kernel's sO): Q's (a (tile_m, head_dim_v) view of it where
        V is narrower), or with separate_o_smem O's own, whose store nobody waits for until the
        next tile's O needs the buffer (the dense kernel's way)."""
        rO = cute.make_rmem_tensor(acc_O.shape, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        if const_expr(self.separate_o):
            # O's own buffer is free once the previous tile's store has read it; the barrier
            # below passes that on from the thread that issued the store.
            if tidx == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)
        # Every consumer warpgroup is past its last QK^T before O overwrites Q (or, in its
        # own buffer, the previous tile's O store has read it).
        cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=self.consumer_threads)
        store_atom = smem_store_atom(self.dtype)
        thr_store = cute.make_tiled_copy_C(store_atom, tiled_mma_pv).get_slice(tidx)
        cute.copy(store_atom, thr_store.retile(rO), thr_store.partition_D(sQ))
        thr_mma = tiled_mma_pv.get_slice(tidx)
        cO = acc_as_rows_cols(thr_mma.partition_C(cute.make_identity_tensor((self.tile_m, self.hdim_v))))
        for r in cutlass.range_constexpr(cute.size(cO, mode=[0])):
            token = m_block * self.tile_m + cO[r, 0][0]
            if token < seqlen_q:
                if cO[0, 0][1] == 0:
                    mLSE[head, offset_q + token] = lse[r]
        if const_expr(tma_o is not None):
            # The TMA engine reads the buffer: the stmatrix writes visible to the async proxy.
            cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=int(Barrier.EPILOGUE), number_of_threads=self.consumer_threads)
        if const_expr(tma_o is not None):
            if tidx == 0:
                row0, outer = ragged_coords(mO.shape[0], offset_q, seqlen_q)
                gO = cute.local_tile(cute.domain_offset((row0, 0), mOr[None, None, head, outer]),
                                     (self.tile_m, self.hdim_v), (m_block, 0))
                tOsO, tOgO = cpasync.tma_partition(
                    tma_o, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gO, 0, 2))
                cute.copy(tma_o, tOsO, tOgO)
                cute.arch.cp_async_bulk_commit_group()
                if const_expr(not self.separate_o):
                    # Q's buffer goes back to the producer (or the CTA exits) once the store read it.
                    cute.arch.cp_async_bulk_wait_group(0, read=True)
            if const_expr(not self.separate_o):
                # This warp's release of Q's buffer (the caller's) comes after thread 0's wait;
                # the other warps release at once.
                cute.arch.sync_warp()
            return
        vec = 128 // self.dtype.width
        per_row = self.hdim_v // vec
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.dtype, num_bits_per_copy=128)
        tiled = cute.make_tiled_copy_tv(
            atom, cute.make_layout((self.consumer_threads // per_row, per_row), stride=(per_row, 1)),
            cute.make_layout((1, vec)))
        thr = tiled.get_slice(tidx)
        gO = cute.local_tile(cute.domain_offset((offset_q, 0), mO[None, head, None]), (self.tile_m, self.hdim_v),
                             (m_block, 0))
        tOsO = thr.partition_S(sQ)
        tOgO = thr.partition_D(gO)
        tOcO = thr.partition_D(cute.make_identity_tensor((self.tile_m, self.hdim_v)))
        tOrO = cute.make_fragment_like(tOsO)
        cute.autovec_copy(tOsO, tOrO)
        for m in cutlass.range_constexpr(cute.size(tOgO, mode=[1])):
            if m_block * self.tile_m + tOcO[0, m, 0][0] < seqlen_q:
                cute.copy(atom, tOrO[None, m, None], tOgO[None, m, None])

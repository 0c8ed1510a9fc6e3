"""The SM100 (Blackwell) forward kernel (CuTe DSL). Cross-compiled here; never run anywhere.

One CTA computes one (128 query rows, head, batch) tile of O and LSE, FA4's shape at its
simplest (one softmax warpgroup, one tile per CTA, no cluster):
- the load warp issues TMA loads: Q once, then K and V per key block, each into its own
  mbarrier pipeline of `kv_stages` slots;
- the MMA warp issues tcgen05 UMMAs: S = Q K^T into TMEM, then O += P V with P read from
  TMEM (written there by the softmax) and O accumulated in TMEM across key blocks;
- the softmax warpgroup owns one query row per thread (the 32x32b TMEM load gives thread t
  lane t): it masks S, keeps the running max and sum, writes P to TMEM and the factor by
  which O must shrink to shared memory;
- the correction warpgroup rescales O in TMEM by that factor between PV MMAs, and at the end
  normalises O, stages it in shared memory for a TMA store and writes LSE (the epilogue).

Every hand-off is an mbarrier pipeline, so the order of each pair of roles is explicit:
  K/V slots   load -> MMA (TMA tx bytes)      MMA -> load (tcgen05.commit when read)
  S           MMA -> softmax (commit)         softmax -> MMA (S read out of TMEM)
  P           softmax -> MMA (P in TMEM)      MMA -> softmax (commit: PV read P)
  row factor  softmax -> correction (smem)    correction -> softmax (factor read)
  O           MMA -> correction (commit: PV)  correction -> MMA (O rescaled)
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100
from cutlass import Float32, Int32, const_expr
from cutlass import pipeline
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05

from .mask import first_masked_block, key_blocks
from .config import CORRECTION_WARPS, LOAD_WARP, MMA_WARP, REGISTER_SPLIT, SOFTMAX_WARPS, FwdConfig

DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}
LN2 = math.log(2.0)
# Named barriers (0 is __syncthreads): TMEM pointer hand-out, the correction warpgroup's
# epilogue, and TMEM release.
BAR_TMEM_ALLOC = 1
BAR_EPILOGUE = 2
# Columns one correction step moves between TMEM and registers.
O_CHUNK = 16
# 32-bit TMEM columns of P one softmax store writes (32 16-bit values).
P_CHUNK = 16


def _group(threads: int):
    return pipeline.CooperativeGroup(pipeline.Agent.Thread, threads)


class FlashFwdSm100:
    def __init__(self, cfg: FwdConfig):
        self.cfg = cfg
        self.dtype = DTYPES[cfg.dtype]
        self.tile_m, self.tile_n, self.hdim = cfg.tile_m, cfg.tile_n, cfg.head_dim
        self.stages = cfg.kv_stages
        self.causal = cfg.causal
        self.qk_tiler = (self.tile_m, self.tile_n, self.hdim)
        self.pv_tiler = (self.tile_m, self.hdim, self.tile_n)

    # ------------------------------------------------------------------ host side
    def _tiled_mmas(self):
        qk = sm100.make_trivial_tiled_mma(
            self.dtype, self.dtype, OperandMajorMode.K, OperandMajorMode.K, Float32,
            tcgen05.CtaGroup.ONE, self.qk_tiler[:2],
        )
        # P comes from TMEM (K-major), V from shared memory with the head dim contiguous.
        pv = sm100.make_trivial_tiled_mma(
            self.dtype, self.dtype, OperandMajorMode.K, OperandMajorMode.MN, Float32,
            tcgen05.CtaGroup.ONE, self.pv_tiler[:2], tcgen05.OperandSource.TMEM,
        )
        return qk, pv

    @cute.jit
    def __call__(
        self,
        mQ: cute.Tensor,  # (batch, seqlen_q, heads_q, head_dim)
        mK: cute.Tensor,  # (batch, seqlen_k, heads_kv, head_dim)
        mV: cute.Tensor,
        mO: cute.Tensor,  # like mQ
        mLSE: cute.Tensor,  # (batch, heads_q, seqlen_q) float32
        softmax_scale_log2: Float32,
    ):
        # Kernel views: Q, K, O as (seqlen, head_dim, heads, batch); V as (head_dim, seqlen,
        # heads, batch), the (N, K) B operand of O += P V with N contiguous.
        mQ, mK, mO = [
            cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 3, 2, 0])) for t in (mQ, mK, mO)
        ]
        mVt = cute.make_tensor(mV.iterator, cute.select(mV.layout, mode=[3, 1, 2, 0]))
        mLSE = cute.make_tensor(mLSE.iterator, cute.select(mLSE.layout, mode=[2, 1, 0]))

        qk_mma, pv_mma = self._tiled_mmas()
        sQ_layout = sm100.make_smem_layout_a(qk_mma, self.qk_tiler, self.dtype, 1)
        sK_layout = sm100.make_smem_layout_b(qk_mma, self.qk_tiler, self.dtype, self.stages)
        sV_layout = sm100.make_smem_layout_b(pv_mma, self.pv_tiler, self.dtype, self.stages)
        tP_layout = sm100.make_smem_layout_a(pv_mma, self.pv_tiler, self.dtype, 1)
        sO_layout = sm100.make_smem_layout_epi(
            self.dtype, utils.LayoutEnum.ROW_MAJOR, (self.tile_m, self.hdim), 1
        )

        def buffer(layout):
            return cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(layout)], 1024]

        fields = {
            "mbar_q": cute.struct.MemRange[cutlass.Int64, 2],
            "mbar_k": cute.struct.MemRange[cutlass.Int64, 2 * self.stages],
            "mbar_v": cute.struct.MemRange[cutlass.Int64, 2 * self.stages],
            "mbar_s": cute.struct.MemRange[cutlass.Int64, 2],
            "mbar_p": cute.struct.MemRange[cutlass.Int64, 2],
            "mbar_scale": cute.struct.MemRange[cutlass.Int64, 2],
            "mbar_o": cute.struct.MemRange[cutlass.Int64, 2],
            "tmem_base": Int32,
            # Per row: the factor O must shrink by (then, at the end, the row sum) and the max.
            "row_scale": cute.struct.MemRange[Float32, self.tile_m],
            "row_max": cute.struct.MemRange[Float32, self.tile_m],
            "sQ": buffer(sQ_layout),
            "sK": buffer(sK_layout),
            "sV": buffer(sV_layout),
            "sO": buffer(sO_layout),
        }
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage

        load_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_q, tQ = cute.nvgpu.make_tiled_tma_atom_A(
            load_op, mQ, cute.select(sQ_layout, mode=[0, 1, 2]), self.qk_tiler, qk_mma
        )
        tma_k, tK = cute.nvgpu.make_tiled_tma_atom_B(
            load_op, mK, cute.select(sK_layout, mode=[0, 1, 2]), self.qk_tiler, qk_mma
        )
        tma_v, tV = cute.nvgpu.make_tiled_tma_atom_B(
            load_op, mVt, cute.select(sV_layout, mode=[0, 1, 2]), self.pv_tiler, pv_mma
        )
        tma_o, tO = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mO, cute.select(sO_layout, mode=[0, 1]),
            (self.tile_m, self.hdim),
        )
        # Facts the launch contract needs and the cubin does not hold.
        self.dynamic_smem_bytes = SharedStorage.size_in_bytes()
        self.swizzles = {n: str(l.inner) for n, l in (("q", sQ_layout), ("k", sK_layout), ("v", sV_layout), ("o", sO_layout))}
        self.tma_bytes = {
            "q": cute.size_in_bytes(self.dtype, cute.select(sQ_layout, mode=[0, 1, 2])),
            "k": cute.size_in_bytes(self.dtype, cute.select(sK_layout, mode=[0, 1, 2])),
            "v": cute.size_in_bytes(self.dtype, cute.select(sV_layout, mode=[0, 1, 2])),
        }

        num_m = cute.ceil_div(cute.size(mQ.shape[0]), self.tile_m)
        grid = (num_m, cute.size(mQ.shape[2]), cute.size(mQ.shape[3]))
        self.kernel(
            tQ, tK, tV, tO, mLSE,
            tma_q, tma_k, tma_v, tma_o,
            softmax_scale_log2,
            sQ_layout, sK_layout, sV_layout, tP_layout, sO_layout,
            qk_mma, pv_mma,
        ).launch(grid=grid, block=[self.cfg.threads, 1, 1], cluster=(1, 1, 1), min_blocks_per_mp=1)

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(
        self,
        mQ: cute.Tensor,
        mK: cute.Tensor,
        mVt: cute.Tensor,
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
        tP_layout: cute.ComposedLayout,
        sO_layout: cute.ComposedLayout,
        qk_mma: cute.TiledMma,
        pv_mma: cute.TiledMma,
    ):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        if warp_idx == LOAD_WARP:
            for atom in (tma_q, tma_k, tma_v, tma_o):
                cpasync.prefetch_descriptor(atom)

        smem = cutlass.utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        wg_threads = 32 * len(SOFTMAX_WARPS)
        one = _group(1)
        pipe_q = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.mbar_q.data_ptr(), num_stages=1, producer_group=one,
            consumer_group=one, tx_count=self.tma_bytes["q"], defer_sync=True,
        )
        pipe_k = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.mbar_k.data_ptr(), num_stages=self.stages, producer_group=one,
            consumer_group=one, tx_count=self.tma_bytes["k"], defer_sync=True,
        )
        pipe_v = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.mbar_v.data_ptr(), num_stages=self.stages, producer_group=one,
            consumer_group=one, tx_count=self.tma_bytes["v"], defer_sync=True,
        )
        pipe_s = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.mbar_s.data_ptr(), num_stages=1, producer_group=one,
            consumer_group=_group(wg_threads), defer_sync=True,
        )
        pipe_p = pipeline.PipelineAsyncUmma.create(
            barrier_storage=storage.mbar_p.data_ptr(), num_stages=1, producer_group=_group(wg_threads),
            consumer_group=one, defer_sync=True,
        )
        pipe_scale = pipeline.PipelineAsync.create(
            barrier_storage=storage.mbar_scale.data_ptr(), num_stages=1, producer_group=_group(wg_threads),
            consumer_group=_group(wg_threads), defer_sync=True,
        )
        pipe_o = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.mbar_o.data_ptr(), num_stages=1, producer_group=one,
            consumer_group=_group(wg_threads), defer_sync=True,
        )
        # The correction warpgroup touches TMEM last, so its first warp allocates and frees it.
        tmem_users = 32 * (len(SOFTMAX_WARPS) + len(CORRECTION_WARPS) + 1)
        tmem = utils.TmemAllocator(
            storage.tmem_base.ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=BAR_TMEM_ALLOC, num_threads=tmem_users),
            allocator_warp_id=CORRECTION_WARPS[0],
        )
        cute.arch.mbarrier_init_fence()
        cute.arch.sync_threads()

        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)
        sK = storage.sK.get_tensor(sK_layout.outer, swizzle=sK_layout.inner)
        sV = storage.sV.get_tensor(sV_layout.outer, swizzle=sV_layout.inner)
        sO = storage.sO.get_tensor(sO_layout.outer, swizzle=sO_layout.inner)
        row_scale = storage.row_scale.get_tensor(cute.make_layout(self.tile_m))
        row_max_s = storage.row_max.get_tensor(cute.make_layout(self.tile_m))

        m_block, head, batch = cute.arch.block_idx()
        head_kv = head // (mQ.shape[2] // mK.shape[2])
        seqlen_q, seqlen_k = mQ.shape[0], mK.shape[0]
        n_blocks = self.num_key_blocks(m_block, seqlen_q, seqlen_k)

        # Registers: a warp lives on one of the SM's four sub-partitions (16K registers each), and
        # each holds one warp of every warpgroup, so the three warpgroups' counts sum to <= 512.
        # The issuing warpgroup needs few; the softmax holds a 128-column row of S.
        softmax_regs, _, other_regs = REGISTER_SPLIT
        if warp_idx >= MMA_WARP:
            cute.arch.setmaxregister_decrease(other_regs)
            if warp_idx == LOAD_WARP:
                self.load(mQ, mK, mVt, sQ, sK, sV, tma_q, tma_k, tma_v, qk_mma, pv_mma,
                          pipe_q, pipe_k, pipe_v, m_block, head, head_kv, batch, n_blocks)
            if warp_idx == MMA_WARP:
                tmem.wait_for_alloc()
                tmem_ptr = tmem.retrieve_ptr(Float32)
                self.mma(qk_mma, pv_mma, sQ, sK, sV, tP_layout, tmem_ptr,
                         pipe_q, pipe_k, pipe_v, pipe_s, pipe_p, pipe_o, n_blocks)
        if warp_idx < len(SOFTMAX_WARPS):
            cute.arch.setmaxregister_increase(softmax_regs)
            tmem.wait_for_alloc()
            tmem_ptr = tmem.retrieve_ptr(Float32)
            self.softmax(qk_mma, tmem_ptr, row_scale, row_max_s, pipe_s, pipe_p, pipe_scale,
                         softmax_scale_log2, tidx, m_block, n_blocks, seqlen_q, seqlen_k)
        if warp_idx >= CORRECTION_WARPS[0] and warp_idx <= CORRECTION_WARPS[-1]:
            tmem.allocate(self.cfg.tmem_columns)
            tmem.relinquish_alloc_permit()  # this CTA allocates nothing more
            tmem.wait_for_alloc()
            tmem_ptr = tmem.retrieve_ptr(Float32)
            ctidx = tidx - 32 * CORRECTION_WARPS[0]
            self.correction(pv_mma, tmem_ptr, row_scale, row_max_s, sO, mO, mLSE, tma_o,
                            pipe_scale, pipe_o, softmax_scale_log2, ctidx,
                            m_block, head, batch, n_blocks, seqlen_q)
            # Every TMEM user is done: the softmax's last store preceded P's last hand-off, the
            # MMA's last write preceded the final O commit the epilogue waited for, and the
            # epilogue's barrier follows every correction thread's last load.
            tmem.free(tmem_ptr)

    @cute.jit
    def num_key_blocks(self, m_block, seqlen_q, seqlen_k):
        """Key blocks this tile visits (0 .. n-1): mask.key_blocks."""
        return key_blocks(m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n, self.causal,
                          mn=cutlass.min, mx=cutlass.max)

    # ------------------------------------------------------------------ load warp
    @cute.jit
    def load(self, mQ, mK, mVt, sQ, sK, sV, tma_q, tma_k, tma_v, qk_mma, pv_mma,
             pipe_q, pipe_k, pipe_v, m_block, head, head_kv, batch, n_blocks):
        qk_thr, pv_thr = qk_mma.get_slice(0), pv_mma.get_slice(0)
        one = cute.make_layout(1)
        # (MMA, MMA_M, MMA_K, tiles along seqlen, tiles along head_dim) per operand.
        gQ = qk_thr.partition_A(cute.flat_divide(mQ[None, None, head, batch], cute.select(self.qk_tiler, mode=[0, 2])))
        gK = qk_thr.partition_B(cute.flat_divide(mK[None, None, head_kv, batch], cute.select(self.qk_tiler, mode=[1, 2])))
        gV = pv_thr.partition_B(cute.flat_divide(mVt[None, None, head_kv, batch], cute.select(self.pv_tiler, mode=[1, 2])))
        tQs, tQg = cpasync.tma_partition(tma_q, 0, one, cute.group_modes(sQ, 0, 3), cute.group_modes(gQ, 0, 3))
        tKs, tKg = cpasync.tma_partition(tma_k, 0, one, cute.group_modes(sK, 0, 3), cute.group_modes(gK, 0, 3))
        tVs, tVg = cpasync.tma_partition(tma_v, 0, one, cute.group_modes(sV, 0, 3), cute.group_modes(gV, 0, 3))

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        pipe_q.producer_acquire(q_state)
        cute.copy(tma_q, tQg[None, m_block, 0], tQs[None, 0], tma_bar_ptr=pipe_q.producer_get_barrier(q_state))
        for n in cutlass.range(n_blocks, unroll=1):
            pipe_k.producer_acquire(kv_state)
            cute.copy(tma_k, tKg[None, n, 0], tKs[None, kv_state.index],
                      tma_bar_ptr=pipe_k.producer_get_barrier(kv_state))
            pipe_v.producer_acquire(kv_state)
            cute.copy(tma_v, tVg[None, 0, n], tVs[None, kv_state.index],
                      tma_bar_ptr=pipe_v.producer_get_barrier(kv_state))
            kv_state.advance()
        # Stay until the MMA warp has read every slot we filled (producer_tail advances the
        # state it is given: K's gets a copy, so V's waits on the same slots and phases).
        pipe_k.producer_tail(kv_state.clone())
        pipe_v.producer_tail(kv_state)

    # ------------------------------------------------------------------ MMA warp
    def tmem_tensors(self, qk_mma, pv_mma, tP_layout, tmem_ptr):
        """S, P (as the PV MMA's A operand) and O as TMEM tensors at the config's columns."""
        qk_thr, pv_thr = qk_mma.get_slice(0), pv_mma.get_slice(0)
        tS_shape = qk_thr.partition_shape_C(self.qk_tiler[:2])
        tStS = cute.make_tensor(tmem_ptr + self.cfg.tmem_s, qk_thr.make_fragment_C(tS_shape).layout)
        tO_shape = pv_thr.partition_shape_C(self.pv_tiler[:2])
        tOtO = cute.make_tensor(tmem_ptr + self.cfg.tmem_o, pv_thr.make_fragment_C(tO_shape).layout)
        tOrP_any = pv_thr.make_fragment_A(cute.make_tensor(tmem_ptr, tP_layout.outer))[None, None, None, 0]
        tOrP = cute.make_tensor(cute.recast_ptr(tmem_ptr + self.cfg.tmem_p, dtype=tOrP_any.dtype), tOrP_any.layout)
        return tStS, tOrP, tOtO

    @cute.jit
    def mma(self, qk_mma, pv_mma, sQ, sK, sV, tP_layout, tmem_ptr,
            pipe_q, pipe_k, pipe_v, pipe_s, pipe_p, pipe_o, n_blocks):
        qk_thr, pv_thr = qk_mma.get_slice(0), pv_mma.get_slice(0)
        tSrQ = qk_thr.make_fragment_A(sQ)[None, None, None, 0]
        tSrK = qk_thr.make_fragment_B(sK)
        tOrV = pv_thr.make_fragment_B(sV)
        tStS, tOrP, tOtO = self.tmem_tensors(qk_mma, pv_mma, tP_layout, tmem_ptr)

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        s_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        p_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        o_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        pipe_q.consumer_wait(q_state)
        for n in cutlass.range(n_blocks, unroll=1):
            # S = Q K^T, once the softmax has read the previous S out of TMEM.
            pipe_k.consumer_wait(kv_state)
            pipe_s.producer_acquire(s_state)
            self.gemm(qk_mma, tStS, tSrQ, tSrK[None, None, None, kv_state.index], False)
            pipe_s.producer_commit(s_state)
            pipe_k.consumer_release(kv_state)
            s_state.advance()
            # O += P V, once P is in TMEM and the correction warpgroup has rescaled O.
            pipe_v.consumer_wait(kv_state)
            pipe_p.consumer_wait(p_state)
            pipe_o.producer_acquire(o_state)
            self.gemm(pv_mma, tOtO, tOrP, tOrV[None, None, None, kv_state.index], n > 0)
            pipe_o.producer_commit(o_state)
            pipe_p.consumer_release(p_state)
            pipe_v.consumer_release(kv_state)
            o_state.advance()
            p_state.advance()
            kv_state.advance()
        pipe_q.consumer_release(q_state)

    @cute.jit
    def gemm(self, tiled_mma, acc, tA, tB, accumulate):
        """One tile GEMM as a chain of UMMAs over K; the first overwrites unless `accumulate`."""
        # A fresh atom per GEMM: setting ACCUMULATE on the shared tiled MMA inside the key
        # loop would carry a loop-local value out of it.
        atom = cute.make_mma_atom(tiled_mma.op)
        for k in cutlass.range_constexpr(cute.size(tA, mode=[2])):
            atom.set(tcgen05.Field.ACCUMULATE, accumulate or k != 0)
            cute.gemm(atom, acc, tA[None, None, k], tB[None, None, k], acc)

    # ------------------------------------------------------------------ softmax warpgroup
    @cute.jit
    def softmax(self, qk_mma, tmem_ptr, row_scale, row_max_s, pipe_s, pipe_p, pipe_scale,
                softmax_scale_log2, tidx, m_block, n_blocks, seqlen_q, seqlen_k):
        qk_thr = qk_mma.get_slice(0)
        tS_shape = qk_thr.partition_shape_C(self.qk_tiler[:2])
        tStS = cute.make_tensor(tmem_ptr + self.cfg.tmem_s, qk_thr.make_fragment_C(tS_shape).layout)
        tScS = qk_thr.partition_C(cute.make_identity_tensor(self.qk_tiler[:2]))
        load_atom = cute.make_copy_atom(tcgen05.copy.Ld32x32bOp(tcgen05.copy.Repetition(32)), Float32)
        thr_load = tcgen05.make_tmem_copy(load_atom, tStS).get_slice(tidx)
        tLtS = thr_load.partition_S(tStS)
        tLcS = thr_load.partition_D(tScS)
        # P: the same lanes, tile_n 16-bit values packed two to a 32-bit column, stored in chunks
        # of P_CHUNK columns so S (tile_n registers) and P are never both whole in registers.
        p_cols = self.tile_n * self.dtype.width // 32
        tStP = cute.make_tensor(tStS.iterator + self.cfg.tmem_p, cute.composition(tStS.layout, cute.make_layout((128, p_cols))))
        store_atom = cute.make_copy_atom(tcgen05.copy.St32x32bOp(tcgen05.copy.Repetition(P_CHUNK)), Float32)
        thr_store = tcgen05.make_tmem_copy(store_atom, tStP).get_slice(tidx)
        tPtP = thr_store.partition_D(tStP)  # (TMEM view, 1, p_cols / P_CHUNK)
        # The thread's registers for it: shaped by the same copy over coordinates (never by the
        # TMEM view, which spans the warp's 32 lanes).
        tPcP = thr_store.partition_S(
            cute.make_tensor(tScS.iterator, cute.composition(tScS.layout, cute.make_layout((128, p_cols))))
        )

        # This thread's row: its TMEM lane (the same for every column it holds).
        row = m_block * self.tile_m + tLcS[0][0]
        # Keys this row may see: the key length, and (causal) up to its diagonal.
        key_limit = seqlen_k
        if const_expr(self.causal):
            key_limit = cutlass.min(key_limit, row + seqlen_k - seqlen_q + 1)
        # Blocks before this one are wholly visible to every row of the tile: no mask.
        first_masked = first_masked_block(m_block, seqlen_q, seqlen_k, self.tile_m, self.tile_n, self.causal,
                                          mn=cutlass.min, mx=cutlass.max)
        s_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        p_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        c_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        m_run = -Float32.inf
        l_run = Float32(0.0)
        for n in cutlass.range(n_blocks, unroll=1):
            pipe_s.consumer_wait(s_state)
            rS = cute.make_rmem_tensor(tLcS.shape, Float32)
            cute.copy(thr_load, tLtS, rS)
            cute.arch.fence_view_async_tmem_load()
            pipe_s.consumer_release(s_state)
            s_state.advance()
            if n >= first_masked:
                # Only blocks with a key past seqlen_k or past some row's diagonal.
                limit = key_limit - n * self.tile_n
                for i in cutlass.range_constexpr(cute.size(rS)):
                    # A select per element, not a branch: the fragment stays in registers.
                    rS[i] = -Float32.inf if tLcS[i][1] >= limit else rS[i]
            m_new = cute.arch.fmax(m_run, rS.load().reduce(cute.ReductionOp.MAX, -Float32.inf, 0))
            # A row with every key masked so far keeps max -inf; use 0 so exp2 gives 0, not NaN.
            m_safe = m_new if m_new != -Float32.inf else Float32(0.0)
            shrink = cute.math.exp2((m_run - m_safe) * softmax_scale_log2, fastmath=True)
            rS.store(cute.math.exp2(rS.load() * softmax_scale_log2 - m_safe * softmax_scale_log2, fastmath=True))
            l_run = l_run * shrink + rS.load().reduce(cute.ReductionOp.ADD, Float32(0.0), 0)
            m_run = m_new
            # P into TMEM once the previous PV MMA has read the previous P.
            pipe_p.producer_acquire(p_state)
            # One chunk of P is one 32-column TMEM load of S: rS[None, 0, c].
            for c in cutlass.range_constexpr(p_cols // P_CHUNK):
                rP = cute.make_rmem_tensor(tPcP[None, None, c].shape, Float32)
                s_chunk = rS[None, c, 0, 0]
                rP_half = cute.make_tensor(cute.recast_ptr(rP.iterator, dtype=self.dtype), s_chunk.layout)
                rP_half.store(s_chunk.load().to(self.dtype))
                cute.copy(thr_store, rP, tPtP[None, None, c])
            cute.arch.fence_view_async_tmem_store()
            pipe_p.producer_commit(p_state)
            p_state.advance()
            # The factor O shrinks by before this block's PV (unused for the first block).
            pipe_scale.producer_acquire(c_state)
            row_scale[tidx] = shrink
            pipe_scale.producer_commit(c_state)
            c_state.advance()
        # Final message: the row's sum and max, for the epilogue.
        pipe_scale.producer_acquire(c_state)
        row_scale[tidx] = l_run
        row_max_s[tidx] = m_run
        pipe_scale.producer_commit(c_state)

    # ------------------------------------------------------------------ correction warpgroup
    def o_chunks(self, pv_mma, tmem_ptr, tidx):
        """This thread's row of O in TMEM, as (chunk view, load copy, store copy, coordinates)."""
        pv_thr = pv_mma.get_slice(0)
        tO_shape = pv_thr.partition_shape_C(self.pv_tiler[:2])
        tOtO = cute.make_tensor(tmem_ptr + self.cfg.tmem_o, pv_thr.make_fragment_C(tO_shape).layout)
        tOtO_c = cute.make_tensor(tOtO.iterator, cute.composition(tOtO.layout, cute.make_layout((128, O_CHUNK))))
        load = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.copy.Ld32x32bOp(tcgen05.copy.Repetition(O_CHUNK)), Float32), tOtO_c
        ).get_slice(tidx)
        store = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.copy.St32x32bOp(tcgen05.copy.Repetition(O_CHUNK)), Float32), tOtO_c
        ).get_slice(tidx)
        return tOtO, load, store

    @cute.jit
    def correction(self, pv_mma, tmem_ptr, row_scale, row_max_s, sO, mO, mLSE, tma_o,
                   pipe_scale, pipe_o, softmax_scale_log2, tidx, m_block, head, batch, n_blocks, seqlen_q):
        tOtO, thr_load, thr_store = self.o_chunks(pv_mma, tmem_ptr, tidx)
        tOtO_c = cute.make_tensor(tOtO.iterator, cute.composition(tOtO.layout, cute.make_layout((128, O_CHUNK))))
        tLtO = thr_load.partition_S(tOtO_c)
        tStO = thr_store.partition_D(tOtO_c)
        # Registers for one chunk, shaped from coordinates (the TMEM view spans the warp's lanes).
        pv_thr = pv_mma.get_slice(0)
        tOcO = pv_thr.partition_C(cute.make_identity_tensor(self.pv_tiler[:2]))
        tLcO = thr_load.partition_D(cute.make_tensor(tOcO.iterator, cute.composition(tOcO.layout, cute.make_layout((128, O_CHUNK)))))
        c_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        o_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        # Block 0's factor is not needed: its PV overwrites O.
        pipe_scale.consumer_wait(c_state)
        pipe_scale.consumer_release(c_state)
        c_state.advance()
        for n in cutlass.range(1, n_blocks, unroll=1):
            pipe_scale.consumer_wait(c_state)
            shrink = row_scale[tidx]
            pipe_scale.consumer_release(c_state)
            c_state.advance()
            # PV of block n-1 is done: shrink O before PV of block n adds to it.
            pipe_o.consumer_wait(o_state)
            for c in cutlass.range_constexpr(self.hdim // O_CHUNK):
                rO = cute.make_rmem_tensor(tLcO.shape, Float32)
                cute.copy(thr_load, cute.make_tensor(tLtO.iterator + c * O_CHUNK, tLtO.layout), rO)
                rO.store(rO.load() * shrink)
                cute.copy(thr_store, rO, cute.make_tensor(tStO.iterator + c * O_CHUNK, tStO.layout))
            cute.arch.fence_view_async_tmem_store()
            pipe_o.consumer_release(o_state)
            o_state.advance()
        # Epilogue: the row's sum and max, then the last PV.
        pipe_scale.consumer_wait(c_state)
        row_sum = row_scale[tidx]
        row_max = row_max_s[tidx]
        pipe_scale.consumer_release(c_state)
        pipe_o.consumer_wait(o_state)
        self.epilogue(pv_mma, tOtO, sO, mO, mLSE, tma_o, row_sum, row_max, softmax_scale_log2,
                      tidx, m_block, head, batch, seqlen_q)
        pipe_o.consumer_release(o_state)

    @cute.jit
    def epilogue(self, pv_mma, tOtO, sO, mO, mLSE, tma_o, row_sum, row_max, softmax_scale_log2,
                 tidx, m_block, head, batch, seqlen_q):
        """O / row_sum through shared memory and one TMA store (it clips rows past seqlen_q);
        LSE straight to global memory."""
        empty = row_sum == Float32(0.0) or row_sum != row_sum
        inv = Float32(0.0) if empty else cute.arch.rcp_approx(row_sum)
        pv_thr = pv_mma.get_slice(0)
        tOsO = pv_thr.partition_C(sO[None, None, 0])
        tOcO = pv_thr.partition_C(cute.make_identity_tensor(self.pv_tiler[:2]))
        chunk = cute.make_layout((128, O_CHUNK))
        tOtO_c = cute.logical_divide(tOtO, chunk)
        tOsO_c = cute.logical_divide(tOsO, chunk)
        tOcO_c = cute.logical_divide(tOcO, chunk)
        load_atom = cute.make_copy_atom(tcgen05.copy.Ld32x32bOp(tcgen05.copy.Repetition(O_CHUNK)), Float32)
        tiled_load = tcgen05.make_tmem_copy(load_atom, tOtO_c[(None, None), 0])
        thr_load = tiled_load.get_slice(tidx)
        tLtO = thr_load.partition_S(tOtO_c[(None, None), None])
        tLsO = thr_load.partition_D(tOsO_c[(None, None), None])
        tLcO = thr_load.partition_D(tOcO_c[(None, None), None])
        smem_store = cute.make_tiled_copy_D(
            sm100.get_smem_store_op(utils.LayoutEnum.ROW_MAJOR, self.dtype, Float32, tiled_load), tiled_load
        )
        for c in cutlass.range_constexpr(self.hdim // O_CHUNK):
            rO = cute.make_rmem_tensor(tLcO[None, 0, 0, c].shape, Float32)
            cute.copy(tiled_load, tLtO[None, 0, 0, c], rO)
            rO.store(rO.load() * inv)
            rOh = cute.make_rmem_tensor(rO.shape, self.dtype)
            rOh.store(rO.load().to(self.dtype))
            cute.copy(smem_store, rOh, tLsO[None, 0, 0, c])
        row = m_block * self.tile_m + tLcO[0][0]  # this thread's row (its TMEM lane)
        if row < seqlen_q:
            mLSE[row, head, batch] = (
                -Float32.inf if empty
                else (row_max * softmax_scale_log2 + cute.math.log2(row_sum, fastmath=True)) * LN2
            )
        # The TMA engine reads sO: make the writes visible to the async proxy first.
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=BAR_EPILOGUE, number_of_threads=32 * len(CORRECTION_WARPS))
        if tidx == 0:
            gO = cute.local_tile(mO[None, None, head, batch], (self.tile_m, self.hdim), (m_block, 0))
            tOs, tOg = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO[None, None, 0], 0, 2), cute.group_modes(gO, 0, 2)
            )
            cute.copy(tma_o, tOs, tOg)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
